//! Record and replay: what-if tuning on production data, offline.
//!
//! [`RecordingFs`] wraps any [`BlockFs`] and notes every read the daemon makes during a tick
//! (the diskstats text, device lists, attribute values); [`RecordingFs::finish`] turns
//! them into one [`TickRecord`], written as one JSON line per tick. [`ReplayFs`] serves a
//! recording back: counters and device facts come from the file, tick by tick, while the
//! tunables the replaying policy writes live in an overlay, so a replay with a different
//! config sees its own choices. With the same config, a replay reproduces the recorded
//! decisions tick for tick: the policy is pure and sees the same inputs.

use crate::controller::Controller;
use mergetune_kernel::blockfs::{BlockFs, FsError};
use mergetune_kernel::tunable::Tunable;
use mergetune_logic::decision::Decision;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Errors reading or writing a recording; the path is in every variant.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("{path}: {message}")]
    Io { path: PathBuf, message: String },
    #[error("{path}: line {line}: {message}")]
    Parse {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{path}: the recording holds no tick")]
    Empty { path: PathBuf },
}

/// What the daemon read in one tick.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TickRecord {
    /// The tick's time, ms since the recorded daemon started.
    pub t_ms: u64,
    /// The /proc/diskstats content (absent when it could not be read): a JSON string when
    /// it is UTF-8 (always, in recordings made before diskstats was read as bytes), else an
    /// array of byte values, so a stray byte replays exactly as it was read.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "bytes_or_text"
    )]
    pub diskstats: Option<Vec<u8>>,
    /// The /sys/block listing, when the daemon rescanned in this tick.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<Vec<String>>,
    /// `dev/rel` -> value read (None: not found).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attrs: BTreeMap<String, Option<String>>,
    /// `dev/rel` -> directory entries read.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub dirs: BTreeMap<String, Vec<String>>,
}

mod bytes_or_text {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Text(String),
        Bytes(Vec<u8>),
    }

    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            None => s.serialize_none(),
            Some(b) => match std::str::from_utf8(b) {
                Ok(t) => s.serialize_str(t),
                Err(_) => b.serialize(s),
            },
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        Ok(Option::<Repr>::deserialize(d)?.map(|r| match r {
            Repr::Text(t) => t.into_bytes(),
            Repr::Bytes(b) => b,
        }))
    }
}

/// A [`BlockFs`] that notes what is read through it.
pub struct RecordingFs<'a> {
    inner: &'a mut dyn BlockFs,
    current: TickRecord,
}

impl<'a> RecordingFs<'a> {
    pub fn new(inner: &'a mut dyn BlockFs, t_ms: u64) -> Self {
        RecordingFs {
            inner,
            current: TickRecord {
                t_ms,
                ..Default::default()
            },
        }
    }
    /// The record of everything read since `new`.
    pub fn finish(self) -> TickRecord {
        self.current
    }
}

fn key(dev: &str, rel: &str) -> String {
    format!("{dev}/{rel}")
}

impl BlockFs for RecordingFs<'_> {
    fn read_diskstats(&mut self) -> Result<Vec<u8>, FsError> {
        let r = self.inner.read_diskstats();
        if let Ok(t) = &r {
            self.current.diskstats = Some(t.clone());
        }
        r
    }
    fn list_block_devices(&mut self) -> Result<Vec<String>, FsError> {
        let r = self.inner.list_block_devices();
        if let Ok(v) = &r {
            self.current.devices = Some(v.clone());
        }
        r
    }
    fn read_attr(&mut self, dev: &str, rel: &str) -> Result<String, FsError> {
        let r = self.inner.read_attr(dev, rel);
        match &r {
            Ok(v) => {
                self.current.attrs.insert(key(dev, rel), Some(v.clone()));
            }
            Err(FsError::NotFound { .. }) => {
                self.current.attrs.insert(key(dev, rel), None);
            }
            Err(_) => {}
        }
        r
    }
    fn write_tunable(&mut self, dev: &str, tunable: Tunable, value: &str) -> Result<(), FsError> {
        self.inner.write_tunable(dev, tunable, value)
    }
    fn list_dir(&mut self, dev: &str, rel: &str) -> Result<Vec<String>, FsError> {
        let r = self.inner.list_dir(dev, rel);
        if let Ok(v) = &r {
            self.current.dirs.insert(key(dev, rel), v.clone());
        }
        r
    }
    fn attr_exists(&mut self, dev: &str, rel: &str) -> bool {
        // Recorded as a read so a replay answers the same.
        match self.inner.read_attr(dev, rel) {
            Ok(v) => {
                self.current.attrs.insert(key(dev, rel), Some(v));
                true
            }
            Err(FsError::NotFound { .. }) => {
                self.current.attrs.insert(key(dev, rel), None);
                false
            }
            Err(_) => self.inner.attr_exists(dev, rel),
        }
    }
}

