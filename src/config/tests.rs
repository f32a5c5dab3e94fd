use super::*;
use crate::cli::{self, Command};
use proptest::prelude::*;

const EXAMPLE: &str = include_str!("../../config/bootlet.example.yaml");
const CFG: &str = "/etc/bootlet.yaml";

fn flags(args: &[&str]) -> Flags {
    let argv = std::iter::once("bootlet").chain(args.iter().copied());
    match cli::parse_from(argv).unwrap() {
        Command::Run(flags) => flags,
        other => panic!("expected run, got {other:?}"),
    }
}

/// Settings from a YAML text and flags; `--node-name n1` unless given, so tests do not
/// depend on this machine's host name.
fn settings(yaml: Option<&str>, args: &[&str]) -> Result<Settings, ConfigError> {
    let mut f = flags(args);
    f.node_name.get_or_insert_with(|| "n1".into());
    match yaml {
        Some(text) => {
            let file = FileConfig::parse(Path::new(CFG), text)?;
            Settings::from_parts(Some((Path::new(CFG), &file)), &f)
        }
        None => Settings::from_parts(None, &f),
    }
}

/// Default settings (node `n1`), for other modules' tests.
pub(crate) fn settings_for_tests() -> Settings {
    settings(None, &[]).unwrap()
}

fn err(yaml: Option<&str>, args: &[&str]) -> String {
    let e = settings(yaml, args)
        .expect_err("should be rejected")
        .to_string();
    assert!(!e.contains('\n'), "one line: {e}");
    e
}

#[test]
fn go_durations_parse() {
    let ok = [
        ("0", Duration::ZERO),
        ("0s", Duration::ZERO),
        ("500ms", Duration::from_millis(500)),
        ("10s", Duration::from_secs(10)),
        ("5m", Duration::from_secs(300)),
        ("1h", Duration::from_secs(3600)),
        ("1h30m", Duration::from_secs(5400)),
        ("1.5h", Duration::from_secs(5400)),
        ("300us", Duration::from_micros(300)),
        ("300µs", Duration::from_micros(300)),
        ("300μs", Duration::from_micros(300)),
        ("10ns", Duration::from_nanos(10)),
        ("1m0.5s", Duration::from_millis(60_500)),
    ];
    for (text, want) in ok {
        assert_eq!(parse_duration(text), Ok(want), "{text}");
    }
    for bad in [
        "", "10", "10x", "-1s", "+1s", "1 hour", "1h ago", "PT1H", "s", "1d", "1h 30m", "ten",
    ] {
        assert!(parse_duration(bad).is_err(), "{bad:?} should be rejected");
    }
    assert_eq!(
        parse_duration("10x").unwrap_err().to_string(),
        r#"invalid duration "10x" (use Go units such as 10s, 5m, 1h)"#
    );
}

#[test]
fn durations_format_canonically() {
    assert_eq!(format_duration(Duration::from_secs(10)), "10s");
    assert_eq!(format_duration(Duration::from_secs(5400)), "1h30m");
    assert_eq!(format_duration(Duration::from_secs(7200)), "2h");
    assert_eq!(format_duration(Duration::from_millis(500)), "500ms");
    assert_eq!(format_duration(Duration::from_micros(300)), "300us");
    assert_eq!(format_duration(Duration::ZERO), "0s");
}

proptest! {
    #[test]
    fn format_then_parse_round_trips(secs in 0u64..10_000_000, nanos in 0u32..1_000_000_000) {
        let d = Duration::new(secs, nanos);
        prop_assert_eq!(parse_duration(&format_duration(d)), Ok(d));
    }
}

#[test]
fn example_file_equals_serialized_defaults() {
    let serialized = serde_saphyr::to_string(&FileConfig::defaults()).unwrap();
    let from_defaults = FileConfig::parse(Path::new("defaults"), &serialized).unwrap();
    let example = FileConfig::parse(Path::new("example"), EXAMPLE).unwrap();
    assert_eq!(
        example, from_defaults,
        "config/bootlet.example.yaml drifted from the defaults; expected these keys:\n{serialized}"
    );
}

/// A FileConfig with every field set: a struct literal, so adding a field breaks this.
fn every_key_set() -> FileConfig {
    FileConfig {
        node_name: Some("n".into()),
        lease_health_probe: Some("http://127.0.0.1/".into()),
        node_ip: Some(vec!["10.0.0.1".into()]),
        ..FileConfig::defaults()
    }
}

