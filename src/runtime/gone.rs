//! Waits for a file to be removed (`kubeadm reset` deleting kubelet.conf), at no cost while
//! it is there: inotify on its directory wakes the agent only for a change to that
//! directory's entries, never on a timer. Where inotify cannot be had (no instance left,
//! a sandbox without it) a `stat` every [`POLL`] does the same job. A leaf: no IO of ours.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Duration;

use rustix::fs::inotify;
use tokio::io::unix::AsyncFd;

/// The fallback's period: a removal is noticed within this long.
pub const POLL: Duration = Duration::from_secs(5);

/// Resolves once `path` no longer exists (removed, or renamed away). A file replaced by a
/// rename onto it (an atomic write, bootlet's own) is still there: nothing happens.
pub async fn removed(path: &Path) {
    let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return poll(path).await;
    };
    match watch(dir) {
        Ok(fd) => {
            // Armed before the first look, so a removal between the two is not missed.
            while path.exists() {
                if wait(&fd).await.is_err() {
                    return poll(path).await;
                }
            }
        }
        Err(e) => {
            tracing::debug!(error = %e, dir = %dir.display(), "no inotify; looking every {POLL:?}");
            poll(path).await
        }
    }
}

fn watch(dir: &Path) -> std::io::Result<AsyncFd<OwnedFd>> {
    let fd = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)?;
    inotify::add_watch(
        &fd,
        dir,
        inotify::WatchFlags::DELETE
            | inotify::WatchFlags::MOVED_FROM
            | inotify::WatchFlags::DELETE_SELF
            | inotify::WatchFlags::MOVE_SELF,
    )?;
    // `new` is deprecated for types whose fd could be closed behind tokio's back; an
    // `OwnedFd` moved in is ours alone until the AsyncFd drops it. `register`, its
    // replacement, is `unsafe`, which this crate forbids.
    #[allow(deprecated)]
    AsyncFd::new(fd)
}

/// Until some event arrives on `fd` (they are drained: the caller looks at the file).
async fn wait(fd: &AsyncFd<OwnedFd>) -> std::io::Result<()> {
    loop {
        let mut guard = fd.readable().await?;
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 1024];
        let mut reader = inotify::Reader::new(fd.get_ref(), &mut buf);
        let mut any = false;
        loop {
            match reader.next() {
                Ok(_) => any = true,
                Err(rustix::io::Errno::AGAIN) => {
                    guard.clear_ready();
                    break;
                }
                Err(e) => return Err(e.into()),
            }
        }
        if any {
            return Ok(());
        }
    }
}

async fn poll(path: &Path) {
    while path.exists() {
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_removal_is_seen_and_a_rename_onto_the_file_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("kubelet.conf");
        std::fs::write(&file, "a").unwrap();
        let watching = tokio::spawn({
            let file = file.clone();
            async move { removed(&file).await }
        });
        tokio::task::yield_now().await;
        // bootlet's own atomic write: a temp file renamed onto it.
        let tmp = dir.path().join(".kubelet.conf.tmp");
        std::fs::write(&tmp, "b").unwrap();
        std::fs::rename(&tmp, &file).unwrap();
        let early = tokio::time::timeout(Duration::from_millis(300), async {
            while !watching.is_finished() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(
            early.is_err(),
            "a rename onto the file counted as a removal"
        );
        std::fs::remove_file(&file).unwrap();
        tokio::time::timeout(Duration::from_secs(2), watching)
            .await
            .expect("the removal was not seen within 2 s")
            .unwrap();
    }

    #[tokio::test]
    async fn a_missing_file_is_removed_already() {
        let dir = tempfile::tempdir().unwrap();
        tokio::time::timeout(Duration::from_secs(1), removed(&dir.path().join("none")))
            .await
            .unwrap();
    }
}
