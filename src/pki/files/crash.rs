//! Test-only crash points on the real filesystem (`--test-crash-at`, a hidden flag that
//! reaches here through `agent::TestHooks`, never the config file): SIGKILL the process
//! right before its Nth file operation, or before the Nth one with a given label, or trace
//! every operation. Disarmed, one load.

use std::path::Path;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

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

/// Arms the hook for the rest of the process; a second call changes nothing.
pub fn arm(plan: CrashPlan) {
    let _ = PLAN.set(plan);
}

/// Called by `RealFs` before each mutating operation on `path`.
pub(super) fn before(op: Op, path: &Path) {
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