fn all_keys() -> Vec<String> {
    let text = serde_saphyr::to_string(&every_key_set()).unwrap();
    let map: std::collections::BTreeMap<String, serde::de::IgnoredAny> =
        serde_saphyr::from_str(&text).unwrap();
    map.into_keys().collect()
}

#[test]
fn example_file_documents_every_key() {
    let keys = all_keys();
    assert_eq!(keys.len(), 26);
    for key in keys {
        let line = EXAMPLE
            .lines()
            .position(|l| l.trim_start_matches("# ").starts_with(&format!("{key}:")))
            .unwrap_or_else(|| panic!("example file lacks key {key}"));
        let above = EXAMPLE.lines().nth(line - 1).unwrap();
        assert!(
            above.starts_with('#'),
            "{key} needs a comment line above it"
        );
    }
}

#[test]
fn layering_covers_every_key_by_its_serde_name() {
    let f = Flags {
        node_name: Some("n1".into()),
        ..Flags::default()
    };
    let (_, layers) = Settings::layer(None, &f, &KubeletView::default()).unwrap();
    let picked: Vec<String> = layers.origins.keys().map(|k| k.to_string()).collect();
    assert_eq!(picked, all_keys());
}

#[test]
fn help_mentions_every_key_flag() {
    let mut cmd = cli::command();
    let help = cmd.render_long_help().to_string();
    for key in all_keys() {
        let flag = flag_for_key(&key);
        let arg = cmd
            .get_arguments()
            .find(|a| {
                a.get_long() == flag.strip_prefix("--")
                    || (flag == "-v" && a.get_short() == Some('v'))
            })
            .unwrap_or_else(|| panic!("no flag {flag} for key {key}"));
        if !arg.is_hide_set() {
            assert!(help.contains(&flag), "--help lacks {flag}");
        }
    }
}

#[test]
fn example_loads_to_the_same_settings_as_no_file() {
    assert_eq!(
        settings(Some(EXAMPLE), &[]).unwrap(),
        settings(None, &[]).unwrap()
    );
}

#[test]
fn defaults_are_the_contract_defaults() {
    let s = settings(None, &[]).unwrap();
    assert_eq!(
        s.bootstrap_kubeconfig,
        Path::new("/etc/kubernetes/bootstrap-kubelet.conf")
    );
    assert_eq!(s.kubeconfig, Path::new("/etc/kubernetes/kubelet.conf"));
    assert_eq!(s.cert_dir, Path::new("/var/lib/kubelet/pki"));
    assert!(s.rotate_certificates && s.renew_lease && !s.allow_insecure_kubeconfig);
    assert_eq!((s.rotation_fraction, s.rotation_jitter), (0.75, 0.05));
    assert_eq!(s.lease_renew_interval, Duration::from_secs(10));
    assert_eq!(s.lease_duration, Duration::from_secs(40));
    assert_eq!(s.csr_timeout, Duration::from_secs(3600));
    assert_eq!(
        s.metrics_bind_address,
        Some("127.0.0.1:10271".parse().unwrap())
    );
    assert_eq!(s.lease_health_probe, None);
    assert_eq!(s.keep_certificates, 5);
    assert_eq!((s.log_format, s.verbosity), (LogFormat::Text, 0));
    assert!(!s.rotate_server_certificates);
    assert!(s.node_ips.is_empty() && s.tls_sans.is_empty());
}

#[test]
fn node_name_defaults_to_the_lowercased_host_name() {
    let Ok(host) = hostname() else { return };
    if !is_dns1123_subdomain(&host) {
        return;
    }
    let s = Settings::from_parts(None, &Flags::default()).unwrap();
    assert_eq!(s.node_name, host);
}

