use super::*;
use crate::config::{self, FileConfig};

fn parse(args: &[&str]) -> Result<Command, clap::Error> {
    parse_from(std::iter::once("bootlet").chain(args.iter().copied()))
}

fn run_flags(args: &[&str]) -> Flags {
    match parse(args).unwrap() {
        Command::Run(flags) => flags,
        other => panic!("expected run, got {other:?}"),
    }
}

#[test]
fn bare_bootlet_is_run_with_nothing_set() {
    assert_eq!(parse(&[]).unwrap(), Command::Run(Flags::default()));
    assert_eq!(parse(&["run"]).unwrap(), Command::Run(Flags::default()));
}

#[test]
fn flags_work_at_top_level_and_after_run() {
    let args = [
        "--node-name",
        "w1",
        "--cert-dir=/tmp/pki",
        "--lease-renew-interval",
        "5s",
    ];
    let top = run_flags(&args);
    let mut with_run = vec!["run"];
    with_run.extend(args);
    assert_eq!(top, run_flags(&with_run));
    assert_eq!(top.node_name.as_deref(), Some("w1"));
    assert_eq!(top.cert_dir, Some("/tmp/pki".into()));
    assert_eq!(top.lease_renew_interval, Some(Duration::from_secs(5)));
}

#[test]
fn booleans_parse_like_the_kubelet() {
    let cases: [(&[&str], Option<bool>); 8] = [
        (&[], None),
        (&["--renew-lease"], Some(true)),
        (&["--renew-lease=false"], Some(false)),
        (&["--renew-lease", "false"], Some(false)),
        (&["--renew-lease", "true"], Some(true)),
        (&["--renew-lease=0"], Some(false)),
        (&["--renew-lease=1"], Some(true)),
        (&["--renew-lease", "--node-name", "x"], Some(true)),
    ];
    for (args, want) in cases {
        assert_eq!(run_flags(args).renew_lease, want, "{args:?}");
    }
    assert!(parse(&["--renew-lease=maybe"]).is_err());
    let f = run_flags(&["--rotate-certificates=false", "--allow-insecure-kubeconfig"]);
    assert_eq!(
        (f.rotate_certificates, f.allow_insecure_kubeconfig),
        (Some(false), Some(true))
    );
}

#[test]
fn doctor_takes_flags_and_output() {
    assert_eq!(
        parse(&["doctor"]).unwrap(),
        Command::Doctor {
            flags: Flags::default(),
            output: OutputFormat::Text
        }
    );
    match parse(&["doctor", "--kubeconfig", "/k", "--output", "json"]).unwrap() {
        Command::Doctor { flags, output } => {
            assert_eq!(output, OutputFormat::Json);
            assert_eq!(flags.kubeconfig, Some("/k".into()));
        }
        other => panic!("{other:?}"),
    }
    assert!(parse(&["doctor", "--output", "yaml"]).is_err());
    assert!(parse(&["run", "--output", "json"]).is_err());
}

#[test]
fn version_and_unknown_flags() {
    assert_eq!(parse(&["version"]).unwrap(), Command::Version);
    let e = parse(&["--no-such-flag"]).unwrap_err();
    assert_eq!(e.kind(), clap::error::ErrorKind::UnknownArgument);
    assert!(parse(&["--lease-duration", "10x"])
        .unwrap_err()
        .to_string()
        .contains("invalid duration"));
    assert!(parse(&["--rotation-fraction", "abc"]).is_err());
}

#[test]
fn extra_flags() {
    let f = run_flags(&[
        "--config=/etc/bootlet.yaml",
        "--log-format=json",
        "-vv",
        "--keep-certificates=3",
        "--csr-backoff-min=30s",
        "--csr-backoff-max=10m",
        "--csr-not-issued-warning=2m",
        "--lease-owner-lookup-interval=5m",
        "--shutdown-grace=1s",
        "--metrics-bind-address=off",
        "--lease-health-probe=http://127.0.0.1:10248/healthz",
    ]);
    assert_eq!(f.config, Some("/etc/bootlet.yaml".into()));
    assert_eq!(f.log_format, Some(LogFormat::Json));
    assert_eq!(f.verbose, 2);
    assert_eq!(f.keep_certificates, Some(3));
    assert_eq!(f.csr_backoff_min, Some(Duration::from_secs(30)));
    assert_eq!(f.csr_backoff_max, Some(Duration::from_secs(600)));
    assert_eq!(f.shutdown_grace, Some(Duration::from_secs(1)));
    assert_eq!(f.metrics_bind_address.as_deref(), Some("off"));
}

