//! The command line as users and scripts see it: `--help` snapshots, `version`, and the
//! one-line failures with a non-zero exit for bad flags and config files.

use crate::support;

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

/// `--version` prints one line: version, commit, build date. `bootlet version` prints the
/// same line, then the Kubernetes versions this build supports and was tested against.
#[test]
fn version_prints_version_commit_and_build_date_then_kubernetes() {
    let (code, both, _) = bootlet(&["version"]);
    assert_eq!(code, Some(0));
    let (code, out, _) = bootlet(&["--version"]);
    assert_eq!(code, Some(0));
    assert_eq!(out.lines().count(), 1, "{out}");
    let k = bootlet::version::KUBERNETES;
    assert_eq!(
        both,
        format!(
            "{out}Kubernetes 1.{} to 1.{} (tested against {} and {})\n",
            k.oldest, k.newest, k.tested_oldest, k.tested
        ),
        "bootlet version is not --version's line and the Kubernetes line"
    );
    // The commit is this checkout's HEAD when the test runs in a git work tree.
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".to_string());
    let want = format!(
        "bootlet {} (commit {head}, built ",
        env!("CARGO_PKG_VERSION")
    );
    assert!(
        out.starts_with(&want),
        "{out:?} does not start with {want:?}"
    );
    let date = out
        .trim()
        .strip_prefix(&want)
        .and_then(|d| d.strip_suffix(')'));
    let date = date.unwrap_or_else(|| panic!("no build date in {out:?}"));
    assert!(date.parse::<jiff::Timestamp>().is_ok(), "{date:?}");
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

/// Every test flag, and the crash hook's line prefix: none is in a shipped binary.
#[cfg(not(feature = "test-hooks"))]
const HOOK_STRINGS: [&str; 7] = [
    "--test-crash-at",
    "--test-clock-offset-file",
    "--test-wedge-lease-after",
    "--test-short-lease-interval",
    "--test-lease-content-type",
    "--test-lease-http1",
    "bootlet-test-crash",
];

/// A build without the `test-hooks` feature, as every shipped one (packaging/deb.sh, where
/// .ci/run checks the packaged binary the same way): each test flag is an unknown argument
/// (clap's exit 2), and no hook string is anywhere in the binary's bytes.
/// Compiled only into the default build (tests/run.sh runs it after the feature build;
/// an `ignore` would run under its `--include-ignored`).
#[test]
#[cfg(not(feature = "test-hooks"))]
fn the_default_build_refuses_the_test_flags_and_carries_no_hook() {
    for flag in &HOOK_STRINGS[..6] {
        let (code, _, err) = bootlet(&["run", flag, "1"]);
        assert_eq!(code, Some(2), "{flag}: {err}");
        assert!(
            err.contains(&format!("unexpected argument '{flag}'")),
            "{flag}: {err}"
        );
    }
    let binary = std::fs::read(env!("CARGO_BIN_EXE_bootlet")).expect("read the bootlet binary");
    for hook in HOOK_STRINGS {
        let name = hook.trim_start_matches('-');
        assert!(
            !binary.windows(name.len()).any(|w| w == name.as_bytes()),
            "{name:?} is in {}",
            env!("CARGO_BIN_EXE_bootlet")
        );
    }
}

/// The generated bash completion, sourced by a real bash: subcommands, flags and values.
#[test]
fn bash_completes_subcommands_flags_and_values() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let (code, out, err) = bootlet(&["generate", "completions", d]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("bootlet.bash"), "{out}");
    // COMP_WORDS as bash fills them at <TAB>; the function's arguments: command, word, previous word.
    let complete = |words: &[&str]| {
        let cword = words.len() - 1;
        let script = format!(
            "source {d}/bootlet.bash; COMP_WORDS=({}); COMP_CWORD={cword}; _bootlet bootlet '{}' '{}'; echo \"${{COMPREPLY[@]}}\"",
            words.iter().map(|w| format!("'{w}'")).collect::<Vec<_>>().join(" "),
            words[cword],
            words[cword - 1],
        );
        let out = Command::new("bash").args(["-c", &script]).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(complete(&["bootlet", "doc"]), "doctor");
    assert_eq!(complete(&["bootlet", "doctor", "--out"]), "--output");
    assert_eq!(
        complete(&["bootlet", "doctor", "--output", ""]),
        "text json"
    );
    assert_eq!(
        complete(&["bootlet", "--rotate-cert"]),
        "--rotate-certificates"
    );
    assert_eq!(
        complete(&["bootlet", "--test-"]),
        "",
        "a hidden flag is offered"
    );
}
