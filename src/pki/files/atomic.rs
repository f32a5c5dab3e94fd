//! Atomic writes: temp file beside the target (O_EXCL, final mode), fsync, rename, fsync
//! the directory; and the temp names a crash can leave behind, so `CertDir::open` can
//! sweep them. Knows nothing about certificates.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use super::{FilesError, CURRENT_FILE};

/// Writes `bytes` to `path` so a reader sees the old content or the new, never a mix:
/// a temp file in the same directory (O_EXCL, `mode` from creation), write, fsync,
/// chmod, rename over `path`, fsync the directory.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), FilesError> {
    let dir = parent(path)?;
    let (tmp, mut file) = create_temp(path, mode)?;
    let result = (|| {
        let write_err = |source| FilesError::Write {
            path: tmp.clone(),
            source,
        };
        file.write_all(bytes).map_err(write_err)?;
        file.sync_all().map_err(write_err)?;
        // The umask may have removed bits from the creation mode; set it exactly.
        file.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(|source| FilesError::Chmod {
                path: tmp.clone(),
                mode,
                source,
            })?;
        fs::rename(&tmp, path).map_err(|source| FilesError::Rename {
            path: path.to_path_buf(),
            source,
        })
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result?;
    sync_dir(dir)
}

/// `.NAME.tmp-RANDOM`: the name of every temp file and temp symlink bootlet creates.
pub(super) fn temp_name(name: &str) -> String {
    format!(".{name}.tmp-{:016x}", rand::random::<u64>())
}

/// Whether `name` is one of [`temp_name`]'s (or, from releases before the symlink's temp
/// name had its dot, `kubelet-client-current.pem.tmp-RANDOM`): a crash leftover when no
/// write is in flight.
pub(super) fn is_temp_name(name: &str) -> bool {
    let Some((stem, random)) = name.rsplit_once(".tmp-") else {
        return false;
    };
    random.len() == 16
        && random.bytes().all(|b| b.is_ascii_hexdigit())
        && ((stem.len() > 1 && stem.starts_with('.')) || stem == CURRENT_FILE)
}

/// Creates `.NAME.tmp-RANDOM` beside `path` with O_EXCL and `mode`.
pub(super) fn create_temp(path: &Path, mode: u32) -> Result<(PathBuf, File), FilesError> {
    let dir = parent(path)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let name = name.ok_or_else(|| FilesError::NoParent {
        path: path.to_path_buf(),
    })?;
    loop {
        let tmp = dir.join(temp_name(&name));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)
        {
            Ok(file) => return Ok((tmp, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(source) => return Err(FilesError::Write { path: tmp, source }),
        }
    }
}

fn parent(path: &Path) -> Result<&Path, FilesError> {
    match path.parent() {
        Some(p) if p.as_os_str().is_empty() => Ok(Path::new(".")),
        Some(p) => Ok(p),
        None => Err(FilesError::NoParent {
            path: path.to_path_buf(),
        }),
    }
}

pub(super) fn sync_dir(dir: &Path) -> Result<(), FilesError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| FilesError::SyncDir {
            path: dir.to_path_buf(),
            source,
        })
}
