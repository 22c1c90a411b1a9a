//! Client addresses: networks as operators write them (`[api] trusted_proxies`).

/// An address or a network (`10.0.0.0/8`; an address alone is the whole prefix): the
/// network's address and its prefix length.
pub fn parse_network(s: &str) -> Option<(std::net::IpAddr, u8)> {
    let (addr, len) = match s.trim().split_once('/') {
        Some((a, l)) => (
            a.parse::<std::net::IpAddr>().ok()?,
            Some(l.parse::<u8>().ok()?),
        ),
        None => (s.trim().parse().ok()?, None),
    };
    let most = if addr.is_ipv4() { 32 } else { 128 };
    let len = len.unwrap_or(most);
    (len <= most).then_some((addr, len))
}

/// Whether `ip` lies in the network `(net, len)`.
pub fn in_network(ip: std::net::IpAddr, (net, len): (std::net::IpAddr, u8)) -> bool {
    use std::net::IpAddr::{V4, V6};
    match (ip, net) {
        (V4(a), V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (V6(a), V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_are_parsed_and_matched() {
        let n = parse_network("10.0.0.0/8").unwrap();
        assert!(in_network("10.1.2.3".parse().unwrap(), n));
        assert!(!in_network("11.0.0.1".parse().unwrap(), n));
        let one = parse_network("192.0.2.10").unwrap();
        assert!(in_network("192.0.2.10".parse().unwrap(), one));
        assert!(!in_network("192.0.2.11".parse().unwrap(), one));
        let v6 = parse_network("fd00::/8").unwrap();
        assert!(in_network("fd12::1".parse().unwrap(), v6));
        assert!(!in_network("10.0.0.1".parse().unwrap(), v6));
        assert!(in_network(
            "1.2.3.4".parse().unwrap(),
            parse_network("0.0.0.0/0").unwrap()
        ));
        for bad in ["x", "10.0.0.0/33", "fd00::/129", "10.0.0.0/x"] {
            assert!(parse_network(bad).is_none(), "{bad}");
        }
    }
}