#[test]
fn flags_override_file_override_defaults() {
    let yaml = "leaseRenewInterval: 5s\nrenewLease: false\nnodeName: from-file\nverbosity: 1\n";
    let s = settings(Some(yaml), &[]).unwrap();
    assert_eq!(s.lease_renew_interval, Duration::from_secs(5));
    assert!(!s.renew_lease);
    assert_eq!(s.verbosity, 1);
    let s = settings(
        Some(yaml),
        &["--lease-renew-interval=2s", "--renew-lease", "-vv"],
    )
    .unwrap();
    assert_eq!(s.lease_renew_interval, Duration::from_secs(2));
    assert!(s.renew_lease);
    assert_eq!(s.verbosity, 2);
    assert_eq!(s.node_name, "n1");
    let mut f = Flags::default();
    let file = FileConfig::parse(Path::new(CFG), yaml).unwrap();
    f.lease_duration = Some(Duration::from_secs(30));
    let s = Settings::from_parts(Some((Path::new(CFG), &file)), &f).unwrap();
    assert_eq!(s.node_name, "from-file");
    assert_eq!(s.lease_duration, Duration::from_secs(30));
}

#[test]
fn node_names_are_lowercased_and_validated() {
    assert_eq!(
        settings(None, &["--node-name", "Worker-1.Example"])
            .unwrap()
            .node_name,
        "worker-1.example"
    );
    for bad in ["-a", "a_b", "a..b", "", "a.", &"x".repeat(64)] {
        let e = err(None, &[&format!("--node-name={bad}")]);
        assert!(e.starts_with("--node-name: "), "{e}");
    }
    // The error quotes what the operator typed, not the lower-cased value checked.
    assert_eq!(
        err(None, &["--node-name", "Bad_Name!"]),
        r#"--node-name: "Bad_Name!" is not a valid node name (lower-case letters, digits, '-' and '.', at most 253)"#
    );
    let file = FileConfig::parse(Path::new(CFG), "nodeName: Bad_Name\n").unwrap();
    let e = Settings::from_parts(Some((Path::new(CFG), &file)), &Flags::default()).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("/etc/bootlet.yaml: nodeName: \"Bad_Name\" is not"),
        "{e}"
    );
}

#[test]
fn errors_name_the_file_and_key() {
    assert_eq!(
        err(Some("leaseRenewInterval: 10x\n"), &[]),
        r#"/etc/bootlet.yaml: leaseRenewInterval: invalid duration "10x" (use Go units such as 10s, 5m, 1h)"#
    );
    assert_eq!(
        err(Some("rotationFraction: 1.5\n"), &[]),
        "/etc/bootlet.yaml: rotationFraction: must be between 0 and 1, got 1.5"
    );
    let e = err(Some("leaseRenewIntervall: 10s\n"), &[]);
    assert!(
        e.starts_with("/etc/bootlet.yaml: unknown field `leaseRenewIntervall`"),
        "{e}"
    );
    assert!(e.contains("line 1"), "{e}");
    let e = err(Some("renewLease: true\nrotationFraction: abc\n"), &[]);
    assert!(
        e.starts_with("/etc/bootlet.yaml: rotationFraction: "),
        "{e}"
    );
    assert!(e.contains("line 2"), "{e}");
    let e = err(Some("- 1\n"), &[]);
    assert!(
        e.starts_with("/etc/bootlet.yaml: ") && e.contains("line 1"),
        "{e}"
    );
}

#[test]
fn errors_name_the_flag() {
    assert_eq!(
        err(None, &["--rotation-fraction", "1.5"]),
        "--rotation-fraction: must be between 0 and 1, got 1.5"
    );
    assert_eq!(
        err(None, &["--metrics-bind-address", "nowhere"]),
        r#"--metrics-bind-address: invalid address "nowhere" (use IP:PORT such as 127.0.0.1:10271, or off)"#
    );
    assert_eq!(
        err(None, &["--keep-certificates=0"]),
        "--keep-certificates: must be at least 1"
    );
    assert_eq!(
        err(None, &["--csr-timeout=0"]),
        "--csr-timeout: must be greater than 0"
    );
    assert_eq!(
        err(Some("leaseOwnerLookupInterval: 0s\n"), &[]),
        "/etc/bootlet.yaml: leaseOwnerLookupInterval: must be greater than 0"
    );
}

#[test]
fn rotation_window_must_fit_in_the_lifetime() {
    assert!(
        err(None, &["--rotation-jitter=-0.1"]).starts_with("--rotation-jitter: must be 0 or more")
    );
    assert!(err(None, &["--rotation-jitter=0.3"]).starts_with("--rotation-jitter: rotation window"));
    assert!(err(None, &["--rotation-fraction=0.04"])
        .starts_with("rotationJitter (default): rotation window"));
    assert!(err(None, &["--rotation-fraction=NaN"]).starts_with("--rotation-fraction: "));
    assert!(err(None, &["--rotation-fraction=0"]).starts_with("--rotation-fraction: "));
    let s = settings(None, &["--rotation-fraction=0.5", "--rotation-jitter=0"]).unwrap();
    assert_eq!((s.rotation_fraction, s.rotation_jitter), (0.5, 0.0));
}

