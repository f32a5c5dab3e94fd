//! The write path on the simulated disk (`sim.rs`): the power goes out before every single
//! file operation of a bootstrap and of a rotation (and again before every operation of the
//! recovery after it), and the disk fills up, turns read-only or loses the cert dir under a
//! running writer. After each, what survived is the old complete identity or the new one,
//! and the restarted (or retrying) writer ends with the new one, no temp files and one CSR.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

use super::sim::SimFs;
use super::*;
use crate::pki::{parse_cert_chain, self_signed, CertProfile, NodeKey};

const PKI: &str = "/var/lib/kubelet/pki";
const KUBECONFIG: &str = "/etc/kubernetes/kubelet.conf";
const KEEP: usize = 2;
const EROFS: i32 = 30;

/// A certificate and its key, as installed.
#[derive(Clone, Debug, PartialEq)]
struct Identity {
    serial: String,
    key: PrivateKeyPem,
    chain: String,
}

/// The signer: one certificate per key, as a CSR adopted again after a restart returns the
/// certificate it was issued. Its size is the number of CSRs filed.
#[derive(Default)]
struct Signer(BTreeMap<String, Identity>);

impl Signer {
    fn issue(&mut self, key: &PrivateKeyPem) -> Identity {
        self.0
            .entry(key.as_str().to_string())
            .or_insert_with(|| {
                let node_key = NodeKey::from_pem(key).unwrap();
                let chain = self_signed(
                    &node_key,
                    &CertProfile::client("n1"),
                    testplane::wall_now(),
                    Duration::from_secs(3600),
                )
                .unwrap();
                let serial = parse_cert_chain(&chain).unwrap()[0].0.serial.clone();
                Identity {
                    serial,
                    key: key.clone(),
                    chain,
                }
            })
            .clone()
    }
}

fn kubeconfig_yaml() -> String {
    let current = format!("{PKI}/{CURRENT_FILE}");
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: default-cluster\n  cluster:\n    server: https://10.0.0.1:6443\nusers:\n- name: default-auth\n  user:\n    client-certificate: {current}\n    client-key: {current}\n"
    )
}

/// The error with its sources, as the agent logs it (`runtime::report`, a layer up).
fn report(e: &FilesError) -> String {
    let mut out = e.to_string();
    let mut next = std::error::Error::source(e);
    while let Some(cause) = next {
        out.push_str(&format!(": {cause}"));
        next = cause.source();
    }
    out
}

fn pki() -> &'static Path {
    Path::new(PKI)
}

fn kubeconfig() -> &'static Path {
    Path::new(KUBECONFIG)
}

/// The cert dir on `fs` without opening it (opening sweeps: a write).
fn view(fs: &SimFs) -> CertDir<SimFs> {
    CertDir {
        dir: pki().to_path_buf(),
        prefix: CLIENT_PREFIX,
        fs: fs.clone(),
    }
}

/// What `kubelet-client-current.pem` holds: nothing, or a certificate and key that match.
fn installed(fs: &SimFs) -> Result<Option<Identity>, String> {
    let Some((chain, key)) = view(fs).read_current().map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let certs = parse_cert_chain(&chain).map_err(|e| format!("certificate: {e}"))?;
    let node_key = NodeKey::from_pem(&key).map_err(|e| format!("key: {e}"))?;
    if certs[0].0.spki_der != node_key.public_key_der() {
        return Err("the certificate is not for the key beside it".into());
    }
    Ok(Some(Identity {
        serial: certs[0].0.serial.clone(),
        key,
        chain,
    }))
}

/// An agent starting: open the cert dir (sweeping its temps) and sweep the kubeconfig's.
fn start(fs: &SimFs) -> Result<CertDir<SimFs>, FilesError> {
    let dir = CertDir::open_in(fs.clone(), pki())?;
    sweep_temps_of_in(fs, kubeconfig())?;
    Ok(dir)
}

