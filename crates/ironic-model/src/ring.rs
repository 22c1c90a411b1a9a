//! The consistent hash ring that maps a node to the one conductor that owns it,
//! bit-compatible with the ring upstream Ironic builds (tooz, md5, reference §6), so that
//! a mixed or migrating deployment agrees on ownership.

use md5::{Digest, Md5};

/// Default `hash_partition_exponent`: 2^5 = 32 partitions per host.
pub const DEFAULT_PARTITION_EXPONENT: u32 = 5;

/// One ring for one (conductor group, hardware type) key.
#[derive(Debug, Clone, Default)]
pub struct HashRing {
    /// (position, index into `hosts`), sorted by position.
    points: Vec<(u128, usize)>,
    hosts: Vec<String>,
}

fn position(h: &Md5) -> u128 {
    u128::from_be_bytes(h.clone().finalize().into())
}

impl HashRing {
    pub fn new<I, S>(hosts: I, partition_exponent: u32) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut hosts: Vec<String> = hosts.into_iter().map(Into::into).collect();
        hosts.sort();
        hosts.dedup();
        let partitions = 1usize << partition_exponent.min(16);
        let mut points = Vec::with_capacity(hosts.len() * partitions);
        for (i, host) in hosts.iter().enumerate() {
            let mut h = Md5::new();
            h.update(host.as_bytes());
            for _ in 0..partitions {
                h.update(host.as_bytes());
                points.push((position(&h), i));
            }
        }
        points.sort_unstable();
        // Upstream keeps a dict keyed by position: the later host wins a collision.
        points.dedup_by(|later, earlier| {
            if later.0 == earlier.0 {
                earlier.1 = later.1.max(earlier.1);
                true
            } else {
                false
            }
        });
        HashRing { points, hosts }
    }

    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    /// The host that owns `key` (a node UUID), or `None` for an empty ring.
    pub fn owner(&self, key: &str) -> Option<&str> {
        if self.points.is_empty() {
            return None;
        }
        let mut h = Md5::new();
        h.update(key.as_bytes());
        let p = position(&h);
        let i = self.points.partition_point(|(pos, _)| *pos <= p);
        let i = if i == self.points.len() { 0 } else { i };
        Some(&self.hosts[self.points[i].1])
    }
}

/// The ring key upstream uses: `"<conductor_group>:<hardware_type>"`, group lower-cased.
pub fn ring_key(conductor_group: &str, hardware_type: &str) -> String {
    format!("{}:{}", conductor_group.to_ascii_lowercase(), hardware_type)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn empty_ring_has_no_owner() {
        assert_eq!(HashRing::new(Vec::<String>::new(), 5).owner("x"), None);
    }

    #[test]
    fn single_host_owns_everything() {
        let r = HashRing::new(["a"], 5);
        assert_eq!(r.owner("7c1a0f2e-8b43-4c6a-9d1e-2f3a4b5c6d7e"), Some("a"));
    }

    #[test]
    fn known_mappings_are_pinned() {
        // Computed independently with Python's hashlib following tooz's algorithm.
        let r = HashRing::new(["conductor-1", "conductor-2", "conductor-3"], 5);
        let got: Vec<&str> = [
            "00000000-0000-0000-0000-000000000000",
            "7c1a0f2e-8b43-4c6a-9d1e-2f3a4b5c6d7e",
            "11111111-2222-3333-4444-555555555555",
            "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee",
        ]
        .iter()
        .map(|k| r.owner(k).unwrap_or_default())
        .collect();
        assert_eq!(got, PINNED);
    }

    // Filled in from tools/ring_reference.py (see docs/architecture.md).
    const PINNED: [&str; 4] = include!("ring_pinned.in");

    proptest! {
        #[test]
        fn owner_is_a_member_and_stable_under_order(
            hosts in proptest::collection::btree_set("[a-z]{1,8}", 1..6),
            key in "[a-f0-9-]{1,36}",
        ) {
            let v: Vec<String> = hosts.iter().cloned().collect();
            let mut rev = v.clone();
            rev.reverse();
            let a = HashRing::new(v.clone(), 5);
            let b = HashRing::new(rev, 5);
            let owner = a.owner(&key).map(str::to_owned);
            prop_assert!(owner.as_ref().is_some_and(|o| hosts.contains(o)));
            prop_assert_eq!(owner.as_deref(), b.owner(&key));
        }

        #[test]
        fn removing_a_host_moves_only_its_keys(
            hosts in proptest::collection::btree_set("[a-z]{1,8}", 2..6),
            keys in proptest::collection::vec("[a-f0-9]{8}", 1..40),
        ) {
            let all: Vec<String> = hosts.iter().cloned().collect();
            let gone = all[0].clone();
            let full = HashRing::new(all.clone(), 5);
            let less = HashRing::new(all[1..].to_vec(), 5);
            for k in &keys {
                let before = full.owner(k).map(str::to_owned);
                if before.as_deref() != Some(gone.as_str()) {
                    prop_assert_eq!(before.as_deref(), less.owner(k));
                }
            }
        }
    }
}
