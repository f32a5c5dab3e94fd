//! A simulated disk behind the [`Fs`] seam, for tests: it keeps what a running process sees
//! apart from what is durable, by the POSIX rules (ext4 promises no more): file data and
//! mode are durable after the file's fsync; a creation, link, rename, symlink or removal
//! after its directory's fsync (a file's fsync does not make its name durable). The power
//! can be cut before any operation, and `images` lists every state a reboot may find;
//! operations can also fail with an errno (ENOSPC from a capacity, EROFS, one chosen op).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::fs::{Fs, Kind, Meta};

const ENOSPC: i32 = 28;
const EROFS: i32 = 30;

/// A handle on the simulated disk; clones share it.
#[derive(Clone, Debug, Default)]
pub struct SimFs(Arc<Mutex<Disk>>);

/// An open file: its inode.
#[derive(Debug)]
pub struct SimFile(usize);

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Node {
    File,
    Dir,
    Symlink(PathBuf),
}

#[derive(Clone, Debug)]
struct Inode {
    node: Node,
    data: Vec<u8>,
    durable_data: Vec<u8>,
    mode: u32,
    durable_mode: u32,
}

/// One metadata operation (a rename changes two names at once) and the directories whose
/// fsync it still waits for.
#[derive(Clone, Debug)]
struct MetaOp {
    changes: Vec<(PathBuf, Option<usize>)>,
    unsynced: BTreeSet<PathBuf>,
}

/// What a reboot finds of file data written but not fsynced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataFate {
    /// Lost: the durable data (empty for a file never fsynced), the durable mode.
    Lost,
    /// The first half of it reached the disk.
    Torn,
    /// All of it reached the disk, and the mode too.
    Kept,
}

#[derive(Debug, Default)]
struct Disk {
    inodes: Vec<Inode>,
    /// The namespace a running process sees: absolute path → inode.
    names: BTreeMap<PathBuf, usize>,
    /// The namespace as durable, before `journal`.
    durable: BTreeMap<PathBuf, usize>,
    /// Metadata operations since `durable`, in order.
    journal: Vec<MetaOp>,
    /// Mutating operations done (or attempted) so far.
    ops: usize,
    /// The power goes out before mutating operation `cut_before` (0-based); every call
    /// fails from then on.
    cut_before: Option<usize>,
    dead: bool,
    /// Mutating operation number → the errno it fails with.
    fail_at: BTreeMap<usize, i32>,
    /// From this mutating operation on, every one fails with the errno.
    fail_from: Option<(usize, i32)>,
    /// Right before this mutating operation, the tree under the path vanishes (`rm -rf`
    /// by someone else).
    delete_before: Option<(usize, PathBuf)>,
    /// Right before this mutating operation, the disk fills up.
    fill_before: Option<usize>,
    /// Bytes of file data the disk holds at most.
    capacity: Option<usize>,
    read_only: bool,
    umask: u32,
}

// === impl SimFs ===

impl SimFs {
    /// An empty disk with `dirs` (and their parents) made, 0700 and durable.
    pub fn with_dirs(dirs: &[&Path]) -> SimFs {
        let sim = SimFs::default();
        {
            let mut d = sim.disk();
            d.umask = 0o022;
            let root = d.new_inode(Node::Dir, 0o755);
            d.names.insert(PathBuf::from("/"), root);
            d.durable = d.names.clone();
        }
        for dir in dirs {
            sim.make_dir(dir);
        }
        sim
    }

    fn disk(&self) -> MutexGuard<'_, Disk> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Cut the power right before mutating operation `n` (0-based, counted from now on the
    /// total so far).
    pub fn cut_power_before(&self, n: usize) {
        self.disk().cut_before = Some(n);
    }

    /// Whether the power went out.
    pub fn is_dead(&self) -> bool {
        self.disk().dead
    }

    /// Mutating operations done so far (the failed one included).
    pub fn ops(&self) -> usize {
        self.disk().ops
    }

    /// Mutating operation `n` (0-based, on the total) fails with `errno`.
    pub fn fail_op(&self, n: usize, errno: i32) {
        self.disk().fail_at.insert(n, errno);
    }

    /// Mutating operation `n` and every one after fail with `errno` (a remount read-only
    /// under the writer), until `clear_faults`.
    pub fn fail_from(&self, n: usize, errno: i32) {
        self.disk().fail_from = Some((n, errno));
    }

    /// Someone else removes `dir` and everything under it right before mutating
    /// operation `n`.
    pub fn delete_tree_before(&self, n: usize, dir: &Path) {
        self.disk().delete_before = Some((n, normal(dir)));
    }

    /// Someone else fills the disk right before mutating operation `n`: no byte more fits.
    pub fn fill_up_before(&self, n: usize) {
        self.disk().fill_before = Some(n);
    }

