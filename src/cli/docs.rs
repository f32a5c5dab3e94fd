//! The man pages and shell completions, generated from the clap definition in cli.rs so
//! that they never drift from `--help` (`bootlet generate man|completions DIR`, hidden;
//! packaging/deb.sh runs it with the binary it packages).
//!
//! - `bootlet.1`: the synopsis, every visible flag with its default, the subcommands, and
//!   the sections `--help` has no room for (exit status, environment, files, see also);
//!   `bootlet-run.1`, `bootlet-doctor.1`, `bootlet-version.1`: one per subcommand.
//! - Completions: `bootlet.bash`, `_bootlet` (zsh), `bootlet.fish`.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use clap::ValueEnum;
use clap_complete::Shell;
use clap_mangen::roff::{roman, Roff};
use clap_mangen::Man;

use crate::{defaults, version};

/// What `bootlet generate` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Generated {
    /// bootlet.1 and one page per subcommand (roff, uncompressed)
    Man,
    /// bash, zsh and fish completion scripts
    Completions,
}

/// Writes `what` into `dir` (which must exist); the files written, in order.
pub fn generate(what: Generated, dir: &Path) -> io::Result<Vec<PathBuf>> {
    match what {
        Generated::Man => man_pages(dir),
        Generated::Completions => completions(dir),
    }
}

fn man_pages(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut root = super::command().disable_help_subcommand(true);
    root.build();
    let mut written = vec![write(dir, &page(root.clone()), |w, man| {
        man.render_title(w)?;
        man.render_name_section(w)?;
        man.render_synopsis_section(w)?;
        man.render_description_section(w)?;
        w.write_all(description().as_bytes())?;
        man.render_options_section(w)?;
        man.render_subcommands_section(w)?;
        w.write_all(reference().as_bytes())?;
        man.render_version_section(w)
    })?];
    for sub in root.get_subcommands().filter(|s| !s.is_hide_set()) {
        // `bootlet-run(1)`: the page's name is the command line, joined by a dash.
        let name = format!("bootlet-{}", sub.get_name());
        let sub = sub.clone().display_name(name);
        written.push(write(dir, &page(sub), |w, man| man.render(w))?);
    }
    Ok(written)
}

/// The page's header: section 1, dated by the build (reproducible), the version as source.
fn page(cmd: clap::Command) -> Man {
    Man::new(cmd)
        .date(&version::BUILD_DATE[..10])
        .source(format!("bootlet {}", version::VERSION))
        .manual("bootlet manual")
}

fn write(
    dir: &Path,
    man: &Man,
    render: impl FnOnce(&mut dyn Write, &Man) -> io::Result<()>,
) -> io::Result<PathBuf> {
    let path = dir.join(man.get_filename());
    let mut out = Vec::new();
    render(&mut out, man)?;
    std::fs::write(&path, out)?;
    Ok(path)
}

/// More of DESCRIPTION than `--help`'s one line.
fn description() -> String {
    let mut r = Roff::default();
    r.control("PP", []);
    r.text([roman(
        "bootlet gives a Kubernetes worker node its identity and keeps it alive. It files a \
         CertificateSigningRequest (signer kubernetes.io/kube-apiserver-client-kubelet, CN \
         system:node:NAME, O system:nodes) with the bootstrap kubeconfig's token, waits for its \
         approval, writes the key and certificate into the cert dir in the kubelet's own layout \
         and the kubeconfig the kubelet uses, renews the node Lease in kube-node-lease, and \
         rotates the client certificate at 75% (plus or minus 5%) of its lifetime. It runs as \
         the systemd service bootlet.service (Type=notify): READY=1 once a valid client \
         certificate and the kubeconfig are on disk, or as soon as issuing them waits on \
         something outside bootlet (no bootstrap kubeconfig yet, an approval, an API server \
         that does not answer), so the boot never waits for a person; the kubelet's \
         ExecStartPre=bootlet check-identity keeps it from starting without an identity.",
    )]);
    r.control("PP", []);
    r.text([roman(
        "bootlet doctor walks the join chain in order (configuration, bootstrap kubeconfig, \
         reachability, CA trust, clock skew, authentication, authorization, CSR, client \
         certificate, Node, Lease) and names the root cause of a failed join with the command \
         that fixes it.",
    )]);
    r.control("PP", []);
    r.text([roman(
        "Flags override the keys of the config file (--config). Every setting has a key there: \
         the flag's name in camelCase, except nodeIP, tlsSAN, serverTLSBootstrap and verbosity \
         (-v).",
    )]);
    r.render()
}

