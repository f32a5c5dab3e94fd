//! Hostile local input on the real binary: config files and kubeconfigs that are not YAML,
//! have wrong types, are gigantic, nest without end or are not files at all (a FIFO, a
//! device); and things planted in the cert dir at the current-certificate, pending-key,
//! kubeconfig and temp paths. Every case ends in one clear line or a safe recovery, never
//! a hang (each run is bounded by `support::WAIT`).

use crate::support;

use std::path::Path;
use std::time::Duration;

use support::{path, Agent, NodeDir};

const HOUR: Duration = Duration::from_secs(3600);

fn mkfifo(at: &Path) {
    let ok = std::process::Command::new("mkfifo")
        .arg(at)
        .status()
        .unwrap()
        .success();
    assert!(ok, "mkfifo {}", at.display());
}

fn symlink(target: &str, at: &Path) {
    std::os::unix::fs::symlink(target, at).unwrap();
}

/// The cert dir as bootlet would create it, so something can be planted in it first.
fn cert_dir(node: &NodeDir) -> &Path {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&node.cert_dir)
        .unwrap();
    &node.cert_dir
}

/// `bootlet run --config FILE` with this node's paths: exit status and stderr.
async fn run_with_config(node: &NodeDir, config: &Path) -> (Option<i32>, String) {
    let mut args = node.args("hostile");
    args.extend(["--config".into(), path(config)]);
    let (status, log) = Agent::spawn(&args).exit().await;
    (status.code(), log)
}

/// Exit 1 with exactly one stderr line that names `file` and holds every `want`.
fn assert_one_line(code: Option<i32>, log: &str, file: &Path, want: &[&str]) {
    assert_eq!(code, Some(1), "exit status 1 (not a signal): {log}");
    let lines: Vec<&str> = log.trim_end().lines().collect();
    assert_eq!(lines.len(), 1, "one line: {log}");
    assert!(lines[0].starts_with("bootlet: "), "{log}");
    assert!(
        lines[0].contains(&path(file)),
        "names {}: {log}",
        file.display()
    );
    for w in want {
        assert!(lines[0].contains(w), "says {w:?}: {log}");
    }
}

/// Exit 1 and a last line naming `file` and holding every `want` (the agent may have
/// logged before it found the problem).
fn assert_last_line(code: Option<i32>, log: &str, file: &Path, want: &[&str]) {
    assert_eq!(code, Some(1), "exit status 1 (not a signal): {log}");
    let last = log.trim_end().lines().last().unwrap_or_default();
    assert!(last.starts_with("bootlet: "), "{log}");
    assert!(
        last.contains(&path(file)),
        "names {}: {log}",
        file.display()
    );
    for w in want {
        assert!(last.contains(w), "says {w:?}: {log}");
    }
}

#[tokio::test]
async fn config_files_that_are_not_yaml_or_have_wrong_types_stop_with_one_line() {
    let cases: &[(&[u8], &[&str])] = &[
        (b"\x00\x01\x02\xff\xfe binary", &["not valid UTF-8"]),
        (b"{{{{ not: yaml", &[]),
        (b"leaseRenewInterval: [1, 2]\n", &["leaseRenewInterval"]),
        (b"rotateCertificates: maybe\n", &["rotateCertificates"]),
        (b"keepCertificates: -3\n", &["keepCertificates"]),
        (b"nodeIP: {a: b}\n", &["nodeIP"]),
        (b"verbosity: 300\n", &["verbosity"]),
        (b"rotationFraction: .nan\n", &["rotationFraction"]),
        (b"- a list\n- not a mapping\n", &[]),
        (b"just a sentence\n", &[]),
        (b"nodeName: a\nnodeName: b\n", &["nodeName"]),
    ];
    let node = NodeDir::new("unused");
    for (i, (contents, want)) in cases.iter().enumerate() {
        let file = node.tmp.path().join(format!("config-{i}.yaml"));
        std::fs::write(&file, contents).unwrap();
        let (code, log) = run_with_config(&node, &file).await;
        assert_one_line(code, &log, &file, want);
    }
}