#[test]
fn help_states_every_default() {
    let help = command().render_long_help().to_string();
    for needle in [
        "[default: /etc/kubernetes/bootstrap-kubelet.conf]",
        "[default: /etc/kubernetes/kubelet.conf]",
        "[default: /var/lib/kubelet/pki]",
        "[default: the host name, lower-cased]",
        "[default: 0.75]",
        "[default: 0.05]",
        "[default: 10s]",
        "[default: 40s]",
        "[default: 1h]",
        "[default: 127.0.0.1:10271]",
        "[default: 5]",
        "[default: false]",
        "[default: true]",
        "[default: text]",
        "[default: the addresses of the default-route interface]",
        "[default: none]",
    ] {
        assert!(help.contains(needle), "--help lacks {needle}:\n{help}");
    }
    // The tuning knobs are real settings, listed under their own heading; the test flags
    // (a test-hooks build's) never show.
    let advanced = help
        .split_once("Advanced settings:")
        .map(|(_, rest)| rest)
        .expect("an Advanced settings heading");
    for knob in [
        "--csr-backoff-min",
        "--csr-backoff-max",
        "--csr-not-issued-warning",
        "--lease-owner-lookup-interval",
        "--shutdown-grace",
    ] {
        assert!(advanced.contains(knob), "{knob} is not an advanced setting");
    }
    assert!(!help.contains("--test-"), "a test flag is shown:\n{help}");
    assert!(help.contains("doctor") && help.contains("version"));
}

#[test]
fn every_visible_flag_has_help_with_a_default() {
    let cmd = command();
    for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        let id = arg.get_id().as_str();
        if matches!(id, "help" | "version") {
            continue;
        }
        let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
        assert!(
            help.contains("[default: "),
            "--{id} help lacks its default: {help:?}"
        );
    }
}

#[test]
fn flags_and_file_keys_match() {
    // Every flag but --config and -v has a file key spelled the same way.
    let keys = serde_saphyr::to_string(&FileConfig {
        node_name: Some("n".into()),
        lease_health_probe: Some("http://x/".into()),
        node_ip: Some(vec!["10.0.0.1".into()]),
        ..FileConfig::defaults()
    })
    .unwrap();
    for arg in command().get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        // test-* flags are hidden test switches, deliberately not settable from a file.
        if matches!(long, "help" | "version" | "config" | "verbose") || long.starts_with("test-") {
            continue;
        }
        let key = keys
            .lines()
            .filter_map(|l| l.split_once(':').map(|(k, _)| k))
            .find(|k| config::flag_for_key(k) == format!("--{long}"));
        assert!(key.is_some(), "--{long} has no config file key");
    }
}

#[test]
fn serving_flags_parse() {
    let f = run_flags(&[]);
    assert_eq!(
        (f.rotate_server_certificates, f.node_ip, f.tls_san),
        (None, None, None)
    );
    assert_eq!(
        run_flags(&["--rotate-server-certificates"]).rotate_server_certificates,
        Some(true)
    );
    assert_eq!(
        run_flags(&["--rotate-server-certificates=false"]).rotate_server_certificates,
        Some(false)
    );
    // Comma-separated like the kubelet's --node-ip; repeating the flag adds to the list.
    let f = run_flags(&[
        "--node-ip",
        "10.0.0.1,fd00::1",
        "--node-ip=10.0.0.2",
        "--tls-san=a.example,192.0.2.1",
    ]);
    assert_eq!(
        f.node_ip,
        Some(vec!["10.0.0.1".into(), "fd00::1".into(), "10.0.0.2".into()])
    );
    assert_eq!(
        f.tls_san,
        Some(vec!["a.example".into(), "192.0.2.1".into()])
    );
    assert!(parse(&["--rotate-server-certificates=maybe"]).is_err());
    assert!(parse(&["--node-ip"]).is_err(), "a value is required");
}
