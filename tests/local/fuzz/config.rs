//! Fuzz target: the config file, `FileConfig::parse` then `Settings::from_parts`. Errors
//! are one clean line naming the file; accepted settings keep every documented range and
//! the CSR back-off its floor and cap.

use std::path::Path;
use std::time::Duration;

use bootlet::cli::Flags;
use bootlet::config::{is_dns1123_subdomain, FileConfig, Settings};
use bootlet::runtime::report;

use super::cluster::NODE;
use super::engine::{one_clean_line, outcome, Target, Verdict};

const CONFIG_PATH: &str = "/etc/bootlet/fuzz.yaml";

/// What a valid `Settings` promises (config.rs documents each field's range).
fn settings_sound(s: &Settings) -> Result<(), String> {
    let hour = Duration::from_secs(3600);
    let day = 24 * hour;
    let checks: [(&str, bool); 14] = [
        ("node name", is_dns1123_subdomain(&s.node_name)),
        (
            "fraction in (0,1)",
            s.rotation_fraction > 0.0 && s.rotation_fraction < 1.0,
        ),
        ("jitter >= 0", s.rotation_jitter >= 0.0),
        (
            "window inside (0,1)",
            s.rotation_fraction - s.rotation_jitter > 0.0
                && s.rotation_fraction + s.rotation_jitter < 1.0,
        ),
        (
            "renew interval in [1s, 1h]",
            s.lease_renew_interval >= Duration::from_secs(1) && s.lease_renew_interval <= hour,
        ),
        (
            "lease duration whole seconds, > interval, <= 1h",
            s.lease_duration.subsec_nanos() == 0
                && s.lease_duration > s.lease_renew_interval
                && s.lease_duration <= hour,
        ),
        (
            "csr timeout in (0, 24h]",
            !s.csr_timeout.is_zero() && s.csr_timeout <= day,
        ),
        (
            "csr backoff 0 < min <= max <= 24h",
            !s.csr_backoff_min.is_zero()
                && s.csr_backoff_min <= s.csr_backoff_max
                && s.csr_backoff_max <= day,
        ),
        ("keep >= 1", s.keep_certificates >= 1),
        (
            "paths absolute",
            s.cert_dir.is_absolute()
                && s.kubeconfig.is_absolute()
                && s.bootstrap_kubeconfig.is_absolute(),
        ),
        (
            "warning in (0, 24h]",
            !s.csr_not_issued_warning.is_zero() && s.csr_not_issued_warning <= day,
        ),
        ("owner lookup > 0", !s.lease_owner_lookup_interval.is_zero()),
        (
            "grace <= 5 min",
            s.shutdown_grace <= Duration::from_secs(300),
        ),
        (
            "node IPs usable",
            s.node_ips
                .iter()
                .all(|ip| !ip.is_unspecified() && !ip.is_multicast()),
        ),
    ];
    if let Some((what, _)) = checks.iter().find(|(_, ok)| !ok) {
        return Err(format!("config accepted but breaks: {what}"));
    }
    // Every retry has a floor and a cap: the CSR back-off never waits less than its
    // minimum, nor more than its (jittered) maximum.
    let mut backoff = s.csr_backoff();
    let j = bootlet::config::DEFAULT_CSR_BACKOFF_JITTER;
    let ceiling = s
        .csr_backoff_max
        .max(s.csr_backoff_min.div_f64(1.0 - j))
        .mul_f64(1.0 + j)
        + Duration::from_micros(1);
    for _ in 0..40 {
        let d = backoff.next_delay();
        if d + Duration::from_micros(1) < s.csr_backoff_min || d > ceiling {
            return Err(format!("CSR back-off delay outside [min, max]: {d:?}"));
        }
    }
    Ok(())
}

fn config_case(input: &[u8]) -> Verdict {
    let text = String::from_utf8_lossy(input);
    let path = Path::new(CONFIG_PATH);
    let fc = match FileConfig::parse(path, &text) {
        Ok(fc) => fc,
        Err(e) => {
            let line = report(&e);
            if !one_clean_line(&line) || !line.starts_with(CONFIG_PATH) {
                return Err(format!(
                    "parse error is not one clean line naming the file: {line}"
                ));
            }
            return Ok(outcome("parse", &line[CONFIG_PATH.len()..]));
        }
    };
    let flags = Flags {
        // Without a nodeName in the file the host name would be read: use a fixed one.
        node_name: fc.node_name.is_none().then(|| NODE.to_string()),
        ..Flags::default()
    };
    match Settings::from_parts(Some((path, &fc)), &flags) {
        Err(e) => {
            let line = report(&e);
            if !one_clean_line(&line) || !line.contains(CONFIG_PATH) {
                return Err(format!(
                    "invalid-setting error is not one clean line naming the file: {line}"
                ));
            }
            Ok(outcome(
                "invalid",
                &line[CONFIG_PATH.len().min(line.len())..],
            ))
        }
        Ok(s) => {
            settings_sound(&s)?;
            let keys = serde_json::to_value(&fc).unwrap_or_default();
            let keys: Vec<&String> = keys
                .as_object()
                .map(|o| o.keys().collect())
                .unwrap_or_default();
            Ok(format!("valid:{keys:?}"))
        }
    }
}

