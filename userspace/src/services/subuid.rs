//! Subordinate uids (`/etc/subuid`, subuid(5)): the uids each user may map into its user
//! namespaces through the setuid `newuidmap`. A process running as one of them, wherever
//! it runs, is that user's, so the registration limits count it as that user
//! ([`super::limits::Account`]).
//!
//! The file is read at start and again when its modification time changes (checked at most
//! once a second), so a user added with `usermod --add-subuids` is counted right without a
//! restart. A line that is not `NAME_OR_UID:START:COUNT`, or names an unknown user, is
//! skipped with a warning: the file belongs to shadow-utils, and a mistake in it must not
//! stop the scheduler.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

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

    /// The user `uid` is a subordinate uid of (the first range holding it), if any.
    pub fn owner(&self, uid: u32) -> Option<u32> {
        self.ranges
            .iter()
            .find(|&&(s, c, _)| uid >= s && u64::from(uid) < u64::from(s) + u64::from(c))
            .map(|&(_, _, o)| o)
    }

    /// `uid` as the limits count it: its owner if it is some user's subordinate uid, else
    /// itself. A subordinate uid of root's (a container runtime's range) stays itself.
    pub fn user_of(&self, uid: u32) -> u32 {
        match self.owner(uid) {
            Some(o) if o != 0 => o,
            _ => uid,
        }
    }
}

/// [`SubUids`] from a file, read again when it changes.
pub struct SubUidFile {
    path: PathBuf,
    table: SubUids,
    mtime: Option<SystemTime>,
    checked: Instant,
}

impl SubUidFile {
    /// Reads `path` now (a missing file is an empty table).
    pub fn open(path: &Path) -> Self {
        let mut f = Self {
            path: path.to_owned(),
            table: SubUids::default(),
            mtime: None,
            checked: Instant::now(),
        };
        f.reload();
        f
    }

    /// The table, read again first if the file changed (checked at most once a second).
    pub fn table(&mut self) -> &SubUids {
        if self.checked.elapsed() >= Duration::from_secs(1) {
            self.checked = Instant::now();
            let mtime = std::fs::metadata(&self.path)
                .and_then(|m| m.modified())
                .ok();
            if mtime != self.mtime {
                self.reload();
            }
        }
        &self.table
    }

    fn reload(&mut self) {
        self.mtime = std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .ok();
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => {
                warn!(
                    "{}: {e}; subordinate uids count as their own users",
                    self.path.display()
                );
                String::new()
            }
        };
        let (table, bad) = SubUids::parse(&text, |name| {
            nix::unistd::User::from_name(name)
                .ok()
                .flatten()
                .map(|u| u.uid.as_raw())
        });
        for why in bad {
            warn!("{}: {why} (skipped)", self.path.display());
        }
        self.table = table;
    }
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
        let mut f = SubUidFile::open(&path);
        assert_eq!(f.table().user_of(300_001), 300_001, "no file: empty");
        std::fs::write(&path, "65528:300000:8\n").unwrap();
        f.checked -= Duration::from_secs(2);
        assert_eq!(f.table().user_of(300_001), 65528);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
