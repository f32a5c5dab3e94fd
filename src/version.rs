//! What `bootlet version` and `bootlet --version` print. `--version` is one line with the
//! version, the git commit and the build date; `bootlet version` adds a second line with the
//! Kubernetes versions this build supports and the release it was tested against
//! ([`KUBERNETES`]). build.rs sets the commit and date (`unknown` commit outside git; the
//! date is `$SOURCE_DATE_EPOCH` when set, so a package build is reproducible).

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

/// The Kubernetes minors bootlet supports and the release it was tested against.
///
/// **Supported: 1.33 to 1.37.** The newest is the release the test suite runs for real
/// (`testplane/kube/go.mod`'s `k8s.io/kubernetes`, built from source by `bootlet-testplane
/// kube-build`). The oldest is the oldest minor managed providers still run under their
/// extended or long-term support (about 26 months from a minor's release, against upstream's
/// 14 months for the three newest minors): 1.33 reaches the end of that in mid-2027. The API
/// types are compiled for it too (the `v1_33` feature of k8s-openapi), so bootlet sends no
/// field an older server of the range would not know.
///
/// What bootlet needs from the API server, all GA long before 1.33:
/// - `certificates.k8s.io/v1` CertificateSigningRequests (GA in 1.19), with the
///   `kube-apiserver-client-kubelet` and `kubelet-serving` signers;
/// - `coordination.k8s.io/v1` Leases in `kube-node-lease` (GA in 1.14);
/// - `authentication.k8s.io/v1` SelfSubjectReview (GA in 1.28), to ask the server whether
///   it accepts a certificate signed by another CA than the kubeconfig's; a server without
///   it (404) is asked a SelfSubjectAccessReview instead (`identity::issue::proof`);
/// - `application/vnd.kubernetes.protobuf` for the Lease, as the kubelet sends it; a server
///   that refuses protobuf gets JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kubernetes {
    /// The oldest supported minor of Kubernetes 1.x.
    pub oldest: u32,
    /// The newest supported minor: the tested release's.
    pub newest: u32,
    /// The release the suite runs against, as go.mod spells it.
    pub tested: &'static str,
    /// The release of the oldest minor the suite runs its core set against
    /// (testplane/kube-oldest/go.mod).
    pub tested_oldest: &'static str,
}

/// This build's supported range: see [`Kubernetes`].
pub const KUBERNETES: Kubernetes = Kubernetes {
    oldest: 33,
    newest: 37,
    tested: "v1.37.2",
    tested_oldest: "v1.33.13",
};
const _: () = assert!(KUBERNETES.oldest <= KUBERNETES.newest, "an empty range");

/// The `--version` line: `bootlet 0.1.0 (commit 0123456789ab, built 2026-12-01T19:30:00Z)`.
pub fn line() -> String {
    format!("bootlet {LONG}")
}