#[test]
fn lease_duration_must_outlast_the_interval() {
    let e = err(None, &["--lease-duration=10s"]);
    assert_eq!(e, "--lease-duration: must be longer than the lease renew interval (10s, from leaseRenewInterval (default)), got 10s");
    let e = err(Some("leaseRenewInterval: 1m\n"), &[]);
    assert!(
        e.starts_with("leaseDuration (default): ")
            && e.contains("/etc/bootlet.yaml: leaseRenewInterval"),
        "{e}"
    );
    assert!(err(None, &["--lease-duration=40.5s"]).contains("whole seconds"));
    assert_eq!(
        err(None, &["--lease-duration=1000000h"]),
        "--lease-duration: must be at most 1h, got 1000000h"
    );
    assert!(settings(None, &["--lease-duration=11s"]).is_ok());
}

#[test]
fn metrics_and_probe() {
    assert_eq!(
        settings(None, &["--metrics-bind-address=off"])
            .unwrap()
            .metrics_bind_address,
        None
    );
    assert_eq!(
        settings(None, &["--metrics-bind-address=[::1]:9"])
            .unwrap()
            .metrics_bind_address,
        Some("[::1]:9".parse().unwrap())
    );
    let probe = "http://127.0.0.1:10248/healthz";
    let s = settings(Some(&format!("leaseHealthProbe: {probe}\n")), &[]).unwrap();
    assert_eq!(s.lease_health_probe.as_deref(), Some(probe));
    assert!(err(None, &["--lease-health-probe=ftp://x/"])
        .starts_with("--lease-health-probe: invalid URL"));
}

/// Before: an https probe passed validation, then failed every probe (no trust root), so
/// the Lease was never renewed and nothing said why.
#[test]
fn an_https_health_probe_is_refused_naming_the_key() {
    let https = "https://127.0.0.1:10250/healthz";
    assert_eq!(
        err(None, &[&format!("--lease-health-probe={https}")]),
        format!(
            "--lease-health-probe: \"{https}\": https is not supported (the probe has no trust \
             root for a local endpoint's certificate, so it could never succeed); use the plain \
             http health URL, e.g. http://127.0.0.1:10248/healthz"
        )
    );
    let e = err(Some(&format!("leaseHealthProbe: {https}\n")), &[]);
    assert!(e.contains(": leaseHealthProbe: \"https://"), "{e}");
    assert!(e.contains("https is not supported"), "{e}");
}

#[test]
fn csr_backoff_is_validated_and_never_under_min() {
    let e = err(None, &["--csr-backoff-min=2h"]);
    assert!(
        e.starts_with("csrBackoffMax (default): must be at least"),
        "{e}"
    );
    let s = settings(None, &[]).unwrap();
    let mut b = s.csr_backoff();
    for _ in 0..20 {
        let d = b.next_delay();
        assert!(
            d >= Duration::from_secs(60) && d <= Duration::from_secs(3960),
            "{d:?}"
        );
    }
}

#[test]
fn relative_paths_anchor_to_file_folder_or_working_dir() {
    let file = FileConfig::parse(Path::new("/etc/bootlet/b.yaml"), "certDir: pki\n").unwrap();
    let f = Flags {
        node_name: Some("n1".into()),
        kubeconfig: Some("kc".into()),
        ..Flags::default()
    };
    let s = Settings::from_parts(Some((Path::new("/etc/bootlet/b.yaml"), &file)), &f).unwrap();
    assert_eq!(s.cert_dir, Path::new("/etc/bootlet/pki"));
    assert_eq!(s.kubeconfig, std::env::current_dir().unwrap().join("kc"));
}

