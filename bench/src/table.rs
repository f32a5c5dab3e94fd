//! How the drivers print: Markdown tables (a header, an alignment row, a row per figure)
//! and PASS/FAIL beside the criterion a figure is held to. Formatting only; which rows, and
//! what a budget is, belong to each driver.

/// PASS when a criterion holds, FAIL when not.
pub fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "FAIL"
    }
}

/// How a column's cells sit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// `---`
    Left,
    /// `---:`
    Right,
}

/// A Markdown table built row by row.
#[derive(Debug)]
pub struct Markdown {
    out: String,
}

impl Markdown {
    /// The header row (one cell per `(title, alignment)`) and the alignment row.
    pub fn new<S: AsRef<str>>(columns: impl IntoIterator<Item = (S, Align)>) -> Markdown {
        let (titles, aligns): (Vec<String>, Vec<&str>) = columns
            .into_iter()
            .map(|(t, a)| {
                let a = match a {
                    Align::Left => "---",
                    Align::Right => "---:",
                };
                (t.as_ref().to_string(), a)
            })
            .unzip();
        let mut table = Markdown { out: String::new() };
        table.row(titles);
        table.out.push('|');
        for a in aligns {
            table.out.push_str(a);
            table.out.push('|');
        }
        table.out.push('\n');
        table
    }

    /// One row: `| a | b |`, with any `|` inside a cell escaped.
    pub fn row<S: AsRef<str>>(&mut self, cells: impl IntoIterator<Item = S>) {
        for c in cells {
            self.out.push_str("| ");
            self.out.push_str(&c.as_ref().replace('|', "\\|"));
            self.out.push(' ');
        }
        self.out.push_str("|\n");
    }

    /// The table's text, each row ending in a newline.
    pub fn finish(self) -> String {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_alignment_and_escaped_cells() {
        let mut t = Markdown::new([("what", Align::Left), ("value", Align::Right)]);
        t.row(["a|b", "1"]);
        t.row([String::from("c"), String::new()]);
        assert_eq!(
            t.finish(),
            "| what | value |\n|---|---:|\n| a\\|b | 1 |\n| c |  |\n"
        );
    }

    #[test]
    fn verdicts() {
        assert_eq!(verdict(true), "PASS");
        assert_eq!(verdict(false), "FAIL");
    }
}
