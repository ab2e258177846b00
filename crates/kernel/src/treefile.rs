//! Reading a file of a kernel tree (the sysfs or procfs root, real or fake) by its path under
//! the root: never blocking, never leaving the tree, never more than a cap.
//!
//! The file is opened with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` under a
//! descriptor of the root: a symlink may move within the tree (`/sys/block/sda` points into
//! `/sys/devices`), and one that leads out of it (absolute, or `..` past the root) fails the
//! open, so an attribute read never follows a link to `/etc`. The open is `O_NONBLOCK`: a
//! FIFO put where `/proc/diskstats` should be would otherwise block the tick in `open` and,
//! with it, the daemon's SIGTERM while its tunables are changed. The open descriptor is then
//! checked with `fstat`: only a regular file is read (sysfs and procfs attributes are
//! regular files of size 0 or 4096), and never more than `max_bytes` of it.
//!
//! A kernel without `openat2` (before 5.6; a seccomp filter that refuses it) gets the same
//! rules by path: the canonical path must lie under the canonical root, and the last
//! component is opened with `O_NOFOLLOW`.

use rustix::fs::{Mode, OFlags, ResolveFlags};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Why a file of a kernel tree was not read; every variant names the path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TreeFileError {
    #[error("{}: {message}", path.display())]
    Open {
        path: PathBuf,
        kind: std::io::ErrorKind,
        message: String,
    },
    #[error("{}: resolves outside {} (a symlink leading out of the tree): not read", path.display(), root.display())]
    OutsideTree { path: PathBuf, root: PathBuf },
    #[error("{}: is {what}, not a regular file: not read (reading it could block)", path.display())]
    NotRegular { path: PathBuf, what: &'static str },
    #[error("{}: larger than {max_bytes} bytes: not read", path.display())]
    TooLarge { path: PathBuf, max_bytes: u64 },
    #[error("{}: {message}", path.display())]
    Read {
        path: PathBuf,
        kind: std::io::ErrorKind,
        message: String,
    },
}

impl TreeFileError {
    /// The path the error is about.
    pub fn path(&self) -> &Path {
        match self {
            TreeFileError::Open { path, .. }
            | TreeFileError::OutsideTree { path, .. }
            | TreeFileError::NotRegular { path, .. }
            | TreeFileError::TooLarge { path, .. }
            | TreeFileError::Read { path, .. } => path,
        }
    }
}

fn open_error(path: &Path, e: std::io::Error) -> TreeFileError {
    TreeFileError::Open {
        path: path.to_path_buf(),
        kind: e.kind(),
        message: e.to_string(),
    }
}

const READ_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::NONBLOCK)
    .union(OFlags::CLOEXEC)
    .union(OFlags::NOCTTY);

/// Opens `rel` under `root` for reading, never leaving the tree and never blocking.
fn open_beneath(root: &Path, rel: &Path) -> Result<std::fs::File, TreeFileError> {
    let path = root.join(rel);
    let outside = || TreeFileError::OutsideTree {
        path: path.clone(),
        root: root.to_path_buf(),
    };
    if rel.is_absolute() {
        return Err(outside());
    }
    let dir = rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| open_error(root, e.into()))?;
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
    match rustix::fs::openat2(&dir, rel, READ_FLAGS, Mode::empty(), resolve) {
        Ok(fd) => Ok(std::fs::File::from(fd)),
        Err(rustix::io::Errno::XDEV) => Err(outside()),
        Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM) => open_by_path(root, &path),
        Err(e) => Err(open_error(&path, e.into())),
    }
}

/// [`open_beneath`]'s rules by path, where `openat2` is not there.
fn open_by_path(root: &Path, path: &Path) -> Result<std::fs::File, TreeFileError> {
    let canon = |p: &Path| std::fs::canonicalize(p).map_err(|e| open_error(p, e));
    let (root_c, file_c) = (canon(root)?, canon(path)?);
    if !file_c.starts_with(&root_c) {
        return Err(TreeFileError::OutsideTree {
            path: path.to_path_buf(),
            root: root.to_path_buf(),
        });
    }
    let fd = rustix::fs::open(&file_c, READ_FLAGS | OFlags::NOFOLLOW, Mode::empty())
        .map_err(|e| open_error(path, e.into()))?;
    Ok(std::fs::File::from(fd))
}

