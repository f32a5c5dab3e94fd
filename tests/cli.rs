//! The command line as users and scripts see it: `--help` snapshots, `version`, and the
//! one-line failures with a non-zero exit for bad flags and config files.

mod support;

use std::process::Command;

use support::snapshot;

fn bootlet(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_bootlet"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("run bootlet");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn help_snapshots() {
    let (code, out, _) = bootlet(&["--help"]);
    assert_eq!(code, Some(0));
    snapshot("help.txt", &out);
    let (code, out, _) = bootlet(&["run", "--help"]);
    assert_eq!(code, Some(0));
    snapshot("run-help.txt", &out);
}

#[test]
fn version_prints_the_crate_version() {
    let (code, out, _) = bootlet(&["version"]);
    assert_eq!(code, Some(0));
    assert_eq!(out.trim(), format!("bootlet {}", env!("CARGO_PKG_VERSION")));
}

#[test]
fn an_unknown_flag_fails_and_names_it() {
    let (code, _, err) = bootlet(&["run", "--no-such-flag"]);
    assert_ne!(code, Some(0));
    assert!(err.contains("--no-such-flag"), "{err}");
}

#[test]
fn a_bad_flag_value_names_the_flag() {
    let (code, _, err) = bootlet(&["run", "--lease-renew-interval", "10x"]);
    assert_ne!(code, Some(0));
    assert!(
        err.contains("lease-renew-interval") || err.contains("leaseRenewInterval"),
        "{err}"
    );
    let (code, _, err) = bootlet(&["run", "--renew-lease", "maybe"]);
    assert_ne!(code, Some(0));
    assert!(err.contains("--renew-lease"), "{err}");
}

fn config_error(contents: &str) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bootlet.yaml");
    std::fs::write(&file, contents).unwrap();
    let path = file.to_str().unwrap().to_string();
    let (code, out, err) = bootlet(&["run", "--config", &path]);
    assert_eq!(code, Some(1), "stdout {out} stderr {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    (path, err)
}

#[test]
fn config_file_errors_are_one_line_naming_the_file_and_key() {
    let (path, err) = config_error("leaseRenewInterval: 10x\n");
    assert!(
        err.contains(&path) && err.contains("leaseRenewInterval"),
        "{err}"
    );

    let (path, err) = config_error("noSuchKey: 1\n");
    assert!(err.contains(&path) && err.contains("noSuchKey"), "{err}");

    let (path, err) = config_error("renewLease: perhaps\n");
    assert!(err.contains(&path) && err.contains("renewLease"), "{err}");

    let (path, err) = config_error("this: [is not: yaml\n");
    assert!(err.contains(&path), "{err}");
}

#[test]
fn a_missing_config_file_names_it() {
    let (code, _, err) = bootlet(&["run", "--config", "/nonexistent/bootlet.yaml"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("/nonexistent/bootlet.yaml"), "{err}");
}

#[test]
fn bad_serving_settings_are_one_line_naming_the_flag_or_key() {
    let (code, _, err) = bootlet(&["run", "--node-name=n1", "--node-ip=10.0.0.1,nope"]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(
        err.trim_end(),
        r#"bootlet: --node-ip: invalid IP address "nope" (give comma-separated IPv4/IPv6 addresses)"#
    );
    let (code, _, err) = bootlet(&["run", "--node-name=n1", "--tls-san=ok.example,"]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(
        err.trim_end(),
        "bootlet: --tls-san: an empty name (give comma-separated DNS names or IPs)"
    );

    let (path, err) = config_error("nodeName: n1\nnodeIP: [\"::\"]\n");
    assert!(
        err.contains(&format!("{path}: nodeIP: :: is the unspecified address")),
        "{err}"
    );
    let (path, err) = config_error("nodeName: n1\ntlsSAN: [bad_name]\n");
    assert!(
        err.contains(&format!("{path}: tlsSAN: \"bad_name\"")),
        "{err}"
    );
    let (path, err) = config_error("serverTLSBootstrap: perhaps\n");
    assert!(
        err.contains(&path) && err.contains("serverTLSBootstrap"),
        "{err}"
    );
}