/// Appends tick records to a JSON-lines file.
pub struct Recorder {
    path: PathBuf,
    out: std::io::BufWriter<std::fs::File>,
}

impl Recorder {
    pub fn create(path: &Path) -> Result<Self, RecordError> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| RecordError::Io {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
        Ok(Recorder {
            path: path.to_path_buf(),
            out: std::io::BufWriter::new(f),
        })
    }

    /// Writes one tick as one line, flushed so a crash loses at most the current tick.
    pub fn write(&mut self, rec: &TickRecord) -> Result<(), RecordError> {
        let io = |e: std::io::Error| RecordError::Io {
            path: self.path.clone(),
            message: e.to_string(),
        };
        let line = serde_json::to_string(rec).map_err(|e| RecordError::Io {
            path: self.path.clone(),
            message: e.to_string(),
        })?;
        self.out.write_all(line.as_bytes()).map_err(io)?;
        self.out.write_all(b"\n").map_err(io)?;
        self.out.flush().map_err(io)
    }
}

/// The longest tick line [`load`] reads: a tick holds one /proc/diskstats read (at most
/// [`mergetune_kernel::blockfs::MAX_DISKSTATS_BYTES`], up to four times that as a JSON byte array)
/// and the few attributes read with it.
pub const MAX_LINE_BYTES: usize =
    4 * mergetune_kernel::blockfs::MAX_DISKSTATS_BYTES as usize + (1 << 20);

/// Reads a recording. A truncated last line (the daemon died mid-write) is skipped; any
/// other bad line is an error naming its number, and so is a tick earlier than the one
/// before it (a replay runs forward in time).
pub fn load(path: &Path) -> Result<Vec<TickRecord>, RecordError> {
    load_bounded(path, MAX_LINE_BYTES)
}