/// The whole of the regular file `rel` under `root`, at most `max_bytes` of it.
pub fn read_beneath(root: &Path, rel: &Path, max_bytes: u64) -> Result<Vec<u8>, TreeFileError> {
    let path = root.join(rel);
    let f = open_beneath(root, rel)?;
    let read_error = |e: std::io::Error| TreeFileError::Read {
        path: path.clone(),
        kind: e.kind(),
        message: e.to_string(),
    };
    let meta = f.metadata().map_err(read_error)?;
    if !meta.file_type().is_file() {
        return Err(TreeFileError::NotRegular {
            path: path.clone(),
            what: crate::userfile::what(meta.file_type()),
        });
    }
    let mut buf = Vec::with_capacity(4096);
    // One byte past the cap tells a file larger than it (procfs files say size 0).
    f.take(max_bytes.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(read_error)?;
    if buf.len() as u64 > max_bytes {
        return Err(TreeFileError::TooLarge { path, max_bytes });
    }
    Ok(buf)
}

/// [`read_beneath`] as text (a byte that is not UTF-8 becomes U+FFFD).
pub fn read_text_beneath(root: &Path, rel: &Path, max_bytes: u64) -> Result<String, TreeFileError> {
    read_beneath(root, rel, max_bytes).map(|b| String::from_utf8_lossy(&b).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A scratch directory with the tree's root, `sys`, in it and `dir` below the root.
    fn tree(dir: &str) -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("sys");
        std::fs::create_dir_all(root.join(dir)).unwrap();
        (d, root)
    }

    #[test]
    fn a_file_in_the_tree_is_read_through_links_inside_it() {
        let (_d, root) = tree("devices/x/queue");
        std::fs::create_dir_all(root.join("block")).unwrap();
        std::fs::write(root.join("devices/x/queue/nomerges"), "0\n").unwrap();
        symlink("../devices/x", root.join("block/sda")).unwrap();
        let got = read_text_beneath(&root, Path::new("block/sda/queue/nomerges"), 4096);
        assert_eq!(got.unwrap(), "0\n");
        let e = read_beneath(&root, Path::new("block/sda/queue/nomerges"), 1).unwrap_err();
        assert!(matches!(e, TreeFileError::TooLarge { .. }), "{e}");
    }

    #[test]
    fn links_out_of_the_tree_fifos_and_directories_are_refused_without_blocking() {
        let (d, root) = tree("block/sda/queue");
        std::fs::write(d.path().join("secret"), "s3cret\n").unwrap();
        // Absolute, and relative past the root.
        symlink(
            d.path().join("secret"),
            root.join("block/sda/queue/nomerges"),
        )
        .unwrap();
        symlink("../../../../secret", root.join("block/sda/queue/scheduler")).unwrap();
        for rel in ["block/sda/queue/nomerges", "block/sda/queue/scheduler"] {
            let e = read_beneath(&root, Path::new(rel), 4096).unwrap_err();
            assert!(matches!(e, TreeFileError::OutsideTree { .. }), "{rel}: {e}");
            assert!(e.to_string().contains(rel), "{e}");
        }
        let fifo = root.join("block/sda/stat");
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, Mode::from_raw_mode(0o600)).unwrap();
        let e = read_beneath(&root, Path::new("block/sda/stat"), 4096).unwrap_err();
        assert!(
            matches!(e, TreeFileError::NotRegular { what: "a FIFO", .. }),
            "{e}"
        );
        let e = read_beneath(&root, Path::new("block/sda"), 4096).unwrap_err();
        assert!(
            matches!(
                e,
                TreeFileError::NotRegular {
                    what: "a directory",
                    ..
                }
            ),
            "{e}"
        );
        let e = read_beneath(&root, Path::new("/etc/hostname"), 4096).unwrap_err();
        assert!(matches!(e, TreeFileError::OutsideTree { .. }), "{e}");
    }

    #[test]
    fn the_path_rules_hold_without_openat2() {
        let (d, root) = tree("a");
        std::fs::write(root.join("a/f"), "1").unwrap();
        std::fs::write(d.path().join("out"), "2").unwrap();
        symlink(d.path().join("out"), root.join("a/l")).unwrap();
        let mut f = open_by_path(&root, &root.join("a/f")).unwrap();
        let mut s = String::new();
        f.read_to_string(&mut s).unwrap();
        assert_eq!(s, "1");
        let e = open_by_path(&root, &root.join("a/l")).unwrap_err();
        assert!(matches!(e, TreeFileError::OutsideTree { .. }), "{e}");
    }
}
