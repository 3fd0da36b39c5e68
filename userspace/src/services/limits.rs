//! What one user may hold: service slots and connections, and how fast it
//! may open connections.
//!
//! There are only TAILCTL_MAX_SERVICES slots, and each connection costs the
//! daemon a thread. Without limits, one unprivileged user could take every
//! slot (registering with no workers costs nothing) or open connections
//! until the daemon runs out of threads or descriptors, and no other service
//! could register. Root is not limited (it can stop the scheduler anyway).
//!
//! Each registration also costs the daemon a region map, its bindings, a
//! binding generation (every task on the machine looks its binding up again)
//! and a round of the allotment controller. Four processes of one user
//! registering and closing in a loop kept 1.37 of the guest's 4 CPUs busy in
//! the daemon (guest test `regabuse`, 7.3, 373 registrations in 12 s), at the
//! daemon's nice -10. So a user's new connections are also metered: a bucket
//! of `2 x connect_rate` connections, refilled at `connect_rate` a second.

use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, Instant};

use super::MAX_SERVICES;

/// Whom the limits count a connection against: a user, however many uids it runs
/// processes as.
///
/// A process in the daemon's user namespace counts as its uid. A process in another user
/// namespace (a container, `unshare --user`) counts as the uid that created the outermost
/// of its namespaces: with subordinate uids (`/etc/subuid`, usually 65536 per user) one
/// user can run processes as thousands of uids, and each uid with its own quota would let
/// it take every slot. A namespace root created is counted on its own
/// ([`Key::Namespace`]): its owner (root) is not limited, its processes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Key {
    /// A uid of the daemon's user namespace (0: root, not limited).
    Uid(u32),
    /// A user namespace root created (its nsfs inode), with everything nested in it.
    Namespace(u64),
}

impl Key {
    fn limited(self) -> bool {
        self != Key::Uid(0)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Uid(u) => write!(f, "uid {u}"),
            Key::Namespace(ino) => write!(f, "user namespace {ino}"),
        }
    }
}

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
    /// New connections one non-root uid may open per second, on average,
    /// in bursts of twice that (0: no limit).
    pub connect_rate: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            services_per_uid: 4,
            connections_per_uid: 8,
            connections: 64,
            request_timeout: Duration::from_secs(3),
            max_user_priority: tailctl_rt::kernel::protocol::PRIORITY_NORMAL,
            connect_rate: 10,
        }
    }
}

/// Slot and connection bookkeeping, behind the registry's one mutex.
#[derive(Default, Debug)]
pub struct Book {
    /// The account holding each slot.
    owners: [Option<Key>; MAX_SERVICES],
    conns: HashMap<Key, u32>,
    unprivileged_conns: u32,
    /// Per limited account: connections it may still open now, and when that was counted.
    buckets: HashMap<Key, (f64, Instant)>,
}

/// Accounts whose buckets are kept before the full ones are dropped (a full
/// bucket is the same as none), so that many uids cannot grow the map.
const MAX_BUCKETS: usize = 1024;

impl Book {
    /// A new connection of account `uid`: admitted, or why not.
    pub fn admit(&mut self, uid: Key, lim: &Limits) -> Result<(), String> {
        self.admit_at(uid, lim, Instant::now())
    }

    /// [`Book::admit`] at `now`.
    pub fn admit_at(&mut self, uid: Key, lim: &Limits, now: Instant) -> Result<(), String> {
        if uid.limited() {
            let mine = self.conns.get(&uid).copied().unwrap_or(0);
            if mine >= lim.connections_per_uid {
                return Err(format!(
                    "{uid} already has {mine} connections (at most {})",
                    lim.connections_per_uid
                ));
            }
            if self.unprivileged_conns >= lim.connections {
                return Err(format!(
                    "{} connections are open (at most {})",
                    self.unprivileged_conns, lim.connections
                ));
            }
            // Last: a connection the caps refuse takes nothing from the bucket.
            self.meter(uid, lim, now)?;
            self.unprivileged_conns += 1;
        }
        *self.conns.entry(uid).or_insert(0) += 1;
        Ok(())
    }

