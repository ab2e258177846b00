//! The state directory as one open directory: every file in it is reached relative to the
//! directory's descriptor, never by a path walked again, and never through a symbolic link.
//!
//! The records steer root's writes under `/sys/block`, so whoever can write them can steer
//! the machine. As sshd does with its keys, a directory or file that another user owns, or
//! that its group or anyone may write, is refused and named, before anything in it is read
//! or written. The temporary file of a save is created with `O_EXCL|O_NOFOLLOW`: a link
//! planted at its name is removed (the link, never what it names), and a file that appears
//! between the removal and the create fails the save rather than being followed.

use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{AtFlags, CWD, FileType, FlockOperation, Mode, OFlags, Stat};
use rustix::io::Errno;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// What is wrong with a state directory or one of its files.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsafe {
    #[error(
        "owned by uid {owner}, not by this process's user (uid {euid}) or root: another user could steer what is restored"
    )]
    Owner { owner: u32, euid: u32 },
    #[error(
        "writable by its group or by anyone (mode {mode:04o}): another user could steer what is restored"
    )]
    Writable { mode: u32 },
    #[error("a symbolic link: the state file is never read or written through a link")]
    Symlink,
    #[error("not a regular file ({kind})")]
    NotRegular { kind: &'static str },
    #[error(
        "its ancestor {ancestor} is {why}: whoever can write there can replace the state directory"
    )]
    Ancestor { ancestor: PathBuf, why: String },
}

/// An I/O failure on `path`, or a reason not to trust it.
#[derive(Debug, thiserror::Error)]
pub enum DirError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: refused: {why}")]
    Unsafe { path: PathBuf, why: Unsafe },
    #[error("{path}: not a directory")]
    NotADirectory { path: PathBuf },
}

impl DirError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, DirError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

fn io(path: &Path, e: impl Into<std::io::Error>) -> DirError {
    DirError::Io {
        path: path.to_path_buf(),
        source: e.into(),
    }
}

/// The owner and mode rule, for a directory or a file: owned by `euid` or root, and not
/// writable by group or others.
pub fn trust(st: &Stat, euid: u32) -> Result<(), Unsafe> {
    let mode = st.st_mode & 0o7777;
    if st.st_uid != euid && st.st_uid != 0 {
        return Err(Unsafe::Owner {
            owner: st.st_uid,
            euid,
        });
    }
    if mode & 0o022 != 0 {
        return Err(Unsafe::Writable { mode });
    }
    Ok(())
}

/// Every ancestor of the canonical `path`, from the root down, as sshd's StrictModes checks
/// a key's directories: owned by root or `euid`, and not writable by group or others
/// unless sticky (`/tmp`: others may add entries there, never rename or remove ours).
fn trust_ancestors(path: &Path, euid: u32) -> Result<(), Unsafe> {
    for a in path.ancestors().skip(1) {
        let st = rustix::fs::stat(a).map_err(|e| Unsafe::Ancestor {
            ancestor: a.to_path_buf(),
            why: format!("unreadable ({e})"),
        })?;
        let mode = st.st_mode & 0o7777;
        if st.st_uid != euid && st.st_uid != 0 {
            return Err(Unsafe::Ancestor {
                ancestor: a.to_path_buf(),
                why: format!(
                    "owned by uid {}, not by this process's user (uid {euid}) or root",
                    st.st_uid
                ),
            });
        }
        if mode & 0o022 != 0 && mode & 0o1000 == 0 {
            return Err(Unsafe::Ancestor {
                ancestor: a.to_path_buf(),
                why: format!("writable by its group or by anyone and not sticky (mode {mode:04o})"),
            });
        }
    }
    Ok(())
}

/// A regular file, or what else it is.
fn regular(st: &Stat) -> Result<(), Unsafe> {
    let kind = match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => return Ok(()),
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Directory => "a directory",
        _ => "a special file",
    };
    Err(Unsafe::NotRegular { kind })
}

fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// An open, trusted state directory.
#[derive(Debug)]
pub struct SafeDir {
    fd: OwnedFd,
    path: PathBuf,
}

