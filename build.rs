//! Build metadata for `bootlet version`: the git commit and the build date, as
//! `BOOTLET_GIT_COMMIT` and `BOOTLET_BUILD_DATE` (read with `env!` in src/version.rs).
//!
//! - Commit: `$BOOTLET_GIT_COMMIT` when set (a build from a source tarball), else
//!   `git rev-parse --short=12 HEAD`, else `unknown`.
//! - Date: `$SOURCE_DATE_EPOCH` when set (reproducible builds: packaging/deb.sh sets it to
//!   the commit's time, so two builds of one commit are the same bytes), else now. UTC,
//!   RFC 3339 to the second.
//!
//! The script runs again when HEAD moves (a commit, a checkout) or either variable changes.

use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

fn main() {
    println!("cargo:rerun-if-env-changed=BOOTLET_GIT_COMMIT");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    let commit = std::env::var("BOOTLET_GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_string());
    watch_head();
    let epoch = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(s) => s
            .trim()
            .parse::<i64>()
            .unwrap_or_else(|_| panic!("SOURCE_DATE_EPOCH={s:?} is not whole seconds")),
        // The build's date, not the agent's clock.
        #[allow(clippy::disallowed_methods)]
        Err(_) => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64),
    };
    println!("cargo:rustc-env=BOOTLET_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=BOOTLET_BUILD_DATE={}", rfc3339(epoch));
}

/// One line of git's output, if git runs here and this is a work tree.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let line = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !line.is_empty()).then_some(line)
}

/// Reruns this script when HEAD, the branch it names or the packed refs change.
fn watch_head() {
    let mut files = vec!["HEAD".to_string(), "packed-refs".to_string()];
    files.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for f in files {
        if let Some(path) = git(&["rev-parse", "--git-path", &f]) {
            if Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
}

/// `YYYY-MM-DDTHH:MM:SSZ` for seconds since the epoch (proleptic Gregorian, UTC): the
/// days-to-civil conversion of Howard Hinnant's date algorithms.
fn rfc3339(epoch: i64) -> String {
    let (days, secs) = (epoch.div_euclid(86_400), epoch.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3_600,
        secs % 3_600 / 60,
        secs % 60
    )
}
