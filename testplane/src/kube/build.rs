//! Builds the real Kubernetes components from a Go module that requires `k8s.io/kubernetes`
//! at one pinned release, once: idempotent, cached (Go's own GOCACHE and GOMODCACHE, kept
//! between runs), rebuilt only when the binary is missing or older than the module's
//! sources. Two modules, one per end of the supported range ([`Module`]):
//! `testplane/kube` (the newest, every component) into `target/kube/kube`, and
//! `testplane/kube-oldest` (the oldest, the core set) into `target/kube-oldest/kube`. Each
//! is built under a file lock of its own output directory. Progress goes to stderr.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::KubeError;

/// Which pinned module: an end of the Kubernetes range bootlet supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Module {
    /// `testplane/kube`: the newest supported release, the one the suite runs everything
    /// against (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the hollow
    /// kubelet, the kubelet, kubeadm, kubectl, etcdutl).
    #[default]
    Newest,
    /// `testplane/kube-oldest`: the oldest supported minor, the core set only (etcd,
    /// kube-apiserver, kube-controller-manager, kubectl), for `tests/kube/oldest.rs`.
    Oldest,
}

impl Module {
    pub const ALL: [Module; 2] = [Module::Newest, Module::Oldest];

    /// The module's directory under `testplane/`, and its output directory under `target/`.
    pub fn name(self) -> &'static str {
        match self {
            Module::Newest => "kube",
            Module::Oldest => "kube-oldest",
        }
    }

    /// What the binary runs, for the progress line.
    fn components(self) -> &'static str {
        match self {
            Module::Newest => {
                "etcd, kube-apiserver, kube-controller-manager, kube-scheduler, hollow-node, \
                 kubectl, kubeadm, kubelet"
            }
            Module::Oldest => "etcd, kube-apiserver, kube-controller-manager, kubectl",
        }
    }

    /// The Go module's directory in this checkout.
    pub fn source_dir(self) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(self.name())
    }

    /// Where the binary goes: `$CARGO_TARGET_DIR/NAME/kube`, else the workspace's `target/`.
    pub fn output(self) -> PathBuf {
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace().join("target"));
        target.join(self.name()).join("kube")
    }

    /// The pinned release: the `k8s.io/kubernetes` requirement in go.mod (e.g. `v1.37.2`).
    pub fn release(self) -> Result<String, KubeError> {
        let gomod = self.source_dir().join("go.mod");
        let text = std::fs::read_to_string(&gomod).map_err(|source| KubeError::Io {
            path: gomod.display().to_string(),
            source,
        })?;
        text.lines()
            .map(str::trim)
            .filter_map(|l| l.strip_prefix("k8s.io/kubernetes "))
            .map(|v| v.trim().to_string())
            .next()
            .ok_or_else(|| {
                KubeError::Build(format!(
                    "{}: no k8s.io/kubernetes requirement",
                    gomod.display()
                ))
            })
    }

    /// The binary, built first if it is missing or older than go.mod, go.sum or a .go file.
    /// Concurrent callers (test binaries, the bench) wait for one build under a file lock.
    pub fn binary(self) -> Result<PathBuf, KubeError> {
        let out = self.output();
        let dir = out.parent().expect("output has a parent").to_path_buf();
        let io = |p: &Path| {
            let path = p.display().to_string();
            move |source| KubeError::Io { path, source }
        };
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let _lock = build_lock(&dir)?;
        let release = self.release()?;
        let go = which("go").ok_or_else(|| {
            KubeError::Build(
                "the Go toolchain (go ≥ 1.26) is not on PATH: the README's test command \
                 (`bash tests/run.sh`) installs it, or install Go and run it again"
                    .into(),
            )
        })?;
        let ldflags = ldflags(&release);
        // What the binary was built with: a change of flags or toolchain rebuilds it too.
        let go_version = std::process::Command::new(&go)
            .args(["env", "GOVERSION"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        let recipe = format!("{go_version}\n{ldflags}\n");
        let stamp = dir.join("kube.stamp");
        if self.fresh(&out)?
            && std::fs::read_to_string(&stamp).ok().as_deref() == Some(recipe.as_str())
        {
            return Ok(out);
        }
        eprintln!(
            "bootlet-testplane: building Kubernetes {release} ({}) into {}; the first build \
             takes 15-25 minutes on 2 cores, later ones seconds",
            self.components(),
            out.display()
        );
        let tmp = dir.join("kube.partial");
        let source = self.source_dir();
        let status = std::process::Command::new(go)
            .current_dir(&source)
            .args(["build", "-trimpath", "-ldflags", &ldflags, "-o"])
            .arg(&tmp)
            .arg(".")
            .env("GOFLAGS", "-mod=readonly")
            .status()
            .map_err(io(Path::new("go")))?;
        if !status.success() {
            return Err(KubeError::Build(format!(
                "go build in {} failed ({status}); see the lines above",
                source.display()
            )));
        }
        std::fs::rename(&tmp, &out).map_err(io(&out))?;
        std::fs::write(&stamp, recipe).map_err(io(&stamp))?;
        eprintln!("bootlet-testplane: built {}", out.display());
        Ok(out)
    }

    /// This release's kubectl as a program of its own: `kubectl` beside the binary, a
    /// symbolic link to it (the binary picks the component by the name it was run as), for
    /// callers that take one program path (the bench's shell baseline, tests).
    pub fn kubectl(self) -> Result<PathBuf, KubeError> {
        self.link("kubectl")
    }

    /// The component `name` (`kubectl`, `kubeadm`, `kubelet`, ...) as a program of its
    /// own: `NAME` beside the binary, a symbolic link to `kube`. kubeadm runs `kubelet
    /// --version` and systemd units run `/usr/bin/kubelet`: a link named so is that program.
    pub fn link(self, name: &str) -> Result<PathBuf, KubeError> {
        let kube = self.binary()?;
        link_in(kube.parent().expect("output has a parent"), name)
    }

    /// The binary exists and is newer than every source file of the module.
    fn fresh(self, out: &Path) -> Result<bool, KubeError> {
        let Ok(built) = std::fs::metadata(out).and_then(|m| m.modified()) else {
            return Ok(false);
        };
        Ok(newest_source(&self.source_dir())? <= built)
    }
}

/// `-ldflags`: stripped, with the release's version stamped where `--version` and the
/// API server's `/version` read it (as upstream's build stamps it).
fn ldflags(release: &str) -> String {
    let minor = release
        .trim_start_matches('v')
        .split('.')
        .nth(1)
        .unwrap_or("0")
        .to_string();
    format!(
        "-s -w -X k8s.io/component-base/version.gitVersion={release} \
         -X k8s.io/component-base/version.gitMajor=1 \
         -X k8s.io/component-base/version.gitMinor={minor} \
         -X k8s.io/component-base/version.gitTreeState=clean \
         -X k8s.io/client-go/pkg/version.gitVersion={release} \
         -X k8s.io/client-go/pkg/version.gitMajor=1 \
         -X k8s.io/client-go/pkg/version.gitMinor={minor}"
    )
}

/// The newest module's directory ([`Module::source_dir`]).
pub fn source_dir() -> PathBuf {
    Module::Newest.source_dir()
}

/// The newest module's binary path ([`Module::output`]): `target/kube/kube`.
pub fn output() -> PathBuf {
    Module::Newest.output()
}

/// The newest module's pinned release ([`Module::release`]).
pub fn release() -> Result<String, KubeError> {
    Module::Newest.release()
}

/// The newest module's binary, built first if needed ([`Module::binary`]).
pub fn binary() -> Result<PathBuf, KubeError> {
    Module::Newest.binary()
}

/// The newest release's kubectl as a program of its own ([`Module::kubectl`]).
pub fn kubectl() -> Result<PathBuf, KubeError> {
    Module::Newest.kubectl()
}

/// The newest release's component `name` as a program of its own ([`Module::link`]).
pub fn link(name: &str) -> Result<PathBuf, KubeError> {
    Module::Newest.link(name)
}

/// `DIR/NAME` → `kube`, made under the build lock: two callers replacing it at once
/// would share the temporary name (one's `symlink` fails with EEXIST, or one's `rename`
/// finds it gone).
fn link_in(dir: &Path, name: &str) -> Result<PathBuf, KubeError> {
    let link = dir.join(name);
    let _lock = build_lock(dir)?;
    if std::fs::read_link(&link).ok().as_deref() != Some(Path::new("kube")) {
        let tmp = dir.join(format!(".{name}.link"));
        let _ = std::fs::remove_file(&tmp);
        let io = |source| KubeError::Io {
            path: link.display().to_string(),
            source,
        };
        std::os::unix::fs::symlink("kube", &tmp).map_err(io)?;
        std::fs::rename(&tmp, &link).map_err(io)?;
    }
    Ok(link)
}

/// The lock every change under `DIR` (the build, the kubectl link) is made under, held
/// until the returned file is dropped; concurrent callers wait for it.
fn build_lock(dir: &Path) -> Result<std::fs::File, KubeError> {
    let path = dir.join(".build.lock");
    let io = |source| KubeError::Io {
        path: path.display().to_string(),
        source,
    };
    let lock = std::fs::File::create(&path).map_err(io)?;
    lock.lock().map_err(io)?;
    Ok(lock)
}

/// The newest modification time of the module's go.mod, go.sum and .go files, a linked
/// file's (testplane/kube-oldest's core.go) being its target's.
fn newest_source(dir: &Path) -> Result<SystemTime, KubeError> {
    let entries = std::fs::read_dir(dir).map_err(|source| KubeError::Io {
        path: dir.display().to_string(),
        source,
    })?;
    let mut newest = SystemTime::UNIX_EPOCH;
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name == "go.mod" || name == "go.sum" || name.ends_with(".go") {
            if let Ok(t) = std::fs::metadata(e.path()).and_then(|m| m.modified()) {
                newest = newest.max(t);
            }
        }
    }
    Ok(newest)
}

