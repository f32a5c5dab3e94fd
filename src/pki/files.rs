//! The cert dir in the kubelet's layout: timestamped `kubelet-client-*.pem` (chain then
//! key, 0600), the atomically swapped `kubelet-client-current.pem` symlink, the pending
//! key, and `write_atomic` for every file bootlet writes. Does not validate certificates.
//! Every file operation goes through the [`Fs`] seam ([`HostFs`] in production).

use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::{split_pem, CertProfile, NodeKey, PrivateKeyPem};

use atomic::{create_temp, remove_temps, sync_dir, write_error, InFlight};
pub use atomic::{sweep_temps_of, sweep_temps_of_in, write_atomic, write_atomic_in};
#[cfg(feature = "test-hooks")]
pub use crash::{CrashFs, CrashPlan};
pub use fs::{Fs, Kind, Meta, RealFs};
use names::{is_temp_name, temp_name};
pub use read::{read_bounded, read_text_bounded, refusal, Refusal};

mod atomic;
#[cfg(feature = "test-hooks")]
pub mod crash;
mod fs;
mod names;
mod prune;
mod read;
#[cfg(test)]
pub(crate) mod sim;

/// The filesystem bootlet writes its files through: [`RealFs`], `std::fs` itself; in a
/// build with the `test-hooks` feature, wrapped in the crash points (`crash::CrashFs`), which do
/// nothing until `--test-crash-at` arms them.
#[cfg(not(feature = "test-hooks"))]
pub type HostFs = RealFs;
/// The filesystem bootlet writes its files through: [`RealFs`] wrapped in the crash points,
/// which do nothing until `--test-crash-at` arms them (`test-hooks` feature).
#[cfg(feature = "test-hooks")]
pub type HostFs = CrashFs<RealFs>;

/// The symlink the kubelet and kubelet.conf read.
pub const CURRENT_FILE: &str = "kubelet-client-current.pem";
/// The pending key of a CSR not yet issued.
pub const PENDING_KEY_FILE: &str = "kubelet-client.key.tmp";
/// The client certificate's file prefix (the serving one's is `kubelet-server`).
const CLIENT_PREFIX: &str = "kubelet-client";
const SUFFIX: &str = ".pem";
/// Mode of the cert dir.
pub const DIR_MODE: u32 = 0o700;
/// Mode of every key-bearing file.
pub const FILE_MODE: u32 = 0o600;
/// The most read from one cert dir file: an installed chain came in an API response under
/// the client's 4 MiB body cap, so no file bootlet wrote is larger.
pub const MAX_FILE_SIZE: u64 = 4 << 20;

/// A failed file operation, naming the path.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    #[error("{path}: cannot create directory", path = .path.display())]
    CreateDir { path: PathBuf, source: io::Error },
    #[error("{path}: cannot set mode {mode:o}", path = .path.display())]
    Chmod {
        path: PathBuf,
        mode: u32,
        source: io::Error,
    },
    #[error("{path}: cannot write", path = .path.display())]
    Write { path: PathBuf, source: io::Error },
    #[error("{path}: cannot write: the directory {dir} is gone (deleted while bootlet runs? recreate it, mode 0700)", path = .path.display(), dir = .dir.display())]
    DirGone {
        path: PathBuf,
        dir: PathBuf,
        source: io::Error,
    },
    #[error("{path}: cannot read", path = .path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("{path}: cannot rename into place", path = .path.display())]
    Rename { path: PathBuf, source: io::Error },
    #[error("{path}: cannot create symlink", path = .path.display())]
    Symlink { path: PathBuf, source: io::Error },
    #[error("{path}: cannot fsync directory", path = .path.display())]
    SyncDir { path: PathBuf, source: io::Error },
    #[error("{path}: cannot list directory", path = .path.display())]
    List { path: PathBuf, source: io::Error },
    #[error("{path}: cannot remove", path = .path.display())]
    Remove { path: PathBuf, source: io::Error },
    #[error("{path}: has no parent directory", path = .path.display())]
    NoParent { path: PathBuf },
    #[error("{path}: holds no CERTIFICATE block", path = .path.display())]
    NoCertificate { path: PathBuf },
    #[error("{path}: holds no PRIVATE KEY block", path = .path.display())]
    NoPrivateKey { path: PathBuf },
    #[error("time {time:?} cannot be named as a UTC timestamp")]
    BadTime { time: SystemTime },
    #[error("{path}: the cert dir is a symlink to {target}; refusing it (name the real directory as --cert-dir)", path = .path.display(), target = .target.display())]
    Symlinked { path: PathBuf, target: PathBuf },
    #[error("{path}: the cert dir is not a directory", path = .path.display())]
    NotADirectory { path: PathBuf },
    #[error("{path}: the cert dir is owned by uid {owner}, not by uid {euid} that bootlet runs as; refusing it (another user could swap the key files: chown {euid} the directory)", path = .path.display())]
    NotOurs {
        path: PathBuf,
        owner: u32,
        euid: u32,
    },
}

