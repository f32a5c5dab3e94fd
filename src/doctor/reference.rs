//! The doctor reference (docs/troubleshooting.md's generated part): every check from
//! [`CheckId::ALL`] in the order doctor runs them, with what it needs to pass first and
//! what it observes ([`CheckId::observes`]). tests/docs.rs compares it with the file.

use super::CheckId;

/// The generated markdown: one section per check.
pub fn markdown() -> String {
    let mut out = String::new();
    for (n, id) in CheckId::ALL.iter().enumerate() {
        let needs = match id.depends_on() {
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
            "### {}. `{id}`\n\n{needs}\n\n{}\n\n",
            n + 1,
            id.observes()
        ));
    }
    out.truncate(out.trim_end().len());
    out.push('\n');
    out
}