/// Regression: the config file was read whole, whatever its size, and a FIFO there blocked
/// the agent forever.
#[tokio::test]
async fn a_gigantic_config_file_or_one_that_is_no_file_is_refused_at_once() {
    let node = NodeDir::new("unused");
    let big = node.tmp.path().join("big.yaml");
    // Valid YAML (comments only) that would parse as an empty config: the cap refuses it.
    let line = format!("# {}\n", "x".repeat(1022));
    std::fs::write(&big, line.repeat(2048)).unwrap();
    let (code, log) = run_with_config(&node, &big).await;
    assert_one_line(code, &log, &big, &["larger than the 1 MiB cap"]);

    let zero = node.tmp.path().join("zero.yaml");
    symlink("/dev/zero", &zero);
    let (code, log) = run_with_config(&node, &zero).await;
    assert_one_line(
        code,
        &log,
        &zero,
        &["is a character device, not a regular file"],
    );

    let fifo = node.tmp.path().join("fifo.yaml");
    mkfifo(&fifo);
    let (code, log) = run_with_config(&node, &fifo).await;
    assert_one_line(code, &log, &fifo, &["is a FIFO, not a regular file"]);

    let dir = node.tmp.path().join("dir.yaml");
    std::fs::create_dir(&dir).unwrap();
    let (code, log) = run_with_config(&node, &dir).await;
    assert_one_line(code, &log, &dir, &["is a directory"]);
}

/// YAML that nests without end, or expands aliases exponentially (9^9 nodes from 2 KiB),
/// within the size cap, as the value after `prefix`: a place that takes any YAML (the
/// config's `nodeIP` buffers it to try a string and a list; a kubeconfig extension is any
/// JSON value).
fn yaml_bombs(prefix: &str) -> Vec<(&'static str, String)> {
    let mut laughs = "&a [x, x, x, x, x, x, x, x, x]".to_string();
    let mut prev = "a".to_string();
    for c in ["b", "c", "d", "e", "f", "g", "h", "i"] {
        let refs = vec![format!("*{prev}"); 9].join(", ");
        laughs = format!("[{laughs}, &{c} [{refs}]]");
        prev = c.to_string();
    }
    vec![
        (
            "deep sequences",
            format!("{prefix}{}\n", "[".repeat(200_000)),
        ),
        (
            "deep mappings",
            format!("{prefix}{}\n", "{a: ".repeat(100_000)),
        ),
        ("alias bomb", format!("{prefix}{laughs}\n")),
    ]
}

/// The parser's own limits (serde-saphyr's depth and node budgets) stop each bomb.
const BOMB_STOPPED: [&str; 2] = ["recursion limit exceeded", "budget breached"];

#[tokio::test]
async fn yaml_bombs_in_the_config_file_are_refused_not_a_crash() {
    let node = NodeDir::new("unused");
    for (i, (what, yaml)) in yaml_bombs("nodeIP: ").into_iter().enumerate() {
        let file = node.tmp.path().join(format!("bomb-{i}.yaml"));
        std::fs::write(&file, &yaml).unwrap();
        let (code, log) = run_with_config(&node, &file).await;
        assert_one_line(code, &log, &file, &[]);
        assert!(
            BOMB_STOPPED.iter().any(|w| log.contains(w)),
            "{what}: {log}"
        );
    }
}

#[tokio::test]
async fn yaml_bombs_in_the_bootstrap_kubeconfig_are_refused_not_a_crash() {
    for (what, yaml) in yaml_bombs("extensions:\n- name: x\n  extension: ") {
        let node = NodeDir::new(&yaml);
        let (status, log) = Agent::spawn(&node.args("bomb")).exit().await;
        assert_last_line(status.code(), &log, &node.bootstrap, &["not a kubeconfig"]);
        assert!(
            BOMB_STOPPED.iter().any(|w| log.contains(w)),
            "{what}: {log}"
        );
    }
}

