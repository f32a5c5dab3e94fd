//! `bootlet doctor`: the join chain as an ordered list of checks (the contract's ids and
//! order), the runner that skips what depends on a failed check, and the exit code.
//! Observing is observe.rs, judging checks.rs, printing render.rs.

pub mod checks;
pub mod observe;
pub mod reference;
pub mod render;

use std::time::SystemTime;

pub use crate::checkid::CheckId;
use crate::cli::{Flags, OutputFormat};
use observe::Observations;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Warn,
    Fail,
    Skip,
}

/// One check's result: one sentence with the observed value, and for a failure (or a
/// warning worth acting on) the command that fixes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub status: Status,
    pub summary: String,
    pub remediation: Option<String>,
}

/// Every check's outcome, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub checks: Vec<(CheckId, Outcome)>,
}

// === impl Outcome ===

impl Outcome {
    pub fn pass(summary: impl Into<String>) -> Self {
        Self::new(Status::Pass, summary, None)
    }
    pub fn warn(summary: impl Into<String>, fix: Option<String>) -> Self {
        Self::new(Status::Warn, summary, fix)
    }
    pub fn fail(summary: impl Into<String>, fix: impl Into<String>) -> Self {
        Self::new(Status::Fail, summary, Some(fix.into()))
    }
    pub fn skip(summary: impl Into<String>) -> Self {
        Self::new(Status::Skip, summary, None)
    }
    fn new(status: Status, summary: impl Into<String>, remediation: Option<String>) -> Self {
        Self {
            status,
            summary: clean(&summary.into()),
            remediation: remediation.map(|r| clean(&r)),
        }
    }
}

// === impl Report ===

impl Report {
    /// The first failing check: the root cause.
    pub fn root_cause(&self) -> Option<(CheckId, &Outcome)> {
        self.checks
            .iter()
            .find(|(_, o)| o.status == Status::Fail)
            .map(|(id, o)| (*id, o))
    }

    pub fn ok(&self) -> bool {
        self.root_cause().is_none()
    }

    pub fn get(&self, id: CheckId) -> &Outcome {
        &self.checks[id as usize].1
    }

    /// The contract's exit code: 0 when nothing failed, 1 when a check failed.
    pub fn exit_code(&self) -> u8 {
        if self.ok() {
            0
        } else {
            1
        }
    }
}

/// Run every check in order over `obs` (pure): a check whose dependency failed or was
/// skipped is skipped, naming it.
pub fn evaluate(obs: &Observations, now: SystemTime) -> Report {
    let mut checks: Vec<(CheckId, Outcome)> = Vec::with_capacity(CheckId::ALL.len());
    for id in CheckId::ALL {
        let blocked = id
            .depends_on()
            .iter()
            .find(|dep| matches!(checks[**dep as usize].1.status, Status::Fail | Status::Skip));
        let outcome = match blocked {
            Some(dep) => Outcome::skip(format!("skipped: needs {dep} to pass")),
            None => checks::verdict(id, obs, now),
        };
        checks.push((id, outcome));
    }
    Report { checks }
}

/// `bootlet doctor`: observe, judge, print; returns the exit code.
pub async fn run(flags: &Flags, output: OutputFormat) -> u8 {
    let obs = observe::gather(flags).await;
    let report = evaluate(&obs, observe::now());
    let text = match output {
        OutputFormat::Json => render::json(&report),
        OutputFormat::Text => render::text(&report, render::color_wanted()),
    };
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    if out
        .write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .is_err()
    {
        return 2;
    }
    report.exit_code()
}

/// Server (and file) text is data: control characters become spaces before it reaches a
/// terminal, a log line or JSON.
pub fn clean(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_in_contract_order_and_index_the_report() {
        let ids: Vec<&str> = CheckId::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            ids,
            [
                "config",
                "bootstrap-kubeconfig",
                "server-reachable",
                "ca-trust",
                "clock-skew",
                "authentication",
                "authorization",
                "csr",
                "client-certificate",
                "node",
                "lease",
                "serving-csr"
            ]
        );
        for (i, id) in CheckId::ALL.iter().enumerate() {
            assert_eq!(*id as usize, i);
            assert!(
                id.depends_on().iter().all(|d| d < id),
                "{id} depends forward"
            );
        }
    }

    #[test]
    fn clean_strips_control_characters() {
        assert_eq!(clean("a\x1b[31mb\nc\td"), "a [31mb c d");
    }

    #[test]
    fn nothing_observed_fails_config_and_skips_the_rest() {
        let report = evaluate(&Observations::default(), crate::runtime::clock::now());
        assert_eq!(report.root_cause().map(|(id, _)| id), Some(CheckId::Config));
        assert_eq!(report.exit_code(), 1);
        for (id, o) in &report.checks[1..] {
            assert_eq!(o.status, Status::Skip, "{id}");
        }
    }
}