/// The cert dir (`--cert-dir`), absolute, mode 0700, seen through one certificate's file
/// prefix (`kubelet-client` from `open`; [`CertDir::for_profile`] for another), on the
/// filesystem `F` (the real one unless a test says otherwise).
#[derive(Clone, Debug)]
pub struct CertDir<F: Fs = HostFs> {
    dir: PathBuf,
    prefix: &'static str,
    fs: F,
}

// === impl CertDir ===

impl CertDir {
    /// Opens the cert dir: creates it (and parents) with mode 0700 if missing; refuses a
    /// symlink or a directory owned by another uid than the process's effective one (root
    /// in production); tightens a looser mode to 0700; removes the temp files a crash left
    /// (`.*.tmp-RANDOM`). The caller is the only writer of the dir while it opens it.
    pub fn open(dir: &Path) -> Result<CertDir, FilesError> {
        CertDir::open_in(HostFs::default(), dir)
    }

    /// A read-only view of `dir`, for a tool that must change nothing (doctor): no creation,
    /// no ownership or mode checks, no sweep. Only its read methods are meant to be used.
    pub fn peek(dir: &Path) -> CertDir {
        CertDir {
            dir: std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf()),
            prefix: CLIENT_PREFIX,
            fs: HostFs::default(),
        }
    }
}

