//! The names of bootlet's temp files: made by one function and recognised by another,
//! beside each other so the two never disagree (the atomic writer makes them; the crash
//! sweep and the crash-test hooks recognise them).

use super::CURRENT_FILE;

/// `.NAME.tmp-RANDOM`: the name of every temp file and temp symlink bootlet creates.
pub(super) fn temp_name(name: &str) -> String {
    format!(".{name}.tmp-{:016x}", rand::random::<u64>())
}

/// Whether `name` is one of [`temp_name`]'s (or, from releases before the symlink's temp
/// name had its dot, `kubelet-client-current.pem.tmp-RANDOM`): a crash leftover when no
/// write is in flight.
pub(super) fn is_temp_name(name: &str) -> bool {
    let Some((stem, random)) = name.rsplit_once(".tmp-") else {
        return false;
    };
    random.len() == 16
        && random.bytes().all(|b| b.is_ascii_hexdigit())
        && ((stem.len() > 1 && stem.starts_with('.')) || stem == CURRENT_FILE)
}
