//! TLS client settings shared by the drivers' HTTP clients: the public web roots, a
//! PEM bundle of trusted authorities, or (explicitly asked for) no verification.

use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// An HTTP/1 client for `http://` and `https://` URLs with `tls`, connecting within
/// `connect_timeout` when given.
pub fn https_client<B>(
    tls: rustls::ClientConfig,
    connect_timeout: Option<std::time::Duration>,
) -> Client<HttpsConnector<HttpConnector>, B>
where
    B: hyper::body::Body + Send,
    B::Data: Send,
{
    Client::builder(hyper_util::rt::TokioExecutor::new())
        .build(https_connector(tls, connect_timeout))
}

/// The connector of [`https_client`], for a client built with other pool settings.
pub fn https_connector(
    tls: rustls::ClientConfig,
    connect_timeout: Option<std::time::Duration>,
) -> HttpsConnector<HttpConnector> {
    let mut http = HttpConnector::new();
    http.set_connect_timeout(connect_timeout);
    http.enforce_http(false);
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http)
}

/// An error with its causes (`client error (Connect): … : Connection refused`).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    // Bounded: causes do not loop, but never trust that.
    for _ in 0..8 {
        let Some(c) = cur else { break };
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// Why no client configuration could be made. The text is what the drivers' messages
/// say (after the setting's name).
#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
    /// The crypto provider refused the protocol versions (not expected with ring).
    #[error("TLS: {0}")]
    Protocols(#[source] rustls::Error),
    /// The CA bundle cannot be read or holds a malformed certificate.
    #[error("{path}: {source}")]
    ReadCaFile {
        path: String,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// A certificate of the CA bundle is refused as a trust anchor.
    #[error("{path}: {source}")]
    BadCa {
        path: String,
        #[source]
        source: rustls::Error,
    },
    #[error("{path} holds no certificate")]
    NoCertificate { path: String },
}

impl TlsConfigError {
    /// The CA bundle the error is about, if it is about one.
    pub fn ca_file(&self) -> Option<&str> {
        match self {
            TlsConfigError::Protocols(_) => None,
            TlsConfigError::ReadCaFile { path, .. }
            | TlsConfigError::BadCa { path, .. }
            | TlsConfigError::NoCertificate { path } => Some(path),
        }
    }
}

/// A client configuration: `insecure` accepts any certificate (signatures are still
/// checked, so the connection is encrypted, just not authenticated); else `ca_file`'s
/// authorities, else the public web roots. `Err` says what is wrong with the file.
pub fn client_config(
    insecure: bool,
    ca_file: Option<&str>,
) -> Result<rustls::ClientConfig, TlsConfigError> {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(TlsConfigError::Protocols)?;
    if insecure {
        return Ok(builder
            .dangerous()
            .with_custom_certificate_verifier(std::sync::Arc::new(NoVerification(provider)))
            .with_no_client_auth());
    }
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let unreadable = |source| TlsConfigError::ReadCaFile {
                path: path.to_string(),
                source,
            };
            for c in CertificateDer::pem_file_iter(path).map_err(unreadable)? {
                roots
                    .add(c.map_err(unreadable)?)
                    .map_err(|source| TlsConfigError::BadCa {
                        path: path.to_string(),
                        source,
                    })?;
            }
            if roots.is_empty() {
                return Err(TlsConfigError::NoCertificate {
                    path: path.to_string(),
                });
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    Ok(builder.with_root_certificates(roots).with_no_client_auth())
}

/// Any certificate is accepted (signatures are still
/// checked, so the connection is encrypted, just not authenticated).
#[derive(Debug)]
struct NoVerification(std::sync::Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