/// `name` on PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// The workspace root (the testplane crate's parent directory).
fn workspace() -> PathBuf {
    let me = Path::new(env!("CARGO_MANIFEST_DIR"));
    me.parent().unwrap_or(me).to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Many callers (test binaries) making the link at once, while it keeps disappearing:
    /// every one gets it.
    #[test]
    fn racing_callers_all_get_the_kubectl_link() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("kube"), "").unwrap();
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..200 {
                        let _ = std::fs::remove_file(dir.path().join("kubectl"));
                        let link = link_in(dir.path(), "kubectl").unwrap();
                        assert_eq!(link, dir.path().join("kubectl"));
                    }
                });
            }
        });
        let target = std::fs::read_link(dir.path().join("kubectl")).unwrap();
        assert_eq!(target, Path::new("kube"));
    }

    /// Each module pins one release throughout: every staging module it replaces is the
    /// published module of that same release (`k8s.io/X v0.MINOR.PATCH` beside
    /// `k8s.io/kubernetes v1.MINOR.PATCH`), so a bump that forgets one fails here and not
    /// twenty minutes into a build, or worse, in a binary of two releases.
    #[test]
    fn each_module_replaces_the_staging_modules_with_its_own_release() {
        for m in Module::ALL {
            let release = m.release().unwrap();
            let staging = release.replacen("v1.", "v0.", 1);
            let gomod = std::fs::read_to_string(m.source_dir().join("go.mod")).unwrap();
            let replaced: Vec<&str> = gomod
                .lines()
                .filter_map(|l| l.trim().split_once(" => "))
                .map(|(_, to)| to)
                .collect();
            assert!(replaced.len() >= 25, "{m:?}: {replaced:?}");
            for to in replaced {
                assert!(
                    to.starts_with("k8s.io/") && to.ends_with(&format!(" {staging}")),
                    "{m:?} ({release}) replaces with {to}"
                );
            }
        }
    }

    /// The two ends: two releases, the oldest below the newest, built into two places, and
    /// one core (the dispatch, etcd, kube-apiserver, kube-controller-manager, kubectl)
    /// compiled into both: testplane/kube-oldest/core.go is a link to testplane/kube's.
    #[test]
    fn the_two_modules_are_two_releases_built_apart_around_one_core() {
        let minor = |m: Module| -> u32 {
            let r = m.release().unwrap();
            r.strip_prefix("v1.")
                .and_then(|r| r.split('.').next())
                .and_then(|m| m.parse().ok())
                .unwrap_or_else(|| panic!("{r} is not v1.MINOR.PATCH"))
        };
        assert!(minor(Module::Oldest) < minor(Module::Newest));
        assert_ne!(Module::Oldest.output(), Module::Newest.output());
        assert_eq!(Module::Oldest.output().file_name(), Some("kube".as_ref()));
        assert_eq!(Module::default(), Module::Newest);
        let core = Module::Oldest.source_dir().join("core.go");
        assert_eq!(
            std::fs::read_link(&core).unwrap(),
            Path::new("../kube/core.go")
        );
        assert_eq!(
            std::fs::canonicalize(&core).unwrap(),
            std::fs::canonicalize(Module::Newest.source_dir().join("core.go")).unwrap()
        );
    }

    /// A linked source counts by its target's time: a change to testplane/kube/core.go
    /// rebuilds the oldest module too.
    #[test]
    fn a_linked_source_counts_by_its_targets_time() {
        let dir = tempfile::tempdir().unwrap();
        let (shared, module) = (dir.path().join("shared"), dir.path().join("module"));
        std::fs::create_dir_all(&shared).unwrap();
        std::fs::create_dir_all(&module).unwrap();
        let at = |secs| SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs);
        let write = |p: &Path, text: &str, t: SystemTime| {
            std::fs::write(p, text).unwrap();
            std::fs::File::options()
                .write(true)
                .open(p)
                .and_then(|f| f.set_modified(t))
                .unwrap();
        };
        write(&module.join("go.mod"), "module x\n", at(1_000));
        // The shared file changed after go.mod; the link itself was made just now, later
        // than both, so reading the link's own time would give the wrong answer.
        write(&shared.join("core.go"), "package main\n", at(2_000));
        std::os::unix::fs::symlink("../shared/core.go", module.join("core.go")).unwrap();
        assert_eq!(newest_source(&module).unwrap(), at(2_000));
    }
}