    /// Lift every fault: no failing ops, no capacity, writable.
    pub fn clear_faults(&self) {
        let mut d = self.disk();
        d.fail_at.clear();
        d.fail_from = None;
        d.fill_before = None;
        d.delete_before = None;
        d.capacity = None;
        d.read_only = false;
    }

    /// Makes `dir` (and its parents) as `mkdir -p` by someone else would, durable.
    pub fn make_dir(&self, dir: &Path) {
        let mut d = self.disk();
        for a in normal(dir)
            .ancestors()
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
        {
            if !d.names.contains_key(a) {
                let ino = d.new_inode(Node::Dir, 0o700);
                d.names.insert(a.to_path_buf(), ino);
                d.durable.insert(a.to_path_buf(), ino);
            }
        }
    }

    /// At most `bytes` of file data fit (ENOSPC past it); `None` lifts the limit.
    pub fn set_capacity(&self, bytes: Option<usize>) {
        self.disk().capacity = bytes;
    }

    /// Bytes of file data held by the files that have a name.
    pub fn used(&self) -> usize {
        self.disk().used()
    }

    /// Every mutating operation fails with EROFS while `yes`.
    pub fn set_read_only(&self, yes: bool) {
        self.disk().read_only = yes;
    }

    /// Everything made durable now, as after `sync(1)`.
    pub fn sync_all(&self) {
        let mut d = self.disk();
        d.durable = d.names.clone();
        d.journal.clear();
        for ino in &mut d.inodes {
            ino.durable_data = ino.data.clone();
            ino.durable_mode = ino.mode;
        }
    }

    /// Every disk a reboot may find after the power went out now, deduplicated: the
    /// durable namespace with any prefix of the pending metadata operations (a journal
    /// commits them in order) plus every one made durable by a directory fsync, each with
    /// unsynced file data lost, torn or kept. The power is on again in each.
    pub fn images(&self) -> Vec<(SimFs, String)> {
        let d = self.disk();
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for p in 0..=d.journal.len() {
            let mut names = d.durable.clone();
            for (i, op) in d.journal.iter().enumerate() {
                if i < p || op.unsynced.is_empty() {
                    apply(&mut names, &op.changes);
                }
            }
            for fate in [DataFate::Lost, DataFate::Torn, DataFate::Kept] {
                let mut inodes = d.inodes.clone();
                for ino in &mut inodes {
                    let (data, mode) = match fate {
                        DataFate::Lost => (ino.durable_data.clone(), ino.durable_mode),
                        DataFate::Torn if ino.data != ino.durable_data => {
                            (ino.data[..ino.data.len() / 2].to_vec(), ino.durable_mode)
                        }
                        DataFate::Torn => (ino.durable_data.clone(), ino.durable_mode),
                        DataFate::Kept => (ino.data.clone(), ino.mode),
                    };
                    (ino.data, ino.durable_data) = (data.clone(), data);
                    (ino.mode, ino.durable_mode) = (mode, mode);
                }
                let key: Vec<_> = names
                    .iter()
                    .map(|(p, i)| (p.clone(), inodes[*i].node.clone(), inodes[*i].data.clone()))
                    .collect();
                if !seen.insert(key) {
                    continue;
                }
                let disk = Disk {
                    inodes,
                    names: names.clone(),
                    durable: names.clone(),
                    umask: d.umask,
                    ..Disk::default()
                };
                let what = format!(
                    "{p} of {} pending metadata ops committed, unsynced data {fate:?}",
                    d.journal.len()
                );
                out.push((SimFs(Arc::new(Mutex::new(disk))), what));
            }
        }
        out
    }

    /// The names on the disk as a running process sees them, with what each is.
    pub fn listing(&self) -> Vec<String> {
        let d = self.disk();
        d.names
            .iter()
            .map(|(p, i)| {
                let ino = &d.inodes[*i];
                match &ino.node {
                    Node::Dir => format!("{} dir {:o}", p.display(), ino.mode),
                    Node::Symlink(t) => format!("{} -> {}", p.display(), t.display()),
                    Node::File => {
                        format!("{} {} bytes {:o}", p.display(), ino.data.len(), ino.mode)
                    }
                }
            })
            .collect()
    }

    /// The mode of the file `path` names (following symlinks).
    pub fn mode_of(&self, path: &Path) -> io::Result<u32> {
        let d = self.disk();
        let ino = d.resolve(path)?;
        Ok(d.inodes[ino].mode)
    }
}

// === impl Disk ===

impl Disk {
    fn new_inode(&mut self, node: Node, mode: u32) -> usize {
        self.inodes.push(Inode {
            node,
            data: Vec::new(),
            durable_data: Vec::new(),
            mode,
            durable_mode: mode,
        });
        self.inodes.len() - 1
    }