#[test]
fn load_reads_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bootlet.yaml");
    std::fs::write(&path, "# only comments\n").unwrap();
    let f = Flags {
        config: Some(path.clone()),
        node_name: Some("n1".into()),
        ..Flags::default()
    };
    assert!(Settings::load(&f).is_ok());
    std::fs::write(&path, "csrTimeout: 5m\n").unwrap();
    assert_eq!(
        Settings::load(&f).unwrap().csr_timeout,
        Duration::from_secs(300)
    );
    let missing = Flags {
        config: Some(dir.path().join("nope.yaml")),
        ..f
    };
    let e = Settings::load(&missing).unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "{}: cannot read config file",
            dir.path().join("nope.yaml").display()
        )
    );
}

#[test]
fn keys_map_to_flags() {
    assert_eq!(flag_for_key("leaseRenewInterval"), "--lease-renew-interval");
    assert_eq!(flag_for_key("kubeconfig"), "--kubeconfig");
    assert_eq!(flag_for_key("verbosity"), "-v");
    assert_eq!(
        flag_for_key("serverTLSBootstrap"),
        "--rotate-server-certificates"
    );
    assert_eq!(flag_for_key("nodeIP"), "--node-ip");
    assert_eq!(flag_for_key("tlsSAN"), "--tls-san");
}

fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

#[test]
fn serving_settings_layer_from_flags_and_file() {
    let s = settings(
        None,
        &[
            "--rotate-server-certificates",
            "--node-ip=10.0.0.5, fd00:0::5",
            "--node-ip=10.0.0.6",
            "--tls-san=Node.Example,192.0.2.001",
        ],
    );
    // 192.0.2.001 is no IP (no leading zeros) and, though a DNS-1123 name, surely meant one.
    assert_eq!(
        s.unwrap_err().to_string(),
        r#"--tls-san: invalid IP address "192.0.2.001""#
    );
    let s = settings(
        None,
        &[
            "--rotate-server-certificates",
            "--node-ip=10.0.0.5, fd00:0::5",
            "--node-ip=10.0.0.6",
            "--tls-san=Node.Example,2001:DB8:0::1,127.0.0.1",
        ],
    )
    .unwrap();
    assert!(s.rotate_server_certificates);
    assert_eq!(s.node_ips, ips(&["10.0.0.5", "fd00::5", "10.0.0.6"]));
    assert_eq!(s.tls_sans, ["node.example", "2001:db8::1", "127.0.0.1"]);

    // The file: the kubelet's key, a YAML list or one comma-separated string.
    let yaml =
        "serverTLSBootstrap: true\nnodeIP: [10.0.0.5, \"fd00::5\"]\ntlsSAN: a.example,192.0.2.1\n";
    let s = settings(Some(yaml), &[]).unwrap();
    assert!(s.rotate_server_certificates);
    assert_eq!(s.node_ips, ips(&["10.0.0.5", "fd00::5"]));
    assert_eq!(s.tls_sans, ["a.example", "192.0.2.1"]);
    let s = settings(Some("nodeIP: 10.0.0.5,10.0.0.6\n"), &[]).unwrap();
    assert_eq!(s.node_ips, ips(&["10.0.0.5", "10.0.0.6"]));

    // Flags override the file.
    let s = settings(
        Some(yaml),
        &[
            "--rotate-server-certificates=false",
            "--node-ip=10.9.9.9",
            "--tls-san=b.example",
        ],
    )
    .unwrap();
    assert!(!s.rotate_server_certificates);
    assert_eq!(s.node_ips, ips(&["10.9.9.9"]));
    assert_eq!(s.tls_sans, ["b.example"]);

    // The flag's camelCase is not a key: the contract names serverTLSBootstrap.
    let e = err(Some("rotateServerCertificates: true\n"), &[]);
    assert!(
        e.starts_with("/etc/bootlet.yaml: unknown field `rotateServerCertificates`"),
        "{e}"
    );
}

