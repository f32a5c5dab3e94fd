//! The side-by-side tables: one row per figure, one column per subject, the ratio bootlet ÷
//! peer, and where the issue sets a budget on that ratio, the budget and PASS/FAIL.
//! `render` prints bootlet and the peer (the rotation's table); `render_all` adds the floor
//! and the baseline (`real bench`), empty where a figure does not apply to them.

use bootlet_bench::table::{verdict, Align, Markdown};

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

/// The subject columns, in order.
const COLUMNS: [&str; 5] = [
    "bootlet",
    "peer (kubelet code)",
    "floor",
    "baseline",
    "bootlet, HTTP/1.1",
];

#[derive(Debug, Clone)]
pub struct Row {
    pub what: String,
    pub unit: Unit,
    /// One value per column: bootlet, the peer, the floor, the baseline, bootlet over
    /// HTTP/1.1.
    pub values: [Option<f64>; 5],
    /// The most bootlet ÷ peer may be, and how the budget reads.
    pub budget: Option<(f64, &'static str)>,
}

impl Row {
    /// bootlet's and the peer's values (the floor's and the baseline's empty).
    pub fn new(
        what: impl Into<String>,
        unit: Unit,
        bootlet: Option<f64>,
        peer: Option<f64>,
    ) -> Row {
        Row::all(what, unit, [bootlet, peer, None, None, None])
    }

    /// Every subject's value: bootlet, the peer, the floor, the baseline.
    pub fn all(what: impl Into<String>, unit: Unit, values: [Option<f64>; 5]) -> Row {
        Row {
            what: what.into(),
            unit,
            values,
            budget: None,
        }
    }

    pub fn budget(mut self, most: f64, reads: &'static str) -> Row {
        self.budget = Some((most, reads));
        self
    }

    /// bootlet ÷ peer.
    pub fn ratio(&self) -> Option<f64> {
        match (self.values[0], self.values[1]) {
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

/// The rows as a Markdown table of bootlet and the peer.
pub fn render(rows: &[Row]) -> String {
    render_columns(rows, 2)
}

/// The rows as a Markdown table of all four subjects.
pub fn render_all(rows: &[Row]) -> String {
    render_columns(rows, COLUMNS.len())
}

fn render_columns(rows: &[Row], columns: usize) -> String {
    let header = std::iter::once(("what", Align::Left))
        .chain(COLUMNS[..columns].iter().map(|c| (*c, Align::Right)))
        .chain([
            ("bootlet ÷ peer", Align::Right),
            ("budget", Align::Left),
            ("pass", Align::Left),
        ]);
    let mut out = Markdown::new(header);
    for r in rows {
        let ratio = r.ratio();
        let (budget, pass) = match (r.budget, ratio) {
            (Some((most, reads)), Some(x)) => (reads.to_string(), verdict(x <= most)),
            (Some((_, reads)), None) => (reads.to_string(), "—"),
            (None, _) => ("—".to_string(), "—"),
        };
        let values = r.values[..columns].iter().map(|v| value(r.unit, *v));
        out.row(std::iter::once(r.what.clone()).chain(values).chain([
            ratio.map_or("—".into(), |x| format!("{x:.2}")),
            budget,
            pass.to_string(),
        ]));
    }
    out.finish()
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
            t.starts_with(
                "| what | bootlet | peer (kubelet code) | bootlet ÷ peer | budget | pass |\n\
                 |---|---:|---:|---:|---|---|\n"
            ),
            "{t}"
        );
        assert!(
            t.contains("| cpu | 1.000 ms | 4.000 ms | 0.25 | ≤ 1/3 | PASS |"),
            "{t}"
        );
        assert!(t.contains("| rss | 2.0 MiB | — | — | — | — |"), "{t}");
    }

    #[test]
    fn all_five_subjects_print_with_the_ratio_of_the_first_two() {
        let rows = [
            Row::all(
                "cpu",
                Unit::Ms,
                [Some(1e6), Some(4e6), Some(5e5), None, None],
            )
            .budget(1.0 / 3.0, "≤ 1/3"),
            Row::all(
                "rss",
                Unit::Mib,
                [Some(2048.0), None, None, Some(4096.0), None],
            ),
        ];
        let t = render_all(&rows);
        assert!(
            t.starts_with(
                "| what | bootlet | peer (kubelet code) | floor | baseline | bootlet, HTTP/1.1 | bootlet ÷ peer | budget | pass |\n\
                 |---|---:|---:|---:|---:|---:|---:|---|---|\n"
            ),
            "{t}"
        );
        assert!(
            t.contains("| cpu | 1.000 ms | 4.000 ms | 0.500 ms | — | — | 0.25 | ≤ 1/3 | PASS |"),
            "{t}"
        );
        assert!(
            t.contains("| rss | 2.0 MiB | — | — | 4.0 MiB | — | — | — |"),
            "{t}"
        );
    }
}
