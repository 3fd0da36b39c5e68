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

/// A user the limits count connections and services against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Key {
    /// A uid of the daemon's user namespace (0: root, not limited), after subordinate uids
    /// (`/etc/subuid`) were taken back to the user they belong to.
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

/// Whom a connection is counted against: one key, or two, each under every limit.
///
/// One user can run processes as many uids: its subordinate uids (`/etc/subuid`, usually
/// 65536 per user), through `newuidmap` in a user namespace or through a file it made
/// setuid to one of them from inside one. With a quota per uid it could take every slot.
/// So (`identity::account`):
/// - a process of the daemon's user namespace counts as its uid, a subordinate uid as the
///   user it belongs to;
/// - a process in another user namespace counts as the uid that created the outermost of
///   its namespaces (taken back the same way);
/// - when root created that namespace, as that namespace: a container is one user however
///   many uids it maps (not its uids' owner in subuid(5): Docker lists its range under
///   `dockremap`, and all containers would share one quota). A namespace that maps one uid
///   only is a sandbox a setuid helper (bubblewrap) made for its caller, who is charged as
///   well, so a user does not get a fresh quota from each sandbox it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account(Vec<Key>);

impl Account {
    /// Counted as each of `keys` (duplicates dropped).
    pub fn of(mut keys: Vec<Key>) -> Self {
        keys.dedup();
        Account(keys)
    }

    /// One uid.
    pub fn uid(uid: u32) -> Self {
        Account(vec![Key::Uid(uid)])
    }

    /// Root of the daemon's user namespace: not limited.
    pub fn is_root(&self) -> bool {
        self.0 == [Key::Uid(0)]
    }

    /// The keys the limits apply to (every key but root's).
    fn limited(&self) -> impl Iterator<Item = Key> + '_ {
        self.0.iter().copied().filter(|k| k.limited())
    }

    fn has(&self, k: Key) -> bool {
        self.0.contains(&k)
    }
}

impl fmt::Display for Account {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, k) in self.0.iter().enumerate() {
            write!(f, "{}{k}", if i > 0 { " and " } else { "" })?;
        }
        Ok(())
    }
}

/// The limits, from the command line.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Services one non-root uid may have registered at once (0: no limit).
    pub services_per_user: u32,
    /// Connections (registered or not yet) one non-root uid may hold.
    pub connections_per_user: u32,
    /// Connections of all non-root users together.
    pub connections: u32,
    /// Time a client has to send its whole REGISTER line, and any later line.
    pub request_timeout: Duration,
    /// Highest priority level a non-root uid may register at (root: any).
    pub max_user_priority: u8,
    /// New connections one non-root uid may open per second, on average,
    /// in bursts of twice that (0: no limit).
    pub connect_rate: u32,
    /// subuid(5): whose subordinate uids are whose ([`super::subuid`]).
    pub subuid_file: std::path::PathBuf,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            services_per_user: 4,
            connections_per_user: 8,
            connections: 64,
            request_timeout: Duration::from_secs(3),
            max_user_priority: tailctl_rt::kernel::protocol::PRIORITY_NORMAL,
            connect_rate: 10,
            subuid_file: "/etc/subuid".into(),
        }
    }
}

/// Slot and connection bookkeeping, behind the registry's one mutex.
#[derive(Default, Debug)]
pub struct Book {
    /// The account holding each slot.
    owners: [Option<Account>; MAX_SERVICES],
    /// Connections open per key.
    conns: HashMap<Key, u32>,
    unprivileged_conns: u32,
    /// Per limited account: connections it may still open now, and when that was counted.
    buckets: HashMap<Key, (f64, Instant)>,
}

/// Accounts whose buckets are kept before the full ones are dropped (a full
/// bucket is the same as none), so that many uids cannot grow the map.
const MAX_BUCKETS: usize = 1024;

impl Book {
    /// A new connection of `acct`: admitted, or why not.
    pub fn admit(&mut self, acct: &Account, lim: &Limits) -> Result<(), String> {
        self.admit_at(acct, lim, Instant::now())
    }