/// EXIT STATUS, ENVIRONMENT, FILES and SEE ALSO (the contract's exit codes and files).
fn reference() -> String {
    let mut r = Roff::default();
    let item = |r: &mut Roff, tag: &str, text: &str| {
        r.control("TP", []);
        r.text([roman(tag)]);
        r.text([roman(text)]);
    };
    r.control("SH", ["EXIT STATUS"]);
    item(&mut r, "run", "0 after SIGTERM or SIGINT; 1 with one line naming the file and the reason when it cannot start (no usable client certificate and no readable bootstrap kubeconfig, a config file that does not parse; under systemd a bootstrap kubeconfig that is not there yet is waited for instead); 2 for an unknown flag.");
    item(
        &mut r,
        "doctor",
        "0 when every check passes, 1 when a check fails, 2 when it could not run.",
    );
    r.control("SH", ["ENVIRONMENT"]);
    item(
        &mut r,
        "RUST_LOG",
        "Log filter; overrides -v and the config's verbosity.",
    );
    item(
        &mut r,
        "NOTIFY_SOCKET, WATCHDOG_USEC",
        "Set by systemd: READY, STATUS, WATCHDOG and STOPPING go there.",
    );
    item(
        &mut r,
        "HTTPS_PROXY, NO_PROXY",
        "Proxy for the API server, as in client-go.",
    );
    r.control("SH", ["FILES"]);
    let files = [
        ("/etc/bootlet/config.yaml", "The config file bootlet.service passes with --config.".to_string()),
        (defaults::DEFAULT_BOOTSTRAP_KUBECONFIG, "The bootstrap kubeconfig: token, CA and server, used when no valid client certificate exists.".to_string()),
        (defaults::DEFAULT_KUBECONFIG, "The kubeconfig bootlet writes (0600), naming kubelet-client-current.pem.".to_string()),
        (defaults::DEFAULT_CERT_DIR, "The cert dir (0700): kubelet-client-DATE.pem (chain, then key; 0600) and the kubelet-client-current.pem symlink; kubelet-server-* likewise with the serving certificate.".to_string()),
        ("/usr/share/bootlet/kubelet.service.d/", "The kubelet drop-ins, not active until linked into /etc/systemd/system/kubelet.service.d/.".to_string()),
    ];
    for (path, text) in files {
        item(&mut r, path, &text);
    }
    r.control("SH", ["SEE ALSO"]);
    r.text([roman(
        "kubelet(8), systemctl(1), journalctl(1), kubectl(1); the README in /usr/share/doc/bootlet/.",
    )]);
    r.render()
}

fn completions(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut root = super::command();
    root.build();
    let mut cmd = visible(&root);
    [Shell::Bash, Shell::Zsh, Shell::Fish]
        .into_iter()
        .map(|shell| clap_complete::generate_to(shell, &mut cmd, "bootlet", dir))
        .collect()
}

/// `cmd` without its hidden flags and subcommands (the test-only flags, `generate`): the
/// completion generators, unlike clap_mangen, list everything. `cmd` is built, so its help
/// and version flags are among the arguments copied.
fn visible(cmd: &clap::Command) -> clap::Command {
    let mut out = clap::Command::new(cmd.get_name().to_string())
        .disable_help_flag(true)
        .disable_version_flag(true)
        .args(cmd.get_arguments().filter(|a| !a.is_hide_set()).cloned());
    if let Some(about) = cmd.get_about() {
        out = out.about(about.clone());
    }
    if let Some(version) = cmd.get_version() {
        out = out.version(version.to_string());
    }
    out.subcommands(
        cmd.get_subcommands()
            .filter(|s| !s.is_hide_set() && s.get_name() != "help")
            .map(visible),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every flag `--help` shows is on the page that documents it, with its default.
    #[test]
    fn the_man_pages_carry_every_visible_flag_of_help() {
        let dir = tempfile::tempdir().unwrap();
        let pages = generate(Generated::Man, dir.path()).unwrap();
        let names: Vec<_> = pages
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "bootlet.1",
                "bootlet-run.1",
                "bootlet-doctor.1",
                "bootlet-check-identity.1",
                "bootlet-rejoin.1",
                "bootlet-approve.1",
                "bootlet-version.1"
            ]
        );
        let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
        let root = read("bootlet.1");
        // roff escapes '-' as '\-'.
        let unescape = |s: &str| s.replace("\\-", "-");
        for (page, cmd) in [
            ("bootlet.1", super::super::command()),
            (
                "bootlet-doctor.1",
                super::super::command()
                    .find_subcommand("doctor")
                    .unwrap()
                    .clone(),
            ),
            (
                "bootlet-rejoin.1",
                super::super::command()
                    .find_subcommand("rejoin")
                    .unwrap()
                    .clone(),
            ),
        ] {
            let text = unescape(&read(page));
            for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
                let Some(long) = arg.get_long() else { continue };
                assert!(text.contains(&format!("--{long}")), "{page} lacks --{long}");
            }
        }
        let root = unescape(&root);
        for want in [
            ".TH bootlet 1",
            "--cert-dir",
            "/var/lib/kubelet/pki",
            "EXIT STATUS",
            "FILES",
            "/etc/bootlet/config.yaml",
            "bootlet-doctor(1)",
        ] {
            assert!(root.contains(want), "bootlet.1 lacks {want:?}:\n{root}");
        }
        assert!(
            !root.contains("test-crash-at"),
            "a hidden flag is documented"
        );
    }

    #[test]
    fn completions_for_three_shells_know_the_subcommands() {
        let dir = tempfile::tempdir().unwrap();
        let files = generate(Generated::Completions, dir.path()).unwrap();
        assert_eq!(files.len(), 3);
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            for want in ["doctor", "rotate-certificates", "bootstrap-kubeconfig"] {
                assert!(text.contains(want), "{} lacks {want}", f.display());
            }
            for hidden in ["generate", "test-crash-at"] {
                assert!(!text.contains(hidden), "{} completes {hidden}", f.display());
            }
        }
    }
}
