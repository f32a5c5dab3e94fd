//! The doctor reference (docs/troubleshooting.md's generated part): every row of
//! [`CHECKS`] in the order doctor runs them — its id and title, what it needs to pass
//! first and what it observes. tests/local/docs.rs compares it with the file.

use crate::checkid::CHECKS;

/// The generated markdown: one section per check.
pub fn markdown() -> String {
    let mut out = String::new();
    for (n, check) in CHECKS.iter().enumerate() {
        let needs = match check.depends_on {
            [] => "Runs first.".to_string(),
            deps => format!(
                "Runs after {}; skipped when that failed.",
                deps.iter()
                    .map(|d| format!("`{d}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        out.push_str(&format!(
            "### {}. `{}`: {}\n\n{needs}\n\n{}\n\n",
            n + 1,
            check.name,
            check.title,
            check.observes
        ));
    }
    out.truncate(out.trim_end().len());
    out.push('\n');
    out
}
