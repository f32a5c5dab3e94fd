//! Builds the real Kubernetes components (`testplane/kube`, a Go module that requires
//! `k8s.io/kubernetes` at one pinned release) into `target/kube/kube`, once: idempotent,
//! cached (Go's own GOCACHE and GOMODCACHE, kept between runs), rebuilt only when the binary
//! is missing or older than the module's sources. Progress goes to stderr.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::KubeError;

/// The Go module's directory in this checkout.
pub fn source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("kube")
}

/// Where the binary goes: `$CARGO_TARGET_DIR/kube/kube`, else the workspace's `target/`.
pub fn output() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"));
    target.join("kube").join("kube")
}

/// The pinned release: the `k8s.io/kubernetes` requirement in go.mod (e.g. `v1.37.2`).
pub fn release() -> Result<String, KubeError> {
    let gomod = source_dir().join("go.mod");
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
pub fn binary() -> Result<PathBuf, KubeError> {
    let out = output();
    let dir = out.parent().expect("output has a parent").to_path_buf();
    let io = |p: &Path| {
        let path = p.display().to_string();
        move |source| KubeError::Io { path, source }
    };
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    let _lock = build_lock(&dir)?;
    let release = release()?;
    let go = which("go").ok_or_else(|| {
        KubeError::Build(
            "the Go toolchain (go ≥ 1.26) is not on PATH: the README's test command \
             (`bash tests/run.sh`) installs it, or install Go and run it again"
                .into(),
        )
    })?;
    let minor = release
        .trim_start_matches('v')
        .split('.')
        .nth(1)
        .unwrap_or("0")
        .to_string();
    let ldflags = format!(
        "-s -w -X k8s.io/component-base/version.gitVersion={release} \
         -X k8s.io/component-base/version.gitMajor=1 \
         -X k8s.io/component-base/version.gitMinor={minor} \
         -X k8s.io/component-base/version.gitTreeState=clean \
         -X k8s.io/client-go/pkg/version.gitVersion={release} \
         -X k8s.io/client-go/pkg/version.gitMajor=1 \
         -X k8s.io/client-go/pkg/version.gitMinor={minor}"
    );
    // What the binary was built with: a change of flags or toolchain rebuilds it too.
    let go_version = std::process::Command::new(&go)
        .args(["env", "GOVERSION"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let recipe = format!("{go_version}\n{ldflags}\n");
    let stamp = dir.join("kube.stamp");
    if fresh(&out)? && std::fs::read_to_string(&stamp).ok().as_deref() == Some(recipe.as_str()) {
        return Ok(out);
    }
    eprintln!(
        "bootlet-testplane: building Kubernetes {release} (etcd, kube-apiserver, \
         kube-controller-manager, kube-scheduler, hollow-node, kubectl, kubeadm, kubelet) into {}; the first build takes \
         15-25 minutes on 2 cores, later ones seconds",
        out.display()
    );
    let tmp = dir.join("kube.partial");
    let status = std::process::Command::new(go)
        .current_dir(source_dir())
        .args(["build", "-trimpath", "-ldflags", &ldflags, "-o"])
        .arg(&tmp)
        .arg(".")
        .env("GOFLAGS", "-mod=readonly")
        .status()
        .map_err(io(Path::new("go")))?;
    if !status.success() {
        return Err(KubeError::Build(format!(
            "go build in {} failed ({status}); see the lines above",
            source_dir().display()
        )));
    }
    std::fs::rename(&tmp, &out).map_err(io(&out))?;
    std::fs::write(&stamp, recipe).map_err(io(&stamp))?;
    eprintln!("bootlet-testplane: built {}", out.display());
    Ok(out)
}

/// The real kubectl of the pinned release as a program of its own: `kubectl` beside the
/// binary, a symbolic link to it (the binary picks the component by the name it was run
/// as), for callers that take one program path (the bench's shell baseline, tests).
pub fn kubectl() -> Result<PathBuf, KubeError> {
    link("kubectl")
}

/// The component `name` (`kubectl`, `kubeadm`, `kubelet`, ...) as a program of its own:
/// `NAME` beside the binary, a symbolic link to `kube`. kubeadm runs `kubelet --version`
/// and systemd units run `/usr/bin/kubelet`: a link named so is that program.
pub fn link(name: &str) -> Result<PathBuf, KubeError> {
    let kube = binary()?;
    link_in(kube.parent().expect("output has a parent"), name)
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

/// The binary exists and is newer than every source file of the module.
fn fresh(out: &Path) -> Result<bool, KubeError> {
    let Ok(built) = std::fs::metadata(out).and_then(|m| m.modified()) else {
        return Ok(false);
    };
    Ok(newest_source()? <= built)
}

fn newest_source() -> Result<SystemTime, KubeError> {
    let dir = source_dir();
    let entries = std::fs::read_dir(&dir).map_err(|source| KubeError::Io {
        path: dir.display().to_string(),
        source,
    })?;
    let mut newest = SystemTime::UNIX_EPOCH;
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name == "go.mod" || name == "go.sum" || name.ends_with(".go") {
            if let Ok(t) = e.metadata().and_then(|m| m.modified()) {
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
}
