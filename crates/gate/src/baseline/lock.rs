//! The baseline store's exclusive lock. Every write to a store (`baseline update --from`,
//! `--traces`) holds it from reading the store file to renaming its new version into place, so
//! parallel updates queue instead of losing each other's runs.
//!
//! The lock is an advisory `flock` on the store directory itself, not on a lock file: nothing is
//! created for it, so nothing is left for `git add -A baselines` to commit, and the kernel releases
//! it when the holder exits, however it exits (no stale lock to clean up after a killed job).
//! Readers (`check`, `compare`) take no lock: every write renames a complete, flushed file into
//! place, so a reader sees the old file or the new one.
//!
//! Taking the lock is also when leftovers are cleaned: temporary files that a killed update left
//! in the store are removed before anything is read.

use std::fs::File;
use std::path::{Path, PathBuf};

use commgate_core::output::is_leftover_temp;
use commgate_core::result::FileError;

/// Proof that this process holds the store's lock; the lock is released when it is dropped (its
/// file descriptor is closed).
#[derive(Debug)]
pub struct StoreLock {
    dir: PathBuf,
    _handle: File,
    removed: Vec<PathBuf>,
}

impl StoreLock {
    /// Takes the lock on the store directory `dir` (created when absent), waiting while another
    /// process holds it; `waiting` is called once before such a wait.
    pub fn acquire(dir: &Path, waiting: impl FnOnce()) -> Result<StoreLock, FileError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| FileError::new(dir, format!("cannot create the baseline directory: {e}")))?;
        let handle =
            File::open(dir).map_err(|e| FileError::new(dir, format!("cannot open the baseline directory: {e}")))?;
        let cannot_lock = |e: std::io::Error| {
            FileError::new(
                dir,
                format!(
                    "cannot lock the baseline directory ({e}); the store is updated under an exclusive lock \
                     (flock), so keep it on a local filesystem"
                ),
            )
        };
        // Named in full: the standard library's `File::try_lock` (Rust 1.89) would shadow fs4's
        // on newer compilers, and this crate supports older ones.
        match fs4::FileExt::try_lock(&handle) {
            Ok(()) => {}
            Err(fs4::TryLockError::WouldBlock) => {
                waiting();
                fs4::FileExt::lock(&handle).map_err(cannot_lock)?;
            }
            Err(fs4::TryLockError::Error(e)) => return Err(cannot_lock(e)),
        }
        let removed = remove_leftovers(dir)?;
        Ok(StoreLock { dir: dir.to_path_buf(), _handle: handle, removed })
    }

    /// The locked store directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The temporary files of interrupted updates that taking the lock removed.
    pub fn removed(&self) -> &[PathBuf] {
        &self.removed
    }
}

/// Removes the temporary files of interrupted writes from the store directory and its profile
/// directories (the store is two levels deep). Called only under the lock, when no other update
/// can be writing one. A leftover that cannot be removed is an error: it would be committed.
fn remove_leftovers(dir: &Path) -> Result<Vec<PathBuf>, FileError> {
    let mut removed = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    let mut depth_one = true;
    while !dirs.is_empty() {
        let mut next = Vec::new();
        for d in dirs {
            let entries =
                std::fs::read_dir(&d).map_err(|e| FileError::new(&d, format!("cannot list the directory: {e}")))?;
            for entry in entries {
                let entry = entry.map_err(|e| FileError::new(&d, format!("cannot list the directory: {e}")))?;
                // The entry's own type: a symbolic link is neither followed nor removed.
                let Ok(kind) = entry.file_type() else { continue };
                let name = entry.file_name();
                if kind.is_dir() && depth_one {
                    next.push(entry.path());
                } else if kind.is_file() && name.to_str().is_some_and(is_leftover_temp) {
                    let path = entry.path();
                    std::fs::remove_file(&path).map_err(|e| {
                        FileError::new(
                            &path,
                            format!("is a temporary file left by an interrupted update and cannot be removed ({e}); delete it"),
                        )
                    })?;
                    removed.push(path);
                }
            }
        }
        dirs = next;
        depth_one = false;
    }
    removed.sort();
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_is_exclusive_and_released_on_drop() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("baselines");
        let first = StoreLock::acquire(&dir, || panic!("nobody holds it yet")).expect("locks");
        // A second holder (another open file description, as another process would have) is refused.
        let other = File::open(&dir).expect("open");
        assert!(matches!(fs4::FileExt::try_lock(&other), Err(fs4::TryLockError::WouldBlock)));
        drop(first);
        // Other tests spawn processes: a child forked before its exec shares every descriptor
        // for a moment (close-on-exec closes it at the exec), and a flock lives until the last
        // copy closes. So the release is seen within moments, not necessarily at once.
        let released = (0..200).any(|_| {
            fs4::FileExt::try_lock(&other).is_ok() || {
                std::thread::sleep(std::time::Duration::from_millis(10));
                false
            }
        });
        assert!(released, "released on drop");
        assert_eq!(std::fs::read_dir(&dir).expect("ls").count(), 0, "the lock leaves nothing in the store");
    }

    #[test]
    fn a_waiting_update_says_so_and_gets_the_lock() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_path_buf();
        let held = StoreLock::acquire(&dir, || {}).expect("locks");
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || StoreLock::acquire(&dir, || tx.send(()).expect("send")).map(|_| ()));
        rx.recv().expect("the second acquire reports that it waits");
        drop(held);
        waiter.join().expect("thread").expect("then locks");
    }

    #[test]
    fn leftover_temporaries_are_removed_and_nothing_else() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path();
        let profile = dir.join("PAR-MOCK");
        std::fs::create_dir_all(profile.join("deeper")).expect("mkdir");
        let keep = [profile.join("w.json"), dir.join("README.md"), profile.join("deeper/.commgate-tmp-9-0-0")];
        for p in &keep {
            std::fs::write(p, "x").expect("write");
        }
        let stale =
            [profile.join(".commgate-tmp-1-00ff-0"), profile.join(".w.json.tmp-4242"), dir.join(".commgate-tmp-2")];
        for p in &stale {
            std::fs::write(p, "half").expect("write");
        }
        let lock = StoreLock::acquire(dir, || {}).expect("locks");
        let mut expected = stale.to_vec();
        expected.sort();
        assert_eq!(lock.removed(), expected);
        assert!(stale.iter().all(|p| !p.exists()));
        assert!(keep.iter().all(|p| p.exists()), "only temporaries, only two levels deep");
    }
}