    /// Whether an unprivileged connection could be admitted at all (the global cap): checked
    /// on SO_PEERCRED's uid alone, before the peer is identified, so a flood past the cap
    /// costs no more than that.
    pub fn full(&self, lim: &Limits) -> Option<String> {
        (self.unprivileged_conns >= lim.connections).then(|| {
            format!(
                "{} connections are open (at most {})",
                self.unprivileged_conns, lim.connections
            )
        })
    }

    /// [`Book::admit`] at `now`.
    pub fn admit_at(&mut self, acct: &Account, lim: &Limits, now: Instant) -> Result<(), String> {
        if !acct.is_root() {
            for k in acct.limited() {
                let mine = self.conns.get(&k).copied().unwrap_or(0);
                if mine >= lim.connections_per_user {
                    return Err(format!(
                        "{k} already has {mine} connections (at most {})",
                        lim.connections_per_user
                    ));
                }
            }
            if let Some(why) = self.full(lim) {
                return Err(why);
            }
            // Last: a connection the caps refuse takes nothing from the buckets, nor one
            // refused by one key's bucket from the other's.
            for k in acct.limited() {
                self.meter(k, lim, now)?;
            }
            if lim.connect_rate > 0 {
                // The second key's eviction may have dropped the first's (full) bucket:
                // a full one again, charged all the same.
                let burst = 2.0 * lim.connect_rate as f64;
                for k in acct.limited() {
                    self.buckets.entry(k).or_insert((burst, now)).0 -= 1.0;
                }
            }
            self.unprivileged_conns += 1;
        }
        for &k in &acct.0 {
            *self.conns.entry(k).or_insert(0) += 1;
        }
        Ok(())
    }

