//! The configuration reference (docs/configuration.md's generated part): every flag of
//! `bootlet run` from the clap definition in cli.rs, its config-file key (by [`flag_for_key`]) and what a
//! reload does with it from [`super::reload::TABLE`], its default from its help. Flags that are
//! test hooks (no file key, hidden) are left out. tests/local/docs.rs compares it with the file.

use super::flag_for_key;
use super::reload::{Reload, TABLE};

/// One row of the reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// `--cert-dir DIR`, or `-v, --verbose`.
    pub flag: String,
    /// The config-file key, `None` for `--config` itself.
    pub key: Option<&'static str>,
    pub default: String,
    /// What a SIGHUP does with a changed value; `None` for `--config`.
    pub reload: Option<Reload>,
    /// Hidden from `--help`.
    pub hidden: bool,
    /// The `--help` heading it is listed under, when not the default one (e.g. the
    /// advanced settings).
    pub heading: Option<String>,
    pub help: String,
}

/// The rows for `bootlet run`'s flags, in `--help`'s order.
pub fn rows() -> Vec<Row> {
    let cmd = crate::cli::command();
    let run = cmd
        .find_subcommand("run")
        .expect("cli.rs defines `run`")
        .clone();
    let mut rows = Vec::new();
    for arg in run.get_arguments() {
        let id = arg.get_id().as_str();
        let Some(long) = arg.get_long() else { continue };
        if id == "help" {
            continue;
        }
        // The key whose flag this is, by config.rs's own key-to-flag rule.
        let short = arg.get_short().map(|c| format!("-{c}"));
        let entry = TABLE.iter().find(|(_, key, _)| {
            let flag = flag_for_key(key);
            flag == format!("--{long}") || Some(&flag) == short.as_ref()
        });
        if entry.is_none() && id != "config" {
            // A test hook: a flag only, never a setting (cli.rs says so on each).
            continue;
        }
        let mut flag = String::new();
        if let Some(short) = arg.get_short() {
            flag.push_str(&format!("-{short}, "));
        }
        flag.push_str(&format!("--{long}"));
        if let Some(names) = arg.get_value_names() {
            if arg.get_action().takes_values() {
                flag.push_str(&format!(" {}", names.join(" ")));
            }
        }
        let text = arg.get_help().map(ToString::to_string).unwrap_or_default();
        let (help, default) = split_default(&text);
        rows.push(Row {
            flag,
            key: entry.map(|(_, key, _)| *key),
            default,
            reload: entry.map(|(_, _, r)| *r),
            hidden: arg.is_hide_set(),
            heading: arg.get_help_heading().map(str::to_string),
            help,
        });
    }
    rows
}

/// `help [default: X]` into (`help`, `X`).
fn split_default(text: &str) -> (String, String) {
    match text.rsplit_once(" [default: ") {
        Some((help, rest)) => (help.to_string(), rest.trim_end_matches(']').to_string()),
        None => (text.to_string(), "none".to_string()),
    }
}

/// The generated markdown.
pub fn markdown() -> String {
    let mut out = String::from(
        "| flag | config-file key | default | on reload (SIGHUP) | what it sets |\n|---|---|---|---|---|\n",
    );
    for row in rows() {
        let reload = match row.reload {
            None => "—",
            Some(Reload::Live) => "applied at once",
            Some(Reload::LeaseLoop) => "applied (the Lease loop restarts)",
            Some(Reload::Restart) => "restart needed (kept, logged)",
        };
        let hidden = match (&row.hidden, &row.heading) {
            (true, _) => " (not listed by `--help`)".to_string(),
            (false, Some(heading)) => format!(" (`--help`: {heading})"),
            (false, None) => String::new(),
        };
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {}{} |\n",
            row.flag,
            row.key.map_or("—".to_string(), |k| format!("`{k}`")),
            default_cell(&row.default),
            reload,
            cell(&row.help),
            hidden,
        ));
    }
    out
}

/// The flags the other subcommands add to `run`'s (all of `approve`'s), as markdown: one
/// table.
pub fn subcommand_markdown() -> String {
    let cmd = crate::cli::command();
    let run = cmd.find_subcommand("run").expect("cli.rs defines `run`");
    let shared: Vec<&str> = run.get_arguments().map(|a| a.get_id().as_str()).collect();
    let mut out =
        String::from("| subcommand | flag | default | what it sets |\n|---|---|---|---|\n");
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        // `approve` has flags of its own (some share a name with `run`'s, not a meaning):
        // all of them are listed. The others add to `run`'s.
        let own = !sub.get_arguments().any(|a| a.get_id() == "cert_dir");
        for arg in sub.get_arguments() {
            let id = arg.get_id().as_str();
            if (!own && shared.contains(&id)) || id == "help" || arg.is_hide_set() {
                continue;
            }
            let Some(long) = arg.get_long() else { continue };
            let value = arg
                .get_value_names()
                .filter(|_| arg.get_action().takes_values())
                .map(|n| format!(" {}", n.join(" ")))
                .unwrap_or_default();
            let short = arg
                .get_short()
                .map(|c| format!("-{c}, "))
                .unwrap_or_default();
            let text = arg.get_help().map(ToString::to_string).unwrap_or_default();
            let (help, default) = split_default(&text);
            out.push_str(&format!(
                "| `{}` | `{short}--{long}{value}` | {} | {} |\n",
                sub.get_name(),
                default_cell(&default),
                cell(&help)
            ));
        }
    }
    out
}

/// Markdown table cell text: no pipes, no line breaks, no HTML.
fn cell(s: &str) -> String {
    s.replace('|', "\\|")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('\n', " ")
}

/// A default as a value (`10s`) or, when it is a phrase ("the host name"), as text.
fn default_cell(s: &str) -> String {
    if s.contains(' ') || s == "none" {
        cell(s)
    } else {
        format!("`{s}`")
    }
}
