//! The generated parts of docs/: each is regenerated from the code it documents and must
//! equal what the file holds between its markers, so the docs cannot drift from the code.
//! `UPDATE_DOCS=1 cargo test --test local docs::` rewrites them.

use std::path::Path;

/// Compares the part of `file` between the `name` markers with `body`; rewrites it when
/// `UPDATE_DOCS` is set.
fn generated(file: &str, name: &str, body: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
    let begin =
        format!("<!-- BEGIN GENERATED {name}: UPDATE_DOCS=1 cargo test --test local docs:: -->\n");
    let end = format!("<!-- END GENERATED {name} -->");
    let start = text
        .find(&begin)
        .unwrap_or_else(|| panic!("{file} lacks the line {begin:?}"))
        + begin.len();
    let stop = start
        + text[start..]
            .find(&end)
            .unwrap_or_else(|| panic!("{file} lacks the line {end:?}"));
    if &text[start..stop] == body {
        return;
    }
    if std::env::var_os("UPDATE_DOCS").is_some() {
        let updated = format!("{}{body}{}", &text[..start], &text[stop..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    panic!(
        "{file}: the generated part {name} differs from the code; rerun with UPDATE_DOCS=1 \
         if the change is intended\n--- in the file\n{}\n--- from the code\n{body}",
        &text[start..stop]
    );
}

#[test]
fn configuration_reference_matches_the_flags_and_the_reload_table() {
    let rows = bootlet::config::reference::rows();
    // Every setting is reachable by a flag: the reference leaves none out.
    for (field, key, _) in bootlet::config::reload::TABLE {
        assert!(
            rows.iter().any(|r| r.key == Some(*key)),
            "setting {field} ({key}) has no flag in the reference"
        );
    }
    assert!(rows
        .iter()
        .any(|r| r.flag == "--config FILE" && r.key.is_none()));
    generated(
        "docs/configuration.md",
        "flags",
        &bootlet::config::reference::markdown(),
    );
    generated(
        "docs/configuration.md",
        "subcommand-flags",
        &bootlet::config::reference::subcommand_markdown(),
    );
}

#[test]
fn doctor_reference_matches_the_checks() {
    let text = bootlet::doctor::reference::markdown();
    for id in bootlet::doctor::CheckId::ALL {
        assert!(text.contains(&format!("`{id}`")), "{id} missing");
    }
    generated("docs/troubleshooting.md", "checks", &text);
}

#[test]
fn metrics_reference_matches_the_registry() {
    let text = bootlet::metrics::reference::markdown();
    // Both certificates' kubelet names and a labelled family with its labels.
    for expected in [
        "`kubelet_certificate_manager_client_ttl_seconds` | gauge",
        "`kubelet_certificate_manager_server_ttl_seconds` | gauge",
        "`bootlet_rotations_total` | counter | `profile`, `result`",
        "`bootlet_lease_renewals_total` | counter | `result`",
    ] {
        assert!(text.contains(expected), "{expected} missing from\n{text}");
    }
    generated("docs/metrics.md", "metrics", &text);
}
