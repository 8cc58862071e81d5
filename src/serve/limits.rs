//! Sign-in attempts, limited per client address and per principal name, counted before the
//! token is hashed (`Attempts`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Sign-ins allowed to fail in `WINDOW` from one client address, and for one principal name
/// (from any number of addresses); more are refused (429) unchecked (`Attempts`).
const FAILURES: u32 = 5;
const NAME_FAILURES: u32 = 10;
const WINDOW: Duration = Duration::from_secs(60);
/// Past this many addresses and names counted, the expired ones are dropped; past
/// `MOST_COUNTED`, sign-ins are refused (429) until some expire: a flood of new addresses or
/// names cannot grow the server's memory without end.
const PRUNE_AT: usize = 10_000;
const MOST_COUNTED: usize = 100_000;

/// Who a sign-in attempt is counted against: its client's address (an IPv6 client by its
/// /64, which one machine usually holds whole), and the principal name its token claims (by
/// hash: a name of any length costs the same to keep).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Attempter {
    Address(IpAddr),
    Name([u8; 32]),
}

/// Sign-in attempts within `WINDOW` of each attempter's first: each one is counted when it
/// begins, before its token is hashed, and given back if it succeeds. At its limit an
/// attempter is refused unchecked until the window ends.
#[derive(Default)]
pub(super) struct Attempts {
    counted: HashMap<Attempter, (u32, Instant)>,
}

impl Attempts {
    /// The attempters of a sign-in from `ip` with `token`, each with its limit.
    pub(super) fn keys(ip: IpAddr, token: &str) -> Vec<(Attempter, u32)> {
        use sha2::Digest;
        let address = match ip {
            IpAddr::V4(_) => ip,
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6(std::net::Ipv6Addr::from(
                    u128::from(v6) & !((1u128 << 64) - 1),
                )),
            },
        };
        let mut keys = vec![(Attempter::Address(address), FAILURES)];
        // The name as `auth::authenticate` reads it: before the token's last dot.
        if let Some((name, _)) = token.trim().rsplit_once('.').filter(|(n, _)| !n.is_empty()) {
            let hash: [u8; 32] = sha2::Sha256::digest(name.as_bytes()).into();
            keys.push((Attempter::Name(hash), NAME_FAILURES));
        }
        keys
    }

    /// Counts an attempt against each of `keys`, unless one of them is at its limit (or too
    /// many are counted already): then nothing is counted, and the attempt is refused.
    pub(super) fn begin(&mut self, keys: &[(Attempter, u32)], now: Instant) -> bool {
        if self.counted.len() >= PRUNE_AT {
            self.counted
                .retain(|_, (_, since)| now.duration_since(*since) <= WINDOW);
        }
        let live = |c: &(u32, Instant)| now.duration_since(c.1) <= WINDOW;
        let limited = keys
            .iter()
            .any(|(k, most)| self.counted.get(k).is_some_and(|c| live(c) && c.0 >= *most));
        if limited || self.counted.len() + keys.len() > MOST_COUNTED {
            return false;
        }
        for (k, _) in keys {
            let c = self.counted.entry(*k).or_insert((0, now));
            if !live(c) {
                *c = (0, now);
            }
            c.0 += 1;
        }
        true
    }

    /// Gives back the attempt `begin` counted against each of `keys` (it succeeded).
    pub(super) fn give_back(&mut self, keys: &[(Attempter, u32)]) {
        for (k, _) in keys {
            if let Some(c) = self.counted.get_mut(k) {
                c.0 = c.0.saturating_sub(1);
            }
        }
    }
}
