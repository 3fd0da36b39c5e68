//! What one user may hold: service slots and connections.
//!
//! There are only TAILCTL_MAX_SERVICES slots, and each connection costs the
//! daemon a thread. Without limits, one unprivileged user could take every
//! slot (registering with no workers costs nothing) or open connections
//! until the daemon runs out of threads or descriptors, and no other service
//! could register. Root is not limited (it can stop the scheduler anyway).

use std::collections::HashMap;
use std::time::Duration;

use super::MAX_SERVICES;

/// The limits, from the command line.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Services one non-root uid may have registered at once (0: no limit).
    pub services_per_uid: u32,
    /// Connections (registered or not yet) one non-root uid may hold.
    pub connections_per_uid: u32,
    /// Connections of all non-root users together.
    pub connections: u32,
    /// Time a client has to send its whole REGISTER line, and any later line.
    pub request_timeout: Duration,
    /// Highest priority level a non-root uid may register at (root: any).
    pub max_user_priority: u8,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            services_per_uid: 4,
            connections_per_uid: 8,
            connections: 64,
            request_timeout: Duration::from_secs(3),
            max_user_priority: tailctl_rt::kernel::protocol::PRIORITY_NORMAL,
        }
    }
}

/// Slot and connection bookkeeping, behind the registry's one mutex.
#[derive(Default, Debug)]
pub struct Book {
    /// The uid holding each slot.
    owners: [Option<u32>; MAX_SERVICES],
    conns: HashMap<u32, u32>,
    unprivileged_conns: u32,
}

impl Book {
    /// A new connection from `uid`: admitted, or why not.
    pub fn admit(&mut self, uid: u32, lim: &Limits) -> Result<(), String> {
        if uid != 0 {
            let mine = self.conns.get(&uid).copied().unwrap_or(0);
            if mine >= lim.connections_per_uid {
                return Err(format!(
                    "uid {uid} already has {mine} connections (at most {})",
                    lim.connections_per_uid
                ));
            }
            if self.unprivileged_conns >= lim.connections {
                return Err(format!(
                    "{} connections are open (at most {})",
                    self.unprivileged_conns, lim.connections
                ));
            }
            self.unprivileged_conns += 1;
        }
        *self.conns.entry(uid).or_insert(0) += 1;
        Ok(())
    }

    /// A connection admitted by [`Book::admit`] closed.
    pub fn leave(&mut self, uid: u32) {
        if let Some(n) = self.conns.get_mut(&uid) {
            *n -= 1;
            if *n == 0 {
                self.conns.remove(&uid);
            }
            if uid != 0 {
                self.unprivileged_conns -= 1;
            }
        }
    }

    /// A free slot for a service of `uid`, or why there is none for it.
    pub fn claim(&mut self, uid: u32, lim: &Limits) -> Result<u32, String> {
        let mine = self.owners.iter().filter(|o| **o == Some(uid)).count() as u32;
        if uid != 0 && lim.services_per_uid > 0 && mine >= lim.services_per_uid {
            return Err(format!(
                "uid {uid} already has {mine} services registered (at most {})",
                lim.services_per_uid
            ));
        }
        let i = self
            .owners
            .iter()
            .position(Option::is_none)
            .ok_or_else(|| format!("all {MAX_SERVICES} service slots are in use"))?;
        self.owners[i] = Some(uid);
        Ok(i as u32)
    }

    /// A slot for a cgroup job (`--job`), the highest free one (registered
    /// services take the lowest): held by root, so it counts in
    /// [`Book::count`] and no uid's quota. None when every slot is in use.
    pub fn claim_top(&mut self) -> Option<u32> {
        let i = self.owners.iter().rposition(Option::is_none)?;
        self.owners[i] = Some(0);
        Some(i as u32)
    }

    pub fn release(&mut self, slot: u32) {
        self.owners[slot as usize] = None;
    }

    /// Registered services.
    pub fn count(&self) -> u32 {
        self.owners.iter().filter(|o| o.is_some()).count() as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_user_cannot_take_every_slot() {
        let lim = Limits::default();
        let mut b = Book::default();
        for _ in 0..4 {
            b.claim(1000, &lim).unwrap();
        }
        assert!(b.claim(1000, &lim).unwrap_err().contains("at most 4"));
        // Others still register, root without a quota.
        b.claim(1001, &lim).unwrap();
        for _ in 0..(MAX_SERVICES - 5) {
            b.claim(0, &lim).unwrap();
        }
        assert_eq!(b.count(), MAX_SERVICES as u32);
        assert!(b.claim(0, &lim).unwrap_err().contains("slots are in use"));
        b.release(0);
        assert_eq!(b.claim(1000, &lim).unwrap(), 0);
    }

    #[test]
    fn cgroup_job_slots_come_from_the_top_and_are_reused() {
        let lim = Limits::default();
        let mut b = Book::default();
        assert_eq!(b.claim_top(), Some(MAX_SERVICES as u32 - 1));
        assert_eq!(b.count(), 1);
        for _ in 0..(MAX_SERVICES - 1) {
            assert_ne!(b.claim(0, &lim).unwrap(), MAX_SERVICES as u32 - 1);
        }
        assert!(b.claim(0, &lim).unwrap_err().contains("slots are in use"));
        assert_eq!(b.claim_top(), None);
        // A job that ends frees its slot for the next one.
        b.release(MAX_SERVICES as u32 - 1);
        assert_eq!(b.claim_top(), Some(MAX_SERVICES as u32 - 1));
    }

    #[test]
    fn no_quota_when_zero() {
        let lim = Limits {
            services_per_uid: 0,
            ..Default::default()
        };
        let mut b = Book::default();
        for _ in 0..MAX_SERVICES {
            b.claim(1000, &lim).unwrap();
        }
    }

    #[test]
    fn connections_are_capped_per_user_and_in_total() {
        let lim = Limits {
            connections_per_uid: 2,
            connections: 3,
            ..Default::default()
        };
        let mut b = Book::default();
        b.admit(1, &lim).unwrap();
        b.admit(1, &lim).unwrap();
        assert!(b.admit(1, &lim).unwrap_err().contains("uid 1"));
        b.admit(2, &lim).unwrap();
        assert!(b
            .admit(3, &lim)
            .unwrap_err()
            .contains("connections are open"));
        // Root is never turned away.
        for _ in 0..10 {
            b.admit(0, &lim).unwrap();
        }
        b.leave(1);
        b.admit(3, &lim).unwrap();
        for _ in 0..10 {
            b.leave(0);
        }
        assert_eq!(b.conns.get(&0), None);
    }
}