/// What a bootstrap kubeconfig can be instead of a kubeconfig, and what the one line says.
#[tokio::test]
async fn hostile_bootstrap_kubeconfigs_stop_with_one_line_naming_the_file() {
    let ca = testplane::pki::Ca::generate("hostile-ca").unwrap();
    let good_cluster = "clusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n    \
        certificate-authority: ca.crt\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\n\
        current-context: x\n"
        .to_string();
    let text_cases: Vec<(String, Vec<&str>)> = vec![
        ("clusters: 5\n".into(), vec!["not a kubeconfig"]),
        (
            "users: \"everyone\"\ncontexts: {a: b}\n".into(),
            vec!["not a kubeconfig"],
        ),
        ("current-context: [a, b]\n".into(), vec!["not a kubeconfig"]),
        (
            "%%%% \t\u{1b}[31m not yaml at all {{".into(),
            vec!["not a kubeconfig"],
        ),
        (
            format!("{good_cluster}users:\n- name: u\n  user: {{tokenFile: fifo}}\n"),
            vec!["tokenFile", "is a FIFO, not a regular file"],
        ),
        (
            format!("{good_cluster}users:\n- name: u\n  user: {{tokenFile: /dev/zero}}\n"),
            vec!["tokenFile", "is a character device"],
        ),
        (
            format!("{good_cluster}users:\n- name: u\n  user: {{tokenFile: big}}\n"),
            vec!["tokenFile", "larger than the 1 MiB cap"],
        ),
        (
            good_cluster.replace("ca.crt", "fifo")
                + "users:\n- name: u\n  user: {token: abcdef.0123456789abcdef}\n",
            vec!["certificate-authority", "is a FIFO"],
        ),
    ];
    for (i, (text, want)) in text_cases.into_iter().enumerate() {
        let node = NodeDir::new(&text);
        std::fs::write(node.tmp.path().join("ca.crt"), ca.cert_pem()).unwrap();
        mkfifo(&node.tmp.path().join("fifo"));
        std::fs::write(node.tmp.path().join("big"), vec![b'a'; (1 << 20) + 1]).unwrap();
        let (status, log) = Agent::spawn(&node.args("hostile")).exit().await;
        assert_last_line(status.code(), &log, &node.bootstrap, &want);
        assert!(!log.contains("0123456789abcdef"), "case {i}: {log}");
    }

    // Not a file: a FIFO, a device, a directory; and one far over the cap.
    let node = NodeDir::new("unused");
    std::fs::remove_file(&node.bootstrap).unwrap();
    mkfifo(&node.bootstrap);
    let (status, log) = Agent::spawn(&node.args("hostile")).exit().await;
    assert_last_line(status.code(), &log, &node.bootstrap, &["is a FIFO"]);

    let node = NodeDir::new("unused");
    std::fs::remove_file(&node.bootstrap).unwrap();
    symlink("/dev/zero", &node.bootstrap);
    let (status, log) = Agent::spawn(&node.args("hostile")).exit().await;
    assert_last_line(
        status.code(),
        &log,
        &node.bootstrap,
        &["is a character device"],
    );

    let node = NodeDir::new(&format!("# {}\n", "x".repeat(5 << 20)));
    let (status, log) = Agent::spawn(&node.args("hostile")).exit().await;
    assert_last_line(
        status.code(),
        &log,
        &node.bootstrap,
        &["larger than the 4 MiB cap"],
    );
}

