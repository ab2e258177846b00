//! Reading a file a user named (a config, a cost profile, a scenario, a recording, a trace,
//! the state file): a regular file only, and never more of it than a cap.
//!
//! A FIFO would block the reader for ever (and `restore` under the unit's ExecStopPost with
//! it); `/dev/zero` would be read until memory runs out; a directory fails late with a
//! confusing EISDIR. So the file is opened with `O_NONBLOCK` (opening a FIFO that has no
//! writer blocks in `open` itself otherwise), checked with `fstat` on the open descriptor
//! (a stat of the path before the open could be raced by a rename), and refused unless it
//! is regular. The cap is checked against the size and enforced while reading too, since a
//! file can grow between the `fstat` and the read. For a regular file `O_NONBLOCK` changes
//! nothing, so the descriptor is handed on as it is. `/dev/null` (the character device
//! 1:3) is the one exception: it reads as an empty file at once, and `--config /dev/null`
//! is the usual way to say "no config, built-in defaults".

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Why a named file was not read; every variant names the path.
#[derive(Debug, thiserror::Error)]
pub enum UserFileError {
    #[error("{}: {message}", path.display())]
    Open {
        path: PathBuf,
        kind: std::io::ErrorKind,
        message: String,
    },
    #[error("{}: is {what}, not a regular file: refused (reading it could block or never end)", path.display())]
    NotRegular { path: PathBuf, what: &'static str },
    #[error("{}: larger than {max_bytes} bytes: refused", path.display())]
    TooLarge { path: PathBuf, max_bytes: u64 },
    #[error("{}: {message}", path.display())]
    Read { path: PathBuf, message: String },
    #[error("{}: not UTF-8 text (at byte {offset})", path.display())]
    NotUtf8 { path: PathBuf, offset: usize },
}

impl UserFileError {
    /// The message without the path, for an error type that names the path itself.
    pub fn reason(&self) -> String {
        let full = self.to_string();
        let path = match self {
            UserFileError::Open { path, .. }
            | UserFileError::NotRegular { path, .. }
            | UserFileError::TooLarge { path, .. }
            | UserFileError::Read { path, .. }
            | UserFileError::NotUtf8 { path, .. } => path.display().to_string(),
        };
        full.strip_prefix(&format!("{path}: "))
            .map_or(full.clone(), str::to_string)
    }

