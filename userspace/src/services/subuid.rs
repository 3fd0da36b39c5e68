//! Subordinate uids (`/etc/subuid`, subuid(5)): the uids each user may map into its user
//! namespaces through the setuid `newuidmap`. A process running as one of them, wherever
//! it runs, is that user's, so the registration limits count it as that user
//! ([`super::limits::Account`]).
//!
//! The file is read at start and then by a thread of its own, again whenever it changes
//! (inode, size, modification or change time, checked once a second) and every minute while
//! a user it names could not be looked up (the name service may come up after the daemon);
//! the skipped lines are logged when they change, not at every retry.
//! The registration server only takes the current table: a slow name service never holds
//! up a connection. A line that is not `NAME_OR_UID:START:COUNT`, or names an unknown user,
//! is skipped with a warning: the file belongs to shadow-utils, and a mistake in it must not
//! stop the scheduler.

use std::path::Path;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use log::warn;

/// The subordinate uid ranges: `(start, count, owner uid)`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubUids {
    ranges: Vec<(u32, u32, u32)>,
}

impl SubUids {
    /// Parses subuid(5) text; `user` resolves a user name to its uid. Returns the table
    /// and the lines it skipped, with why.
    pub fn parse(text: &str, user: impl Fn(&str) -> Option<u32>) -> (Self, Vec<String>) {
        let mut ranges = Vec::new();
        let mut bad = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let f: Vec<&str> = line.split(':').collect();
            let parsed = match f.as_slice() {
                [who, start, count] => {
                    let owner = who.parse::<u32>().ok().or_else(|| user(who));
                    match (owner, start.parse::<u32>(), count.parse::<u32>()) {
                        (Some(o), Ok(s), Ok(c)) => Ok((s, c, o)),
                        (None, _, _) => Err(format!("unknown user `{who}`")),
                        _ => Err("START and COUNT must be numbers".to_string()),
                    }
                }
                _ => Err("not NAME:START:COUNT".to_string()),
            };
            match parsed {
                Ok(r) => ranges.push(r),
                Err(why) => bad.push(format!("line {}: {why}", n + 1)),
            }
        }
        (Self { ranges }, bad)
    }

    /// The user `uid` is a subordinate uid of, if any: of the ranges holding it, the first
    /// one a user other than root owns, else root.
    pub fn owner(&self, uid: u32) -> Option<u32> {
        let mut holding = self
            .ranges
            .iter()
            .filter(|&&(s, c, _)| uid >= s && u64::from(uid) < u64::from(s) + u64::from(c))
            .map(|&(_, _, o)| o);
        let first = holding.next()?;
        Some(if first != 0 {
            first
        } else {
            holding.find(|&o| o != 0).unwrap_or(0)
        })
    }

    /// `uid` as the limits count it: its owner if it is some user's subordinate uid, else
    /// itself. A subordinate uid of root's (a container runtime's range) stays itself, and
    /// root stays root whatever the file says.
    pub fn user_of(&self, uid: u32) -> u32 {
        match self.owner(uid) {
            Some(o) if o != 0 && uid != 0 => o,
            _ => uid,
        }
    }
}

/// What tells a rewrite of the file apart (`cp -p` keeps the modification time, not the
/// change time or the inode a rename brings).
type Stamp = Option<(u64, u64, i64, i64, i64, i64)>;

fn stamp(path: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| {
        (
            m.ino(),
            m.size(),
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec(),
        )
    })
}

/// How often a table with an unknown user name is read again anyway.
const RETRY_UNKNOWN: Duration = Duration::from_secs(60);

/// [`SubUids`] from a file, kept current by a thread of its own (module docs).
pub struct SubUidFile {
    current: Arc<Mutex<Arc<SubUids>>>,
}

impl SubUidFile {
    /// Reads `path` now (a missing file is an empty table) and starts the thread that
    /// follows it; the thread ends with the last clone of the table's holder.
    pub fn open(path: &Path) -> Self {
        // The stamp before the read: a change during it is seen afterwards.
        let seen = stamp(path);
        let (table, bad) = read(path);
        warn_skipped(path, &bad);
        let current = Arc::new(Mutex::new(Arc::new(table)));
        let weak: Weak<Mutex<Arc<SubUids>>> = Arc::downgrade(&current);
        let path = path.to_owned();
        let spawned = std::thread::Builder::new()
            .name("tailctl-subuid".into())
            .spawn(move || follow(&path, weak, seen, bad));
        if let Err(e) = spawned {
            warn!("no thread to follow the subordinate uids file: {e}; it was read once");
        }
        Self { current }
    }

