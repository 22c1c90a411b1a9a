//! A node's `network_data` (1.66): the instance's network configuration in OpenStack's
//! `network_data.json` format (the one config drives and metadata services carry), as
//! upstream checks it: `links` (physical and virtual interfaces, bonds, VLANs),
//! `networks` (IPv4 and IPv6, static or DHCP, with routes) and `services` (DNS). Keys
//! the format does not name are allowed, as upstream's schema allows them.
//!
//! Written from the format's rules, not from a schema engine: the messages follow the
//! wording of upstream's JSON-schema errors (`'links' is a required property`, `… is
//! not of type 'array'`), in the order upstream's picks them (see [`check`]).

use std::net::{Ipv4Addr, Ipv6Addr};

use serde_json::{Map, Value};

use crate::error::SchemaError;
use crate::names::py_repr_str;
use crate::patch::py_repr;

type Check = Result<(), SchemaError>;

const L2_TYPES: &[&str] = &[
    "bridge",
    "dvs",
    "hw_veb",
    "hyperv",
    "ovs",
    "tap",
    "vhostuser",
    "vif",
    "phy",
];
const BOND_MODES: &[&str] = &[
    "802.3ad",
    "balance-rr",
    "active-backup",
    "balance-xor",
    "broadcast",
    "balance-tlb",
    "balance-alb",
];
const IPV4_TYPES: &[&str] = &["ipv4", "ipv4_dhcp"];
const IPV6_TYPES: &[&str] = &["ipv6", "ipv6_dhcp", "ipv6_slaac"];

/// Checks a whole `network_data` document; `{}` (no data) is valid.
pub fn check(doc: &Value) -> Check {
    let o = object(doc)?;
    if o.is_empty() {
        return Ok(());
    }
    // Upstream reports the most relevant error, not the first: a list of the wrong
    // type before a missing list, and a missing list before a bad item in another.
    for k in ["links", "networks", "services"] {
        if let Some(v) = o.get(k) {
            array(v)?;
        }
    }
    required(o, &["links", "networks", "services"])?;
    for link in array(&o["links"])? {
        one_of(link, "type", |t| {
            if L2_TYPES.contains(&t) {
                Some(l2_link as fn(&Map<String, Value>) -> Check)
            } else if t == "bond" {
                Some(l2_bond)
            } else if t == "vlan" {
                Some(l2_vlan)
            } else {
                None
            }
        })?;
    }
    for network in array(&o["networks"])? {
        one_of(network, "type", |t| {
            if IPV4_TYPES.contains(&t) {
                Some(ipv4_network as fn(&Map<String, Value>) -> Check)
            } else if IPV6_TYPES.contains(&t) {
                Some(ipv6_network)
            } else {
                None
            }
        })?;
    }
    for service in array(&o["services"])? {
        let s = object(service)?;
        let v4 = service_of(s, Family::V4);
        if v4.is_err() && service_of(s, Family::V6).is_err() {
            return v4;
        }
    }
    Ok(())
}

/// An item valid under the variant its `key` selects; an item whose `key` selects
/// none is "not valid under any of the given schemas".
fn one_of(
    item: &Value,
    key: &str,
    variant: impl Fn(&str) -> Option<fn(&Map<String, Value>) -> Check>,
) -> Check {
    let none = || {
        Err(crate::schema!(
            "{} is not valid under any of the given schemas",
            py_repr(item)
        ))
    };
    let Value::Object(o) = item else {
        return none();
    };
    match o.get(key).and_then(Value::as_str).and_then(variant) {
        Some(check) => check(o),
        None => none(),
    }
}

fn object(v: &Value) -> Result<&Map<String, Value>, SchemaError> {
    v.as_object().ok_or_else(|| not_type(v, "object"))
}

fn array(v: &Value) -> Result<&Vec<Value>, SchemaError> {
    v.as_array().ok_or_else(|| not_type(v, "array"))
}

fn not_type(v: &Value, t: &str) -> SchemaError {
    crate::schema!("{} is not of type '{t}'", py_repr(v))
}

fn required(o: &Map<String, Value>, keys: &[&str]) -> Check {
    match keys.iter().find(|k| !o.contains_key(**k)) {
        Some(k) => Err(crate::schema!("{} is a required property", py_repr_str(k))),
        None => Ok(()),
    }
}

/// `o[key]`, when present, passes `check`.
fn opt(o: &Map<String, Value>, key: &str, check: impl Fn(&Value) -> Check) -> Check {
    o.get(key).map_or(Ok(()), check)
}

fn string(v: &Value) -> Result<&str, SchemaError> {
    v.as_str().ok_or_else(|| not_type(v, "string"))
}

fn any_string(v: &Value) -> Check {
    string(v).map(|_| ())
}

