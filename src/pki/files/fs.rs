//! The seam under the cert dir's write path: every file operation it makes (create a temp,
//! write, chmod, fsync, link, rename, symlink, fsync a directory, remove, and the reads it
//! decides by) as one small trait. `RealFs` is `std::fs`, unchanged; tests run the same
//! code on a simulated disk that loses power, fills up or turns read-only (`sim.rs`).

use std::ffi::OsString;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// What kind of entry a path names (not following a symlink).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

/// An entry's metadata, not following a symlink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    pub kind: Kind,
    /// Permission bits (`& 0o7777`).
    pub mode: u32,
    pub uid: u32,
}

/// The file operations of the write path. Each method is one system call (or one
/// `write_all`), so a simulation can cut the power between any two of them. The paths
/// passed with a handle name the file it was opened as, for errors and fault hooks.
pub trait Fs: Clone + fmt::Debug + Send + Sync {
    /// An open, writable file.
    type File: Send;

    /// Creates `path` exclusively (O_EXCL) with `mode` (narrowed by the umask), for writing.
    fn create_new(&self, path: &Path, mode: u32) -> io::Result<Self::File>;
    fn write_all(&self, file: &mut Self::File, path: &Path, bytes: &[u8]) -> io::Result<()>;
    /// fchmod: the exact mode, whatever the umask took away at creation.
    fn set_mode(&self, file: &mut Self::File, path: &Path, mode: u32) -> io::Result<()>;
    /// fsync: the file's data and metadata are durable (its directory entry is not).
    fn sync(&self, file: &mut Self::File, path: &Path) -> io::Result<()>;
    /// rename(2): atomically replaces `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// link(2): fails with `AlreadyExists` instead of replacing `to`.
    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()>;
    fn symlink(&self, target: &Path, link: &Path) -> io::Result<()>;
    /// fsync of a directory: its entries (creations, renames, removals) are durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// mkdir -p; the directories created get `mode` (narrowed by the umask).
    fn create_dir_all(&self, dir: &Path, mode: u32) -> io::Result<()>;
    /// chmod of a directory.
    fn set_dir_mode(&self, dir: &Path, mode: u32) -> io::Result<()>;

    /// The whole file, following symlinks (the real one refuses what is not a regular
    /// file of at most [`super::MAX_FILE_SIZE`]).
    fn read_to_string(&self, path: &Path) -> io::Result<String>;
    fn read_link(&self, path: &Path) -> io::Result<PathBuf>;
    /// The names in `dir` and whether each is a directory (not following symlinks).
    fn read_dir(&self, dir: &Path) -> io::Result<Vec<(OsString, bool)>>;
    fn symlink_metadata(&self, path: &Path) -> io::Result<Meta>;
}

/// The real filesystem: `std::fs`, one call per method.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealFs;

// === impl RealFs ===

impl Fs for RealFs {
    type File = File;

    fn create_new(&self, path: &Path, mode: u32) -> io::Result<File> {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(path)
    }

    fn write_all(&self, file: &mut File, _: &Path, bytes: &[u8]) -> io::Result<()> {
        file.write_all(bytes)
    }

    fn set_mode(&self, file: &mut File, _: &Path, mode: u32) -> io::Result<()> {
        file.set_permissions(fs::Permissions::from_mode(mode))
    }

    fn sync(&self, file: &mut File, _: &Path) -> io::Result<()> {
        file.sync_all()
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::hard_link(from, to)
    }

    fn symlink(&self, target: &Path, link: &Path) -> io::Result<()> {
        std::os::unix::fs::symlink(target, link)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir).and_then(|d| d.sync_all())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn create_dir_all(&self, dir: &Path, mode: u32) -> io::Result<()> {
        fs::DirBuilder::new().recursive(true).mode(mode).create(dir)
    }

    fn set_dir_mode(&self, dir: &Path, mode: u32) -> io::Result<()> {
        fs::set_permissions(dir, fs::Permissions::from_mode(mode))
    }

    /// Bounded and never blocking: anything but a regular file of at most
    /// [`super::MAX_FILE_SIZE`] (a FIFO, a device) is refused at once.
    fn read_to_string(&self, path: &Path) -> io::Result<String> {
        super::read::read_text_bounded(path, super::MAX_FILE_SIZE)
    }

    fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
        fs::read_link(path)
    }

    fn read_dir(&self, dir: &Path) -> io::Result<Vec<(OsString, bool)>> {
        fs::read_dir(dir)?
            .map(|entry| {
                let entry = entry?;
                Ok((entry.file_name(), entry.file_type()?.is_dir()))
            })
            .collect()
    }

    fn symlink_metadata(&self, path: &Path) -> io::Result<Meta> {
        let meta = fs::symlink_metadata(path)?;
        let t = meta.file_type();
        let kind = if t.is_symlink() {
            Kind::Symlink
        } else if t.is_dir() {
            Kind::Dir
        } else if t.is_file() {
            Kind::File
        } else {
            debug_assert!(
                t.is_fifo() || t.is_socket() || t.is_block_device() || t.is_char_device()
            );
            Kind::Other
        };
        Ok(Meta {
            kind,
            mode: meta.permissions().mode() & 0o7777,
            uid: meta.uid(),
        })
    }
}
