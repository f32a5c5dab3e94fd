//! Reading a local file whose contents bootlet does not control (config, kubeconfig, the
//! cert dir's files): regular files only, opened without blocking (a FIFO planted at the
//! path must never hang the agent), and never more than a cap into memory.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Read as _};
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
use std::path::Path;

/// Why a local file was refused before its contents were used; the `io::Error` a
/// [`read_bounded`] caller sees carries one of these (see [`refusal`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not a regular file (after following symlinks): `kind` says what it is.
    NotRegular { kind: &'static str },
    /// Longer than `limit` bytes.
    TooLarge { limit: u64 },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotRegular { kind } => write!(f, "is {kind}, not a regular file"),
            Refusal::TooLarge { limit } => {
                write!(f, "is larger than the {} cap", human_size(*limit))
            }
        }
    }
}

impl std::error::Error for Refusal {}

/// The whole file at `path` (symlinks followed), if it is a regular file of at most `limit`
/// bytes. The open never blocks: `O_NONBLOCK` makes a FIFO open at once, and anything but
/// a regular file is refused before a byte is read. Missing files keep `NotFound`.
pub fn read_bounded(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let nonblock = rustix::fs::OFlags::NONBLOCK.bits() as i32;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(nonblock)
        .open(path)?;
    let meta = file.metadata()?;
    let kind = meta.file_type();
    if !kind.is_file() {
        let kind = if kind.is_dir() {
            "a directory"
        } else if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_char_device() {
            "a character device"
        } else if kind.is_block_device() {
            "a block device"
        } else {
            "a special file"
        };
        return Err(refused(Refusal::NotRegular { kind }));
    }
    if meta.len() > limit {
        return Err(refused(Refusal::TooLarge { limit }));
    }
    read_at_most(file, meta.len(), limit)
}

/// [`read_bounded`] as text; bytes that are not UTF-8 are `InvalidData`, as with
/// `fs::read_to_string`.
pub fn read_text_bounded(path: &Path, limit: u64) -> io::Result<String> {
    String::from_utf8(read_bounded(path, limit)?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "is not valid UTF-8"))
}

/// The [`Refusal`] inside an error from [`read_bounded`], if that is why it failed.
pub fn refusal(e: &io::Error) -> Option<Refusal> {
    e.get_ref()?.downcast_ref::<Refusal>().copied()
}

/// The file may grow between `fstat` and the read: read one byte past the cap to notice.
fn read_at_most(file: File, expected: u64, limit: u64) -> io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(usize::try_from(expected).unwrap_or(0));
    file.take(limit.saturating_add(1)).read_to_end(&mut buf)?;
    if buf.len() as u64 > limit {
        return Err(refused(Refusal::TooLarge { limit }));
    }
    Ok(buf)
}

fn refused(r: Refusal) -> io::Error {
    let kind = match r {
        Refusal::NotRegular { .. } => io::ErrorKind::InvalidInput,
        Refusal::TooLarge { .. } => io::ErrorKind::FileTooLarge,
    };
    io::Error::new(kind, r)
}

/// `1 MiB`, `64 KiB`, or bytes when not a whole number of either.
fn human_size(bytes: u64) -> String {
    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;
    match bytes {
        b if b >= MIB && b % MIB == 0 => format!("{} MiB", b / MIB),
        b if b >= KIB && b % KIB == 0 => format!("{} KiB", b / KIB),
        b => format!("{b}-byte"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_file_within_the_cap_reads_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"0123456789").unwrap();
        assert_eq!(read_bounded(&path, 10).unwrap(), b"0123456789");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert_eq!(
            read_bounded(&link, 10).unwrap(),
            b"0123456789",
            "symlinks are followed"
        );
    }

    #[test]
    fn a_file_over_the_cap_is_refused_naming_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![b'x'; 2048 + 1]).unwrap();
        let err = read_bounded(&path, 2048).unwrap_err();
        assert_eq!(refusal(&err), Some(Refusal::TooLarge { limit: 2048 }));
        assert_eq!(err.kind(), io::ErrorKind::FileTooLarge);
        assert_eq!(err.to_string(), "is larger than the 2 KiB cap");
        assert_eq!(
            Refusal::TooLarge { limit: 1 << 20 }.to_string(),
            "is larger than the 1 MiB cap"
        );
    }

    /// Regression: `fs::read` on a FIFO blocks until a writer opens it, which no one does.
    #[test]
    fn a_fifo_is_refused_at_once_instead_of_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let err = read_bounded(&fifo, 1024).unwrap_err();
        assert_eq!(refusal(&err), Some(Refusal::NotRegular { kind: "a FIFO" }));
        assert_eq!(err.to_string(), "is a FIFO, not a regular file");
    }

    #[test]
    fn devices_and_directories_are_refused_and_missing_stays_not_found() {
        let err = read_bounded(Path::new("/dev/zero"), 1024).unwrap_err();
        assert_eq!(
            refusal(&err),
            Some(Refusal::NotRegular {
                kind: "a character device"
            })
        );
        let dir = tempfile::tempdir().unwrap();
        let err = read_bounded(dir.path(), 1024).unwrap_err();
        assert_eq!(
            refusal(&err),
            Some(Refusal::NotRegular {
                kind: "a directory"
            })
        );
        let err = read_bounded(&dir.path().join("absent"), 1024).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert_eq!(refusal(&err), None);
    }
}