    /// Take one connection from `uid`'s bucket, or say how fast it may go.
    /// A refused connection takes nothing, so a user that keeps trying is
    /// let in again as soon as the bucket has refilled by one.
    fn meter(&mut self, uid: Key, lim: &Limits, now: Instant) -> Result<(), String> {
        if lim.connect_rate == 0 {
            return Ok(());
        }
        let (rate, burst) = (lim.connect_rate as f64, 2.0 * lim.connect_rate as f64);
        if self.buckets.len() >= MAX_BUCKETS && !self.buckets.contains_key(&uid) {
            self.buckets.retain(|_, (left, at)| {
                *left + now.saturating_duration_since(*at).as_secs_f64() * rate < burst
            });
            // Still full (that many uids connecting within two seconds): the
            // one seen longest ago starts over.
            if self.buckets.len() >= MAX_BUCKETS {
                if let Some(old) = self
                    .buckets
                    .iter()
                    .min_by_key(|(_, (_, at))| *at)
                    .map(|(u, _)| *u)
                {
                    self.buckets.remove(&old);
                }
            }
        }
        let (left, at) = self.buckets.entry(uid).or_insert((burst, now));
        *left = (*left + now.saturating_duration_since(*at).as_secs_f64() * rate).min(burst);
        *at = now;
        if *left < 1.0 {
            return Err(format!(
                "{uid} {} (at most {} a second, in bursts of {})",
                tailctl_rt::kernel::protocol::TOO_FAST,
                lim.connect_rate,
                2 * u64::from(lim.connect_rate)
            ));
        }
        *left -= 1.0;
        Ok(())
    }

    /// A connection admitted by [`Book::admit`] closed.
    pub fn leave(&mut self, uid: Key) {
        if let Some(n) = self.conns.get_mut(&uid) {
            *n -= 1;
            if *n == 0 {
                self.conns.remove(&uid);
            }
            if uid.limited() {
                self.unprivileged_conns -= 1;
            }
        }
    }

