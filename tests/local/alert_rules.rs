//! The Prometheus rules in `config/prometheus/`: promtool checks both rule files and runs
//! every unit test beside them; the kubernetes-mixin's expressions stay the mixin's; every
//! bootlet alert names the node and a real `bootlet doctor` check; every alert has a
//! promtool case where it fires and one where it does not. Needs `promtool` (Debian's
//! `prometheus` package): without it these tests fail, they never skip.

use std::collections::{BTreeMap, BTreeSet};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::Command;

use bootlet::checkid::CheckId;
use bootlet::defaults::DEFAULT_METRICS_BIND_ADDRESS;
use serde::Deserialize;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config/prometheus");
const BOOTLET_RULES: &str = "bootlet.rules.yaml";
const MIXIN_RULES: &str = "kubernetes-mixin-kubelet.rules.yaml";

/// The expressions as kubernetes-mixin renders them (group kubernetes-system-kubelet), in
/// the file's order: (alert, severity, expr, for).
const MIXIN: [(&str, &str, &str, Option<&str>); 6] = [
    (
        "KubeletClientCertificateExpiration",
        "warning",
        "kubelet_certificate_manager_client_ttl_seconds < 604800",
        None,
    ),
    (
        "KubeletClientCertificateExpiration",
        "critical",
        "kubelet_certificate_manager_client_ttl_seconds < 86400",
        None,
    ),
    (
        "KubeletServerCertificateExpiration",
        "warning",
        "kubelet_certificate_manager_server_ttl_seconds < 604800",
        None,
    ),
    (
        "KubeletServerCertificateExpiration",
        "critical",
        "kubelet_certificate_manager_server_ttl_seconds < 86400",
        None,
    ),
    (
        "KubeletClientCertificateRenewalErrors",
        "warning",
        "increase(kubelet_certificate_manager_client_expiration_renew_errors[5m]) > 0",
        Some("15m"),
    ),
    (
        "KubeletServerCertificateRenewalErrors",
        "warning",
        "increase(kubelet_server_expiration_renew_errors[5m]) > 0",
        Some("15m"),
    ),
];

/// A Prometheus rule file, as far as these tests read it.
#[derive(Debug, Deserialize)]
struct RuleFile {
    groups: Vec<RuleGroup>,
}

#[derive(Debug, Deserialize)]
struct RuleGroup {
    name: String,
    rules: Vec<Rule>,
}