/// What `bootlet version` prints: the [`line()`], then
/// `Kubernetes 1.33 to 1.37 (tested against v1.33.13 and v1.37.2)`.
pub fn lines() -> String {
    let Kubernetes {
        oldest,
        newest,
        tested,
        tested_oldest,
    } = KUBERNETES;
    format!(
        "{}\nKubernetes 1.{oldest} to 1.{newest} (tested against {tested_oldest} and {tested})",
        line()
    )
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

    /// A module's `k8s.io/kubernetes` requirement (`v1.MINOR.PATCH`) and its minor.
    fn pinned(module: &str) -> (String, u32) {
        let go_mod = format!("{}/testplane/{module}/go.mod", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&go_mod).expect(&go_mod);
        let release = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("k8s.io/kubernetes "))
            .unwrap_or_else(|| panic!("no k8s.io/kubernetes requirement in {go_mod}"))
            .trim()
            .to_string();
        let minor = release
            .strip_prefix("v1.")
            .and_then(|r| r.split('.').next())
            .and_then(|m| m.parse().ok())
            .unwrap_or_else(|| panic!("{go_mod}: {release} is not v1.MINOR.PATCH"));
        (release, minor)
    }

    /// The tested release is the one the suite builds: testplane/kube/go.mod's
    /// `k8s.io/kubernetes` requirement. Bumping one without the other fails here.
    #[test]
    fn the_tested_release_is_the_one_the_suite_builds() {
        let (release, minor) = pinned("kube");
        assert_eq!(release, KUBERNETES.tested, "testplane/kube/go.mod");
        assert_eq!(
            minor, KUBERNETES.newest,
            "the newest supported is the tested"
        );
    }

    /// The other end is tested too: testplane/kube-oldest/go.mod pins a release of the
    /// oldest supported minor, which tests/kube/oldest.rs runs the core set against.
    /// Raising the floor here without moving that module (or the reverse) fails here.
    #[test]
    fn the_oldest_supported_minor_is_the_one_the_suite_builds_too() {
        let (release, minor) = pinned("kube-oldest");
        assert_eq!(
            minor, KUBERNETES.oldest,
            "testplane/kube-oldest/go.mod pins {release}"
        );
        assert_eq!(
            release, KUBERNETES.tested_oldest,
            "testplane/kube-oldest/go.mod"
        );
    }

    /// The API types are compiled for the oldest supported minor (k8s-openapi's feature in
    /// the workspace's Cargo.toml), so raising the floor there means raising it here.
    #[test]
    fn the_api_types_are_those_of_the_oldest_minor() {
        let manifest = include_str!("../Cargo.toml");
        let line = manifest
            .lines()
            .find(|l| l.starts_with("k8s-openapi "))
            .expect("k8s-openapi in Cargo.toml");
        let want = format!("\"v1_{}\"", KUBERNETES.oldest);
        assert!(line.contains(&want), "{line} lacks {want}");
    }

    /// One release, said alike everywhere: Cargo.toml's version (the binary's, the .deb's and
    /// the RPM's) is CHANGELOG.md's latest release and packaging/debian/changelog's top
    /// entry, on the same day; the RPM's release is the Debian revision.
    #[test]
    fn the_changelogs_and_the_packages_agree_on_the_release() {
        let changelog = include_str!("../CHANGELOG.md");
        let mut releases = changelog
            .lines()
            .filter_map(|l| l.strip_prefix("## ["))
            .map(|l| l.split_once(']').expect("## [VERSION] - DATE"));
        assert_eq!(
            releases.next(),
            Some(("Unreleased", "")),
            "Keep a Changelog: [Unreleased] comes first"
        );
        let (latest, date) = releases.next().expect("a release in CHANGELOG.md");
        assert_eq!(latest, VERSION, "CHANGELOG.md's latest release");
        let date: jiff::civil::Date = date
            .strip_prefix(" - ")
            .and_then(|d| d.parse().ok())
            .unwrap_or_else(|| panic!("## [{latest}]{date}: not ` - YYYY-MM-DD`"));

        let debian = include_str!("../packaging/debian/changelog");
        let top = debian.lines().next().unwrap_or_default();
        let (upstream, revision) = top
            .strip_prefix("bootlet (")
            .and_then(|t| t.split_once(')'))
            .and_then(|(v, _)| v.rsplit_once('-'))
            .unwrap_or_else(|| panic!("{top:?} is not `bootlet (VERSION-REVISION) ...`"));
        assert_eq!(upstream, VERSION, "packaging/debian/changelog: {top}");
        let signed = debian
            .lines()
            .find_map(|l| l.strip_prefix(" -- "))
            .and_then(|l| l.split_once(">  "))
            .map(|(_, when)| when)
            .expect("the top entry's trailer line");
        let signed = jiff::fmt::rfc2822::parse(signed).expect(signed);
        assert_eq!(
            signed.date(),
            date,
            "the two changelogs' dates of {VERSION}"
        );

        let manifest = include_str!("../Cargo.toml");
        let rpm = manifest
            .split_once("[package.metadata.generate-rpm]")
            .expect("the RPM's metadata in Cargo.toml")
            .1;
        let release = rpm
            .lines()
            .find_map(|l| l.strip_prefix("release = "))
            .expect("release = in [package.metadata.generate-rpm]");
        assert_eq!(release.trim_matches('"'), revision, "RPM release vs .deb");
    }

    #[test]
    fn version_prints_the_kubernetes_range_on_its_second_line() {
        let out = lines();
        let mut it = out.lines();
        assert_eq!(it.next(), Some(line().as_str()));
        assert_eq!(
            it.next(),
            Some("Kubernetes 1.33 to 1.37 (tested against v1.33.13 and v1.37.2)")
        );
        assert_eq!(it.next(), None);
    }
}