    /// Refill `k`'s bucket to `now` and check it holds a connection (the caller takes it),
    /// or say how fast it may go. A refused connection takes nothing, so a user that keeps
    /// trying is let in again as soon as the bucket has refilled by one.
    fn meter(&mut self, k: Key, lim: &Limits, now: Instant) -> Result<(), String> {
        if lim.connect_rate == 0 {
            return Ok(());
        }
        let (rate, burst) = (lim.connect_rate as f64, 2.0 * lim.connect_rate as f64);
        if self.buckets.len() >= MAX_BUCKETS && !self.buckets.contains_key(&k) {
            self.buckets.retain(|_, (left, at)| {
                *left + now.saturating_duration_since(*at).as_secs_f64() * rate < burst
            });
            // Still full (that many users connecting within two seconds): the
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
        let (left, at) = self.buckets.entry(k).or_insert((burst, now));
        *left = (*left + now.saturating_duration_since(*at).as_secs_f64() * rate).min(burst);
        *at = now;
        if *left < 1.0 {
            return Err(format!(
                "{k} {} (at most {} a second, in bursts of {})",
                tailctl_rt::kernel::protocol::TOO_FAST,
                lim.connect_rate,
                2 * u64::from(lim.connect_rate)
            ));
        }
        Ok(())
    }

    /// A connection admitted by [`Book::admit`] closed.
    pub fn leave(&mut self, acct: &Account) {
        if !acct.0.iter().all(|k| self.conns.contains_key(k)) {
            return; // never admitted (a bug elsewhere): nothing to give back
        }
        for k in &acct.0 {
            if let Some(n) = self.conns.get_mut(k) {
                *n -= 1;
                if *n == 0 {
                    self.conns.remove(k);
                }
            }
        }
        if !acct.is_root() {
            self.unprivileged_conns -= 1;
        }
    }

    /// A free slot for a service of `acct`, or why there is none for it.
    pub fn claim(&mut self, acct: &Account, lim: &Limits) -> Result<u32, String> {
        if !acct.is_root() && lim.services_per_user > 0 {
            for k in acct.limited() {
                let mine = self.owners.iter().flatten().filter(|o| o.has(k)).count() as u32;
                if mine >= lim.services_per_user {
                    return Err(format!(
                        "{k} already has {mine} services registered (at most {})",
                        lim.services_per_user
                    ));
                }
            }
        }
        let i = self
            .owners
            .iter()
            .position(Option::is_none)
            .ok_or_else(|| format!("all {MAX_SERVICES} service slots are in use"))?;
        self.owners[i] = Some(acct.clone());
        Ok(i as u32)
    }

    /// A slot for a cgroup job (`--job`), the highest free one (registered
    /// services take the lowest): held by root, so it counts in
    /// [`Book::count`] and no user's quota. None when every slot is in use.
    pub fn claim_top(&mut self) -> Option<u32> {
        let i = self.owners.iter().rposition(Option::is_none)?;
        self.owners[i] = Some(Account::uid(0));
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

    fn u(uid: u32) -> Account {
        Account::uid(uid)
    }

    #[test]
    fn namespaces_root_made_count_as_the_namespace_and_the_user() {
        let lim = Limits::default();
        let mut b = Book::default();
        // Four sandboxes of uid 1000, each a namespace root made (a setuid helper's): the
        // fifth is refused on the uid, whatever its namespace.
        for ns in 0..4 {
            let a = Account::of(vec![Key::Namespace(4026532000 + ns), Key::Uid(1000)]);
            b.claim(&a, &lim).unwrap();
        }
        let fifth = Account::of(vec![Key::Namespace(4026532009), Key::Uid(1000)]);
        let e = b.claim(&fifth, &lim).unwrap_err();
        assert!(e.contains("uid 1000 already has 4"), "{e}");
        // A container (one namespace) is one user however many uids it maps.
        let ns = Key::Namespace(4026532100);
        for uid in 200_000..200_004 {
            b.claim(&Account::of(vec![ns, Key::Uid(uid)]), &lim)
                .unwrap();
        }
        let e = b
            .claim(&Account::of(vec![ns, Key::Uid(200_004)]), &lim)
            .unwrap_err();
        assert!(e.contains("user namespace 4026532100 already has 4"), "{e}");
        // Root in such a namespace is limited by it; root itself is not.
        let e = b
            .claim(&Account::of(vec![ns, Key::Uid(0)]), &lim)
            .unwrap_err();
        assert!(e.contains("user namespace"), "{e}");
        b.claim(&u(0), &lim).unwrap();
    }

    #[test]
    fn two_keys_take_from_both_buckets_or_neither() {
        let lim = Limits {
            connect_rate: 1,
            connections_per_user: 1000,
            connections: 1000,
            ..Default::default()
        };
        let mut b = Book::default();
        let t0 = Instant::now();
        // uid 7's bucket emptied on its own (burst 2).
        b.admit_at(&u(7), &lim, t0).unwrap();
        b.admit_at(&u(7), &lim, t0).unwrap();
        let both = Account::of(vec![Key::Namespace(1), Key::Uid(7)]);
        assert!(b.admit_at(&both, &lim, t0).is_err());
        // The refusal took nothing from the namespace's bucket.
        let ns = Account::of(vec![Key::Namespace(1)]);
        b.admit_at(&ns, &lim, t0).unwrap();
        b.admit_at(&ns, &lim, t0).unwrap();
        assert!(b.admit_at(&ns, &lim, t0).is_err());
        // Connections counted under each key, and given back under each.
        b.leave(&ns);
        assert_eq!(b.conns.get(&Key::Namespace(1)), Some(&1));
    }

    #[test]
    fn one_user_cannot_take_every_slot() {
        let lim = Limits::default();
        let mut b = Book::default();
        for _ in 0..4 {
            b.claim(&u(1000), &lim).unwrap();
        }
        assert!(b.claim(&u(1000), &lim).unwrap_err().contains("at most 4"));
        // Others still register, root without a quota.
        b.claim(&u(1001), &lim).unwrap();
        for _ in 0..(MAX_SERVICES - 5) {
            b.claim(&u(0), &lim).unwrap();
        }
        assert_eq!(b.count(), MAX_SERVICES as u32);
        assert!(b
            .claim(&u(0), &lim)
            .unwrap_err()
            .contains("slots are in use"));
        b.release(0);
        assert_eq!(b.claim(&u(1000), &lim).unwrap(), 0);
    }

    #[test]
    fn cgroup_job_slots_come_from_the_top_and_are_reused() {
        let lim = Limits::default();
        let mut b = Book::default();
        assert_eq!(b.claim_top(), Some(MAX_SERVICES as u32 - 1));
        assert_eq!(b.count(), 1);
        for _ in 0..(MAX_SERVICES - 1) {
            assert_ne!(b.claim(&u(0), &lim).unwrap(), MAX_SERVICES as u32 - 1);
        }
        assert!(b
            .claim(&u(0), &lim)
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
            services_per_user: 0,
            ..Default::default()
        };
        let mut b = Book::default();
        for _ in 0..MAX_SERVICES {
            b.claim(&u(1000), &lim).unwrap();
        }
    }

    #[test]
    fn connections_are_metered_per_user() {
        let lim = Limits {
            connect_rate: 5,
            connections_per_user: 1000,
            connections: 1000,
            ..Default::default()
        };
        let mut b = Book::default();
        let t0 = Instant::now();
        // A burst of twice the rate, then refused; others and root unaffected.
        for _ in 0..10 {
            b.admit_at(&u(7), &lim, t0).unwrap();
        }
        assert!(b
            .admit_at(&u(7), &lim, t0)
            .unwrap_err()
            .contains("too fast"));
        b.admit_at(&u(8), &lim, t0).unwrap();
        for _ in 0..100 {
            b.admit_at(&u(0), &lim, t0).unwrap();
        }
        // A refusal costs nothing: one more after a fifth of a second.
        assert!(b
            .admit_at(&u(7), &lim, t0 + Duration::from_millis(100))
            .is_err());
        b.admit_at(&u(7), &lim, t0 + Duration::from_millis(201))
            .unwrap();
        assert!(b
            .admit_at(&u(7), &lim, t0 + Duration::from_millis(202))
            .is_err());
        // Refilled, never above the burst.
        let later = t0 + Duration::from_secs(60);
        for _ in 0..10 {
            b.admit_at(&u(7), &lim, later).unwrap();
        }
        assert!(b.admit_at(&u(7), &lim, later).is_err());
        // Off at 0.
        let off = Limits {
            connect_rate: 0,
            ..lim
        };
        for _ in 0..100 {
            b.admit_at(&u(9), &off, t0).unwrap();
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
            b.admit_at(&u(uid), &lim, t0).unwrap();
            b.leave(&u(uid));
        }
        assert_eq!(b.buckets.len(), MAX_BUCKETS);
        // Those refilled by then are dropped to make room.
        let later = t0 + Duration::from_secs(10);
        b.admit_at(&u(1_000_000), &lim, later).unwrap();
        assert!(b.buckets.len() <= 11, "{} buckets", b.buckets.len());
    }

    #[test]
    fn connections_are_capped_per_user_and_in_total() {
        let lim = Limits {
            connections_per_user: 2,
            connections: 3,
            ..Default::default()
        };
        let mut b = Book::default();
        b.admit(&u(1), &lim).unwrap();
        b.admit(&u(1), &lim).unwrap();
        assert!(b.admit(&u(1), &lim).unwrap_err().contains("uid 1"));
        b.admit(&u(2), &lim).unwrap();
        assert!(b
            .admit(&u(3), &lim)
            .unwrap_err()
            .contains("connections are open"));
        // Root is never turned away.
        for _ in 0..10 {
            b.admit(&u(0), &lim).unwrap();
        }
        b.leave(&u(1));
        b.admit(&u(3), &lim).unwrap();
        for _ in 0..10 {
            b.leave(&u(0));
        }
        assert_eq!(b.conns.get(&Key::Uid(0)), None);
    }
}
