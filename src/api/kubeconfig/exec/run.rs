//! Running a plugin once: no stdin, its own process group, stdout and stderr read to
//! their caps, bounded by the timeout, after which the group is killed.

use std::process::Stdio;
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncRead, AsyncReadExt as _};
use tokio::process::Child;

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
    let mut child = spawn(spec, &command)?;
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
    let Ok((complete, out, status)) = outcome else {
        kill(&mut child).await;
        let stderr = shown(&err_buf);
        return Err(ExecError::TimedOut {
            command,
            timeout,
            stderr,
        });
    };
    let stderr = shown(&err_buf);
    let status = status.map_err(|source| ExecError::Spawn {
        command: command.clone(),
        source,
    })?;
    let reason = if !status.success() {
        let status = match status.code() {
            Some(code) => format!("exit status {code}"),
            None => format!("{status}"),
        };
        return Err(ExecError::Failed {
            command,
            status,
            stderr,
        });
    } else if !complete {
        format!("more than {MAX_STDOUT} bytes on stdout")
    } else {
        match parse_answer(&spec.api_version, &out) {
            Ok(answer) => return Ok(answer),
            Err(reason) => reason,
        }
    };
    Err(ExecError::BadOutput {
        command,
        reason,
        stderr,
    })
}

/// Start the plugin: its args and env, no stdin, piped output, a process group of its own.
fn spawn(spec: &ExecSpec, command: &str) -> Result<Child, ExecError> {
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
    let command = command.to_string();
    cmd.spawn().map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => ExecError::NotFound {
            command,
            install_hint: spec.install_hint.clone(),
        },
        _ => ExecError::Spawn { command, source },
    })
}

/// SIGKILL to the plugin's process group (its children too), then reap the plugin.
async fn kill(child: &mut Child) {
    let group = child
        .id()
        .and_then(|id| rustix::process::Pid::from_raw(id as i32));
    if let Some(pid) = group {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    let _ = child.kill().await;
}

/// A plugin's stderr as an error shows it: one line, at most [`STDERR_SHOWN`] characters.
fn shown(buf: &[u8]) -> String {
    let text = String::from_utf8_lossy(buf);
    clip(&one_line(text.trim()), STDERR_SHOWN).into_owned()
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
