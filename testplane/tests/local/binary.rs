//! The `bootlet-testplane serve` binary: writes admin.conf and bootstrap-kubelet.conf (CA
//! embedded, fresh token), prints the URL, serves kubectl, keeps its CA across restarts, and
//! exits 0 on SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn serve(dir: &std::path::Path, port: u16) -> (std::process::Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bootlet-testplane"))
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--state-dir",
        ])
        .arg(dir)
        .args(["--cert-ttl", "1h", "--approve", "manual"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, line.trim().to_string())
}

fn stop(child: &mut std::process::Child) -> std::process::ExitStatus {
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    child.wait().unwrap()
}

#[test]
fn serve_writes_state_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let (mut child, url) = serve(dir.path(), port);
    assert_eq!(url, format!("https://127.0.0.1:{port}"));
    let admin = std::fs::read_to_string(dir.path().join("admin.conf")).unwrap();
    let boot = std::fs::read_to_string(dir.path().join("bootstrap-kubelet.conf")).unwrap();
    assert!(
        admin.contains("certificate-authority-data: ")
            && admin.contains("client-certificate-data: ")
    );
    assert!(boot.contains(&format!("server: {url}")));
    let token_line = boot
        .lines()
        .find(|l| l.trim_start().starts_with("token: "))
        .unwrap();
    let token = token_line.split_once(": ").unwrap().1.trim();
    assert!(testplane::auth::parse_token(token).is_some(), "{token}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.path().join("admin.conf"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // The real kubectl (built from the pinned release, as for the real-cluster tests)
    // authenticates with the bootstrap kubeconfig as written.
    let kube = testplane::kube::build::binary().expect("the Kubernetes components");
    let out = Command::new(kube)
        .env("HOME", dir.path())
        .arg("kubectl")
        .arg("--kubeconfig")
        .arg(dir.path().join("bootstrap-kubelet.conf"))
        .args(["get", "--raw", "/version"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ca = std::fs::read(dir.path().join("ca.crt")).unwrap();
    assert!(stop(&mut child).success());

    // Same state dir: same CA.
    let (mut child, _) = serve(dir.path(), port);
    assert_eq!(std::fs::read(dir.path().join("ca.crt")).unwrap(), ca);
    assert!(stop(&mut child).success());
}