/// [`load`] with a bound on the line length: a line longer than `max_line_bytes` is an
/// error, read without holding more than the bound in memory.
pub fn load_bounded(path: &Path, max_line_bytes: usize) -> Result<Vec<TickRecord>, RecordError> {
    use mergetune_kernel::lines::{Line, read_line_bounded};
    let io = |e: std::io::Error| RecordError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let parse = |line: usize, message: String| RecordError::Parse {
        path: path.to_path_buf(),
        line,
        message,
    };
    let f = mergetune_kernel::userfile::open_regular(path)
        .map_err(|e| io(std::io::Error::other(e.reason())))?;
    let mut r = std::io::BufReader::with_capacity(1 << 16, f);
    let mut out: Vec<TickRecord> = Vec::new();
    let mut buf = Vec::new();
    let mut line_no = 0usize;
    let mut prev_line = 0usize;
    // A line cut short by a crash is only forgiven when nothing follows it.
    let mut truncated: Option<(usize, String)> = None;
    loop {
        let kind = read_line_bounded(&mut r, &mut buf, max_line_bytes).map_err(io)?;
        if kind == Line::Eof {
            break;
        }
        line_no += 1;
        if buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if let Some((n, message)) = truncated.take() {
            return Err(parse(n, message));
        }
        if kind == Line::TooLong {
            return Err(parse(
                line_no,
                format!("longer than {max_line_bytes} bytes: not a tick mergetune wrote"),
            ));
        }
        let rec = match serde_json::from_slice::<TickRecord>(&buf) {
            Ok(r) => r,
            Err(e) if e.is_eof() => {
                truncated = Some((line_no, e.to_string()));
                continue;
            }
            Err(e) => return Err(parse(line_no, e.to_string())),
        };
        if let Some(prev) = out.last()
            && rec.t_ms < prev.t_ms
        {
            return Err(parse(
                line_no,
                format!(
                    "t_ms {} is earlier than {} at line {prev_line}: ticks must be in time order (two recordings appended to one file?)",
                    rec.t_ms, prev.t_ms
                ),
            ));
        }
        prev_line = line_no;
        out.push(rec);
    }
    if out.is_empty() {
        return Err(RecordError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(out)
}

/// Serves a recording back, one tick at a time, with the replaying policy's writes in an
/// overlay.
pub struct ReplayFs {
    ticks: Vec<TickRecord>,
    index: usize,
    /// The latest value of every attribute seen up to the current tick.
    attrs: BTreeMap<String, Option<String>>,
    dirs: BTreeMap<String, Vec<String>>,
    devices: Vec<String>,
    written: BTreeMap<String, String>,
}

impl ReplayFs {
    pub fn new(ticks: Vec<TickRecord>) -> Self {
        ReplayFs {
            ticks,
            index: 0,
            attrs: BTreeMap::new(),
            dirs: BTreeMap::new(),
            devices: Vec::new(),
            written: BTreeMap::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.ticks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ticks.is_empty()
    }

    /// Moves to tick `i` and returns its time.
    pub fn seek(&mut self, i: usize) -> u64 {
        self.index = i;
        let t = &self.ticks[i];
        for (k, v) in &t.attrs {
            self.attrs.insert(k.clone(), v.clone());
        }
        for (k, v) in &t.dirs {
            self.dirs.insert(k.clone(), v.clone());
        }
        if let Some(d) = &t.devices {
            self.devices = d.clone();
        }
        t.t_ms
    }

    fn not_found(dev: &str, rel: &str) -> FsError {
        FsError::NotFound {
            path: format!("replay:/sys/block/{dev}/{rel}"),
        }
    }
}

impl BlockFs for ReplayFs {
    fn read_diskstats(&mut self) -> Result<Vec<u8>, FsError> {
        self.ticks[self.index]
            .diskstats
            .clone()
            .ok_or_else(|| FsError::NotFound {
                path: "replay:/proc/diskstats".into(),
            })
    }
    fn list_block_devices(&mut self) -> Result<Vec<String>, FsError> {
        Ok(self.devices.clone())
    }
    fn read_attr(&mut self, dev: &str, rel: &str) -> Result<String, FsError> {
        let k = key(dev, rel);
        if let Some(v) = self.written.get(&k) {
            return Ok(v.clone());
        }
        match self.attrs.get(&k) {
            Some(Some(v)) => Ok(v.clone()),
            _ => Err(Self::not_found(dev, rel)),
        }
    }
    fn write_tunable(&mut self, dev: &str, tunable: Tunable, value: &str) -> Result<(), FsError> {
        let rel = tunable.rel_path();
        let k = key(dev, rel);
        if !matches!(self.attrs.get(&k), Some(Some(_))) && !self.written.contains_key(&k) {
            return Err(Self::not_found(dev, rel));
        }
        self.written.insert(k, value.to_string());
        Ok(())
    }
    fn list_dir(&mut self, dev: &str, rel: &str) -> Result<Vec<String>, FsError> {
        Ok(self.dirs.get(&key(dev, rel)).cloned().unwrap_or_default())
    }
    fn attr_exists(&mut self, dev: &str, rel: &str) -> bool {
        matches!(self.attrs.get(&key(dev, rel)), Some(Some(_)))
    }
}

/// Runs a controller over a recording; returns every decision, tick by tick.
pub fn replay(ticks: Vec<TickRecord>, controller: &mut dyn Controller) -> Vec<Decision> {
    let mut fs = ReplayFs::new(ticks);
    let mut out = Vec::new();
    for i in 0..fs.len() {
        let t = fs.seek(i);
        out.extend(controller.tick(t, &mut fs));
    }
    out
}
