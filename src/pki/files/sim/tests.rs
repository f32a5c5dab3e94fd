//! The simulated disk keeps the POSIX durability rules it claims.

use super::*;

const D: &str = "/d";

fn sim() -> SimFs {
    SimFs::with_dirs(&[Path::new(D)])
}

fn p(name: &str) -> PathBuf {
    Path::new(D).join(name)
}

/// `name`'s content in each image a reboot may find now (`None`: no such name).
fn after_reboot(sim: &SimFs, name: &str) -> BTreeSet<Option<String>> {
    sim.images()
        .iter()
        .map(|(img, _)| img.read_to_string(&p(name)).ok())
        .collect()
}

fn new_file(sim: &SimFs, name: &str, data: &str, fsync: bool) {
    let mut f = sim.create_new(&p(name), 0o600).unwrap();
    sim.write_all(&mut f, &p(name), data.as_bytes()).unwrap();
    if fsync {
        sim.sync(&mut f, &p(name)).unwrap();
    }
}

fn set(items: &[Option<&str>]) -> BTreeSet<Option<String>> {
    items.iter().map(|i| i.map(String::from)).collect()
}

#[test]
fn a_new_name_is_durable_only_after_its_directory_is_fsynced() {
    let sim = sim();
    new_file(&sim, "a", "data", true);
    // fsync of the file made the data durable, not the name.
    assert_eq!(after_reboot(&sim, "a"), set(&[None, Some("data")]));
    sim.sync_dir(Path::new(D)).unwrap();
    assert_eq!(after_reboot(&sim, "a"), set(&[Some("data")]));
}

#[test]
fn data_not_fsynced_is_lost_or_torn_even_under_a_durable_name() {
    let sim = sim();
    new_file(&sim, "a", "abcd", false);
    sim.sync_dir(Path::new(D)).unwrap();
    assert_eq!(
        after_reboot(&sim, "a"),
        set(&[Some(""), Some("ab"), Some("abcd")])
    );
    let mut f = SimFile(sim.disk().names[&p("a")]);
    sim.sync(&mut f, &p("a")).unwrap();
    assert_eq!(after_reboot(&sim, "a"), set(&[Some("abcd")]));
}

#[test]
fn a_rename_is_atomic_and_durable_after_the_directory_fsync() {
    let sim = sim();
    new_file(&sim, "x", "old", true);
    sim.sync_dir(Path::new(D)).unwrap();
    new_file(&sim, "tmp", "new", true);
    sim.rename(&p("tmp"), &p("x")).unwrap();
    assert_eq!(sim.read_to_string(&p("x")).unwrap(), "new");
    // Before the directory fsync: old or new, never neither or a mix.
    assert_eq!(after_reboot(&sim, "x"), set(&[Some("old"), Some("new")]));
    sim.sync_dir(Path::new(D)).unwrap();
    assert_eq!(after_reboot(&sim, "x"), set(&[Some("new")]));
    assert_eq!(after_reboot(&sim, "tmp"), set(&[None]));
}

#[test]
fn a_journal_commits_metadata_in_order() {
    let sim = sim();
    new_file(&sim, "a", "1", true);
    new_file(&sim, "b", "2", true);
    // No image has b without a: a prefix of the operations, never a later one alone.
    for (img, what) in sim.images() {
        let a = img.read_to_string(&p("a")).is_ok();
        let b = img.read_to_string(&p("b")).is_ok();
        assert!(a || !b, "{what}: {:?}", img.listing());
    }
}

#[test]
fn a_symlink_swap_reads_old_or_new_target() {
    let sim = sim();
    new_file(&sim, "one", "1", true);
    new_file(&sim, "two", "2", true);
    sim.symlink(&p("one"), &p("cur")).unwrap();
    sim.sync_dir(Path::new(D)).unwrap();
    sim.symlink(&p("two"), &p("cur.tmp")).unwrap();
    sim.rename(&p("cur.tmp"), &p("cur")).unwrap();
    assert_eq!(sim.read_to_string(&p("cur")).unwrap(), "2");
    assert_eq!(after_reboot(&sim, "cur"), set(&[Some("1"), Some("2")]));
}

#[test]
fn the_power_cut_stops_everything_and_faults_fail_one_op() {
    let sim = sim();
    sim.fail_op(0, 28);
    let err = sim.create_new(&p("a"), 0o600).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(28));
    new_file(&sim, "a", "x", true);
    sim.cut_power_before(sim.ops());
    assert!(sim.remove_file(&p("a")).is_err());
    assert!(sim.is_dead());
    assert!(sim.read_to_string(&p("a")).is_err());
}

#[test]
fn a_full_disk_writes_what_fits_then_says_enospc_and_read_only_says_erofs() {
    let sim = sim();
    sim.set_capacity(Some(3));
    let mut f = sim.create_new(&p("a"), 0o666).unwrap();
    let err = sim.write_all(&mut f, &p("a"), b"abcd").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(28), "{err}");
    assert_eq!(sim.read_to_string(&p("a")).unwrap(), "abc");
    assert_eq!(sim.used(), 3);
    // The umask narrowed the creation mode.
    assert_eq!(sim.mode_of(&p("a")).unwrap(), 0o644);
    sim.set_read_only(true);
    let err = sim.remove_file(&p("a")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(30), "{err}");
}