    fn used(&self) -> usize {
        let live: BTreeSet<usize> = self.names.values().copied().collect();
        live.iter().map(|i| self.inodes[*i].data.len()).sum()
    }

    /// Count a mutating operation; fail it if the power is out or a fault is due.
    fn begin(&mut self) -> io::Result<()> {
        if self.dead {
            return Err(power_lost());
        }
        let n = self.ops;
        self.ops += 1;
        if self.cut_before == Some(n) {
            self.dead = true;
            return Err(power_lost());
        }
        if let Some((at, dir)) = self.delete_before.take() {
            match at == n {
                true => {
                    self.names.retain(|p, _| !p.starts_with(&dir));
                    self.durable.retain(|p, _| !p.starts_with(&dir));
                    for op in &mut self.journal {
                        op.changes.retain(|(p, _)| !p.starts_with(&dir));
                    }
                }
                false => self.delete_before = Some((at, dir)),
            }
        }
        if self.fill_before == Some(n) {
            self.capacity = Some(self.used());
        }
        if let Some(errno) = self.fail_at.remove(&n) {
            return Err(io::Error::from_raw_os_error(errno));
        }
        if let Some((from, errno)) = self.fail_from {
            if n >= from {
                return Err(io::Error::from_raw_os_error(errno));
            }
        }
        if self.read_only {
            return Err(io::Error::from_raw_os_error(EROFS));
        }
        Ok(())
    }

    fn alive(&self) -> io::Result<()> {
        match self.dead {
            true => Err(power_lost()),
            false => Ok(()),
        }
    }

    /// Records a metadata operation, pending the fsync of each directory it touches.
    fn meta(&mut self, changes: Vec<(PathBuf, Option<usize>)>) {
        apply(&mut self.names, &changes);
        let unsynced = changes.iter().map(|(p, _)| parent_of(p)).collect();
        self.journal.push(MetaOp { changes, unsynced });
    }

    fn lookup(&self, path: &Path) -> io::Result<usize> {
        self.names
            .get(&normal(path))
            .copied()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }

    /// The inode `path` names, following symlinks.
    fn resolve(&self, path: &Path) -> io::Result<usize> {
        let mut path = normal(path);
        for _ in 0..8 {
            let ino = self.lookup(&path)?;
            match &self.inodes[ino].node {
                Node::Symlink(target) => path = parent_of(&path).join(target),
                _ => return Ok(ino),
            }
            path = normal(&path);
        }
        Err(io::Error::other("too many levels of symbolic links"))
    }

    /// The parent of a new entry at `path` must be a directory.
    fn parent_dir(&self, path: &Path) -> io::Result<()> {
        let ino = self.lookup(&parent_of(path))?;
        match self.inodes[ino].node {
            Node::Dir => Ok(()),
            _ => Err(io::Error::from(io::ErrorKind::NotADirectory)),
        }
    }

    fn vacant(&self, path: &Path) -> io::Result<()> {
        self.parent_dir(path)?;
        match self.names.contains_key(&normal(path)) {
            true => Err(io::Error::from(io::ErrorKind::AlreadyExists)),
            false => Ok(()),
        }
    }
}

/// Makes a metadata operation's `changes` (a name to an inode, or removed) in `names`.
fn apply(names: &mut BTreeMap<PathBuf, usize>, changes: &[(PathBuf, Option<usize>)]) {
    for (path, to) in changes {
        match to {
            Some(ino) => names.insert(path.clone(), *ino),
            None => names.remove(path),
        };
    }
}

fn power_lost() -> io::Error {
    io::Error::other("simulated power cut")
}

/// `path` absolute with `.` and `..` resolved lexically (the sim has no mounts).
fn normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

fn parent_of(path: &Path) -> PathBuf {
    normal(path)
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/"))
}

impl Fs for SimFs {
    type File = SimFile;

    fn create_new(&self, path: &Path, mode: u32) -> io::Result<SimFile> {
        let mut d = self.disk();
        d.begin()?;
        d.vacant(path)?;
        let mode = mode & !d.umask;
        let ino = d.new_inode(Node::File, mode);
        d.meta(vec![(normal(path), Some(ino))]);
        Ok(SimFile(ino))
    }

    fn write_all(&self, file: &mut SimFile, _: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut d = self.disk();
        d.begin()?;
        let room = d.capacity.map(|c| c.saturating_sub(d.used()));
        let n = room.map_or(bytes.len(), |r| r.min(bytes.len()));
        d.inodes[file.0].data.extend_from_slice(&bytes[..n]);
        match n < bytes.len() {
            true => Err(io::Error::from_raw_os_error(ENOSPC)),
            false => Ok(()),
        }
    }

    fn set_mode(&self, file: &mut SimFile, _: &Path, mode: u32) -> io::Result<()> {
        let mut d = self.disk();
        d.begin()?;
        d.inodes[file.0].mode = mode;
        Ok(())
    }