impl SafeDir {
    /// Opens `path` (created, mode 0700, when `create` and missing) and checks its owner
    /// and mode, and every ancestor's from the root down. Links on the way are resolved
    /// first (an operator may link the directory elsewhere): what is checked, and opened
    /// with `O_NOFOLLOW`, is the directory reached.
    pub fn open(path: &Path, create: bool) -> Result<SafeDir, DirError> {
        if create {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(path)
                .map_err(|e| io(path, e))?;
        }
        let real = match std::fs::canonicalize(path) {
            Ok(p) => p,
            Err(e) if e.raw_os_error() == Some(libc_enotdir()) => {
                return Err(DirError::NotADirectory {
                    path: path.to_path_buf(),
                });
            }
            Err(e) => return Err(io(path, e)),
        };
        trust_ancestors(&real, euid()).map_err(|why| DirError::Unsafe {
            path: path.to_path_buf(),
            why,
        })?;
        let fd = rustix::fs::openat(
            CWD,
            &real,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::NOTDIR => DirError::NotADirectory {
                path: path.to_path_buf(),
            },
            e => io(path, e),
        })?;
        let st = rustix::fs::fstat(&fd).map_err(|e| io(path, e))?;
        trust(&st, euid()).map_err(|why| DirError::Unsafe {
            path: path.to_path_buf(),
            why,
        })?;
        Ok(SafeDir {
            fd,
            path: path.to_path_buf(),
        })
    }

    fn child(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Opens `name` with `flags`, created if missing, readable and writable by the owner
    /// alone, never through a link.
    fn create_private(&self, name: &str, flags: OFlags) -> Result<OwnedFd, Errno> {
        rustix::fs::openat(
            &self.fd,
            name,
            flags | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
    }

    /// Opens the existing file `name` with `access` (RDONLY or WRONLY), never through a
    /// link and never blocking on a FIFO; None when there is no such file.
    fn open_existing(&self, name: &str, access: OFlags) -> Result<Option<OwnedFd>, DirError> {
        match rustix::fs::openat(
            &self.fd,
            name,
            access | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => Ok(Some(fd)),
            Err(Errno::NOENT) => Ok(None),
            Err(Errno::LOOP) => Err(DirError::Unsafe {
                path: self.child(name),
                why: Unsafe::Symlink,
            }),
            Err(e) => Err(io(&self.child(name), e)),
        }
    }

    /// Reads `name` whole (at most `max_bytes`), or None when it does not exist. A link, a
    /// non-regular file, or one another user could have written is refused.
    pub fn read(&self, name: &str, max_bytes: u64) -> Result<Option<Vec<u8>>, DirError> {
        let path = self.child(name);
        let Some(fd) = self.open_existing(name, OFlags::RDONLY)? else {
            return Ok(None);
        };
        trusted_regular(&fd, &path)?;
        let mut bytes = Vec::new();
        std::fs::File::from(fd)
            .take(max_bytes.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| io(&path, e))?;
        Ok(Some(bytes))
    }

    /// Replaces `name` with `bytes` atomically and durably: a new temporary file (never
    /// one that exists, never through a link), synced, renamed over `name`, and the
    /// directory synced.
    pub fn write_atomic(&self, name: &str, bytes: &[u8]) -> Result<(), DirError> {
        let tmp = format!(".{name}.tmp");
        let tmp_path = self.child(&tmp);
        // Left by a crash, or planted: unlinking removes the entry itself, never what a
        // link names.
        match rustix::fs::unlinkat(&self.fd, tmp.as_str(), AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(e) => return Err(io(&tmp_path, e)),
        }
        let fd = self
            .create_private(&tmp, OFlags::WRONLY | OFlags::EXCL)
            .map_err(|e| io(&tmp_path, e))?;
        let mut f = std::fs::File::from(fd);
        let written = f.write_all(bytes).and_then(|()| f.sync_all());
        drop(f);
        if let Err(e) = written {
            let _ = rustix::fs::unlinkat(&self.fd, tmp.as_str(), AtFlags::empty());
            return Err(io(&tmp_path, e));
        }
        if let Err(e) = rustix::fs::renameat(&self.fd, tmp.as_str(), &self.fd, name) {
            let _ = rustix::fs::unlinkat(&self.fd, tmp.as_str(), AtFlags::empty());
            return Err(io(&self.child(name), e));
        }
        // The rename is durable only once the directory is synced.
        let _ = rustix::fs::fsync(&self.fd);
        Ok(())
    }

    /// Removes `name`; a missing file is no error.
    pub fn remove(&self, name: &str) -> Result<(), DirError> {
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(io(&self.child(name), e)),
        }
    }

    /// Rewrites the existing file `name` in place with `bytes` (never creating one, never
    /// through a link). Not atomic: only for contents that lose nothing if torn (a file
    /// emptied of records), where a directory that refuses new entries (immutable, full)
    /// still lets an existing file be rewritten.
    pub fn rewrite_in_place(&self, name: &str, bytes: &[u8]) -> Result<(), DirError> {
        let path = self.child(name);
        let fd = self
            .open_existing(name, OFlags::WRONLY)?
            .ok_or_else(|| io(&path, Errno::NOENT))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| io(&path, e))?;
        regular(&st).map_err(|why| DirError::Unsafe {
            path: path.clone(),
            why,
        })?;
        rustix::fs::ftruncate(&fd, 0).map_err(|e| io(&path, e))?;
        let mut f = std::fs::File::from(fd);
        f.write_all(bytes)
            .and_then(|()| f.sync_all())
            .map_err(|e| io(&path, e))
    }

    /// Proves a file can be created in the directory: one is created (exclusively, under a
    /// name of this process's) and removed at once.
    pub fn probe_writable(&self, name: &str) -> Result<(), DirError> {
        let path = self.child(name);
        let fd = self
            .create_private(name, OFlags::WRONLY | OFlags::EXCL)
            .map_err(|e| io(&path, e))?;
        let wrote = std::fs::File::from(fd).write_all(b"probe\n");
        self.remove(name)?;
        wrote.map_err(|e| io(&path, e))
    }

    /// Takes the directory's lock file `name` exclusively, for as long as the returned
    /// descriptor lives, and writes this process's pid in it. `Ok(Err(pid))`: someone
    /// holds it (the pid it wrote, when readable).
    pub fn lock(&self, name: &str) -> Result<Result<OwnedFd, Option<u32>>, DirError> {
        let path = self.child(name);
        // Never blocking on a FIFO, never through a link, and only a regular file: a lock
        // file that is anything else is named for what it is, not blamed on a daemon.
        let fd = self
            .create_private(name, OFlags::RDWR | OFlags::NONBLOCK)
            .map_err(|e| match e {
                Errno::LOOP => DirError::Unsafe {
                    path: path.clone(),
                    why: Unsafe::Symlink,
                },
                Errno::ISDIR => DirError::Unsafe {
                    path: path.clone(),
                    why: Unsafe::NotRegular {
                        kind: "a directory",
                    },
                },
                e => io(&path, e),
            })?;
        trusted_regular(&fd, &path)?;
        match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(Errno::WOULDBLOCK) => return Ok(Err(read_pid(&fd))),
            Err(e) => return Err(io(&path, e)),
        }
        rustix::fs::ftruncate(&fd, 0).map_err(|e| io(&path, e))?;
        rustix::io::pwrite(&fd, format!("{}\n", std::process::id()).as_bytes(), 0)
            .map_err(|e| io(&path, e))?;
        Ok(Ok(fd))
    }

    /// Who holds the lock file `name`, without taking it: None when nobody does (or there
    /// is no lock file), else the pid it names (when readable).
    pub fn lock_holder(&self, name: &str) -> Result<Option<Option<u32>>, DirError> {
        let path = self.child(name);
        let Some(fd) = self.open_existing(name, OFlags::RDONLY)? else {
            return Ok(None);
        };
        let st = rustix::fs::fstat(&fd).map_err(|e| io(&path, e))?;
        regular(&st).map_err(|why| DirError::Unsafe {
            path: path.clone(),
            why,
        })?;
        match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockShared) {
            Ok(()) => Ok(None),
            Err(Errno::WOULDBLOCK) => Ok(Some(read_pid(&fd))),
            Err(e) => Err(io(&path, e)),
        }
    }
}

fn libc_enotdir() -> i32 {
    Errno::NOTDIR.raw_os_error()
}

fn read_pid(fd: impl AsFd) -> Option<u32> {
    let mut buf = [0u8; 16];
    let n = rustix::io::pread(fd, &mut buf, 0).ok()?;
    std::str::from_utf8(&buf[..n]).ok()?.trim().parse().ok()
}

/// `fd` is a regular file that no other user could have written, or why not.
fn trusted_regular(fd: &impl AsFd, path: &Path) -> Result<(), DirError> {
    let st = rustix::fs::fstat(fd).map_err(|e| io(path, e))?;
    regular(&st)
        .and_then(|()| trust(&st, euid()))
        .map_err(|why| DirError::Unsafe {
            path: path.to_path_buf(),
            why,
        })
}
