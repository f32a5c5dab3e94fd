//! The side-by-side table: one row per figure, bootlet's and the peer's values, the ratio
//! bootlet ÷ peer, and where the issue sets a budget on that ratio, the budget and PASS/FAIL.

/// How a value prints.
#[derive(Debug, Clone, Copy)]
pub enum Unit {
    /// Nanoseconds, printed as milliseconds.
    Ms,
    /// KiB, printed as MiB.
    Mib,
    /// A plain number with this many decimals.
    Num(usize),
    /// Seconds.
    Secs,
}

#[derive(Debug, Clone)]
pub struct Row {
    pub what: String,
    pub unit: Unit,
    pub bootlet: Option<f64>,
    pub peer: Option<f64>,
    /// The most bootlet ÷ peer may be, and how the budget reads.
    pub budget: Option<(f64, &'static str)>,
}

impl Row {
    pub fn new(
        what: impl Into<String>,
        unit: Unit,
        bootlet: Option<f64>,
        peer: Option<f64>,
    ) -> Row {
        Row {
            what: what.into(),
            unit,
            bootlet,
            peer,
            budget: None,
        }
    }

    pub fn budget(mut self, most: f64, reads: &'static str) -> Row {
        self.budget = Some((most, reads));
        self
    }

    pub fn ratio(&self) -> Option<f64> {
        match (self.bootlet, self.peer) {
            (Some(b), Some(p)) if p > 0.0 => Some(b / p),
            (Some(b), Some(_)) => (b == 0.0).then_some(1.0),
            _ => None,
        }
    }
}

pub fn value(unit: Unit, v: Option<f64>) -> String {
    let Some(v) = v else {
        return "—".into();
    };
    match unit {
        Unit::Ms => format!("{:.3} ms", v / 1e6),
        Unit::Mib => format!("{:.1} MiB", v / 1024.0),
        Unit::Num(d) => format!("{v:.d$}"),
        Unit::Secs => format!("{v:.2} s"),
    }
}

/// The rows as a Markdown table.
pub fn render(rows: &[Row]) -> String {
    let mut out = String::from(
        "| what | bootlet | peer (kubelet code) | bootlet ÷ peer | budget | pass |\n\
         |---|---:|---:|---:|---|---|\n",
    );
    for r in rows {
        let ratio = r.ratio();
        let (budget, pass) = match (r.budget, ratio) {
            (Some((most, reads)), Some(x)) => {
                (reads.to_string(), if x <= most { "PASS" } else { "FAIL" })
            }
            (Some((_, reads)), None) => (reads.to_string(), "—"),
            (None, _) => ("—".to_string(), "—"),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {budget} | {pass} |\n",
            r.what,
            value(r.unit, r.bootlet),
            value(r.unit, r.peer),
            ratio.map_or("—".into(), |x| format!("{x:.2}")),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_prints_its_ratio_and_verdict() {
        let rows = [
            Row::new("cpu", Unit::Ms, Some(1e6), Some(4e6)).budget(1.0 / 3.0, "≤ 1/3"),
            Row::new("rss", Unit::Mib, Some(2048.0), None),
        ];
        let t = render(&rows);
        assert!(
            t.contains("| cpu | 1.000 ms | 4.000 ms | 0.25 | ≤ 1/3 | PASS |"),
            "{t}"
        );
        assert!(t.contains("| rss | 2.0 MiB | — | — | — | — |"), "{t}");
    }
}
