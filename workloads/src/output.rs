//! Output files created before a run and put in place after it.
//!
//! A run's outputs (per-request records, plots, traces) are opened before the run, so that a
//! bad path fails at once instead of after the whole run. But opening `PATH` itself would
//! truncate what was there and, if the run then failed, leave an empty file behind. So a
//! [`PendingFile`] writes to a temporary file beside `PATH` (same directory, so the final
//! rename is atomic and cannot cross file systems) and renames it over `PATH` only on
//! [`PendingFile::commit`]. Dropped without a commit (an error, a panic), it removes the
//! temporary file: a failed run leaves `PATH` as it was (a killed one may leave
//! `.tailctl-partial-PID-N` beside it). A `PATH` that is not a regular file (`/dev/null`, a
//! pipe, a symlink, which may lead anywhere) is written in place, as is a file in a
//! directory one may not write.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{bail, Context, Result};

/// An output file being written; see the module docs.
///
/// ```
/// use std::io::Write;
/// use tailctl_workloads::output::PendingFile;
///
/// let dir = std::env::temp_dir().join(format!("pending-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let path = dir.join("records.csv");
///
/// // Dropped without a commit: nothing appears.
/// drop(PendingFile::create(&path).unwrap());
/// assert!(!path.exists());
///
/// let mut f = PendingFile::create(&path).unwrap();
/// writeln!(f, "id,latency_ns").unwrap();
/// f.commit().unwrap();
/// assert_eq!(std::fs::read_to_string(&path).unwrap(), "id,latency_ns\n");
/// assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "no temporary file left");
/// std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub struct PendingFile {
    path: PathBuf,
    /// The temporary file renamed over `path` at commit; `None`: `path` itself is written
    /// (it is not a regular file: `/dev/null`, a pipe, a symlink).
    tmp: Option<PathBuf>,
    out: BufWriter<File>,
    /// Put in place: nothing to remove on drop.
    done: bool,
}

/// Temporary files created by this process, so two outputs with the same path never share one.
static SEQ: AtomicU32 = AtomicU32::new(0);

impl PendingFile {
    /// Creates the temporary file beside `path` (or opens `path` itself when it is not a
    /// regular file); the error names `path`.
    pub fn create(path: &Path) -> Result<Self> {
        let ctx = || format!("cannot create {}", path.display());
        if path.as_os_str().as_encoded_bytes().ends_with(b"/") {
            bail!("cannot create {}: it names a directory", path.display());
        }
        if path.file_name().is_none() {
            bail!("cannot create {}: not a file name", path.display());
        }
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.is_dir() => bail!("cannot create {}: it is a directory", path.display()),
            // A device, a pipe or a symlink: written in place, as it always was (renaming
            // over `/dev/null` would replace the device; a link may lead anywhere, even to
            // the file the shell redirected stdout to, through /dev/stdout).
            Ok(m) if !m.is_file() => {
                if std::fs::metadata(path).is_ok_and(|t| t.is_dir()) {
                    bail!("cannot create {}: it is a directory", path.display());
                }
                return Ok(Self::new(path, None, File::create(path).with_context(ctx)?));
            }
            _ => {}
        }
        loop {
            // A short name of its own (not NAME plus a suffix: that may pass NAME_MAX).
            let tmp = path.with_file_name(format!(
                ".tailctl-partial-{}-{}",
                std::process::id(),
                SEQ.fetch_add(1, Ordering::Relaxed)
            ));
            match OpenOptions::new().write(true).create_new(true).open(&tmp) {
                Ok(f) => return Ok(Self::new(path, Some(tmp), f)),
                // Left by another process of the same pid (another pid namespace): next name.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                // A file one may write in a directory one may not: written in place.
                Err(e) if e.kind() == io::ErrorKind::PermissionDenied && path.is_file() => {
                    let f = OpenOptions::new()
                        .write(true)
                        .truncate(true)
                        .open(path)
                        .with_context(ctx)?;
                    return Ok(Self::new(path, None, f));
                }
                Err(e) => return Err(e).with_context(ctx),
            }
        }
    }

    fn new(path: &Path, tmp: Option<PathBuf>, f: File) -> Self {
        Self {
            path: path.to_owned(),
            tmp,
            out: BufWriter::new(f),
            done: false,
        }
    }

    /// The path the file will have once committed.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Flushes the file and renames it over the final path. On an error the temporary file
    /// is removed (on drop) and the final path keeps what it had.
    pub fn commit(mut self) -> Result<()> {
        let ctx = || format!("cannot write {}", self.path.display());
        self.out.flush().with_context(ctx)?;
        if let Some(tmp) = &self.tmp {
            // On disk before it replaces the old file.
            self.out.get_ref().sync_all().with_context(ctx)?;
            std::fs::rename(tmp, &self.path).with_context(ctx)?;
        }
        self.done = true;
        Ok(())
    }
}

impl Write for PendingFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

impl Drop for PendingFile {
    fn drop(&mut self) {
        if let (false, Some(tmp)) = (self.done, &self.tmp) {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_run_keeps_the_old_file() {
        let dir = std::env::temp_dir().join(format!("pending-old-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("plot.svg");
        std::fs::write(&path, "old").unwrap();
        let mut f = PendingFile::create(&path).unwrap();
        f.write_all(b"new, half written").unwrap();
        drop(f);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn special_paths_are_written_in_place_and_names_never_collide() {
        let dir = std::env::temp_dir().join(format!("pending-special-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // /dev/null stays a device.
        let mut f = PendingFile::create(Path::new("/dev/null")).unwrap();
        f.write_all(b"x").unwrap();
        f.commit().unwrap();
        assert!(!std::fs::metadata("/dev/null").unwrap().is_file());
        // A symlink is written in place: it keeps pointing at its target, which gets the
        // content.
        let target = dir.join("target.csv");
        let link = dir.join("link.csv");
        std::fs::write(&target, "old").unwrap();
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let mut f = PendingFile::create(&link).unwrap();
        f.write_all(b"new").unwrap();
        f.commit().unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "new");
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            2,
            "no temporary file left"
        );
        // A directory is refused at once, so is a path ending in a slash.
        let e = format!("{:#}", PendingFile::create(&dir).err().unwrap());
        assert!(e.contains("is a directory"), "{e}");
        let e = format!(
            "{:#}",
            PendingFile::create(&dir.join("new/")).err().unwrap()
        );
        assert!(e.contains("names a directory"), "{e}");
        // Two outputs to one path: each its own temporary file, the last commit wins.
        let p = dir.join("same.txt");
        let (mut a, mut b) = (
            PendingFile::create(&p).unwrap(),
            PendingFile::create(&p).unwrap(),
        );
        a.write_all(b"a").unwrap();
        b.write_all(b"b").unwrap();
        a.commit().unwrap();
        b.commit().unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "b");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_bad_directory_fails_at_create_naming_the_path() {
        let e = PendingFile::create(Path::new("/nonexistent-dir/records.csv")).err();
        let e = format!("{:#}", e.expect("no such directory"));
        assert!(e.contains("/nonexistent-dir/records.csv"), "{e}");
    }
}