fn config_seeds() -> Vec<Vec<u8>> {
    let example =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("config/bootlet.example.yaml"))
            .unwrap();
    let texts = [
        "",
        "# only a comment\n---\n",
        "nodeName: worker-1\nleaseRenewInterval: 10s\nleaseDuration: 40s\n",
        "{nodeName: w, rotationFraction: 0.8, rotationJitter: 0.1, csrTimeout: 30m}\n",
        "nodeIP: [10.0.0.1, 'fd00::1']\ntlsSAN: node.example,10.0.0.2\nserverTLSBootstrap: true\n",
        "nodeIP: 10.0.0.1,10.0.0.2\ntlsSAN:\n  - a.example\n  - 192.168.0.1\n",
        "base: &d 10s\nleaseRenewInterval: *d\n",
        "metricsBindAddress: off\nlogFormat: json\nverbosity: 2\nkeepCertificates: 3\n",
        "csrBackoffMin: 1m\ncsrBackoffMax: 1h\ncsrNotIssuedWarning: 15m\nleaseOwnerLookupInterval: 1m\nshutdownGrace: 5s\n",
        "leaseHealthProbe: http://127.0.0.1:10248/healthz\nrenewLease: false\nrotateCertificates: false\n",
        "certDir: pki\nkubeconfig: ../kubelet.conf\nbootstrapKubeconfig: /etc/kubernetes/bootstrap-kubelet.conf\nallowInsecureKubeconfig: true\n",
        "{\"nodeName\": \"w\", \"leaseDuration\": \"40s\"}",
    ];
    let mut seeds: Vec<Vec<u8>> = texts.iter().map(|t| t.as_bytes().to_vec()).collect();
    seeds.push(example);
    seeds
}

fn config_dict() -> Vec<Vec<u8>> {
    let words = [
        "bootstrapKubeconfig: ",
        "kubeconfig: ",
        "certDir: ",
        "nodeName: ",
        "rotateCertificates: ",
        "rotationFraction: ",
        "rotationJitter: ",
        "renewLease: ",
        "leaseHealthProbe: ",
        "leaseRenewInterval: ",
        "leaseDuration: ",
        "csrTimeout: ",
        "metricsBindAddress: ",
        "serverTLSBootstrap: ",
        "nodeIP: ",
        "tlsSAN: ",
        "keepCertificates: ",
        "allowInsecureKubeconfig: ",
        "logFormat: ",
        "verbosity: ",
        "csrBackoffMin: ",
        "csrBackoffMax: ",
        "csrNotIssuedWarning: ",
        "leaseOwnerLookupInterval: ",
        "shutdownGrace: ",
        "10s",
        "1h",
        "500ms",
        "1h30m",
        "0s",
        "-1s",
        "99999999999h",
        "1.5h",
        "0.75",
        "0.05",
        ".nan",
        ".inf",
        "-.inf",
        "true",
        "false",
        "yes",
        "~",
        "null",
        "[",
        "]",
        "{",
        "}",
        "&a ",
        "*a",
        "!!binary ",
        "!!str ",
        "!!int ",
        "<<: ",
        "---\n",
        "...\n",
        "? ",
        "- ",
        "|\n  ",
        ">\n  ",
        "'",
        "\"",
        "\"\\u0000\"",
        "\"\\x1b[31m\"",
        "\t",
        "\u{2028}",
        "0x1F",
        "1_000",
        "off",
        "127.0.0.1:0",
        "[::1]:10271",
        "http://",
        "https://h:1/p",
        "::",
        "10.0.0.1,10.0.0.2",
        "255.255.255.255",
        "224.0.0.1",
        "0.0.0.0",
        "UPPER.example",
        "a..b",
        "-a",
        "json",
        "text",
    ];
    words.iter().map(|w| w.as_bytes().to_vec()).collect()
}

/// Runs the target within the budget from the environment.
pub fn run() {
    let run = config_case;
    super::run_target(&Target {
        name: "config",
        seeds: config_seeds(),
        dict: config_dict(),
        structured: None,
        run: &run,
    });
}
