//! Test-only crash points on the file seam, compiled only with the `test-hooks` feature:
//! [`CrashFs`] wraps a filesystem and, once `--test-crash-at` armed the plan (through
//! `agent::TestHooks`, never the config file), SIGKILLs the process right before its Nth
//! file operation, or before the Nth one with a given label, or traces every operation.
//! The count is the process's (one plan, every cert dir and kubeconfig write); disarmed,
//! one load per operation.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use super::fs::{Fs, Meta};
use super::names::is_temp_name;

/// What the hook does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashPlan {
    /// Print `bootlet-test-crash: op N LABEL` to stderr before every file operation.
    Trace,
    /// Print `bootlet-test-crash: SIGKILL before op N LABEL` and SIGKILL this process
    /// right before its Nth file operation (1-based); every operation is traced too.
    At(u64),
    /// The same, right before the `nth` (1-based) operation labelled `label` (see
    /// [`label`]): `LABEL` or `LABEL#N` on the command line. The label is leaked, once
    /// per process, to keep the plan `Copy`.
    Before { label: &'static str, nth: u64 },
}

/// The prefix of every line the hook prints.
pub const LINE_PREFIX: &str = "bootlet-test-crash:";

/// A file operation of the write path, as the hook names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Create,
    Write,
    Chmod,
    Fsync,
    Rename,
    Link,
    Symlink,
    FsyncDir,
    Remove,
    Mkdir,
}

static PLAN: OnceLock<CrashPlan> = OnceLock::new();
static OPS: AtomicU64 = AtomicU64::new(0);
static SEEN: AtomicU64 = AtomicU64::new(0);

// === impl CrashPlan ===

impl FromStr for CrashPlan {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("{s:?}: expected `trace`, an operation number from 1, or LABEL[#N]");
        if s == "trace" {
            return Ok(CrashPlan::Trace);
        }
        if let Ok(n) = s.parse::<u64>() {
            return if n >= 1 {
                Ok(CrashPlan::At(n))
            } else {
                Err(bad())
            };
        }
        let (label, nth) = match s.rsplit_once('#') {
            Some((label, n)) => (label, n.parse::<u64>().map_err(|_| bad())?),
            None => (s, 1),
        };
        if label.is_empty() || nth == 0 {
            return Err(bad());
        }
        Ok(CrashPlan::Before {
            label: Box::leak(label.to_string().into_boxed_str()),
            nth,
        })
    }
}

// === impl Op ===

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Create => "create",
            Op::Write => "write",
            Op::Chmod => "chmod",
            Op::Fsync => "fsync",
            Op::Rename => "rename",
            Op::Link => "link",
            Op::Symlink => "symlink",
            Op::FsyncDir => "fsync-dir",
            Op::Remove => "remove",
            Op::Mkdir => "mkdir",
        }
    }
}

/// `F` with a crash point before each mutating operation; reads go straight through.
#[derive(Clone, Copy, Debug, Default)]
pub struct CrashFs<F> {
    inner: F,
}

// === impl CrashFs ===

impl<F: Fs> CrashFs<F> {
    pub fn new(inner: F) -> Self {
        Self { inner }
    }
}

impl<F: Fs> Fs for CrashFs<F> {
    type File = F::File;

    fn create_new(&self, path: &Path, mode: u32) -> io::Result<F::File> {
        before(Op::Create, path);
        self.inner.create_new(path, mode)
    }

    fn write_all(&self, file: &mut F::File, path: &Path, bytes: &[u8]) -> io::Result<()> {
        before(Op::Write, path);
        self.inner.write_all(file, path, bytes)
    }

    fn set_mode(&self, file: &mut F::File, path: &Path, mode: u32) -> io::Result<()> {
        before(Op::Chmod, path);
        self.inner.set_mode(file, path, mode)
    }

    fn sync(&self, file: &mut F::File, path: &Path) -> io::Result<()> {
        before(Op::Fsync, path);
        self.inner.sync(file, path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        before(Op::Rename, to);
        self.inner.rename(from, to)
    }

    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        before(Op::Link, to);
        self.inner.hard_link(from, to)
    }

    fn symlink(&self, target: &Path, link: &Path) -> io::Result<()> {
        before(Op::Symlink, link);
        self.inner.symlink(target, link)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        before(Op::FsyncDir, dir);
        self.inner.sync_dir(dir)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        before(Op::Remove, path);
        self.inner.remove_file(path)
    }

    fn create_dir_all(&self, dir: &Path, mode: u32) -> io::Result<()> {
        before(Op::Mkdir, dir);
        self.inner.create_dir_all(dir, mode)
    }

