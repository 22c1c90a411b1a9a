//! Message authentication: every message on the bus (request, "accepted" notice, reply,
//! membership announcement) carries an HMAC-SHA256 in the header [`SIGNATURE_HEADER`],
//! keyed by the deployment's secret, over the body and everything that routes the
//! message or gives it meaning. A process drops, unrun and unanswered, a message that
//! is unsigned or wrongly signed, and counts it in `ironic_rpc_messages_refused_total`.
//!
//! The canonical encoding (version 1) is fed to HMAC-SHA256 in this order, each field
//! either *bytes* (its length as a big-endian u64, then the bytes) or *optional* (one
//! byte 0 when absent; one byte 1, then the bytes field, when present), so that no byte
//! can move from one field to the next:
//!
//! 1. the bytes `ironic-rpc-signature-v1` (bare, no length);
//! 2. bytes: the exchange the message was published to (`""` for the default exchange);
//! 3. bytes: its routing key (the target conductor's queue, the shared queue, a reply
//!    queue or the membership key);
//! 4. optional: the AMQP `type` property (the method of a request);
//! 5. optional: `correlation_id`; 6. optional: `reply_to`;
//! 7. optional, each: the headers [`SIGNED_HEADERS`] in that order (`x-ironic-cluster`,
//!    `x-ironic-host`, `x-ironic-incarnation`, `x-openstack-request-id`, `traceparent`,
//!    `tracestate`), as text; a header that is not a string counts as absent, as it does
//!    for the code that reads it;
//! 8. bytes: the body. A request's body is the `Request` envelope, which holds the
//!    method again, the request id, the deadline and the accept-by time, so the sending
//!    time the accept-timeout check uses is signed with it.
//!
//! The header's value is `v1:` and the 32-byte tag in lower-case hex. Nothing else of a
//! message is read by the receiving code; the properties left out (`expiration`,
//! `content_type`, `delivery_mode`, the `redelivered` flag) change nothing it does.
//! Tags are compared in constant time (`hmac`'s `verify_slice`).
//!
//! Replays: a copy of a signed request published again runs only within its accept
//! window (`accept_by_unix_ms`, signed, plus the conductor's allowance for clocks);
//! later it is dropped unrun like any late request.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use lapin::BasicProperties;
use lapin::types::AMQPValue;
use sha2::Sha256;

use super::{CLUSTER_HEADER, HOST_HEADER, INCARNATION_HEADER, header_text};

/// The header that carries a message's signature.
pub const SIGNATURE_HEADER: &str = "x-ironic-signature";

/// The header that carries the caller's request id.
pub const REQUEST_ID_HEADER: &str = "x-openstack-request-id";

/// The headers the signature covers, in the order they are encoded.
pub const SIGNED_HEADERS: &[&str] = &[
    CLUSTER_HEADER,
    HOST_HEADER,
    INCARNATION_HEADER,
    REQUEST_ID_HEADER,
    "traceparent",
    "tracestate",
];

/// The shortest secret accepted, in bytes.
pub const MIN_KEY_BYTES: usize = 32;

const DOMAIN: &[u8] = b"ironic-rpc-signature-v1";
const PREFIX: &str = "v1:";

type HmacSha256 = Hmac<Sha256>;

/// One secret. Its `Debug` shows nothing of it.
#[derive(Clone)]
pub struct SigningKey(Arc<[u8]>);

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningKey(..)")
    }
}

/// Why there is no key.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("the key has {bytes} bytes; at least {MIN_KEY_BYTES} are needed")]
    TooShort { bytes: usize },
    #[error("cannot read {}", path.display())]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The key of this file is too short.
    #[error("{}: the key has {bytes} bytes; at least {MIN_KEY_BYTES} are needed", path.display())]
    TooShortInFile { path: PathBuf, bytes: usize },
}

impl SigningKey {
    /// A key of these bytes; refused when shorter than [`MIN_KEY_BYTES`].
    pub fn new(secret: impl AsRef<[u8]>) -> Result<SigningKey, KeyError> {
        let s = secret.as_ref();
        if s.len() < MIN_KEY_BYTES {
            return Err(KeyError::TooShort { bytes: s.len() });
        }
        Ok(SigningKey(Arc::from(s)))
    }