    /// The current table.
    pub fn table(&self) -> Arc<SubUids> {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

fn follow(path: &Path, table: Weak<Mutex<Arc<SubUids>>>, mut seen: Stamp, mut bad: Vec<String>) {
    let mut read_at = Instant::now();
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let Some(holder) = table.upgrade() else {
            return;
        };
        let unknown = bad.iter().any(|b| b.contains("unknown user"));
        let now = stamp(path);
        if now != seen || (unknown && read_at.elapsed() >= RETRY_UNKNOWN) {
            seen = now;
            read_at = Instant::now();
            let (t, b) = read(path);
            // Said once, not at every retry.
            if b != bad {
                warn_skipped(path, &b);
            }
            bad = b;
            *holder.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(t);
        }
    }
}

fn warn_skipped(path: &Path, bad: &[String]) {
    for why in bad {
        warn!("{}: {why} (skipped)", path.display());
    }
}

/// The table in `path`, and the lines it skipped (with why).
fn read(path: &Path) -> (SubUids, Vec<String>) {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => {
            return (SubUids::default(), vec![format!("cannot read it: {e}")]);
        }
    };
    SubUids::parse(&text, |name| {
        nix::unistd::User::from_name(name)
            .ok()
            .flatten()
            .map(|u| u.uid.as_raw())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn users(name: &str) -> Option<u32> {
        match name {
            "alice" => Some(1000),
            "root" => Some(0),
            _ => None,
        }
    }

    #[test]
    fn ranges_map_back_to_their_user() {
        let text = "# comment\nalice:100000:65536\n2000:300000:10\nroot:1000000:1000000\n\n";
        let (t, bad) = SubUids::parse(text, users);
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!(t.user_of(100_000), 1000);
        assert_eq!(t.user_of(165_535), 1000);
        assert_eq!(t.user_of(165_536), 165_536);
        assert_eq!(t.user_of(300_009), 2000);
        // Root's range (a container runtime's) is not root.
        assert_eq!(t.owner(1_000_005), Some(0));
        assert_eq!(t.user_of(1_000_005), 1_000_005);
        assert_eq!(t.user_of(1000), 1000);
    }

    #[test]
    fn malformed_lines_are_skipped_and_named() {
        let text = "alice:100000\nbob:1:2\nalice:x:1\nalice:4294967295:10\n";
        let (t, bad) = SubUids::parse(text, users);
        assert_eq!(bad.len(), 3, "{bad:?}");
        assert!(bad[0].starts_with("line 1"), "{bad:?}");
        assert!(bad[1].contains("unknown user `bob`"), "{bad:?}");
        // A range running past u32::MAX does not wrap.
        assert_eq!(t.user_of(4_294_967_295), 1000);
        assert_eq!(t.user_of(5), 5);
    }

    #[test]
    fn the_file_is_read_again_when_it_changes() {
        let dir = std::env::temp_dir().join(format!("subuid-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("subuid");
        let f = SubUidFile::open(&path);
        assert_eq!(f.table().user_of(300_001), 300_001, "no file: empty");
        std::fs::write(&path, "65528:300000:8\n").unwrap();
        let t0 = Instant::now();
        while f.table().user_of(300_001) != 65528 {
            assert!(t0.elapsed() < Duration::from_secs(10), "not read again");
            std::thread::sleep(Duration::from_millis(100));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_user_range_wins_over_roots_and_root_stays_root() {
        let (t, _) = SubUids::parse("root:0:1000000\n1000:100000:10\n", |_| None);
        assert_eq!(t.user_of(100_005), 1000);
        assert_eq!(t.user_of(5), 5);
        let (t, _) = SubUids::parse("1000:0:10\n", |_| None);
        assert_eq!(t.user_of(0), 0);
    }
}