    fn set_dir_mode(&self, dir: &Path, mode: u32) -> io::Result<()> {
        before(Op::Chmod, dir);
        self.inner.set_dir_mode(dir, mode)
    }

    fn read_to_string(&self, path: &Path) -> io::Result<String> {
        self.inner.read_to_string(path)
    }

    fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
        self.inner.read_link(path)
    }

    fn read_dir(&self, dir: &Path) -> io::Result<Vec<(OsString, bool)>> {
        self.inner.read_dir(dir)
    }

    fn symlink_metadata(&self, path: &Path) -> io::Result<Meta> {
        self.inner.symlink_metadata(path)
    }
}

/// Arms the hook for the rest of the process; a second call changes nothing.
pub fn arm(plan: CrashPlan) {
    let _ = PLAN.set(plan);
}

/// Called by [`CrashFs`] before each mutating operation on `path`.
fn before(op: Op, path: &Path) {
    let Some(plan) = PLAN.get() else {
        return;
    };
    let n = OPS.fetch_add(1, Ordering::SeqCst) + 1;
    let label = label(op, path);
    let hit = match *plan {
        CrashPlan::Trace => false,
        CrashPlan::At(at) => at == n,
        CrashPlan::Before { label: want, nth } => {
            want == label && SEEN.fetch_add(1, Ordering::SeqCst) + 1 == nth
        }
    };
    match hit {
        true => {
            // stderr is unbuffered: the line is out before the signal.
            eprintln!("{LINE_PREFIX} SIGKILL before op {n} {label}");
            let _ = rustix::process::kill_process(
                rustix::process::getpid(),
                rustix::process::Signal::KILL,
            );
            // SIGKILL cannot be caught; should delivery somehow fail, never go on.
            std::process::abort();
        }
        false => eprintln!("{LINE_PREFIX} op {n} {label}"),
    }
}

/// `OP NAME` with the random and time-dependent parts of the name replaced, so the same
/// step has the same label in every run: `write .kubelet-client.key.tmp.tmp-*`,
/// `link kubelet-client-STAMP.pem`, `fsync-dir pki`.
pub fn label(op: Op, path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!("{} {}", op.name(), normalize(&name))
}

fn normalize(name: &str) -> String {
    if is_temp_name(name) {
        if let Some((stem, _)) = name.rsplit_once(".tmp-") {
            return format!("{}.tmp-*", normalize(stem.trim_start_matches('.')));
        }
    }
    for prefix in ["kubelet-client-", "kubelet-server-"] {
        if let Some(rest) = name.strip_prefix(prefix) {
            if rest.starts_with(|c: char| c.is_ascii_digit()) {
                return format!("{prefix}STAMP.pem");
            }
        }
    }
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_parse_and_labels_hide_random_and_time_parts() {
        assert_eq!("trace".parse(), Ok(CrashPlan::Trace));
        assert_eq!("7".parse(), Ok(CrashPlan::At(7)));
        assert!("0".parse::<CrashPlan>().is_err());
        assert!("x#0".parse::<CrashPlan>().is_err());
        assert!("#2".parse::<CrashPlan>().is_err());
        assert_eq!(
            "link kubelet-client-STAMP.pem#2".parse(),
            Ok(CrashPlan::Before {
                label: "link kubelet-client-STAMP.pem",
                nth: 2
            })
        );
        assert_eq!(
            "fsync-dir pki".parse(),
            Ok(CrashPlan::Before {
                label: "fsync-dir pki",
                nth: 1
            })
        );
        let l = |op, p: &str| label(op, Path::new(p));
        assert_eq!(
            l(Op::Write, "/d/.kubelet-client.key.tmp.tmp-0123456789abcdef"),
            "write kubelet-client.key.tmp.tmp-*"
        );
        assert_eq!(
            l(
                Op::Create,
                "/d/.kubelet-client-2030-01-01-00-00-00.pem.tmp-0123456789abcdef"
            ),
            "create kubelet-client-STAMP.pem.tmp-*"
        );
        assert_eq!(
            l(Op::Link, "/d/kubelet-client-2030-01-01-00-00-00-1.pem"),
            "link kubelet-client-STAMP.pem"
        );
        assert_eq!(
            l(Op::Rename, "/d/kubelet-client-current.pem"),
            "rename kubelet-client-current.pem"
        );
        assert_eq!(l(Op::FsyncDir, "/var/lib/kubelet/pki"), "fsync-dir pki");
    }
}