    /// The key a file holds: its bytes, trailing whitespace (a final newline) left out.
    /// Refused when the file cannot be read or the key is too short.
    pub fn from_file(path: &Path) -> Result<SigningKey, KeyError> {
        let mut bytes = std::fs::read(path).map_err(|source| KeyError::Unreadable {
            path: path.to_path_buf(),
            source,
        })?;
        while bytes.last().is_some_and(u8::is_ascii_whitespace) {
            bytes.pop();
        }
        SigningKey::new(&bytes).map_err(|_| KeyError::TooShortInFile {
            path: path.to_path_buf(),
            bytes: bytes.len(),
        })
    }

    fn tag(&self, m: &Parts<'_>) -> HmacSha256 {
        // Any key length is valid for HMAC: `new_from_slice` cannot fail here.
        let mut mac = match HmacSha256::new_from_slice(&self.0) {
            Ok(m) => m,
            Err(_) => unreachable!("HMAC takes keys of any length"),
        };
        m.feed(&mut mac);
        mac
    }
}

/// The keys of one process: one that signs (and verifies), and during a rotation a
/// second one that is accepted on receipt too.
#[derive(Debug, Clone)]
pub struct SigningKeys {
    signs: SigningKey,
    also_accepts: Option<SigningKey>,
}

/// Why a message was refused (the `reason` label of `ironic_rpc_messages_refused_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No [`SIGNATURE_HEADER`].
    Unsigned,
    /// A signature that no key of this process made over this message.
    BadSignature,
}

impl Refusal {
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Unsigned => "unsigned",
            Refusal::BadSignature => "bad_signature",
        }
    }
}

/// What the signature covers of one message (see the module documentation).
struct Parts<'a> {
    exchange: &'a str,
    routing_key: &'a str,
    props: &'a BasicProperties,
    body: &'a [u8],
}

fn bytes(mac: &mut HmacSha256, b: &[u8]) {
    mac.update(&(b.len() as u64).to_be_bytes());
    mac.update(b);
}

fn optional(mac: &mut HmacSha256, b: Option<&str>) {
    match b {
        None => mac.update(&[0]),
        Some(b) => {
            mac.update(&[1]);
            bytes(mac, b.as_bytes());
        }
    }
}

impl Parts<'_> {
    fn feed(&self, mac: &mut HmacSha256) {
        mac.update(DOMAIN);
        bytes(mac, self.exchange.as_bytes());
        bytes(mac, self.routing_key.as_bytes());
        let p = self.props;
        optional(mac, p.kind().as_ref().map(|s| s.as_str()));
        optional(mac, p.correlation_id().as_ref().map(|s| s.as_str()));
        optional(mac, p.reply_to().as_ref().map(|s| s.as_str()));
        for h in SIGNED_HEADERS {
            optional(mac, header_text(p, h).as_deref());
        }
        bytes(mac, self.body);
    }
}

