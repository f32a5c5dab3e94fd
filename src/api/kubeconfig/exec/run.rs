//! Running a plugin once: no stdin, its own process group, stdout and stderr read to
//! their caps, bounded by the timeout, after which the group is killed.

use std::process::Stdio;
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncRead, AsyncReadExt as _};

use super::{parse_answer, ExecError, ExecSpec, Issued, EXEC_INFO_ENV, MAX_STDOUT, STDERR_SHOWN};
use crate::runtime::text::{clip, one_line};

/// What systemd hands bootlet itself, not its children: the notify socket and watchdog
/// (NotifyAccess=main ignores a child's messages anyway), socket activation, and the
/// journal stream (the plugin's stderr is a pipe to bootlet, not the journal). The rest
/// of bootlet's environment is the plugin's, as client-go passes the kubelet's.
pub const SERVICE_ENV: [&str; 7] = [
    "NOTIFY_SOCKET",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
    "LISTEN_FDS",
    "LISTEN_PID",
    "LISTEN_FDNAMES",
    "JOURNAL_STREAM",
];

/// Run the plugin once, bounded by `timeout`; on timeout its process group is killed.
pub(super) async fn run(
    spec: &ExecSpec,
    timeout: Duration,
) -> Result<(Issued, Option<SystemTime>), ExecError> {
    let command = spec.program.display().to_string();
    let mut cmd = tokio::process::Command::new(&spec.program);
    for name in SERVICE_ENV {
        cmd.env_remove(name);
    }
    cmd.args(&spec.args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .env(EXEC_INFO_ENV, &spec.exec_info)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    tracing::debug!(plugin = %command, "running the exec credential plugin");
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ExecError::NotFound {
                command,
                install_hint: spec.install_hint.clone(),
            })
        }
        Err(source) => return Err(ExecError::Spawn { command, source }),
    };
    let (mut stdout, mut stderr) = (child.stdout.take(), child.stderr.take());
    let mut err_buf = Vec::new();
    let outcome = {
        let work = async {
            let mut out = Vec::new();
            let (o, _, status) = tokio::join!(
                read_capped(stdout.as_mut(), &mut out, MAX_STDOUT),
                read_capped(stderr.as_mut(), &mut err_buf, 4 * STDERR_SHOWN),
                child.wait()
            );
            (o, out, status)
        };
        tokio::time::timeout(timeout, work).await
    };
    let shown = |buf: &[u8]| {
        let text = String::from_utf8_lossy(buf);
        clip(&one_line(text.trim()), STDERR_SHOWN).into_owned()
    };
    let (complete, out, status) = match outcome {
        Ok(done) => done,
        Err(_) => {
            if let Some(pid) = child
                .id()
                .and_then(|id| rustix::process::Pid::from_raw(id as i32))
            {
                let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
            }
            let _ = child.kill().await;
            return Err(ExecError::TimedOut {
                command,
                timeout,
                stderr: shown(&err_buf),
            });
        }
    };
    let stderr = shown(&err_buf);
    let status = status.map_err(|source| ExecError::Spawn {
        command: command.clone(),
        source,
    })?;
    if !status.success() {
        let status = match status.code() {
            Some(code) => format!("exit status {code}"),
            None => format!("{status}"),
        };
        return Err(ExecError::Failed {
            command,
            status,
            stderr,
        });
    }
    if !complete {
        let reason = format!("more than {MAX_STDOUT} bytes on stdout");
        return Err(ExecError::BadOutput {
            command,
            reason,
            stderr,
        });
    }
    parse_answer(&spec.api_version, &out).map_err(|reason| ExecError::BadOutput {
        command,
        reason,
        stderr,
    })
}

/// Read `from` to its end, keeping the first `cap` bytes in `into` (and draining the rest,
/// so the plugin never blocks on a full pipe); false when some were dropped.
async fn read_capped<R: AsyncRead + Unpin>(
    from: Option<&mut R>,
    into: &mut Vec<u8>,
    cap: usize,
) -> bool {
    let Some(from) = from else { return true };
    let mut chunk = [0u8; 8192];
    let mut complete = true;
    loop {
        match from.read(&mut chunk).await {
            Ok(0) | Err(_) => return complete,
            Ok(n) => {
                let room = cap.saturating_sub(into.len());
                into.extend_from_slice(&chunk[..n.min(room)]);
                complete &= n <= room;
            }
        }
    }
}