fn one_of_words(v: &Value, words: &[&str]) -> Check {
    let s = string(v)?;
    if words.contains(&s) {
        Ok(())
    } else {
        let list: Vec<String> = words.iter().map(|w| py_repr_str(w)).collect();
        Err(crate::schema!(
            "{} is not one of [{}]",
            py_repr_str(s),
            list.join(", ")
        ))
    }
}

/// A string that `ok` accepts, else "does not match" what it should be.
fn shaped(v: &Value, what: &str, ok: impl Fn(&str) -> bool) -> Check {
    let s = string(v)?;
    if ok(s) {
        Ok(())
    } else {
        Err(crate::schema!("{} is not a valid {what}", py_repr_str(s)))
    }
}

fn mac(v: &Value) -> Check {
    shaped(v, "MAC address", |s| {
        let parts: Vec<&str> = s.split([':', '-']).collect();
        parts.len() == 6
            && parts
                .iter()
                .all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()))
    })
}

fn mtu(v: &Value) -> Check {
    match v {
        Value::Null => Ok(()),
        Value::Number(n) => match n.as_f64() {
            Some(x) if x < 1.0 => Err(crate::schema!("{n} is less than the minimum of 1")),
            Some(x) if x > 65535.0 => {
                Err(crate::schema!("{n} is greater than the maximum of 65535"))
            }
            _ => Ok(()),
        },
        other => Err(crate::schema!(
            "{} is not valid under any of the given schemas",
            py_repr(other)
        )),
    }
}

fn l2_common(o: &Map<String, Value>) -> Check {
    opt(o, "id", any_string)?;
    opt(o, "mtu", mtu)?;
    opt(o, "vif_id", any_string)
}

fn l2_link(o: &Map<String, Value>) -> Check {
    required(o, &["ethernet_mac_address", "id", "type"])?;
    l2_common(o)?;
    mac(&o["ethernet_mac_address"])
}

fn l2_bond(o: &Map<String, Value>) -> Check {
    required(
        o,
        &[
            "ethernet_mac_address",
            "id",
            "type",
            "bond_mode",
            "bond_links",
        ],
    )?;
    l2_common(o)?;
    mac(&o["ethernet_mac_address"])?;
    one_of_words(&o["bond_mode"], BOND_MODES)?;
    for l in array(&o["bond_links"])? {
        any_string(l)?;
    }
    Ok(())
}

fn l2_vlan(o: &Map<String, Value>) -> Check {
    required(
        o,
        &["vlan_mac_address", "id", "type", "vlan_link", "vlan_id"],
    )?;
    l2_common(o)?;
    mac(&o["vlan_mac_address"])?;
    let id = &o["vlan_id"];
    if !(id.is_i64() || id.is_u64()) {
        return Err(not_type(id, "integer"));
    }
    any_string(&o["vlan_link"])
}

#[derive(Clone, Copy)]
enum Family {
    V4,
    V6,
}

/// An address of the family; IPv6 hosts may carry a `/prefix` and link-local ones a
/// `%zone`, as the format allows.
fn host(v: &Value, f: Family) -> Check {
    match f {
        Family::V4 => plain_address(v, f),
        Family::V6 => shaped(v, "IPv6 address", |s| {
            let (addr, prefix) = s.split_once('/').unwrap_or((s, "0"));
            let addr = match addr.split_once('%') {
                Some((a, zone)) => {
                    if zone.is_empty() || !zone.chars().all(|c| c.is_ascii_alphanumeric()) {
                        return false;
                    }
                    a
                }
                None => addr,
            };
            addr.parse::<Ipv6Addr>().is_ok()
                && (1..=2).contains(&prefix.len())
                && prefix.chars().all(|c| c.is_ascii_digit())
        }),
    }
}

fn plain_address(v: &Value, f: Family) -> Check {
    match f {
        Family::V4 => shaped(v, "IPv4 address", |s| s.parse::<Ipv4Addr>().is_ok()),
        Family::V6 => shaped(v, "IPv6 address", |s| s.parse::<Ipv6Addr>().is_ok()),
    }
}

fn netmask(v: &Value, f: Family) -> Check {
    match f {
        // Contiguous ones, then zeros.
        Family::V4 => shaped(v, "IPv4 netmask", |s| {
            s.parse::<Ipv4Addr>()
                .is_ok_and(|a| u32::from(a).leading_ones() + u32::from(a).trailing_zeros() == 32)
        }),
        Family::V6 => plain_address(v, f),
    }
}

fn network_of(o: &Map<String, Value>, f: Family) -> Check {
    required(o, &["id", "link", "network_id", "type"])?;
    for k in ["id", "link", "network_id"] {
        any_string(&o[k])?;
    }
    opt(o, "ip_address", |v| host(v, f))?;
    opt(o, "netmask", |v| netmask(v, f))?;
    opt(o, "routes", |v| {
        for r in array(v)? {
            let r = object(r)?;
            required(r, &["gateway", "netmask", "network"])?;
            plain_address(&r["network"], f)?;
            netmask(&r["netmask"], f)?;
            plain_address(&r["gateway"], f)?;
            opt(r, "services", |v| {
                for s in array(v)? {
                    service_of(object(s)?, f)?;
                }
                Ok(())
            })?;
        }
        Ok(())
    })
}

