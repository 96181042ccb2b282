//! How many long-lived connections an instance holds, in all and per client address
//! (queue-api's push streams, chat-server's WebSocket sessions). A flood ends in
//! refusals instead of in memory running out: each open connection holds a
//! [`Permit`], given back when it ends. queue-api answers a refusal with 503 (full) or
//! 429 (this address), chat-server closes the upgrade with 1013.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The instance holds its most connections.
    Full,
    /// This client address holds its most connections.
    PerAddress,
}

#[derive(Default)]
struct Counts {
    total: usize,
    by_addr: HashMap<IpAddr, u32>,
}

/// The limits and what is held against them.
pub struct ConnLimit {
    max_total: usize,
    max_per_addr: u32,
    counts: Mutex<Counts>,
}

/// One held connection; dropping it gives the place back.
pub struct Permit {
    limit: Arc<ConnLimit>,
    addr: IpAddr,
}

impl ConnLimit {
    /// `max_total` and `max_per_addr` of 0 mean no limit.
    pub fn new(max_total: usize, max_per_addr: u32) -> Arc<ConnLimit> {
        Arc::new(ConnLimit { max_total, max_per_addr, counts: Mutex::default() })
    }

    /// Takes a place for a connection from `addr`, or says why not.
    pub fn acquire(self: &Arc<Self>, addr: IpAddr) -> Result<Permit, Refusal> {
        let mut c = self.counts.lock().unwrap();
        if self.max_total > 0 && c.total >= self.max_total {
            return Err(Refusal::Full);
        }
        let held = c.by_addr.entry(addr).or_insert(0);
        if self.max_per_addr > 0 && *held >= self.max_per_addr {
            return Err(Refusal::PerAddress);
        }
        *held += 1;
        c.total += 1;
        Ok(Permit { limit: self.clone(), addr })
    }

    /// Connections held now.
    pub fn held(&self) -> usize {
        self.counts.lock().unwrap().total
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut c = self.limit.counts.lock().unwrap();
        c.total -= 1;
        if let Some(held) = c.by_addr.get_mut(&self.addr) {
            *held -= 1;
            if *held == 0 {
                c.by_addr.remove(&self.addr);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_in_all_and_per_address_and_places_come_back() {
        let l = ConnLimit::new(3, 2);
        let (a, b, c): (IpAddr, IpAddr, IpAddr) =
            ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap(), "10.0.0.3".parse().unwrap());
        let a1 = l.acquire(a).unwrap();
        let _a2 = l.acquire(a).unwrap();
        assert_eq!(l.acquire(a).err(), Some(Refusal::PerAddress));
        let _b1 = l.acquire(b).unwrap();
        assert_eq!(l.acquire(c).err(), Some(Refusal::Full));
        drop(a1);
        assert_eq!(l.held(), 2);
        let _c1 = l.acquire(c).unwrap();
        assert_eq!(l.acquire(a).err(), Some(Refusal::Full));
        let unlimited = ConnLimit::new(0, 0);
        let held: Vec<Permit> = (0..100).map(|_| unlimited.acquire(a).unwrap()).collect();
        assert_eq!(unlimited.held(), held.len());
        drop(held);
        assert!(unlimited.counts.lock().unwrap().by_addr.is_empty(), "addresses are forgotten");
    }
}