    fn sync(&self, file: &mut SimFile, _: &Path) -> io::Result<()> {
        let mut d = self.disk();
        d.begin()?;
        let ino = &mut d.inodes[file.0];
        ino.durable_data = ino.data.clone();
        ino.durable_mode = ino.mode;
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut d = self.disk();
        d.begin()?;
        let ino = d.lookup(from)?;
        d.parent_dir(to)?;
        if let Ok(old) = d.lookup(to) {
            if d.inodes[old].node == Node::Dir {
                return Err(io::Error::from(io::ErrorKind::IsADirectory));
            }
        }
        d.meta(vec![(normal(from), None), (normal(to), Some(ino))]);
        Ok(())
    }

    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut d = self.disk();
        d.begin()?;
        let ino = d.lookup(from)?;
        d.vacant(to)?;
        d.meta(vec![(normal(to), Some(ino))]);
        Ok(())
    }

    fn symlink(&self, target: &Path, link: &Path) -> io::Result<()> {
        let mut d = self.disk();
        d.begin()?;
        d.vacant(link)?;
        let ino = d.new_inode(Node::Symlink(target.to_path_buf()), 0o777);
        d.meta(vec![(normal(link), Some(ino))]);
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut d = self.disk();
        d.begin()?;
        d.lookup(dir)?;
        let dir = normal(dir);
        for op in &mut d.journal {
            op.unsynced.remove(&dir);
        }
        // Fold the durable head of the journal into the durable namespace.
        while d.journal.first().is_some_and(|op| op.unsynced.is_empty()) {
            let op = d.journal.remove(0);
            apply(&mut d.durable, &op.changes);
        }
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut d = self.disk();
        d.begin()?;
        let ino = d.lookup(path)?;
        if d.inodes[ino].node == Node::Dir {
            return Err(io::Error::from(io::ErrorKind::IsADirectory));
        }
        d.meta(vec![(normal(path), None)]);
        Ok(())
    }

    fn create_dir_all(&self, dir: &Path, mode: u32) -> io::Result<()> {
        let mut d = self.disk();
        d.begin()?;
        let dir = normal(dir);
        for a in dir.ancestors().collect::<Vec<_>>().into_iter().rev() {
            match d.lookup(a) {
                Ok(ino) if d.inodes[ino].node == Node::Dir => continue,
                Ok(_) => return Err(io::Error::from(io::ErrorKind::AlreadyExists)),
                Err(_) => {
                    let mode = mode & !d.umask;
                    let ino = d.new_inode(Node::Dir, mode);
                    d.meta(vec![(a.to_path_buf(), Some(ino))]);
                }
            }
        }
        Ok(())
    }

    fn set_dir_mode(&self, dir: &Path, mode: u32) -> io::Result<()> {
        let mut d = self.disk();
        d.begin()?;
        let ino = d.lookup(dir)?;
        d.inodes[ino].mode = mode;
        Ok(())
    }

    fn read_to_string(&self, path: &Path) -> io::Result<String> {
        let d = self.disk();
        d.alive()?;
        let ino = d.resolve(path)?;
        match d.inodes[ino].node {
            Node::File => String::from_utf8(d.inodes[ino].data.clone())
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
            _ => Err(io::Error::from(io::ErrorKind::IsADirectory)),
        }
    }

    fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
        let d = self.disk();
        d.alive()?;
        match &d.inodes[d.lookup(path)?].node {
            Node::Symlink(target) => Ok(target.clone()),
            _ => Err(io::Error::from(io::ErrorKind::InvalidInput)),
        }
    }

    fn read_dir(&self, dir: &Path) -> io::Result<Vec<(OsString, bool)>> {
        let d = self.disk();
        d.alive()?;
        let ino = d.lookup(dir)?;
        if d.inodes[ino].node != Node::Dir {
            return Err(io::Error::from(io::ErrorKind::NotADirectory));
        }
        let dir = normal(dir);
        Ok(d.names
            .iter()
            .filter(|(p, _)| p.parent() == Some(dir.as_path()) && **p != dir)
            .map(|(p, i)| {
                let name = p.file_name().unwrap_or_default().to_os_string();
                (name, d.inodes[*i].node == Node::Dir)
            })
            .collect())
    }

    fn symlink_metadata(&self, path: &Path) -> io::Result<Meta> {
        let d = self.disk();
        d.alive()?;
        let ino = &d.inodes[d.lookup(path)?];
        let kind = match ino.node {
            Node::File => Kind::File,
            Node::Dir => Kind::Dir,
            Node::Symlink(_) => Kind::Symlink,
        };
        Ok(Meta {
            kind,
            mode: ino.mode,
            uid: rustix::process::geteuid().as_raw(),
        })
    }
}

mod tests;