#[derive(Debug, Deserialize)]
struct Rule {
    alert: Option<String>,
    record: Option<String>,
    expr: String,
    #[serde(rename = "for")]
    hold: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

/// A promtool unit-test file, as far as these tests read it.
#[derive(Debug, Deserialize)]
struct TestFile {
    rule_files: Vec<String>,
    tests: Vec<TestGroup>,
}

#[derive(Debug, Deserialize)]
struct TestGroup {
    #[serde(default)]
    alert_rule_test: Vec<AlertTest>,
}

#[derive(Debug, Deserialize)]
struct AlertTest {
    alertname: String,
    #[serde(default)]
    exp_alerts: Vec<ExpAlert>,
}

#[derive(Debug, Deserialize)]
struct ExpAlert {
    #[serde(default)]
    exp_labels: BTreeMap<String, String>,
    #[serde(default)]
    exp_annotations: BTreeMap<String, String>,
}

// === helpers ===

fn path(name: &str) -> PathBuf {
    Path::new(DIR).join(name)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Parses a YAML file. Non-finite floats pass through: promtool files spell +Inf `.inf`.
fn parse<T: serde::de::DeserializeOwned>(path: &Path) -> T {
    let options = serde_saphyr::options! {
        non_finite_float_policy: serde_saphyr::NonFiniteFloatPolicy::PassThrough,
    };
    serde_saphyr::from_str_with_options(&read(path), options)
        .unwrap_or_else(|e| panic!("parse {}: {e}", path.display()))
}

fn rule_file(name: &str) -> RuleFile {
    parse(&path(name))
}

fn test_file(path: &Path) -> TestFile {
    parse(path)
}

/// Every `config/prometheus/tests/*.test.yaml`, sorted.
fn test_files() -> Vec<PathBuf> {
    let dir = path("tests");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.to_string_lossy().ends_with(".test.yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no *.test.yaml in {}", dir.display());
    files
}

/// The rule files a test file loads, by file name (its paths are relative to itself).
fn loaded_rule_files(test: &TestFile) -> BTreeSet<String> {
    test.rule_files
        .iter()
        .map(|f| {
            Path::new(f)
                .file_name()
                .expect("a rule file name")
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

/// Runs promtool in `config/prometheus/` and returns its stdout and stderr; fails the test,
/// with that output, when promtool fails or is not installed.
fn promtool(args: &[&str]) -> String {
    let out = match Command::new("promtool")
        .args(args)
        .current_dir(DIR)
        .output()
    {
        Ok(out) => out,
        Err(e) if e.kind() == ErrorKind::NotFound => panic!(
            "promtool is not installed: install Debian's `prometheus` package \
             (apt-get install prometheus), which provides /usr/bin/promtool"
        ),
        Err(e) => panic!("run promtool: {e}"),
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "promtool {} failed ({}):\n{text}",
        args.join(" "),
        out.status
    );
    text
}

fn alerts(file: &RuleFile) -> impl Iterator<Item = (&str, &Rule)> {
    file.groups
        .iter()
        .flat_map(|g| &g.rules)
        .filter_map(|r| r.alert.as_deref().map(|a| (a, r)))
}

fn severity(rule: &Rule) -> &str {
    rule.labels.get("severity").map_or("", String::as_str)
}

/// The words that follow "check", "checks" or "checks up to" in a description: the doctor
/// check ids it tells the operator to read.
fn named_checks(text: &str) -> Vec<&str> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut named = Vec::new();
    for (i, word) in words.iter().enumerate() {
        let word = word.trim_start_matches(|c: char| !c.is_ascii_alphanumeric());
        if !matches!(word, "check" | "checks") {
            continue;
        }
        let next = match words.get(i + 1..i + 3) {
            Some(["up", "to"]) => words.get(i + 3),
            _ => words.get(i + 1),
        };
        if let Some(next) = next {
            named.push(next.trim_end_matches(|c: char| !c.is_ascii_alphanumeric()));
        }
    }
    named
}

// === tests ===

#[test]
fn promtool_checks_both_rule_files() {
    for name in [BOOTLET_RULES, MIXIN_RULES] {
        let out = promtool(&["check", "rules", name]);
        let count: usize = rule_file(name).groups.iter().map(|g| g.rules.len()).sum();
        assert!(
            out.contains(&format!("SUCCESS: {count} rules found")),
            "promtool check rules {name} did not find the {count} rules:\n{out}"
        );
    }
}

#[test]
fn promtool_unit_tests_pass() {
    let files = test_files();
    let names: Vec<String> = files
        .iter()
        .map(|p| format!("tests/{}", p.file_name().unwrap().to_string_lossy()))
        .collect();
    for name in [BOOTLET_RULES, MIXIN_RULES] {
        assert!(
            files
                .iter()
                .any(|f| loaded_rule_files(&test_file(f)).contains(name)),
            "no promtool test file loads {name}"
        );
    }
    let mut args = vec!["test", "rules"];
    args.extend(names.iter().map(String::as_str));
    let out = promtool(&args);
    for name in &names {
        assert!(out.contains(name), "promtool did not run {name}:\n{out}");
    }
    assert!(
        !out.contains("FAILED"),
        "promtool reported a failure:\n{out}"
    );
}

#[test]
fn mixin_expressions_are_the_mixins_to_the_character() {
    let file = rule_file(MIXIN_RULES);
    assert_eq!(file.groups.len(), 1);
    assert_eq!(file.groups[0].name, "kubernetes-system-kubelet");
    let rules = &file.groups[0].rules;
    assert_eq!(
        rules.len(),
        MIXIN.len(),
        "{MIXIN_RULES} holds exactly the mixin's {} rules",
        MIXIN.len()
    );
    for (rule, (alert, sev, expr, hold)) in rules.iter().zip(MIXIN) {
        assert_eq!(rule.alert.as_deref(), Some(alert));
        assert_eq!(severity(rule), sev, "{alert}");
        // The rendering is a block scalar: the expression and one newline.
        assert_eq!(
            rule.expr,
            format!("{expr}\n"),
            "{alert} ({sev}) is not the mixin's expression"
        );
        assert_eq!(rule.hold.as_deref(), hold, "{alert} ({sev})");
        for key in ["summary", "description", "runbook_url"] {
            assert!(
                rule.annotations.contains_key(key),
                "{alert} ({sev}) lost its {key}"
            );
        }
    }
}

#[test]
fn bootlet_alerts_name_the_node_and_a_doctor_check() {
    let file = rule_file(BOOTLET_RULES);
    assert_eq!(file.groups.len(), 1);
    assert_eq!(file.groups[0].name, "bootlet");
    let mixin_names: BTreeSet<&str> = MIXIN.iter().map(|m| m.0).collect();
    let node = "{{ $labels.node }}";
    let mut absent = 0;
    for rule in &file.groups[0].rules {
        assert!(rule.record.is_none(), "{BOOTLET_RULES} holds alerts only");
        let alert = rule.alert.as_deref().expect("every rule is an alert");
        assert!(
            alert.starts_with("Bootlet") && !mixin_names.contains(alert),
            "{alert}: a name of bootlet's own"
        );
        let sev = severity(rule);
        assert!(
            matches!(sev, "warning" | "critical"),
            "{alert}: severity {sev:?}"
        );
        let summary = rule
            .annotations
            .get("summary")
            .unwrap_or_else(|| panic!("{alert}: no summary"));
        let description = rule
            .annotations
            .get("description")
            .unwrap_or_else(|| panic!("{alert}: no description"));
        if rule.expr.trim_start().starts_with("absent(") {
            // absent() yields no target's labels: a node named there would render empty.
            absent += 1;
            assert!(
                !summary.contains("$labels.node") && !description.contains("$labels.node"),
                "{alert}: absent() has no node label"
            );
            assert!(
                description.contains(DEFAULT_METRICS_BIND_ADDRESS),
                "{alert}: names the default bind address"
            );
            continue;
        }
        assert!(
            summary.contains(node),
            "{alert} ({sev}): summary does not name the node: {summary}"
        );
        assert!(
            description.contains(node),
            "{alert} ({sev}): description does not name the node: {description}"
        );
        assert!(
            description.contains("`bootlet doctor`"),
            "{alert} ({sev}): description does not say to run `bootlet doctor`"
        );
        let named = named_checks(description);
        let ids: Vec<&str> = CheckId::ALL.iter().map(|c| c.as_str()).collect();
        assert!(
            !named.is_empty(),
            "{alert} ({sev}): description names no doctor check: {description}"
        );
        for id in named {
            assert!(
                ids.contains(&id),
                "{alert} ({sev}): \"check {id}\" is not a doctor check id of src/checkid.rs"
            );
        }
    }
    assert_eq!(
        absent, 1,
        "one absent() alert for a scrape config that finds no bootlet"
    );
}

#[test]
fn every_alert_has_a_promtool_case_that_fires_and_one_that_does_not() {
    let tests: Vec<(PathBuf, TestFile)> = test_files()
        .into_iter()
        .map(|p| {
            let t = test_file(&p);
            (p, t)
        })
        .collect();
    for name in [BOOTLET_RULES, MIXIN_RULES] {
        let cases: Vec<&AlertTest> = tests
            .iter()
            .filter(|(_, t)| loaded_rule_files(t).contains(name))
            .flat_map(|(_, t)| t.tests.iter().flat_map(|g| &g.alert_rule_test))
            .collect();
        for (alert, rule) in alerts(&rule_file(name)) {
            let sev = severity(rule);
            let fires = cases
                .iter()
                .filter(|c| c.alertname == alert)
                .flat_map(|c| &c.exp_alerts)
                .any(|a| {
                    a.exp_labels.get("severity").map(String::as_str) == Some(sev)
                        && a.exp_labels.len() > 1
                        && a.exp_annotations.contains_key("summary")
                        && a.exp_annotations.contains_key("description")
                });
            assert!(fires, "{name}: no promtool case where {alert} ({sev}) fires with its labels and annotations checked");
            let silent = cases
                .iter()
                .any(|c| c.alertname == alert && c.exp_alerts.is_empty());
            assert!(
                silent,
                "{name}: no promtool case where {alert} does not fire"
            );
        }
    }
}

#[test]
fn scrape_example_gives_the_job_and_node_label_the_rules_select() {
    let config: serde_json::Value = parse(&path("scrape.example.yaml"));
    let rule_files = config["rule_files"].as_array().expect("rule_files");
    assert!(
        rule_files.iter().any(|f| f == BOOTLET_RULES),
        "the example loads {BOOTLET_RULES}"
    );
    let jobs = config["scrape_configs"].as_array().expect("scrape_configs");
    let job = jobs
        .iter()
        .find(|j| j["job_name"] == "bootlet")
        .expect("a scrape job named bootlet, which the rules select");
    let relabel = job["relabel_configs"].as_array().expect("relabel_configs");
    let node = relabel.iter().any(|r| {
        r["target_label"] == "node"
            && r["source_labels"] == serde_json::json!(["__meta_kubernetes_node_name"])
    });
    assert!(node, "the example sets the node label from the node's name");
    let port = DEFAULT_METRICS_BIND_ADDRESS.rsplit(':').next().unwrap();
    let address = relabel.iter().any(|r| {
        r["target_label"] == "__address__" && r["replacement"] == format!("${{1}}:{port}")
    });
    assert!(
        address,
        "the example scrapes bootlet's default metrics port {port}"
    );
}
