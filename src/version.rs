//! What `bootlet version` and `bootlet --version` print: one line with the version, the git
//! commit and the build date. build.rs sets the last two (`unknown` commit outside git;
//! the date is `$SOURCE_DATE_EPOCH` when set, so a package build is reproducible).

/// The crate version, `0.1.0`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// `git rev-parse --short=12 HEAD` at build time, or `unknown`.
pub const GIT_COMMIT: &str = env!("BOOTLET_GIT_COMMIT");
/// UTC, RFC 3339 to the second: `2026-12-01T19:30:00Z`.
pub const BUILD_DATE: &str = env!("BOOTLET_BUILD_DATE");

/// What follows the program name: `0.1.0 (commit 0123456789ab, built 2026-12-01T19:30:00Z)`.
/// clap prints `bootlet ` before it for `--version`; `bootlet version` prints [`line()`].
pub const LONG: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("BOOTLET_GIT_COMMIT"),
    ", built ",
    env!("BOOTLET_BUILD_DATE"),
    ")"
);

/// The one line both spellings print.
pub fn line() -> String {
    format!("bootlet {LONG}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_version_commit_and_date() {
        let line = line();
        assert!(
            line.starts_with(&format!("bootlet {VERSION} (commit ")),
            "{line}"
        );
        assert!(!GIT_COMMIT.is_empty() && !GIT_COMMIT.contains(char::is_whitespace));
        // RFC 3339, UTC, to the second: it parses, and says Z.
        let at: jiff::Timestamp = BUILD_DATE.parse().expect(BUILD_DATE);
        assert!(
            BUILD_DATE.ends_with('Z') && BUILD_DATE.len() == 20,
            "{BUILD_DATE}"
        );
        assert!(at.as_second() > 1_700_000_000, "{BUILD_DATE}");
        assert!(line.ends_with(&format!("built {BUILD_DATE})")), "{line}");
    }
}