#[test]
fn bad_serving_values_name_the_flag_or_the_file_and_key() {
    for (yaml, args, message) in [
        (
            None,
            &["--node-ip=10.0.0.300"][..],
            r#"--node-ip: invalid IP address "10.0.0.300" (give comma-separated IPv4/IPv6 addresses)"#,
        ),
        (
            None,
            &["--node-ip=10.0.0.1,"],
            "--node-ip: an empty entry (give comma-separated IPv4/IPv6 addresses)",
        ),
        (
            None,
            &["--node-ip=0.0.0.0"],
            "--node-ip: 0.0.0.0 is the unspecified address, not the node's",
        ),
        (
            None,
            &["--node-ip=::"],
            "--node-ip: :: is the unspecified address, not the node's",
        ),
        (
            None,
            &["--node-ip=ff02::1"],
            "--node-ip: ff02::1 is a multicast address, not the node's",
        ),
        (
            Some("nodeIP: [10.0.0.1, nope]\n"),
            &[],
            r#"/etc/bootlet.yaml: nodeIP: invalid IP address "nope" (give comma-separated IPv4/IPv6 addresses)"#,
        ),
        (
            None,
            &["--tls-san=a.example,,b.example"],
            "--tls-san: an empty name (give comma-separated DNS names or IPs)",
        ),
        (
            None,
            &["--tls-san=bad_name"],
            r#"--tls-san: "bad_name" is neither an IP address nor a DNS name (letters, digits, '-' and '.', at most 253)"#,
        ),
        (
            None,
            &["--tls-san=224.0.0.1"],
            "--tls-san: 224.0.0.1 is a multicast address, not the node's",
        ),
        (
            Some("tlsSAN: [\"\"]\n"),
            &[],
            "/etc/bootlet.yaml: tlsSAN: an empty name (give comma-separated DNS names or IPs)",
        ),
        (
            Some("tlsSAN: \"*.example\"\n"),
            &[],
            r#"/etc/bootlet.yaml: tlsSAN: "*.example" is neither an IP address nor a DNS name (letters, digits, '-' and '.', at most 253)"#,
        ),
    ] {
        assert_eq!(err(yaml, args), message, "{yaml:?} {args:?}");
    }
    let e = err(Some("serverTLSBootstrap: maybe\n"), &[]);
    assert!(
        e.starts_with("/etc/bootlet.yaml: ") && e.contains("serverTLSBootstrap"),
        "{e}"
    );
}

#[test]
fn the_lease_renew_interval_is_at_least_one_second() {
    assert_eq!(
        err(None, &["--lease-renew-interval=500ms"]),
        "--lease-renew-interval: must be at least 1s, got 500ms"
    );
    assert_eq!(
        err(Some("leaseRenewInterval: 999ms\nleaseDuration: 2s\n"), &[]),
        "/etc/bootlet.yaml: leaseRenewInterval: must be at least 1s, got 999ms"
    );
    let s = settings(None, &["--lease-renew-interval=1s", "--lease-duration=2s"]).unwrap();
    assert_eq!(s.lease_renew_interval, Duration::from_secs(1));
}

/// Only the hidden test switch (a `test-hooks` build) lowers the floor, and never to zero.
#[cfg(feature = "test-hooks")]
#[test]
fn the_test_switch_lowers_the_lease_renew_interval_floor_above_zero() {
    let short = ["--test-short-lease-interval", "--lease-duration=1s"];
    let s = settings(
        None,
        &[&short[..], &["--lease-renew-interval=100ms"]].concat(),
    )
    .unwrap();
    assert_eq!(s.lease_renew_interval, Duration::from_millis(100));
    assert_eq!(
        err(None, &[&short[..], &["--lease-renew-interval=0"]].concat()),
        "--lease-renew-interval: must be greater than 0"
    );
}

#[test]
fn every_duration_has_a_cap_named_by_its_flag_or_key() {
    for (args, message) in [
        (
            &["--lease-renew-interval=2h"][..],
            "--lease-renew-interval: must be at most 1h, got 2h",
        ),
        (
            &["--lease-duration=61m"],
            "--lease-duration: must be at most 1h, got 1h1m",
        ),
        (
            &["--csr-timeout=25h"],
            "--csr-timeout: must be at most 24h, got 25h",
        ),
        (
            &["--csr-backoff-min=25h"],
            "--csr-backoff-min: must be at most 24h, got 25h",
        ),
        (
            &["--csr-backoff-max=18446744073709551615s"],
            "--csr-backoff-max: must be at most 24h, got 5124095576030431h15s",
        ),
        (
            &["--csr-not-issued-warning=24h1s"],
            "--csr-not-issued-warning: must be at most 24h, got 24h1s",
        ),
        (
            &["--lease-owner-lookup-interval=48h"],
            "--lease-owner-lookup-interval: must be at most 24h, got 48h",
        ),
        (
            &["--shutdown-grace=301s"],
            "--shutdown-grace: must be at most 5m, got 5m1s",
        ),
    ] {
        assert_eq!(err(None, args), message, "{args:?}");
    }
    assert_eq!(
        err(Some("csrBackoffMax: 1000000h\n"), &[]),
        "/etc/bootlet.yaml: csrBackoffMax: must be at most 24h, got 1000000h"
    );
    assert_eq!(
        err(Some("shutdownGrace: 1h\n"), &[]),
        "/etc/bootlet.yaml: shutdownGrace: must be at most 5m, got 1h"
    );
}

