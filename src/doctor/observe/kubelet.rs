//! The kubelet's command line as systemd would start it: `kubelet.service`'s effective
//! `ExecStart` (after every drop-in: kubeadm's 10-kubeadm.conf, bootlet's 20-bootlet.conf)
//! with its `$VARIABLES` expanded from the unit's `Environment=` and `EnvironmentFile=`s,
//! as systemd expands them (an unbraced `$VAR` splits into words). doctor reads it to warn
//! when the kubelet would bootstrap or rotate its client certificate itself beside bootlet.

use std::collections::BTreeMap;

/// How `systemctl show` opens each ExecStart entry (`{ path=… ; argv[]=… ; … }`). Named
/// here, not inlined, so no unmatched brace sits inside a function body.
const ENTRY_OPEN: &str = "{ ";

/// `kubelet.service`'s argv, expanded; `None` without systemd or without the unit.
pub fn command_line() -> Option<Vec<String>> {
    let text = crate::runtime::systemctl::show(
        "kubelet.service",
        "LoadState,ExecStart,Environment,EnvironmentFiles",
        false,
    )?;
    let mut env = BTreeMap::new();
    let mut argv = None;
    for line in text.lines() {
        if let Some(state) = line.strip_prefix("LoadState=") {
            if state != "loaded" {
                return None;
            }
        } else if let Some(files) = line.strip_prefix("EnvironmentFiles=") {
            // `PATH (ignore_errors=yes)`: the file's assignments, read now.
            let path = files.split(" (").next().unwrap_or(files);
            if let Ok(body) = std::fs::read_to_string(path) {
                for (k, v) in body.lines().filter_map(assignment) {
                    env.insert(k, v);
                }
            }
        } else if let Some(assignments) = line.strip_prefix("Environment=") {
            for word in words(assignments) {
                if let Some((k, v)) = word.split_once('=') {
                    env.insert(k.to_string(), v.to_string());
                }
            }
        } else if let Some(exec) = line.strip_prefix("ExecStart=") {
            argv = exec
                .split(" ; ")
                .find_map(|part| part.trim_start_matches(ENTRY_OPEN).strip_prefix("argv[]="))
                .map(str::to_string);
        }
    }
    Some(expand(&argv?, &env))
}

/// A `VAR=value` line of an environment file (quotes removed; comments and blanks skipped).
fn assignment(line: &str) -> Option<(String, String)> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let (k, v) = line.split_once('=')?;
    let v = v.trim();
    let v = v
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(v);
    Some((k.trim().to_string(), v.to_string()))
}

/// Whitespace-separated words, a double-quoted stretch kept whole (quotes removed).
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in text.chars() {
        match c {
            '"' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// systemd's expansion of an ExecStart line: a word that is exactly `$VAR` becomes the
/// variable's words (none when unset); `${VAR}` inside a word is replaced as one string.
fn expand(argv: &str, env: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    for word in words(argv) {
        if let Some(name) = word.strip_prefix('$').filter(|n| !n.starts_with('{')) {
            if let Some(value) = env.get(name) {
                out.extend(words(value));
            }
            continue;
        }
        let mut w = word.clone();
        for (k, v) in env {
            w = w.replace(&format!("${{{k}}}"), v);
        }
        out.push(w);
    }
    out
}

/// The value of `--flag` in `argv` as the kubelet reads it (the last one wins): `Some("")`
/// for a bare boolean flag, `None` when absent.
pub fn flag<'a>(argv: &'a [String], name: &str) -> Option<&'a str> {
    let long = format!("--{name}");
    let mut found = None;
    for (i, word) in argv.iter().enumerate() {
        if let Some(rest) = word.strip_prefix(&long) {
            if let Some(v) = rest.strip_prefix('=') {
                found = Some(v);
            } else if rest.is_empty() {
                found = Some(
                    argv.get(i + 1)
                        .map(String::as_str)
                        .filter(|n| !n.starts_with("--"))
                        .unwrap_or(""),
                );
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeadms_drop_in_expands_as_systemd_does() {
        let mut env = BTreeMap::new();
        env.insert(
            "KUBELET_KUBECONFIG_ARGS".to_string(),
            "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf".to_string(),
        );
        env.insert(
            "KUBELET_CONFIG_ARGS".to_string(),
            "--config=/var/lib/kubelet/config.yaml".to_string(),
        );
        let argv = expand(
            "/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS",
            &env,
        );
        assert_eq!(
            argv,
            [
                "/usr/bin/kubelet",
                "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
                "--kubeconfig=/etc/kubernetes/kubelet.conf",
                "--config=/var/lib/kubelet/config.yaml"
            ]
        );
        assert_eq!(
            flag(&argv, "bootstrap-kubeconfig"),
            Some("/etc/kubernetes/bootstrap-kubelet.conf")
        );
        assert_eq!(flag(&argv, "rotate-certificates"), None);
    }

    #[test]
    fn the_last_flag_wins_and_both_spellings_count() {
        let argv: Vec<String> = [
            "k",
            "--rotate-certificates=true",
            "--rotate-certificates",
            "false",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(flag(&argv, "rotate-certificates"), Some("false"));
        let bare: Vec<String> = ["k", "--rotate-certificates"].map(String::from).to_vec();
        assert_eq!(flag(&bare, "rotate-certificates"), Some(""));
    }

    #[test]
    fn environment_lines_keep_quoted_words_whole() {
        assert_eq!(words(r#""A=--x=1 --y=2" B=3"#), ["A=--x=1 --y=2", "B=3"]);
        assert_eq!(
            assignment(r#"KUBELET_KUBEADM_ARGS="--hostname-override=w1""#),
            Some((
                "KUBELET_KUBEADM_ARGS".into(),
                "--hostname-override=w1".into()
            ))
        );
        assert_eq!(assignment("# c"), None);
    }
}