/// Regression: `kubelet-client-current.pem` was read with a blocking open, so a FIFO there
/// hung the agent before it logged a word.
#[tokio::test]
async fn a_fifo_or_device_at_the_current_certificate_path_is_a_clear_error_not_a_hang() {
    let node = NodeDir::new("unused");
    let current = cert_dir(&node).join("kubelet-client-current.pem");
    mkfifo(&current);
    let (status, log) = Agent::spawn(&node.args("planted")).exit().await;
    assert_last_line(
        status.code(),
        &log,
        &current,
        &["is a FIFO, not a regular file"],
    );

    let node = NodeDir::new("unused");
    let current = cert_dir(&node).join("kubelet-client-current.pem");
    symlink("/dev/zero", &current);
    let (status, log) = Agent::spawn(&node.args("planted")).exit().await;
    assert_last_line(status.code(), &log, &current, &["is a character device"]);

    // A symlink to some other file: read, refused by name, the file left as it was.
    let node = NodeDir::new("unused");
    let victim = node.tmp.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let current = cert_dir(&node).join("kubelet-client-current.pem");
    symlink(&path(&victim), &current);
    let (status, log) = Agent::spawn(&node.args("planted")).exit().await;
    assert_last_line(
        status.code(),
        &log,
        &current,
        &["holds no CERTIFICATE block"],
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
}

/// A FIFO or a device at the pending-key path is not a key bootlet wrote: it is never
/// read, and the next key replaces it (the path is bootlet's own scratch file).
#[tokio::test]
async fn a_fifo_or_device_at_the_pending_key_path_is_replaced_by_a_fresh_key() {
    let tp = support::plane(HOUR).await;
    let fifo_node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let pending = cert_dir(&fifo_node).join("kubelet-client.key.tmp");
    mkfifo(&pending);
    let zero_node = NodeDir::new(&tp.bootstrap_kubeconfig());
    symlink(
        "/dev/zero",
        &cert_dir(&zero_node).join("kubelet-client.key.tmp"),
    );

    for (node, name, what) in [
        (&fifo_node, "pending-fifo", "is a FIFO"),
        (&zero_node, "pending-zero", "is a character device"),
    ] {
        let agent = Agent::spawn(&node.args(name));
        let line = agent.wait_for_log("ignoring the pending key path").await;
        assert!(line.contains(what), "{line}");
        agent.wait_for_log("client certificate installed").await;
        let (status, log) = agent.terminate().await;
        assert!(status.success(), "{log}");
        let pending = node.cert_dir.join("kubelet-client.key.tmp");
        assert!(
            std::fs::symlink_metadata(&pending).is_err(),
            "the planted entry was replaced, then removed after the install"
        );
        let pem = std::fs::read_to_string(node.current()).unwrap();
        assert!(pem.contains("BEGIN CERTIFICATE") && pem.contains("PRIVATE KEY"));
    }
}

/// Temp names are random and created with O_EXCL, so a planted entry is never written
/// through; one left at a temp name is swept at start, the symlink removed and not what
/// it points at. A symlink planted at the kubeconfig or pending-key path is replaced by
/// the rename that writes the file, never written through.
#[tokio::test]
async fn entries_planted_at_temp_names_or_the_kubeconfig_path_are_replaced_not_followed() {
    let tp = support::plane(HOUR).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let dir = cert_dir(&node).to_path_buf();
    let victim = node.tmp.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let victim_s = path(&victim);
    let planted = [
        dir.join(".kubelet-client-current.pem.tmp-0123456789abcdef"),
        dir.join(".kubelet-client.key.tmp.tmp-fedcba9876543210"),
        dir.join("kubelet-client-current.pem.tmp-00112233445566ff"),
    ];
    mkfifo(&planted[0]);
    symlink(&victim_s, &planted[1]);
    symlink(&victim_s, &planted[2]);
    symlink(&victim_s, &node.kubeconfig);
    // Not a key: discarded, and the new pending key replaces the link, not its target.
    symlink(&victim_s, &dir.join("kubelet-client.key.tmp"));

    let agent = Agent::spawn(&node.args("planted-temps"));
    agent.wait_for_log("client certificate installed").await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    for p in &planted {
        assert!(
            std::fs::symlink_metadata(p).is_err(),
            "swept: {}",
            p.display()
        );
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let meta = std::fs::symlink_metadata(&node.kubeconfig).unwrap();
    assert!(
        meta.file_type().is_file(),
        "the kubeconfig is a file of its own now"
    );
    assert!(std::fs::read_to_string(&node.kubeconfig)
        .unwrap()
        .contains("kubelet-client-current.pem"));
}

/// Regression: a restart read `--kubeconfig` with a blocking open; a FIFO there hung it.
/// Now the kubeconfig is unusable, the cluster comes from the bootstrap kubeconfig, the
/// valid certificate is reused and the kubeconfig written again as a regular file.
#[tokio::test]
async fn a_fifo_at_the_kubeconfig_path_does_not_block_a_restart() {
    let tp = support::plane(HOUR).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let agent = Agent::spawn(&node.args("kubeconfig-fifo"));
    agent.wait_for_log("client certificate installed").await;
    agent.terminate().await;

    std::fs::remove_file(&node.kubeconfig).unwrap();
    mkfifo(&node.kubeconfig);
    let csrs = tp.csrs().len();
    let agent = Agent::spawn(&node.args("kubeconfig-fifo"));
    let line = agent.wait_for_log("kubeconfig unusable").await;
    assert!(line.contains("is a FIFO"), "{line}");
    agent.wait_for_log("no CSR needed").await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    assert_eq!(tp.csrs().len(), csrs, "the valid certificate was reused");
    assert!(std::fs::symlink_metadata(&node.kubeconfig)
        .unwrap()
        .file_type()
        .is_file());
}

/// `bootlet doctor` reads the same files; a FIFO in the cert dir must not hang it either.
#[tokio::test]
async fn doctor_does_not_block_on_planted_fifos() {
    let node = NodeDir::new(
        "clusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1', certificate-authority: fifo}\n",
    );
    mkfifo(&node.tmp.path().join("fifo"));
    let dir = cert_dir(&node);
    mkfifo(&dir.join("kubelet-client-current.pem"));
    mkfifo(&dir.join("kubelet-client.key.tmp"));
    mkfifo(&node.kubeconfig);
    let mut args = node.args("doctor-fifo");
    args[0] = "doctor".into();
    let (status, log) = Agent::spawn(&args).exit().await;
    assert!(
        matches!(status.code(), Some(1 | 2)),
        "doctor finished with a verdict: {status:?} {log}"
    );
}
