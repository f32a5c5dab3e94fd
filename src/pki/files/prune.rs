//! Pruning old timestamped certificate files: the oldest beyond the newest `keep`, never
//! the one the current symlink names.

use std::path::PathBuf;

use super::atomic::sync_dir;
use super::{CertDir, FilesError, Fs, SUFFIX};

// === impl CertDir ===

impl<F: Fs> CertDir<F> {
    /// Removes the oldest timestamped `kubelet-client-*.pem` beyond the newest `keep`,
    /// never the current symlink's target. Returns what was removed, oldest first.
    pub fn prune(&self, keep: usize) -> Result<Vec<PathBuf>, FilesError> {
        let list_err = |source| FilesError::List {
            path: self.dir.clone(),
            source,
        };
        let current_target = self
            .fs
            .read_link(&self.current_path())
            .ok()
            .and_then(|t| t.file_name().map(|n| n.to_os_string()));
        let mut stamped = Vec::new();
        for (name, _) in self.fs.read_dir(&self.dir).map_err(list_err)? {
            if let Some(order) = name.to_str().and_then(|n| timestamp_order(self.prefix, n)) {
                stamped.push((order, name));
            }
        }
        stamped.sort();
        let excess = stamped.len().saturating_sub(keep);
        let mut removed = Vec::new();
        for (_, name) in stamped.into_iter().take(excess) {
            if Some(&name) == current_target.as_ref() {
                continue;
            }
            let path = self.dir.join(&name);
            self.fs
                .remove_file(&path)
                .map_err(|source| FilesError::Remove {
                    path: path.clone(),
                    source,
                })?;
            removed.push(path);
        }
        if !removed.is_empty() {
            sync_dir(&self.fs, &self.dir)?;
        }
        Ok(removed)
    }
}

/// `PREFIX-YYYY-MM-DD-HH-MM-SS[-N].pem` → sort key (stamp, N); other names → None.
pub(super) fn timestamp_order(prefix: &str, name: &str) -> Option<(String, u32)> {
    let rest = name
        .strip_prefix(prefix)?
        .strip_prefix('-')?
        .strip_suffix(SUFFIX)?;
    let (stamp, n) = match rest.get(19..) {
        Some("") => (rest, 0),
        Some(tail) => (&rest[..19], tail.strip_prefix('-')?.parse().ok()?),
        None => return None,
    };
    let shape_ok = stamp.bytes().enumerate().all(|(i, b)| match i {
        4 | 7 | 10 | 13 | 16 => b == b'-',
        _ => b.is_ascii_digit(),
    });
    shape_ok.then(|| (stamp.to_string(), n))
}