/// What the issuing pipeline (identity/issue.rs) does to the disk for one certificate, in
/// its order: the pending key (stored before the CSR is filed), the CSR issued for it,
/// install + current swap, the kubeconfig, the pending key dropped, old files pruned.
fn issue(dir: &CertDir<SimFs>, signer: &mut Signer) -> Result<Identity, FilesError> {
    let fs = &dir.fs;
    let key = match dir.load_pending_key()? {
        Some(key) if NodeKey::from_pem(&key).is_ok() => key,
        _ => {
            let key = NodeKey::generate().unwrap().to_pem();
            dir.store_pending_key(&key)?;
            key
        }
    };
    let new = signer.issue(&key);
    dir.install(&new.chain, &new.key, testplane::wall_now())?;
    write_atomic_in(fs, kubeconfig(), kubeconfig_yaml().as_bytes(), FILE_MODE)?;
    dir.remove_pending_key()?;
    dir.prune(KEEP)?;
    Ok(new)
}

/// A restarted agent: reuse an installed certificate that is not the one being rotated
/// away from (rewriting a missing or damaged kubeconfig), else issue one.
fn restart(fs: &SimFs, old: Option<&Identity>, signer: &mut Signer) -> Result<(), String> {
    let dir = start(fs).map_err(|e| e.to_string())?;
    match installed(fs)? {
        Some(id) if Some(&id) != old => {
            if fs.read_to_string(kubeconfig()).ok() != Some(kubeconfig_yaml()) {
                write_atomic_in(fs, kubeconfig(), kubeconfig_yaml().as_bytes(), FILE_MODE)
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        }
        _ => issue(&dir, signer).map(drop).map_err(|e| e.to_string()),
    }
}

/// A disk with `old` installed and published, all durable (or an empty cert dir).
fn disk_with(old: Option<&Identity>) -> SimFs {
    let fs = SimFs::with_dirs(&[pki(), Path::new("/etc/kubernetes")]);
    if let Some(old) = old {
        let dir = start(&fs).unwrap();
        dir.install(
            &old.chain,
            &old.key,
            SystemTime::UNIX_EPOCH + Duration::from_secs(1),
        )
        .unwrap();
        write_atomic_in(&fs, kubeconfig(), kubeconfig_yaml().as_bytes(), FILE_MODE).unwrap();
        fs.sync_all();
    }
    fs
}

fn temps(fs: &SimFs) -> Vec<String> {
    [pki(), Path::new("/etc/kubernetes")]
        .iter()
        .flat_map(|d| fs.read_dir(d).unwrap_or_default())
        .filter_map(|(n, _)| n.into_string().ok())
        .filter(|n| is_temp_name(n))
        .collect()
}

/// What must hold on any disk, at any moment: the installed identity is `old` or one the
/// signer issued, complete; the kubeconfig is whole and never names a missing file; a
/// pending key is whole; no key-bearing file is readable by group or others.
fn check_any(fs: &SimFs, old: Option<&Identity>, signer: &Signer) -> Result<(), String> {
    let id = installed(fs)?;
    match (&id, old) {
        (None, Some(_)) => return Err("the old identity is gone and no new one is there".into()),
        (Some(id), _) if Some(id) != old && !signer.0.values().any(|i| i == id) => {
            return Err(format!("an identity nobody issued: {}", id.serial))
        }
        _ => {}
    }
    match fs.read_to_string(kubeconfig()) {
        Ok(text) if text != kubeconfig_yaml() => {
            return Err(format!("the kubeconfig is damaged: {text:?}"))
        }
        Ok(_) if id.is_none() => return Err("the kubeconfig names a missing certificate".into()),
        Ok(_) => {}
        Err(_) if old.is_some() => return Err("the kubeconfig is gone".into()),
        Err(_) => {}
    }
    let pending = view(fs).pending_key_path();
    if let Ok(text) = fs.read_to_string(&pending) {
        NodeKey::from_pem(&PrivateKeyPem::new(text))
            .map_err(|e| format!("the pending key is damaged: {e}"))?;
    }
    let files = fs.read_dir(pki()).unwrap_or_default();
    let paths = files.iter().map(|(n, _)| pki().join(n));
    for path in paths.chain([kubeconfig().to_path_buf()]) {
        if let Ok(mode) = fs.mode_of(&path) {
            if mode & 0o077 != 0
                && fs
                    .symlink_metadata(&path)
                    .is_ok_and(|m| m.kind != Kind::Dir)
            {
                return Err(format!("{} has mode {mode:o}", path.display()));
            }
        }
    }
    Ok(())
}

/// What must hold once a writer finished: a new identity (not `old`), the kubeconfig,
/// no temp files, no pending key but the installed one's, one CSR in all.
fn check_done(fs: &SimFs, old: Option<&Identity>, signer: &Signer) -> Result<(), String> {
    check_any(fs, old, signer)?;
    let id = installed(fs)?.ok_or("no identity installed")?;
    if Some(&id) == old {
        return Err("still the old identity".into());
    }
    if fs.read_to_string(kubeconfig()).is_err() {
        return Err("no kubeconfig".into());
    }
    let temps = temps(fs);
    if !temps.is_empty() {
        return Err(format!("temp files left: {temps:?}"));
    }
    if let Ok(text) = fs.read_to_string(&view(fs).pending_key_path()) {
        if text != id.key.as_str() {
            return Err("a pending key left beside the installed identity".into());
        }
    }
    if signer.0.len() != 1 {
        return Err(format!("{} CSRs filed for one certificate", signer.0.len()));
    }
    Ok(())
}

/// The mutating operations a whole run of `f` makes on a fresh copy of `disk`.
fn ops_of(disk: impl Fn() -> SimFs, f: impl Fn(&SimFs)) -> usize {
    let fs = disk();
    let before = fs.ops();
    f(&fs);
    fs.ops() - before
}

/// The power goes out before each operation of a bootstrap (`old` None) or a rotation;
/// every image a reboot may find is checked, restarted and checked again; and from the
/// strictest image (nothing unsynced survived), the power goes out again before every
/// operation of that restart. Returns (cuts, images checked).
fn cut_everywhere(old: Option<&Identity>) -> (usize, usize) {
    let first = |fs: &SimFs| {
        let mut signer = Signer::default();
        let dir = start(fs).unwrap();
        issue(&dir, &mut signer).unwrap();
        check_done(fs, old, &signer).unwrap();
    };
    let total = ops_of(|| disk_with(old), first);
    assert!(total >= 20, "a publish makes {total} file operations");
    let (mut cuts, mut images) = (0, 0);
    for k in 0..total {
        let fs = disk_with(old);
        let mut signer = Signer::default();
        fs.cut_power_before(fs.ops() + k);
        let run = start(&fs).and_then(|dir| issue(&dir, &mut signer));
        assert!(run.is_err() && fs.is_dead(), "cut {k}: the power stayed on");
        cuts += 1;
        for (n, (img, what)) in fs.images().into_iter().enumerate() {
            images += 1;
            let ctx = |e: String| {
                format!(
                    "cut before op {k}/{total}, {what}: {e}\n{:#?}",
                    img.listing()
                )
            };
            check_any(&img, old, &signer).map_err(ctx).unwrap();
            if n == 0 {
                // The strictest image: cut the restart too, before each of its operations.
                let mut j = 0;
                loop {
                    let again = copy(&img);
                    let mut signer2 = Signer(signer.0.clone());
                    again.cut_power_before(again.ops() + j);
                    let done = restart(&again, old, &mut signer2);
                    if !again.is_dead() {
                        done.map_err(ctx).unwrap();
                        break;
                    }
                    cuts += 1;
                    for (img2, what2) in again.images() {
                        images += 1;
                        let ctx2 = |e: String| {
                            ctx(format!("then cut before restart op {j}, {what2}: {e}"))
                        };
                        check_any(&img2, old, &signer2).map_err(ctx2).unwrap();
                        let mut signer3 = Signer(signer2.0.clone());
                        restart(&img2, old, &mut signer3).map_err(ctx2).unwrap();
                        check_done(&img2, old, &signer3).map_err(ctx2).unwrap();
                    }
                    j += 1;
                }
            }
            let mut signer = Signer(signer.0.clone());
            restart(&img, old, &mut signer).map_err(ctx).unwrap();
            check_done(&img, old, &signer).map_err(ctx).unwrap();
        }
    }
    (cuts, images)
}

/// An independent copy of a disk (its first and only image: it is all durable).
fn copy(fs: &SimFs) -> SimFs {
    fs.sync_all();
    fs.images().remove(0).0
}

#[test]
fn a_power_cut_before_any_operation_of_a_bootstrap_leaves_nothing_or_the_new_identity() {
    let (cuts, images) = cut_everywhere(None);
    eprintln!("bootstrap: {cuts} power cuts, {images} disk images checked");
    assert!(cuts >= 20, "{cuts}");
}

#[test]
fn a_power_cut_before_any_operation_of_a_rotation_leaves_the_old_or_the_new_identity() {
    let old = Signer::default().issue(&NodeKey::generate().unwrap().to_pem());
    let (cuts, images) = cut_everywhere(Some(&old));
    eprintln!("rotation: {cuts} power cuts, {images} disk images checked");
    assert!(cuts >= 20, "{cuts}");
}

/// A fault while a running agent rotates (`fault` is set on the disk right before the
/// rotation, given the disk and the count of operations the rotation makes): the error
/// names a path, the old identity stays installed (or the new one is, complete), no temp
/// file stays behind, and once the fault is lifted the next attempt completes with the
/// same CSR. With `deleted`, the fault took the old identity and the pending key with the
/// cert dir: only the errors and the recovery are checked, and a second CSR is due.
/// Returns the error messages.
fn rotate_under(deleted: bool, stuck_temp: bool, fault: impl Fn(&SimFs, usize)) -> Vec<String> {
    let old = Signer::default().issue(&NodeKey::generate().unwrap().to_pem());
    let rotate = |fs: &SimFs| {
        let dir = view(fs);
        issue(&dir, &mut Signer::default()).unwrap();
    };
    let total = ops_of(|| disk_with(Some(&old)), rotate);
    let mut errors = Vec::new();
    for k in 0..total {
        let fs = disk_with(Some(&old));
        let dir = start(&fs).unwrap();
        let mut signer = Signer::default();
        fault(&fs, k);
        let Err(e) = issue(&dir, &mut signer) else {
            continue;
        };
        let text = report(&e);
        let ctx = |m: String| format!("fault at op {k}: {text}: {m}\n{:#?}", fs.listing());
        assert!(
            text.starts_with(PKI) || text.starts_with("/etc/kubernetes"),
            "{}",
            ctx("the error names no path".into())
        );
        if !deleted {
            check_any(&fs, Some(&old), &signer).map_err(ctx).unwrap();
        }
        // A filesystem gone read-only keeps the temp file of the write it failed (until the
        // next write removes it); otherwise the failed write removed its own.
        let left = temps(&fs);
        assert!(
            left.len() <= usize::from(stuck_temp),
            "{}",
            ctx(format!("temp files left: {left:?}"))
        );
        errors.push(text.clone());
        // Fixed: the running agent tries again (adopting a certificate that made it to
        // disk, as the rotation loop does).
        fs.clear_faults();
        fs.make_dir(pki());
        match installed(&fs).unwrap() {
            Some(id) if id != old => {}
            _ => {
                issue(&dir, &mut signer)
                    .map_err(|e| ctx(report(&e)))
                    .unwrap();
            }
        }
        if deleted && signer.0.len() == 2 {
            signer
                .0
                .retain(|_, id| Some(&*id) == installed(&fs).unwrap().as_ref());
        }
        if stuck_temp && !temps(&fs).is_empty() {
            // An adopted certificate wrote nothing more; the next rotation's writes
            // remove what the read-only filesystem kept.
            let now = installed(&fs).unwrap();
            issue(&dir, &mut signer)
                .map_err(|e| ctx(report(&e)))
                .unwrap();
            assert!(
                temps(&fs).is_empty(),
                "{}",
                ctx("the next rotation kept them".into())
            );
            signer.0.retain(|_, id| Some(&*id) != now.as_ref());
        }
        check_done(&fs, Some(&old), &signer).map_err(ctx).unwrap();
    }
    errors
}

#[test]
fn a_disk_filling_up_at_any_point_of_a_rotation_keeps_the_old_identity_and_recovers() {
    // Someone else fills the disk right before operation k: the rotation's next write
    // fails with ENOSPC.
    let errors = rotate_under(false, false, |fs, k| fs.fill_up_before(fs.ops() + k));
    assert!(errors.len() >= 3, "{errors:?}");
    for e in &errors {
        assert!(e.contains("No space left on device"), "{e}");
    }
}

#[test]
fn a_disk_filling_up_byte_by_byte_fails_every_write_cleanly() {
    let old = Signer::default().issue(&NodeKey::generate().unwrap().to_pem());
    let base = disk_with(Some(&old)).used();
    // The rotation writes the pending key (~240 B), the certificate file and the
    // kubeconfig: try every capacity up to a little past what it needs, 16 B apart.
    let mut failed = 0;
    for room in (0..4000).step_by(16) {
        let fs = disk_with(Some(&old));
        let dir = start(&fs).unwrap();
        let mut signer = Signer::default();
        fs.set_capacity(Some(base + room));
        match issue(&dir, &mut signer) {
            Ok(_) => {
                check_done(&fs, Some(&old), &signer).unwrap();
                continue;
            }
            Err(e) => {
                let text = report(&e);
                assert!(text.contains("No space left on device"), "{room}: {text}");
                assert!(
                    text.starts_with(PKI) || text.starts_with(KUBECONFIG),
                    "{text}"
                );
                failed += 1;
            }
        }
        check_any(&fs, Some(&old), &signer).unwrap();
        assert_eq!(temps(&fs), Vec::<String>::new(), "room {room}");
        fs.clear_faults();
        match installed(&fs).unwrap() {
            Some(id) if id != old => {}
            _ => {
                issue(&dir, &mut signer).unwrap();
            }
        }
        check_done(&fs, Some(&old), &signer).unwrap_or_else(|e| panic!("room {room}: {e}"));
    }
    assert!(failed > 10, "{failed}");
}

#[test]
fn a_remount_read_only_at_any_point_of_a_rotation_keeps_the_old_identity_and_recovers() {
    let errors = rotate_under(false, true, |fs, k| fs.fail_from(fs.ops() + k, EROFS));
    assert!(errors.len() > 10, "{errors:?}");
    assert!(errors.iter().any(|e| e.contains("Read-only file system")));
}

#[test]
fn a_cert_dir_deleted_at_any_point_of_a_rotation_is_named_and_recovers_once_recreated() {
    let errors = rotate_under(true, false, |fs, k| {
        fs.delete_tree_before(fs.ops() + k, pki())
    });
    assert!(!errors.is_empty());
    let gone = format!("the directory {PKI} is gone");
    assert!(errors.iter().any(|e| e.contains(&gone)), "{errors:#?}");
}

#[test]
fn a_full_disk_fails_a_rotation_before_its_csr_is_filed() {
    let old = Signer::default().issue(&NodeKey::generate().unwrap().to_pem());
    let fs = disk_with(Some(&old));
    let dir = start(&fs).unwrap();
    fs.set_capacity(Some(fs.used()));
    let mut signer = Signer::default();
    let e = issue(&dir, &mut signer).unwrap_err();
    assert_eq!(
        report(&e),
        format!(
            "{PKI}/kubelet-client.key.tmp: cannot write: No space left on device (os error 28)"
        )
    );
    assert!(signer.0.is_empty(), "no CSR without a durable pending key");
    assert!(installed(&fs).unwrap() == Some(old));
}