/// At every cap at once, the arithmetic the loops do with these durations stays finite:
/// the CSR backoff (its `mul_f64` ceiling), deadlines as `Instant`/`SystemTime` sums, a
/// doubled wait. (Before the caps, a huge `--csr-backoff-max` was accepted and made the
/// first CSR backoff delay panic in `mul_f64`.)
#[test]
fn durations_at_their_caps_overflow_nothing() {
    let s = settings(
        None,
        &[
            "--lease-renew-interval=59m",
            "--lease-duration=1h",
            "--csr-timeout=24h",
            "--csr-backoff-min=24h",
            "--csr-backoff-max=24h",
            "--csr-not-issued-warning=24h",
            "--lease-owner-lookup-interval=24h",
            "--shutdown-grace=5m",
        ],
    )
    .unwrap();
    let mut backoff = s.csr_backoff();
    for _ in 0..70 {
        let d = backoff.next_delay();
        assert!(
            d <= backoff.ceiling() && d <= Duration::from_secs(30 * 3600),
            "{d:?}"
        );
    }
    let now = tokio::time::Instant::now();
    let system_now = crate::runtime::clock::now();
    for d in [
        s.lease_renew_interval,
        s.lease_duration,
        s.csr_timeout,
        s.csr_backoff_max,
        s.csr_not_issued_warning,
        s.lease_owner_lookup_interval,
        s.shutdown_grace,
    ] {
        let doubled = d.checked_mul(2).expect("2 × d fits");
        assert!(now.checked_add(doubled).is_some(), "{d:?}");
        assert!(system_now.checked_add(doubled).is_some(), "{d:?}");
        assert!(
            d.checked_mul(u32::MAX).is_some(),
            "{d:?}: n × d for any renewal count n"
        );
    }
}

/// Regression: the file was read whole (a 2 MiB or endless file into memory), and a FIFO
/// there blocked `bootlet run` forever.
#[test]
fn a_config_file_over_the_cap_or_not_a_file_is_refused_naming_it() {
    use crate::runtime::report;
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.yaml");
    std::fs::write(&big, "#".repeat((MAX_CONFIG_FILE + 1) as usize)).unwrap();
    let e = report(&FileConfig::read(&big).unwrap_err());
    assert_eq!(
        e,
        format!(
            "{}: cannot read config file: is larger than the 1 MiB cap",
            big.display()
        )
    );
    let at_cap = dir.path().join("at-cap.yaml");
    std::fs::write(&at_cap, "#".repeat(MAX_CONFIG_FILE as usize)).unwrap();
    assert_eq!(FileConfig::read(&at_cap).unwrap(), FileConfig::default());

    let fifo = dir.path().join("fifo.yaml");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.unwrap().success());
    let e = report(&FileConfig::read(&fifo).unwrap_err());
    assert!(
        e.ends_with("cannot read config file: is a FIFO, not a regular file"),
        "{e}"
    );
}

#[test]
fn the_shared_keys_follow_the_kubelet_unless_bootlet_sets_them() {
    let kubelet = KubeletView {
        node_name: Some("from-kubeadm".into()),
        server_tls_bootstrap: Some(true),
        rotate_certificates: Some(false),
    };
    let s = Settings::from_parts_with(None, &Flags::default(), &kubelet).unwrap();
    assert_eq!(s.node_name, "from-kubeadm");
    assert!(s.rotate_server_certificates);
    assert!(!s.rotate_certificates);
    let file = FileConfig::parse(
        Path::new(CFG),
        "nodeName: Mine\nserverTLSBootstrap: false\nrotateCertificates: true\n",
    )
    .unwrap();
    let s = Settings::from_parts_with(Some((Path::new(CFG), &file)), &Flags::default(), &kubelet)
        .unwrap();
    assert_eq!(s.node_name, "mine");
    assert!(!s.rotate_server_certificates);
    assert!(s.rotate_certificates);
}