impl<F: Fs> CertDir<F> {
    /// [`CertDir::open`] on `fs`.
    pub fn open_in(fs: F, dir: &Path) -> Result<CertDir<F>, FilesError> {
        let dir = std::path::absolute(dir).map_err(|source| FilesError::CreateDir {
            path: dir.to_path_buf(),
            source,
        })?;
        let create_err = |source| FilesError::CreateDir {
            path: dir.clone(),
            source,
        };
        let meta = match fs.symlink_metadata(&dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs.create_dir_all(&dir, DIR_MODE).map_err(create_err)?;
                fs.symlink_metadata(&dir).map_err(create_err)?
            }
            meta => meta.map_err(create_err)?,
        };
        if meta.kind == Kind::Symlink {
            let target = fs.read_link(&dir).map_err(create_err)?;
            return Err(FilesError::Symlinked { path: dir, target });
        }
        if meta.kind != Kind::Dir {
            return Err(FilesError::NotADirectory { path: dir });
        }
        let euid = rustix::process::geteuid().as_raw();
        if meta.uid != euid {
            return Err(FilesError::NotOurs {
                path: dir,
                owner: meta.uid,
                euid,
            });
        }
        let mode = meta.mode;
        if mode != DIR_MODE {
            fs.set_dir_mode(&dir, DIR_MODE)
                .map_err(|source| FilesError::Chmod {
                    path: dir.clone(),
                    mode: DIR_MODE,
                    source,
                })?;
            tracing::info!(dir = %dir.display(), "cert dir mode {mode:04o} tightened to {DIR_MODE:04o}");
        }
        let cd = CertDir {
            dir,
            prefix: CLIENT_PREFIX,
            fs,
        };
        cd.sweep_temps()?;
        Ok(cd)
    }

    /// Removes crash leftovers: temp files and temp symlinks named by [`temp_name`].
    fn sweep_temps(&self) -> Result<(), FilesError> {
        let entries = self
            .fs
            .read_dir(&self.dir)
            .map_err(|source| FilesError::List {
                path: self.dir.clone(),
                source,
            })?;
        let removed = remove_temps(&self.fs, &self.dir, entries, is_temp_name)?;
        if !removed.is_empty() {
            tracing::info!(dir = %self.dir.display(), files = ?removed, "removed temp files left by an interrupted write");
        }
        Ok(())
    }

    /// Removes this profile's temp certificate files and temp symlinks that a failed install
    /// could not remove (the filesystem went read-only under it), so they do not pile up
    /// in a long-running agent. Each profile installs from one task, one install at a
    /// time, so none of them is in flight. Best effort: the install reports its own error.
    fn sweep_own_temps(&self) {
        let Ok(entries) = self.fs.read_dir(&self.dir) else {
            return;
        };
        let own = format!(".{}-", self.prefix);
        let _ = remove_temps(&self.fs, &self.dir, entries, |n| {
            is_temp_name(n) && n.starts_with(&own)
        });
    }

    /// The same directory, for `profile`'s files (`kubelet-server-*` for the serving one).
    pub fn for_profile(&self, profile: &CertProfile) -> CertDir<F> {
        CertDir {
            dir: self.dir.clone(),
            prefix: profile.file_prefix(),
            fs: self.fs.clone(),
        }
    }

    /// The directory, absolute.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// `DIR/kubelet-client-current.pem`, absolute.
    pub fn current_path(&self) -> PathBuf {
        self.dir.join(format!("{}-current.pem", self.prefix))
    }

    /// `DIR/kubelet-client.key.tmp`.
    pub fn pending_key_path(&self) -> PathBuf {
        self.dir.join(format!("{}.key.tmp", self.prefix))
    }

    /// The chain and key the current symlink (or a regular file put there by an admin)
    /// names; `None` if there is none (or the symlink dangles). A file without a
    /// certificate or key, or anything but a regular file of at most [`MAX_FILE_SIZE`]
    /// (a FIFO there is refused at once, never waited on), is an error naming it.
    pub fn read_current(&self) -> Result<Option<(String, PrivateKeyPem)>, FilesError> {
        let path = self.current_path();
        let text = match self.fs.read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(FilesError::Read { path, source }),
        };
        let (chain, key) = split_pem(&text);
        if chain.is_empty() {
            return Err(FilesError::NoCertificate { path });
        }
        let key = key.ok_or(FilesError::NoPrivateKey { path })?;
        Ok(Some((chain, key)))
    }

    /// Writes `kubelet-client-YYYY-MM-DD-HH-MM-SS.pem` (UTC from `now`; `-N` appended if
    /// taken, never overwritten) holding `chain_pem` then `key`, 0600 and fsynced, then
    /// swaps the current symlink to it atomically. Earlier files stay. Returns the new path.
    pub fn install(
        &self,
        chain_pem: &str,
        key: &PrivateKeyPem,
        now: SystemTime,
    ) -> Result<PathBuf, FilesError> {
        let stamp = jiff::Timestamp::try_from(now)
            .map_err(|_| FilesError::BadTime { time: now })?
            .strftime("%Y-%m-%d-%H-%M-%S")
            .to_string();
        let mut body = chain_pem.to_string();
        if !body.ends_with('\n') {
            body.push('\n');
        }
        body.push_str(key.as_str());

        self.sweep_own_temps();
        // Fully written temp file first, then a hard link to the first free name: the
        // link fails instead of replacing an existing file.
        let wanted = self.dir.join(format!("{}-{stamp}{SUFFIX}", self.prefix));
        let (tmp, mut file) = create_temp(&self.fs, &wanted, FILE_MODE)?;
        let fs = &self.fs;
        let written = fs
            .write_all(&mut file, &tmp, body.as_bytes())
            .and_then(|()| fs.set_mode(&mut file, &tmp, FILE_MODE))
            .and_then(|()| fs.sync(&mut file, &tmp))
            .map_err(|source| FilesError::Write {
                path: wanted.clone(),
                source,
            });
        drop(file);
        let linked = written.and_then(|()| self.link_free_name(&tmp, &stamp));
        let _ = fs.remove_file(&tmp);
        let target = linked?;
        sync_dir(fs, &self.dir)?;
        self.point_current_at(&target)?;
        Ok(target)
    }

    fn link_free_name(&self, tmp: &Path, stamp: &str) -> Result<PathBuf, FilesError> {
        for n in 0u32.. {
            let name = match n {
                0 => format!("{}-{stamp}{SUFFIX}", self.prefix),
                n => format!("{}-{stamp}-{n}{SUFFIX}", self.prefix),
            };
            let target = self.dir.join(name);
            match self.fs.hard_link(tmp, &target) {
                Ok(()) => return Ok(target),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(source) => {
                    return Err(FilesError::Write {
                        path: target,
                        source,
                    })
                }
            }
        }
        unreachable!("u32 names exhausted")
    }

    /// Symlink under a temp name, rename over `kubelet-client-current.pem`, fsync dir.
    fn point_current_at(&self, target: &Path) -> Result<(), FilesError> {
        let current = self.current_path();
        let tmp = loop {
            let tmp = InFlight::new(
                self.dir
                    .join(temp_name(&format!("{}-current.pem", self.prefix))),
            );
            match self.fs.symlink(target, &tmp) {
                Ok(()) => break tmp,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(source) => {
                    return Err(match write_error(&self.fs, &current, source) {
                        FilesError::Write { source, .. } => FilesError::Symlink {
                            path: current,
                            source,
                        },
                        gone => gone,
                    })
                }
            }
        };
        if let Err(source) = self.fs.rename(&tmp, &current) {
            let _ = self.fs.remove_file(&tmp);
            return Err(FilesError::Rename {
                path: current,
                source,
            });
        }
        sync_dir(&self.fs, &self.dir)
    }

    /// The pending key of a CSR not yet issued, if one was stored. A pending key that is
    /// the installed certificate's key (a kill between installing the certificate and
    /// removing its pending key) is removed, never certified again: `None`. So is anything
    /// at the path that bootlet cannot have written (a FIFO, a device, a file over
    /// [`MAX_FILE_SIZE`]): never read, and replaced by the next stored key.
    pub fn load_pending_key(&self) -> Result<Option<PrivateKeyPem>, FilesError> {
        let path = self.pending_key_path();
        let pending = match self.fs.read_to_string(&path) {
            Ok(text) => PrivateKeyPem::new(text),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) if refusal(&e).is_some() => {
                tracing::warn!(path = %path.display(), error = %e, "ignoring the pending key path: bootlet never wrote what is there; a new key replaces it");
                return Ok(None);
            }
            Err(source) => return Err(FilesError::Read { path, source }),
        };
        if self.is_current_key(&pending) {
            self.remove_pending_key()?;
            tracing::info!(path = %path.display(), "removed the pending key: the installed certificate is already issued for it (an install was interrupted before its cleanup)");
            return Ok(None);
        }
        Ok(Some(pending))
    }

    /// Whether `key` has the public key of the key in `kubelet-client-current.pem`. A key
    /// that does not parse, or a current file that does not read, is not the same key.
    fn is_current_key(&self, key: &PrivateKeyPem) -> bool {
        let Ok(Some((_, current))) = self.read_current() else {
            return false;
        };
        match (NodeKey::from_pem(key), NodeKey::from_pem(&current)) {
            (Ok(a), Ok(b)) => a.public_key_der() == b.public_key_der(),
            _ => false,
        }
    }

    /// Stores the pending key, 0600, atomically.
    pub fn store_pending_key(&self, key: &PrivateKeyPem) -> Result<(), FilesError> {
        write_atomic_in(
            &self.fs,
            &self.pending_key_path(),
            key.as_str().as_bytes(),
            FILE_MODE,
        )
    }

    /// Removes the pending key; absent is fine.
    pub fn remove_pending_key(&self) -> Result<(), FilesError> {
        let path = self.pending_key_path();
        match self.fs.remove_file(&path) {
            Ok(()) => sync_dir(&self.fs, &self.dir),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(FilesError::Remove { path, source }),
        }
    }
}

#[cfg(test)]
mod powercut;
#[cfg(test)]
mod tests;
#[cfg(test)]
use prune::timestamp_order;
