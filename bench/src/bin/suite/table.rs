//! The one table `bench/run.sh` prints: a row per figure, its budget, bootlet's value, the
//! hand-written baseline's, the bare stack's (floor), the ratio and PASS/FAIL where a budget
//! applies. Rendering and budget checks only; the figures come from `main`.

use bootlet_bench::table::{verdict, Align, Markdown};

/// A budget a figure is held to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Budget {
    /// Reported only.
    None,
    AtMost(f64),
    AtLeast(f64),
}

impl Budget {
    /// PASS/FAIL for `value`; "—" without a budget, FAIL when the figure is missing.
    fn verdict(self, value: Option<f64>) -> &'static str {
        match (self, value) {
            (Budget::None, _) => "—",
            (_, None) => "FAIL (no figure)",
            (Budget::AtMost(b), Some(v)) => verdict(v <= b),
            (Budget::AtLeast(b), Some(v)) => verdict(v >= b),
        }
    }
}

pub struct Row {
    pub what: String,
    pub budget_text: String,
    pub budget: Budget,
    /// The value the budget is checked against.
    pub checked: Option<f64>,
    pub bootlet: String,
    pub baseline: String,
    pub floor: String,
    pub ratio: String,
}

impl Row {
    pub fn new(what: impl Into<String>) -> Row {
        Row {
            what: what.into(),
            budget_text: "—".into(),
            budget: Budget::None,
            checked: None,
            bootlet: String::new(),
            baseline: String::new(),
            floor: String::new(),
            ratio: String::new(),
        }
    }

    pub fn budget(mut self, text: &str, budget: Budget, checked: Option<f64>) -> Row {
        self.budget_text = text.into();
        self.budget = budget;
        self.checked = checked;
        self
    }

    pub fn bootlet(mut self, s: impl Into<String>) -> Row {
        self.bootlet = s.into();
        self
    }

    pub fn baseline(mut self, s: impl Into<String>) -> Row {
        self.baseline = s.into();
        self
    }

    pub fn floor(mut self, s: impl Into<String>) -> Row {
        self.floor = s.into();
        self
    }

    pub fn ratio(mut self, s: impl Into<String>) -> Row {
        self.ratio = s.into();
        self
    }
}

/// The table as markdown, and how many budgeted rows failed.
pub fn render(rows: &[Row]) -> (String, usize) {
    let mut out = Markdown::new(
        [
            "what",
            "budget",
            "bootlet",
            "baseline (bash + openssl + kubectl)",
            "floor (bare HTTP/2 PUT)",
            "ratio",
            "pass",
        ]
        .map(|c| (c, Align::Left)),
    );
    let mut failed = 0;
    for r in rows {
        let verdict = r.budget.verdict(r.checked);
        failed += usize::from(verdict.starts_with("FAIL"));
        out.row([
            r.what.as_str(),
            &r.budget_text,
            &r.bootlet,
            &r.baseline,
            &r.floor,
            &r.ratio,
            verdict,
        ]);
    }
    (out.finish(), failed)
}

/// `a ÷ b` as "N×" (no decimals from 100 up), or "—" when either is missing or b is 0.
pub fn times(a: Option<f64>, b: Option<f64>) -> (Option<f64>, String) {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => {
            let r = a / b;
            let text = if r >= 100.0 {
                format!("{r:.0}×")
            } else {
                format!("{r:.2}×")
            };
            (Some(r), text)
        }
        _ => (None, "—".into()),
    }
}

/// An optional figure with `unit`, or "n/a".
pub fn fmt(v: Option<f64>, decimals: usize, unit: &str) -> String {
    v.map_or_else(|| "n/a".into(), |v| format!("{v:.decimals$}{unit}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_per_budget_and_a_missing_figure_fails() {
        let rows = [
            Row::new("cpu").budget("≤ 0.5 ms", Budget::AtMost(0.5), Some(0.47)),
            Row::new("ratio").budget("≥ 100×", Budget::AtLeast(100.0), Some(99.0)),
            Row::new("gone").budget("≤ 1", Budget::AtMost(1.0), None),
            Row::new("size").bootlet("a|b"),
        ];
        let (text, failed) = render(&rows);
        assert_eq!(failed, 2);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 6);
        assert!(lines[2].starts_with("| cpu | ≤ 0.5 ms |") && lines[2].ends_with("| PASS |"));
        assert!(lines[3].ends_with("| FAIL |"));
        assert!(lines[4].ends_with("| FAIL (no figure) |"));
        assert!(lines[5].contains("| a\\|b |") && lines[5].ends_with("| — |"));
    }

    #[test]
    fn ratios() {
        assert_eq!(times(Some(150.0), Some(0.5)).1, "300×");
        assert_eq!(times(Some(0.52), Some(0.4)).1, "1.30×");
        assert_eq!(times(Some(1.0), Some(0.0)), (None, "—".into()));
        assert_eq!(times(None, Some(1.0)).1, "—");
        assert_eq!(fmt(Some(1.234), 2, " ms"), "1.23 ms");
        assert_eq!(fmt(None, 2, " ms"), "n/a");
    }
}
