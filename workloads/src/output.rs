//! Output files created before a run and put in place after it.
//!
//! A run's outputs (per-request records, plots, traces) are opened before the run, so that a
//! bad path fails at once instead of after the whole run. But opening `PATH` itself would
//! truncate what was there and, if the run then failed, leave an empty file behind. So a
//! [`PendingFile`] writes to a temporary file beside `PATH` (same directory, so the final
//! rename is atomic and cannot cross file systems) and renames it over `PATH` only on
//! [`PendingFile::commit`]. Dropped without a commit (an error, a panic), it removes the
//! temporary file: a failed run leaves `PATH` as it was.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

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
    tmp: PathBuf,
    /// `None` once committed.
    out: Option<BufWriter<File>>,
}

impl PendingFile {
    /// Creates the temporary file beside `path`; the error names `path`.
    pub fn create(path: &Path) -> Result<Self> {
        let name = path
            .file_name()
            .with_context(|| format!("cannot create {}: not a file name", path.display()))?;
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".partial-{}", std::process::id()));
        let tmp = path.with_file_name(tmp_name);
        let f = File::create(&tmp).with_context(|| format!("cannot create {}", path.display()))?;
        Ok(Self {
            path: path.to_owned(),
            tmp,
            out: Some(BufWriter::new(f)),
        })
    }

    /// The path the file will have once committed.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Flushes the file and renames it over the final path.
    pub fn commit(mut self) -> Result<()> {
        let out = self.out.take().expect("committed once");
        let f = out
            .into_inner()
            .map_err(|e| e.into_error())
            .with_context(|| format!("cannot write {}", self.path.display()))?;
        drop(f);
        std::fs::rename(&self.tmp, &self.path)
            .with_context(|| format!("cannot write {}", self.path.display()))
    }

    fn out(&mut self) -> &mut BufWriter<File> {
        self.out.as_mut().expect("not yet committed")
    }
}

impl Write for PendingFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out().write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out().flush()
    }
}

impl Drop for PendingFile {
    fn drop(&mut self) {
        if self.out.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
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
    fn a_bad_directory_fails_at_create_naming_the_path() {
        let e = PendingFile::create(Path::new("/nonexistent-dir/records.csv")).err();
        let e = format!("{:#}", e.expect("no such directory"));
        assert!(e.contains("/nonexistent-dir/records.csv"), "{e}");
    }
}