    /// The file is not there (callers that take "absent" as "nothing yet" ask this).
    pub fn is_not_found(&self) -> bool {
        matches!(self, UserFileError::Open { kind, .. } if *kind == std::io::ErrorKind::NotFound)
    }
}

impl From<UserFileError> for std::io::Error {
    fn from(e: UserFileError) -> Self {
        let kind = match &e {
            UserFileError::Open { kind, .. } => *kind,
            UserFileError::NotUtf8 { .. } => std::io::ErrorKind::InvalidData,
            _ => std::io::ErrorKind::InvalidInput,
        };
        std::io::Error::new(kind, e.to_string())
    }
}

/// What a file that is not regular is, with its article ("a FIFO").
pub(crate) fn what(t: std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// The character device 1:3, whatever its path: empty, and never blocks.
fn is_dev_null(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    let dev = meta.rdev();
    // Linux's dev_t encoding (the kernel's new_encode_dev, glibc's gnu_dev_major/minor).
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    meta.file_type().is_char_device() && (major, minor) == (1, 3)
}

/// Opens `path` for appending (created 0644 if absent) if, and only if, it is a regular
/// file (symlinks followed). A FIFO would block the writer in `open` until a reader came
/// (and the daemon's first tick, and its SIGTERM, with it): so the open is non-blocking
/// (a FIFO without a reader then fails with ENXIO, named here as a FIFO) and the open
/// descriptor is checked before anything is written.
pub fn open_regular_append(path: &Path) -> Result<std::fs::File, UserFileError> {
    let not_regular = |t: std::fs::FileType| UserFileError::NotRegular {
        path: path.to_path_buf(),
        what: what(t),
    };
    let f = open_nonblocking(std::fs::OpenOptions::new().create(true).append(true), path).map_err(
        |e| match std::fs::metadata(path) {
            Ok(m) if !m.file_type().is_file() => not_regular(m.file_type()),
            _ => e,
        },
    )?;
    let meta = metadata(&f, path)?;
    if !meta.file_type().is_file() {
        return Err(not_regular(meta.file_type()));
    }
    Ok(f)
}

/// Opens `path` for reading if, and only if, it is a regular file (symlinks followed), or
/// `/dev/null`.
pub fn open_regular(path: &Path) -> Result<std::fs::File, UserFileError> {
    let f = open_nonblocking(std::fs::OpenOptions::new().read(true), path)?;
    let meta = metadata(&f, path)?;
    if !meta.file_type().is_file() && !is_dev_null(&meta) {
        return Err(UserFileError::NotRegular {
            path: path.to_path_buf(),
            what: what(meta.file_type()),
        });
    }
    Ok(f)
}

/// Opens `path` with `opts`, never blocking in the open (a FIFO without a peer) and never
/// taking a controlling terminal.
fn open_nonblocking(
    opts: &mut std::fs::OpenOptions,
    path: &Path,
) -> Result<std::fs::File, UserFileError> {
    opts.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| UserFileError::Open {
            path: path.to_path_buf(),
            kind: e.kind(),
            message: e.to_string(),
        })
}

/// The metadata of the open `f`, named `path` in the error.
fn metadata(f: &std::fs::File, path: &Path) -> Result<std::fs::Metadata, UserFileError> {
    f.metadata().map_err(|e| UserFileError::Read {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// The whole of a regular file of at most `max_bytes` bytes.
pub fn read_bytes(path: &Path, max_bytes: u64) -> Result<Vec<u8>, UserFileError> {
    let f = open_regular(path)?;
    let too_large = || UserFileError::TooLarge {
        path: path.to_path_buf(),
        max_bytes,
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if len > max_bytes {
        return Err(too_large());
    }
    let mut buf = Vec::with_capacity(len as usize);
    // One byte past the cap tells a file that grew after the fstat.
    f.take(max_bytes.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|e| UserFileError::Read {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    if buf.len() as u64 > max_bytes {
        return Err(too_large());
    }
    Ok(buf)
}

/// [`read_bytes`] as UTF-8 text.
pub fn read_text(path: &Path, max_bytes: u64) -> Result<String, UserFileError> {
    String::from_utf8(read_bytes(path, max_bytes)?).map_err(|e| UserFileError::NotUtf8 {
        path: path.to_path_buf(),
        offset: e.utf8_error().valid_up_to(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_file_under_the_cap_is_read_whole() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        std::fs::write(&p, "abc").unwrap();
        assert_eq!(read_text(&p, 3).unwrap(), "abc");
        let e = read_text(&p, 2).unwrap_err();
        assert!(matches!(e, UserFileError::TooLarge { .. }), "{e}");
        assert!(e.to_string().contains(&p.display().to_string()), "{e}");
    }

    #[test]
    fn dev_null_reads_as_an_empty_file() {
        assert_eq!(read_text(Path::new("/dev/null"), 10).unwrap(), "");
    }

    #[test]
    fn a_missing_file_is_not_found_and_named() {
        let e = read_text(Path::new("/nonexistent/x.toml"), 10).unwrap_err();
        assert!(e.is_not_found());
        assert!(e.to_string().starts_with("/nonexistent/x.toml: "), "{e}");
    }

    #[test]
    fn special_files_are_refused_without_blocking_or_reading() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap();
        for (p, what) in [
            (fifo.as_path(), "a FIFO"),
            (Path::new("/dev/zero"), "a character device"),
            (d.path(), "a directory"),
        ] {
            let e = read_bytes(p, 1 << 20).unwrap_err();
            assert!(
                matches!(e, UserFileError::NotRegular { what: w, .. } if w == what),
                "{}: {e}",
                p.display()
            );
        }
    }
}