    /// A free slot for a service of account `uid`, or why there is none for it.
    pub fn claim(&mut self, uid: Key, lim: &Limits) -> Result<u32, String> {
        let mine = self.owners.iter().filter(|o| **o == Some(uid)).count() as u32;
        if uid.limited() && lim.services_per_uid > 0 && mine >= lim.services_per_uid {
            return Err(format!(
                "{uid} already has {mine} services registered (at most {})",
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
        self.owners[i] = Some(Key::Uid(0));
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

    fn u(uid: u32) -> Key {
        Key::Uid(uid)
    }

    #[test]
    fn a_namespace_root_created_is_limited_on_its_own() {
        let lim = Limits::default();
        let mut b = Book::default();
        let ns = Key::Namespace(4026532000);
        for _ in 0..4 {
            b.claim(ns, &lim).unwrap();
        }
        let e = b.claim(ns, &lim).unwrap_err();
        assert!(e.contains("user namespace 4026532000 already has 4"), "{e}");
        // Another namespace, and root itself, are not charged for it.
        b.claim(Key::Namespace(4026532001), &lim).unwrap();
        b.claim(u(0), &lim).unwrap();
    }

    #[test]
    fn one_user_cannot_take_every_slot() {
        let lim = Limits::default();
        let mut b = Book::default();
        for _ in 0..4 {
            b.claim(u(1000), &lim).unwrap();
        }
        assert!(b.claim(u(1000), &lim).unwrap_err().contains("at most 4"));
        // Others still register, root without a quota.
        b.claim(u(1001), &lim).unwrap();
        for _ in 0..(MAX_SERVICES - 5) {
            b.claim(u(0), &lim).unwrap();
        }
        assert_eq!(b.count(), MAX_SERVICES as u32);
        assert!(b
            .claim(u(0), &lim)
            .unwrap_err()
            .contains("slots are in use"));
        b.release(0);
        assert_eq!(b.claim(u(1000), &lim).unwrap(), 0);
    }

    #[test]
    fn cgroup_job_slots_come_from_the_top_and_are_reused() {
        let lim = Limits::default();
        let mut b = Book::default();
        assert_eq!(b.claim_top(), Some(MAX_SERVICES as u32 - 1));
        assert_eq!(b.count(), 1);
        for _ in 0..(MAX_SERVICES - 1) {
            assert_ne!(b.claim(u(0), &lim).unwrap(), MAX_SERVICES as u32 - 1);
        }
        assert!(b
            .claim(u(0), &lim)
            .unwrap_err()
            .contains("slots are in use"));
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
            b.claim(u(1000), &lim).unwrap();
        }
    }

    #[test]
    fn connections_are_metered_per_user() {
        let lim = Limits {
            connect_rate: 5,
            connections_per_uid: 1000,
            connections: 1000,
            ..Default::default()
        };
        let mut b = Book::default();
        let t0 = Instant::now();
        // A burst of twice the rate, then refused; others and root unaffected.
        for _ in 0..10 {
            b.admit_at(u(7), &lim, t0).unwrap();
        }
        assert!(b.admit_at(u(7), &lim, t0).unwrap_err().contains("too fast"));
        b.admit_at(u(8), &lim, t0).unwrap();
        for _ in 0..100 {
            b.admit_at(u(0), &lim, t0).unwrap();
        }
        // A refusal costs nothing: one more after a fifth of a second.
        assert!(b
            .admit_at(u(7), &lim, t0 + Duration::from_millis(100))
            .is_err());
        b.admit_at(u(7), &lim, t0 + Duration::from_millis(201))
            .unwrap();
        assert!(b
            .admit_at(u(7), &lim, t0 + Duration::from_millis(202))
            .is_err());
        // Refilled, never above the burst.
        let later = t0 + Duration::from_secs(60);
        for _ in 0..10 {
            b.admit_at(u(7), &lim, later).unwrap();
        }
        assert!(b.admit_at(u(7), &lim, later).is_err());
        // Off at 0.
        let off = Limits {
            connect_rate: 0,
            ..lim
        };
        for _ in 0..100 {
            b.admit_at(u(9), &off, t0).unwrap();
        }
    }

    #[test]
    fn many_uids_do_not_grow_the_buckets_without_bound() {
        let lim = Limits {
            connect_rate: 1,
            ..Default::default()
        };
        let mut b = Book::default();
        let t0 = Instant::now();
        for uid in 1..=(MAX_BUCKETS as u32 + 10) {
            b.admit_at(u(uid), &lim, t0).unwrap();
            b.leave(u(uid));
        }
        assert_eq!(b.buckets.len(), MAX_BUCKETS);
        // Those refilled by then are dropped to make room.
        let later = t0 + Duration::from_secs(10);
        b.admit_at(u(1_000_000), &lim, later).unwrap();
        assert!(b.buckets.len() <= 11, "{} buckets", b.buckets.len());
    }

    #[test]
    fn connections_are_capped_per_user_and_in_total() {
        let lim = Limits {
            connections_per_uid: 2,
            connections: 3,
            ..Default::default()
        };
        let mut b = Book::default();
        b.admit(u(1), &lim).unwrap();
        b.admit(u(1), &lim).unwrap();
        assert!(b.admit(u(1), &lim).unwrap_err().contains("uid 1"));
        b.admit(u(2), &lim).unwrap();
        assert!(b
            .admit(u(3), &lim)
            .unwrap_err()
            .contains("connections are open"));
        // Root is never turned away.
        for _ in 0..10 {
            b.admit(u(0), &lim).unwrap();
        }
        b.leave(u(1));
        b.admit(u(3), &lim).unwrap();
        for _ in 0..10 {
            b.leave(u(0));
        }
        assert_eq!(b.conns.get(&u(0)), None);
    }
}
