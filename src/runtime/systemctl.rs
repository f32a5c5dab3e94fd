//! `systemctl show`, for the one-shot commands that look at units beside bootlet's own
//! (`check-identity` repeats bootlet.service's STATUS=, doctor reads kubelet.service's
//! command line). Bounded: a hung systemctl costs the caller [`SHOW_TIMEOUT`], never more.

use std::process::Stdio;
use std::time::Duration;

/// How long `systemctl show` may take.
pub const SHOW_TIMEOUT: Duration = Duration::from_secs(2);

/// `systemctl show UNIT -p PROPS [--value]`'s output; `None` without systemd, when it fails
/// or does not answer within [`SHOW_TIMEOUT`].
pub fn show(unit: &str, props: &str, value_only: bool) -> Option<String> {
    let mut cmd = std::process::Command::new("systemctl");
    cmd.args(["show", unit, "-p", props]);
    if value_only {
        cmd.arg("--value");
    }
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    // Waited for on a thread of its own; a one-shot command exits right after, whatever a
    // hung systemctl still does.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = rx.recv_timeout(SHOW_TIMEOUT).ok()?.ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}