fn ipv4_network(o: &Map<String, Value>) -> Check {
    network_of(o, Family::V4)
}

fn ipv6_network(o: &Map<String, Value>) -> Check {
    network_of(o, Family::V6)
}

fn service_of(o: &Map<String, Value>, f: Family) -> Check {
    required(o, &["address", "type"])?;
    host(&o["address"], f)?;
    one_of_words(&o["type"], &["dns"])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn full() -> Value {
        json!({
            "links": [
                {"id": "port0", "type": "phy", "ethernet_mac_address": "52:54:00:00:30:01"},
                {"id": "port1", "type": "phy", "ethernet_mac_address": "52-54-00-00-30-02",
                 "mtu": 9000},
                {"id": "bond0", "type": "bond", "ethernet_mac_address": "52:54:00:00:30:01",
                 "bond_mode": "802.3ad", "bond_links": ["port0", "port1"]},
                {"id": "vlan0", "type": "vlan", "vlan_mac_address": "52:54:00:00:30:01",
                 "vlan_link": "bond0", "vlan_id": 100}
            ],
            "networks": [
                {"id": "net0", "link": "vlan0", "type": "ipv4", "ip_address": "192.0.2.30",
                 "netmask": "255.255.255.0", "network_id": "n0",
                 "routes": [{"network": "0.0.0.0", "netmask": "0.0.0.0",
                             "gateway": "192.0.2.1",
                             "services": [{"type": "dns", "address": "192.0.2.53"}]}]},
                {"id": "net1", "link": "port1", "type": "ipv6", "ip_address": "2001:db8::5/64",
                 "network_id": "n1"},
                {"id": "net2", "link": "port1", "type": "ipv6_slaac", "network_id": "n2"}
            ],
            "services": [{"type": "dns", "address": "192.0.2.53"},
                         {"type": "dns", "address": "2001:db8::53"}],
            "anything_else": true
        })
    }

    #[test]
    fn the_format_passes() {
        assert_eq!(check(&full()), Ok(()));
        assert_eq!(check(&json!({})), Ok(()));
        assert_eq!(
            check(&json!({"links": [], "networks": [], "services": []})),
            Ok(())
        );
    }

    #[test]
    fn errors_name_the_first_problem() {
        let err = |doc: Value| check(&doc).unwrap_err().to_string();
        // Upstream's samples (S216, S226).
        assert_eq!(
            err(json!({"links": "eth0"})),
            "'eth0' is not of type 'array'"
        );
        assert_eq!(
            err(json!({"networks": [{"id": 1}]})),
            "'links' is a required property"
        );
        assert_eq!(err(json!([])), "[] is not of type 'object'");
        let with = |path: &str, v: Value| {
            let mut d = full();
            *d.pointer_mut(path).unwrap() = v;
            check(&d).unwrap_err().to_string()
        };
        assert_eq!(
            with("/links/0/ethernet_mac_address", json!("52:54:00")),
            "'52:54:00' is not a valid MAC address"
        );
        assert_eq!(
            with("/links/0/type", json!("wifi")),
            "{'id': 'port0', 'type': 'wifi', 'ethernet_mac_address': '52:54:00:00:30:01'} is not valid under any of the given schemas"
        );
        assert_eq!(
            with("/links/1/mtu", json!(0)),
            "0 is less than the minimum of 1"
        );
        assert_eq!(
            with("/links/2/bond_mode", json!("fast")),
            "'fast' is not one of ['802.3ad', 'balance-rr', 'active-backup', 'balance-xor', 'broadcast', 'balance-tlb', 'balance-alb']"
        );
        assert_eq!(
            with("/links/3/vlan_id", json!("100")),
            "'100' is not of type 'integer'"
        );
        assert_eq!(
            with("/networks/0/ip_address", json!("192.0.2.300")),
            "'192.0.2.300' is not a valid IPv4 address"
        );
        assert_eq!(
            with("/networks/0/netmask", json!("255.0.255.0")),
            "'255.0.255.0' is not a valid IPv4 netmask"
        );
        assert_eq!(
            with("/networks/1/ip_address", json!("192.0.2.1")),
            "'192.0.2.1' is not a valid IPv6 address"
        );
        assert_eq!(
            with("/networks/0/routes/0/gateway", json!("2001:db8::1")),
            "'2001:db8::1' is not a valid IPv4 address"
        );
        assert_eq!(
            with("/services/0/type", json!("ntp")),
            "'ntp' is not one of ['dns']"
        );
        let mut d = full();
        d["networks"][0].as_object_mut().unwrap().remove("link");
        assert_eq!(
            check(&d).unwrap_err().to_string(),
            "'link' is a required property"
        );
    }
}
