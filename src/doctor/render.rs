//! doctor's two renderings of a `Report`: aligned text for people (✓ ⚠ ✗ -, colour only on
//! a terminal, the fix under each failure, a one-line verdict) and the contract's JSON.
//! Pure apart from `color_wanted`, which looks at stdout and NO_COLOR.

use std::io::IsTerminal as _;

use serde::Serialize;

use super::{CheckId, Report, Status};

/// Colour when stdout is a terminal and NO_COLOR is unset (no-color.org).
pub fn color_wanted() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

fn mark(status: Status) -> (&'static str, &'static str) {
    match status {
        Status::Pass => ("✓", "\x1b[32m"),
        Status::Warn => ("⚠", "\x1b[33m"),
        Status::Fail => ("✗", "\x1b[31m"),
        Status::Skip => ("-", "\x1b[2m"),
    }
}

/// One line per check, `fix:` lines under failures and warnings, then the verdict.
pub fn text(report: &Report, color: bool) -> String {
    let width = CheckId::ALL
        .iter()
        .map(|c| c.as_str().len())
        .max()
        .unwrap_or(0);
    let paint = |code: &str, s: &str| {
        if color {
            format!("{code}{s}\x1b[0m")
        } else {
            s.to_string()
        }
    };
    let mut out = String::new();
    for (id, o) in &report.checks {
        let (sym, code) = mark(o.status);
        out.push_str(&format!(
            "{} {:<width$}  {}\n",
            paint(code, sym),
            id.as_str(),
            o.summary
        ));
        if let (Some(fix), Status::Fail | Status::Warn) = (&o.remediation, o.status) {
            out.push_str(&format!(
                "  {:<width$}  fix: {}\n",
                "",
                paint("\x1b[1m", fix)
            ));
        }
    }
    let warns = report
        .checks
        .iter()
        .filter(|(_, o)| o.status == Status::Warn)
        .count();
    let verdict = match report.root_cause() {
        Some((id, o)) => paint(
            "\x1b[31m",
            &format!("✗ {id} is the root cause: {}", o.summary),
        ),
        None if warns > 0 => paint(
            "\x1b[33m",
            &format!("✓ the join chain works ({warns} warning(s) above)"),
        ),
        None => paint("\x1b[32m", "✓ the join chain works"),
    };
    out.push_str(&format!("\n{verdict}\n"));
    out
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonReport<'a> {
    ok: bool,
    root_cause: Option<&'static str>,
    checks: Vec<JsonCheck<'a>>,
}

#[derive(Serialize)]
struct JsonCheck<'a> {
    id: &'static str,
    status: Status,
    summary: &'a str,
    remediation: Option<&'a str>,
}

/// The contract's object: `{"ok", "rootCause", "checks": [{id, status, summary, remediation}]}`,
/// every id in order; `remediation` is null when there is nothing to do.
pub fn json(report: &Report) -> String {
    let body = JsonReport {
        ok: report.ok(),
        root_cause: report.root_cause().map(|(id, _)| id.as_str()),
        checks: report
            .checks
            .iter()
            .map(|(id, o)| JsonCheck {
                id: id.as_str(),
                status: o.status,
                summary: &o.summary,
                remediation: o.remediation.as_deref(),
            })
            .collect(),
    };
    let mut s = serde_json::to_string_pretty(&body).expect("plain data serializes");
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Outcome;

    fn report() -> Report {
        let mut checks: Vec<_> = CheckId::ALL
            .iter()
            .map(|id| (*id, Outcome::skip("skipped: needs authentication to pass")))
            .collect();
        for c in &mut checks[..5] {
            c.1 = Outcome::pass("fine");
        }
        checks[5].1 = Outcome::fail(
            "bootstrap token 07401b is expired or deleted (401)",
            "kubeadm token create --print-join-command",
        );
        Report { checks }
    }

    #[test]
    fn text_aligns_marks_fixes_and_names_the_root_cause() {
        let t = text(&report(), false);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "✓ config                fine");
        assert_eq!(
            lines[5],
            "✗ authentication        bootstrap token 07401b is expired or deleted (401)"
        );
        assert_eq!(
            lines[6],
            "                        fix: kubeadm token create --print-join-command"
        );
        assert_eq!(
            lines[7],
            "- authorization         skipped: needs authentication to pass"
        );
        assert!(t.ends_with(
            "\n✗ authentication is the root cause: bootstrap token 07401b is expired or deleted (401)\n"
        ));
        assert!(!t.contains('\x1b'));
        assert!(text(&report(), true).contains("\x1b[31m✗\x1b[0m"));
    }

    #[test]
    fn json_has_every_id_in_order_and_the_root_cause() {
        let v: serde_json::Value = serde_json::from_str(&json(&report())).unwrap();
        assert_eq!(v["ok"], false);
        assert_eq!(v["rootCause"], "authentication");
        let checks = v["checks"].as_array().unwrap();
        assert_eq!(checks.len(), 12);
        assert_eq!(checks[5]["status"], "fail");
        assert_eq!(
            checks[5]["remediation"],
            "kubeadm token create --print-join-command"
        );
        assert_eq!(checks[10]["id"], "lease");
        assert_eq!(checks[10]["status"], "skip");
        assert!(checks[0]["remediation"].is_null());
    }
}