fn hex(b: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push(char::from(DIGITS[usize::from(x >> 4)]));
        s.push(char::from(DIGITS[usize::from(x & 0xf)]));
    }
    s
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let s = s.as_bytes();
    if !s.len().is_multiple_of(2) {
        return None;
    }
    s.chunks(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

impl SigningKeys {
    /// Signs and verifies with `key`.
    pub fn new(key: SigningKey) -> SigningKeys {
        SigningKeys {
            signs: key,
            also_accepts: None,
        }
    }

    /// Accepts messages signed with `key` too (never signs with it).
    pub fn also_accepting(self, key: SigningKey) -> SigningKeys {
        SigningKeys {
            also_accepts: Some(key),
            ..self
        }
    }

    /// `props` with the signature of a message published to `exchange` under
    /// `routing_key` with `body` (these properties, as they are, are what is signed).
    pub fn sign(
        &self,
        exchange: &str,
        routing_key: &str,
        props: BasicProperties,
        body: &[u8],
    ) -> BasicProperties {
        let parts = Parts {
            exchange,
            routing_key,
            props: &props,
            body,
        };
        let tag = self.signs.tag(&parts).finalize().into_bytes();
        let mut headers = props.headers().clone().unwrap_or_default();
        headers.insert(
            SIGNATURE_HEADER.into(),
            AMQPValue::LongString(format!("{PREFIX}{}", hex(&tag)).into()),
        );
        props.with_headers(headers)
    }

    /// Whether a message received from `exchange` under `routing_key` carries a
    /// signature one of these keys made over it.
    pub fn verify(
        &self,
        exchange: &str,
        routing_key: &str,
        props: &BasicProperties,
        body: &[u8],
    ) -> Result<(), Refusal> {
        let Some(headers) = props.headers().as_ref() else {
            return Err(Refusal::Unsigned);
        };
        let text = match headers.inner().get(SIGNATURE_HEADER) {
            None => return Err(Refusal::Unsigned),
            Some(AMQPValue::LongString(s)) => s.to_string(),
            Some(AMQPValue::ShortString(s)) => s.to_string(),
            Some(_) => return Err(Refusal::BadSignature),
        };
        let tag = text
            .strip_prefix(PREFIX)
            .and_then(unhex)
            .ok_or(Refusal::BadSignature)?;
        let parts = Parts {
            exchange,
            routing_key,
            props,
            body,
        };
        let ok = std::iter::once(&self.signs)
            .chain(self.also_accepts.as_ref())
            .any(|k| k.tag(&parts).verify_slice(&tag).is_ok());
        if ok {
            Ok(())
        } else {
            Err(Refusal::BadSignature)
        }
    }

    /// [`SigningKeys::verify`] of a delivery (its exchange and routing key as the
    /// broker gives them).
    pub fn verify_delivery(&self, d: &lapin::message::Delivery) -> Result<(), Refusal> {
        self.verify(
            d.exchange.as_str(),
            d.routing_key.as_str(),
            &d.properties,
            &d.data,
        )
    }
}

/// How often, at most, a refusal is logged; the ones in between are counted in the
/// next line (the metric counts every one).
const LOG_EVERY: Duration = Duration::from_secs(60);

static LAST_LOGGED: Mutex<Option<Instant>> = Mutex::new(None);
static UNLOGGED: AtomicU64 = AtomicU64::new(0);

/// Counts a refused message and logs it (nothing of its content; at most one line a
/// minute, so a flood of forgeries cannot flood the log). `side` is `server` (a
/// conductor's request) or `client` (a caller's reply, notice or announcement).
pub(crate) fn refused(side: &'static str, why: Refusal, names_this_cluster: bool) {
    metrics::counter!("ironic_rpc_messages_refused_total", "side" => side, "reason" => why.label())
        .increment(1);
    let now = Instant::now();
    let due = {
        let mut last = LAST_LOGGED.lock().unwrap_or_else(|p| p.into_inner());
        match *last {
            Some(t) if now.duration_since(t) < LOG_EVERY => false,
            _ => {
                *last = Some(now);
                true
            }
        }
    };
    if !due {
        UNLOGGED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let earlier = UNLOGGED.swap(0, Ordering::Relaxed);
    tracing::warn!(
        side,
        reason = why.label(),
        names_this_cluster,
        refused_unlogged_before = earlier,
        "dropped a message on the bus that is unsigned or wrongly signed, without running or answering it (every process of a deployment needs the same signing key: [amqp] signing_key_file, else the database's; ironic_rpc_messages_refused_total counts them)"
    );
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use lapin::types::FieldTable;

    fn keys(b: u8) -> SigningKeys {
        SigningKeys::new(SigningKey::new([b; 32]).unwrap())
    }

    fn header(name: &str, v: &str) -> (String, String) {
        (name.to_string(), v.to_string())
    }

    /// A request as a caller sends it: every signed field set.
    fn request() -> (String, String, Vec<(String, String)>, Vec<u8>) {
        let headers = vec![
            header(CLUSTER_HEADER, "2b0d7c1e-cluster"),
            header(HOST_HEADER, "host-a"),
            header(INCARNATION_HEADER, "3"),
            header(REQUEST_ID_HEADER, "req-1"),
            header("traceparent", "00-abc-def-01"),
            header("tracestate", "k=v"),
        ];
        (
            "ironic".into(),
            "ironic.conductor_manager.c.host-a".into(),
            headers,
            b"\x0a\x0bcreate_node\x12\x05req-1".to_vec(),
        )
    }

    fn props(
        headers: &[(String, String)],
        corr: &str,
        reply_to: &str,
        kind: &str,
    ) -> BasicProperties {
        let mut t = FieldTable::default();
        for (k, v) in headers {
            t.insert(k.as_str().into(), AMQPValue::LongString(v.clone().into()));
        }
        BasicProperties::default()
            .with_correlation_id(corr.into())
            .with_reply_to(reply_to.into())
            .with_type(kind.into())
            .with_headers(t)
    }

    #[test]
    fn a_signed_message_verifies_and_any_change_fails() {
        let k = keys(7);
        let (ex, rk, hs, body) = request();
        let p = props(&hs, "corr-1", "amq.gen-1", "create_node");
        let signed = k.sign(&ex, &rk, p, &body);
        assert_eq!(k.verify(&ex, &rk, &signed, &body), Ok(()));
        let sig = header_text(&signed, SIGNATURE_HEADER).unwrap();
        assert!(sig.starts_with("v1:") && sig.len() == 3 + 64, "{sig}");

        let bad = Err(Refusal::BadSignature);
        // Exchange and routing key (another conductor, the shared queue).
        assert_eq!(k.verify("", &rk, &signed, &body), bad);
        assert_eq!(
            k.verify(&ex, "ironic.conductor_manager.c", &signed, &body),
            bad
        );
        // Every byte of the body.
        for i in 0..body.len() {
            let mut b = body.clone();
            b[i] ^= 0x01;
            assert_eq!(k.verify(&ex, &rk, &signed, &b), bad, "body byte {i}");
        }
        let mut longer = body.clone();
        longer.push(0);
        assert_eq!(k.verify(&ex, &rk, &signed, &longer), bad);
        assert_eq!(k.verify(&ex, &rk, &signed, &body[..body.len() - 1]), bad);
        // Each property, changed or removed.
        let resign = |p: BasicProperties| {
            // The original signature on changed properties.
            let mut t = p.headers().clone().unwrap_or_default();
            t.insert(
                SIGNATURE_HEADER.into(),
                AMQPValue::LongString(sig.clone().into()),
            );
            p.with_headers(t)
        };
        for p in [
            props(&hs, "corr-2", "amq.gen-1", "create_node"),
            props(&hs, "corr-1", "amq.gen-2", "create_node"),
            props(&hs, "corr-1", "amq.gen-1", "destroy_node"),
            BasicProperties::default()
                .with_reply_to("amq.gen-1".into())
                .with_type("create_node".into())
                .with_headers(signed.headers().clone().unwrap()),
        ] {
            assert_eq!(k.verify(&ex, &rk, &resign(p), &body), bad);
        }
        // Each signed header: changed, emptied, removed, or turned into a non-string.
        for (i, (name, _)) in hs.iter().enumerate() {
            for change in [Some("other"), Some(""), None] {
                let mut h = hs.clone();
                match change {
                    Some(v) => h[i].1 = v.to_string(),
                    None => {
                        h.remove(i);
                    }
                }
                let p = resign(props(&h, "corr-1", "amq.gen-1", "create_node"));
                assert_eq!(k.verify(&ex, &rk, &p, &body), bad, "{name} {change:?}");
            }
            let mut t = signed.headers().clone().unwrap();
            t.insert(name.as_str().into(), AMQPValue::LongLongInt(3));
            let p = signed.clone().with_headers(t);
            assert_eq!(k.verify(&ex, &rk, &p, &body), bad, "{name} as a number");
        }
        // An added header the signature does not cover changes nothing it covers.
        let mut t = signed.headers().clone().unwrap();
        t.insert("x-unrelated".into(), AMQPValue::LongString("x".into()));
        let p = signed.clone().with_headers(t);
        assert_eq!(k.verify(&ex, &rk, &p, &body), Ok(()));
    }

    /// Length prefixes: moving bytes from one field to the next breaks the signature.
    #[test]
    fn fields_cannot_be_shifted() {
        let k = keys(1);
        let p = BasicProperties::default()
            .with_correlation_id("ab".into())
            .with_reply_to("c".into());
        let signed = k.sign("ironic", "q", p, b"body");
        let shifted = BasicProperties::default()
            .with_correlation_id("a".into())
            .with_reply_to("bc".into())
            .with_headers(signed.headers().clone().unwrap());
        assert_eq!(
            k.verify("ironic", "q", &shifted, b"body"),
            Err(Refusal::BadSignature)
        );
        assert_eq!(
            k.verify("ironicq", "", &signed, b"body"),
            Err(Refusal::BadSignature)
        );
        assert_eq!(
            k.verify("ironic", "qb", &signed, b"ody"),
            Err(Refusal::BadSignature)
        );
        // Absent and empty differ.
        let empty = BasicProperties::default()
            .with_correlation_id("".into())
            .with_headers(
                k.sign("", "q", BasicProperties::default(), b"")
                    .headers()
                    .clone()
                    .unwrap(),
            );
        assert_eq!(k.verify("", "q", &empty, b""), Err(Refusal::BadSignature));
    }

    #[test]
    fn unsigned_malformed_and_foreign_signatures_are_refused() {
        let k = keys(7);
        let p = BasicProperties::default().with_correlation_id("c".into());
        assert_eq!(k.verify("", "q", &p, b"x"), Err(Refusal::Unsigned));
        let no_sig = p.clone().with_headers(FieldTable::default());
        assert_eq!(k.verify("", "q", &no_sig, b"x"), Err(Refusal::Unsigned));
        let good = k.sign("", "q", p.clone(), b"x");
        let sig = header_text(&good, SIGNATURE_HEADER).unwrap();
        for forged in [
            String::new(),
            "v1:".into(),
            sig.replace("v1:", "v2:"),
            sig.to_uppercase(),
            sig[..sig.len() - 2].to_string(),
            format!("{sig}00"),
            format!("v1:{}", "0".repeat(64)),
            format!("v1:{}", "zz".repeat(32)),
        ] {
            let mut t = FieldTable::default();
            t.insert(
                SIGNATURE_HEADER.into(),
                AMQPValue::LongString(forged.clone().into()),
            );
            let m = p.clone().with_headers(t);
            assert_eq!(
                k.verify("", "q", &m, b"x"),
                Err(Refusal::BadSignature),
                "{forged}"
            );
        }
        let mut t = FieldTable::default();
        t.insert(SIGNATURE_HEADER.into(), AMQPValue::Boolean(true));
        let m = p.clone().with_headers(t);
        assert_eq!(k.verify("", "q", &m, b"x"), Err(Refusal::BadSignature));
        // Another deployment's key.
        let theirs = keys(8).sign("", "q", p.clone(), b"x");
        assert_eq!(k.verify("", "q", &theirs, b"x"), Err(Refusal::BadSignature));
    }

    /// During a rotation a process accepts both keys and signs with its own.
    #[test]
    fn a_second_key_is_accepted_but_never_signs() {
        let old = keys(1);
        let new = keys(2);
        let both = keys(1).also_accepting(SigningKey::new([2; 32]).unwrap());
        let p = BasicProperties::default();
        assert_eq!(
            both.verify("", "q", &new.sign("", "q", p.clone(), b""), b""),
            Ok(())
        );
        assert_eq!(
            both.verify("", "q", &old.sign("", "q", p.clone(), b""), b""),
            Ok(())
        );
        let mine = both.sign("", "q", p.clone(), b"");
        assert_eq!(old.verify("", "q", &mine, b""), Ok(()));
        assert_eq!(new.verify("", "q", &mine, b""), Err(Refusal::BadSignature));
    }

    #[test]
    fn keys_are_long_enough_and_read_from_files() {
        assert!(SigningKey::new([0u8; 31]).is_err());
        assert!(SigningKey::new([0u8; 32]).is_ok());
        let dir =
            std::env::temp_dir().join(format!("ironic-key-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bus.key");
        assert!(matches!(
            SigningKey::from_file(&path),
            Err(KeyError::Unreadable { .. })
        ));
        let secret = "0123456789abcdef0123456789abcdef";
        std::fs::write(&path, format!("{secret}\n")).unwrap();
        let from_file = SigningKeys::new(SigningKey::from_file(&path).unwrap());
        let direct = SigningKeys::new(SigningKey::new(secret).unwrap());
        let m = direct.sign("", "q", BasicProperties::default(), b"");
        assert_eq!(
            from_file.verify("", "q", &m, b""),
            Ok(()),
            "the newline is not the key's"
        );
        std::fs::write(&path, "short\n").unwrap();
        let e = SigningKey::from_file(&path).unwrap_err().to_string();
        assert!(e.contains("at least 32"), "{e}");
        // Nothing of the secret in Debug.
        let shown = format!("{:?}", SigningKey::new(secret).unwrap());
        assert!(!shown.contains("0123"), "{shown}");
        let _ = std::fs::remove_dir_all(dir);
    }

    /// The encoding `docs/rpc.md` describes (its Python `sign`, run on this message,
    /// gives this value).
    #[test]
    fn matches_the_documented_encoding() {
        let k = SigningKeys::new(SigningKey::new([b'k'; 32]).unwrap());
        let h = [
            header(CLUSTER_HEADER, "c1"),
            header(REQUEST_ID_HEADER, "req-1"),
        ];
        let p = props(&h, "corr", "amq.gen-q", "update_node");
        let signed = k.sign("ironic", "ironic.conductor_manager.c1", p, b"\x00\x01body");
        assert_eq!(
            header_text(&signed, SIGNATURE_HEADER).unwrap(),
            "v1:58fe92f46fd51ac96a7df1d7dc6486880d79d5ffe53feb53487b1e60e47f7bea"
        );
    }

    #[test]
    fn hex_round_trips() {
        let b: Vec<u8> = (0..=255).collect();
        assert_eq!(unhex(&hex(&b)).unwrap(), b);
        assert_eq!(unhex("0"), None);
        assert_eq!(unhex("0g"), None);
    }
}
