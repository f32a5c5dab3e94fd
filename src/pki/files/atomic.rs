//! Atomic writes: temp file beside the target (O_EXCL, final mode), fsync, rename, fsync
//! the directory; and the temp names a crash can leave behind, so they can be swept at
//! start. Knows nothing about certificates; every file operation goes through [`Fs`].

use std::collections::BTreeSet;
use std::io;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use super::fs::Fs;
use super::names::{is_temp_name, temp_name};
use super::{FilesError, HostFs};

/// Writes `bytes` to `path` so a reader sees the old content or the new, never a mix:
/// a temp file in the same directory (O_EXCL, `mode` from creation), write, fsync,
/// chmod, rename over `path`, fsync the directory. Temp files of `path` that an earlier
/// write could not remove (its filesystem went read-only under it) go first: one writer
/// writes a given file, one write at a time, so none of them is in flight.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), FilesError> {
    write_atomic_in(&HostFs::default(), path, bytes, mode)
}

/// [`write_atomic`] through `fs`.
pub fn write_atomic_in<F: Fs>(
    fs: &F,
    path: &Path,
    bytes: &[u8],
    mode: u32,
) -> Result<(), FilesError> {
    let dir = parent(path)?;
    // Best effort: when this fails, so does the write, with its own error.
    let _ = sweep_temps_of_in(fs, path);
    let (tmp, mut file) = create_temp(fs, path, mode)?;
    let result = (|| {
        let write_err = |source| FilesError::Write {
            path: path.to_path_buf(),
            source,
        };
        fs.write_all(&mut file, &tmp, bytes).map_err(write_err)?;
        fs.sync(&mut file, &tmp).map_err(write_err)?;
        // The umask may have removed bits from the creation mode; set it exactly.
        fs.set_mode(&mut file, &tmp, mode)
            .map_err(|source| FilesError::Chmod {
                path: path.to_path_buf(),
                mode,
                source,
            })?;
        fs.rename(&tmp, path).map_err(|source| FilesError::Rename {
            path: path.to_path_buf(),
            source,
        })
    })();
    drop(file);
    if result.is_err() {
        let _ = fs.remove_file(&tmp);
    }
    result?;
    sync_dir(fs, dir)
}

/// The temp files and symlinks this process is writing now. A sweep never removes one:
/// the client and serving loops each open the cert dir (and sweep it) while the other may
/// be writing.
static IN_FLIGHT: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

fn in_flight() -> MutexGuard<'static, BTreeSet<PathBuf>> {
    IN_FLIGHT.lock().unwrap_or_else(|e| e.into_inner())
}

/// A temp path, registered as in flight from before it is created until dropped.
#[derive(Debug)]
pub(super) struct InFlight(PathBuf);

// === impl InFlight ===

impl InFlight {
    pub(super) fn new(path: PathBuf) -> InFlight {
        in_flight().insert(path.clone());
        InFlight(path)
    }
}

impl Deref for InFlight {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        in_flight().remove(&self.0);
    }
}

/// Creates `.NAME.tmp-RANDOM` beside `path` with O_EXCL and `mode`. A failure names
/// `path`, the file being written (the temp's random name helps no one).
pub(super) fn create_temp<F: Fs>(
    fs: &F,
    path: &Path,
    mode: u32,
) -> Result<(InFlight, F::File), FilesError> {
    let dir = parent(path)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let name = name.ok_or_else(|| FilesError::NoParent {
        path: path.to_path_buf(),
    })?;
    loop {
        let tmp = InFlight::new(dir.join(temp_name(&name)));
        match fs.create_new(&tmp, mode) {
            Ok(file) => return Ok((tmp, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(source) => return Err(write_error(fs, path, source)),
        }
    }
}

/// A write into `path` failed: a missing directory is named as such (a cert dir deleted
/// under the running agent), anything else as a failed write of `path`.
pub(super) fn write_error<F: Fs>(fs: &F, path: &Path, source: io::Error) -> FilesError {
    if source.kind() == io::ErrorKind::NotFound {
        if let Ok(dir) = parent(path) {
            if fs.symlink_metadata(dir).is_err() {
                return FilesError::DirGone {
                    path: path.to_path_buf(),
                    dir: dir.to_path_buf(),
                    source,
                };
            }
        }
    }
    FilesError::Write {
        path: path.to_path_buf(),
        source,
    }
}

/// Removes the temp files `temp_name` made for `path` (`.NAME.tmp-RANDOM` beside it)
/// that a killed process left; for files outside the cert dir (the kubelet kubeconfig),
/// whose directory `CertDir::open` does not sweep. Call it only while no write of `path`
/// is in flight. A missing directory has none. Returns the names removed.
pub fn sweep_temps_of(path: &Path) -> Result<Vec<String>, FilesError> {
    sweep_temps_of_in(&HostFs::default(), path)
}

/// [`sweep_temps_of`] through `fs`.
pub fn sweep_temps_of_in<F: Fs>(fs: &F, path: &Path) -> Result<Vec<String>, FilesError> {
    let dir = parent(path)?;
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return Ok(Vec::new());
    };
    let stem = format!(".{name}");
    let entries = match fs.read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(FilesError::List {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    let ours =
        |n: &str| is_temp_name(n) && n.rsplit_once(".tmp-").map(|(s, _)| s) == Some(stem.as_str());
    let removed = remove_temps(fs, dir, entries, ours)?;
    if !removed.is_empty() {
        tracing::info!(dir = %dir.display(), files = ?removed, "removed temp files left by an interrupted write");
    }
    Ok(removed)
}

/// Removes the entries of `dir` that are not directories, not in flight in this process,
/// and whose name `pick` chooses, then fsyncs `dir` if any went. Returns the names removed.
pub(super) fn remove_temps<F: Fs>(
    fs: &F,
    dir: &Path,
    entries: Vec<(std::ffi::OsString, bool)>,
    pick: impl Fn(&str) -> bool,
) -> Result<Vec<String>, FilesError> {
    let mut removed = Vec::new();
    for (name, is_dir) in entries {
        if is_dir || !name.to_str().is_some_and(&pick) {
            continue;
        }
        let path = dir.join(&name);
        if in_flight().contains(&path) {
            continue;
        }
        match fs.remove_file(&path) {
            Ok(()) => removed.push(name.to_string_lossy().into_owned()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(source) => return Err(FilesError::Remove { path, source }),
        }
    }
    if !removed.is_empty() {
        sync_dir(fs, dir)?;
    }
    Ok(removed)
}

pub(super) fn parent(path: &Path) -> Result<&Path, FilesError> {
    match path.parent() {
        Some(p) if p.as_os_str().is_empty() => Ok(Path::new(".")),
        Some(p) => Ok(p),
        None => Err(FilesError::NoParent {
            path: path.to_path_buf(),
        }),
    }
}

pub(super) fn sync_dir<F: Fs>(fs: &F, dir: &Path) -> Result<(), FilesError> {
    fs.sync_dir(dir).map_err(|source| FilesError::SyncDir {
        path: dir.to_path_buf(),
        source,
    })
}
