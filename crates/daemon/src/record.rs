//! Record and replay: what-if tuning on production data, offline.
//!
//! [`RecordingFs`] wraps any [`BlockFs`] and notes every read the daemon makes during a tick
//! (the diskstats text, device lists, attribute values); [`RecordingFs::finish`] turns
//! them into one [`TickRecord`], written as one JSON line per tick. [`ReplayFs`] serves a
//! recording back: counters and device facts come from the file, tick by tick, while the
//! tunables the replaying policy writes live in an overlay, so a replay with a different
//! config sees its own choices. With the same config, a replay reproduces the recorded
//! decisions tick for tick: the policy is pure and sees the same inputs.
//!
//! Recording observes and never alters: every call passes through to the world below,
//! the bio tap's and the merge-path sampler's included (a recorded daemon taps, samples
//! and prices exactly as an unrecorded one). Their answers are kept in the tick's
//! [`Call`] list, and the config the daemon ran with rides on the first tick (and on any
//! tick after a reload changed it), so a replay of a live-priced run with the recorded
//! config sees the same prices and the same tap samples, and decides the same.

use crate::controller::Controller;
use mergetune_kernel::biosense::{TapBatch, TapDrain, TapError, TapEvent, TapParams};
use mergetune_kernel::blockfs::{BioTap, BlockFs, FsError, HostFacts, MergeSampler, Sysfs};
use mergetune_kernel::perf::{MergeSamples, PathCounts, PerfError};
use mergetune_kernel::trace::{Dir, EventKind};
use mergetune_kernel::tunable::Tunable;
use mergetune_logic::config::Config;
use mergetune_logic::decision::Decision;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
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
    /// The bio tap's and the merge-path sampler's answers in this tick, in call order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<Call>,
    /// The running kernel's release, when the daemon asked for it in this tick.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_release: Option<String>,
    /// The config the daemon ran this tick with: on the first tick, and on the first
    /// after a reload changed it (absent in recordings made before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<Box<Config>>,
}

/// One answer of the bio tap or of the merge-path sampler, as the recorded daemon got it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "snake_case", deny_unknown_fields)]
pub enum Call {
    TapAvailable {
        dev: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<TapError>,
    },
    TapOpen {
        dev: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<TapError>,
    },
    TapDrain {
        dev: String,
        /// `[t_ns, kind (0 request made, 1 request issued, 2 bio back-merged, 3 bio
        /// front-merged), dir (0 read, 1 write), sector, nr_sectors]` per event.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        events: Vec<(u64, u8, u8, u64, u32)>,
        /// A recording of an older tap, which saw only the bios queued:
        /// `[t_ns, dir, sector, nr_sectors]` per bio. Replayed as requests made and issued
        /// at once (that tap saw nothing waiting), so none of them is mergeable.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        bios: Vec<(u64, u8, u64, u32)>,
        #[serde(default)]
        lost: u64,
        #[serde(default)]
        dropped: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<TapError>,
    },
    TapPause {
        dev: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<TapError>,
    },
    TapClose {
        dev: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<TapError>,
    },
    SamplerOpen {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    SamplerDrain {
        period_ns: u64,
        total: u64,
        merge_path: [u64; 4],
        beyond_one_hit: [u64; 4],
        front_lookup: [u64; 4],
        lost: u64,
        /// The merge-path samples by the devices their tasks queued on: (devices, per slot
        /// [merge path, past the one-hit cache, front lookup]).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        by_submitter: Vec<(Vec<String>, [[u64; 3]; 4])>,
    },
}

fn tap_result(r: &Result<(), TapError>) -> Option<TapError> {
    r.as_ref().err().cloned()
}

fn samples_call(s: &MergeSamples) -> Call {
    Call::SamplerDrain {
        period_ns: s.period_ns,
        total: s.total,
        merge_path: s.merge_path,
        beyond_one_hit: s.beyond_one_hit,
        front_lookup: s.front_lookup,
        lost: s.lost,
        by_submitter: s
            .by_submitter
            .iter()
            .map(|(k, c)| {
                (
                    k.clone(),
                    c.map(|c| [c.merge_path, c.beyond_one_hit, c.front_lookup]),
                )
            })
            .collect(),
    }
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

impl Sysfs for RecordingFs<'_> {
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

impl BioTap for RecordingFs<'_> {
    fn tap_available(&mut self, dev: &str) -> Result<(), TapError> {
        let r = self.inner.tap_available(dev);
        self.current.calls.push(Call::TapAvailable {
            dev: dev.to_string(),
            error: tap_result(&r),
        });
        r
    }
    fn tap_open(&mut self, dev: &str, params: &TapParams) -> Result<(), TapError> {
        let r = self.inner.tap_open(dev, params);
        self.current.calls.push(Call::TapOpen {
            dev: dev.to_string(),
            error: tap_result(&r),
        });
        r
    }
    fn tap_drain(&mut self, dev: &str, batch: TapBatch<'_>) -> Result<TapDrain, TapError> {
        let TapBatch { out, max } = batch;
        let before = out.len();
        let r = self.inner.tap_drain(dev, TapBatch::new(out, max));
        let (lost, dropped) = r.as_ref().map_or((0, 0), |d| (d.lost, d.dropped));
        self.current.calls.push(Call::TapDrain {
            dev: dev.to_string(),
            events: out[before.min(out.len())..]
                .iter()
                .map(|e| {
                    let kind = match e.kind {
                        EventKind::Issue => 1,
                        EventKind::BackMerge => 2,
                        EventKind::FrontMerge => 3,
                        // The tap records no other kind: a request made.
                        _ => 0,
                    };
                    (e.t_ns, kind, e.dir.idx() as u8, e.sector, e.nr_sectors)
                })
                .collect(),
            bios: Vec::new(),
            lost,
            dropped,
            error: r.as_ref().err().cloned(),
        });
        r
    }
    fn tap_pause(&mut self, dev: &str) -> Result<(), TapError> {
        let r = self.inner.tap_pause(dev);
        self.current.calls.push(Call::TapPause {
            dev: dev.to_string(),
            error: tap_result(&r),
        });
        r
    }
    fn tap_close(&mut self, dev: &str) -> Result<(), TapError> {
        let r = self.inner.tap_close(dev);
        self.current.calls.push(Call::TapClose {
            dev: dev.to_string(),
            error: tap_result(&r),
        });
        r
    }
}

impl MergeSampler for RecordingFs<'_> {
    fn merge_sampler_open(&mut self, period_ns: u64) -> Result<(), PerfError> {
        let r = self.inner.merge_sampler_open(period_ns);
        self.current.calls.push(Call::SamplerOpen {
            error: r.as_ref().err().map(|e| e.to_string()),
        });
        r
    }
    fn merge_sampler_enable(&mut self, on: bool) {
        self.inner.merge_sampler_enable(on);
    }
    fn merge_sampler_drain(&mut self) -> MergeSamples {
        let s = self.inner.merge_sampler_drain();
        self.current.calls.push(samples_call(&s));
        s
    }
}

impl HostFacts for RecordingFs<'_> {
    fn boot_id(&mut self) -> Option<String> {
        self.inner.boot_id()
    }
    fn kernel_release(&mut self) -> Option<String> {
        let r = self.inner.kernel_release();
        if r.is_some() {
            self.current.kernel_release.clone_from(&r);
        }
        r
    }
}

/// Appends tick records to a JSON-lines file.
pub struct Recorder {
    path: PathBuf,
    out: std::io::BufWriter<std::fs::File>,
    /// The config last written into the recording.
    config: Option<Config>,
}

impl Recorder {
    /// Opens (or creates) the recording for appending: a regular file only, refused with
    /// its path otherwise (a FIFO would block the daemon before its first tick).
    pub fn create(path: &Path) -> Result<Self, RecordError> {
        let f =
            mergetune_kernel::userfile::open_regular_append(path).map_err(|e| RecordError::Io {
                path: path.to_path_buf(),
                message: e.reason(),
            })?;
        Ok(Recorder {
            path: path.to_path_buf(),
            out: std::io::BufWriter::new(f),
            config: None,
        })
    }

    /// Writes one tick the daemon ran with `cfg`; the config goes with it when it is the
    /// first tick or a reload changed it since the last one written.
    pub fn write_tick(&mut self, mut rec: TickRecord, cfg: &Config) -> Result<(), RecordError> {
        if self.config.as_ref() != Some(cfg) {
            rec.config = Some(Box::new(cfg.clone()));
        }
        self.write(&rec)?;
        if rec.config.is_some() {
            self.config = Some(cfg.clone());
        }
        Ok(())
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

/// A recording as read: its ticks, and the last line when it was cut short.
#[derive(Debug, Clone)]
pub struct Recording {
    pub ticks: Vec<TickRecord>,
    /// A last line cut short (the daemon died mid-write): skipped, and said here so the
    /// reader can tell its user.
    pub truncated: Option<Truncated>,
}

/// A last line cut short, skipped by [`load`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Truncated {
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for Truncated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "line {} is cut short ({}): the writer stopped mid-line; that tick is skipped",
            self.line, self.message
        )
    }
}

/// Reads a recording's ticks. A truncated last line (the daemon died mid-write) is
/// skipped ([`load_recording`] says which); any other bad line is an error naming its
/// number, and so is a tick earlier than the one before it (a replay runs forward in time).
pub fn load(path: &Path) -> Result<Vec<TickRecord>, RecordError> {
    load_recording(path).map(|r| r.ticks)
}

/// [`load`], with the truncated last line it skipped, if any.
pub fn load_recording(path: &Path) -> Result<Recording, RecordError> {
    load_bounded(path, MAX_LINE_BYTES)
}

/// [`load_recording`] with a bound on the line length: a line longer than
/// `max_line_bytes` is an error, read without holding more than the bound in memory.
pub fn load_bounded(path: &Path, max_line_bytes: usize) -> Result<Recording, RecordError> {
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
        // A recording whose one line is cut short holds a tick, just not a whole one.
        return Err(match truncated {
            Some((line, message)) => parse(
                line,
                format!(
                    "the only tick is cut short ({message}): the writer stopped mid-line; no whole tick to replay"
                ),
            ),
            None => RecordError::Empty {
                path: path.to_path_buf(),
            },
        });
    }
    Ok(Recording {
        ticks: out,
        truncated: truncated.map(|(line, message)| Truncated { line, message }),
    })
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
    /// The current tick's tap and sampler answers not yet taken.
    calls: VecDeque<Call>,
    /// The kernel release the recorded daemon read (wherever in the recording it did).
    kernel_release: Option<String>,
    /// What the replayed policy asked and the recording could not answer.
    unanswered: BTreeMap<(Unanswered, String), UnansweredSince>,
}

/// What a replay asked that the recording holds no answer for: the replayed config (a
/// what-if) taps or samples where the recorded daemon did not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unanswered {
    /// The bio tap of a device at L3.
    BioTap,
    /// The merge-path sampler.
    Sampler,
}

/// From when, and how often, a replay asked what the recording cannot answer.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct UnansweredSince {
    pub first_ms: u64,
    pub calls: u64,
}

/// One gap of a replay: what could not be modelled, on which device, and how that changes
/// the replay's answer against a live daemon with the same config.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayGap {
    pub what: Unanswered,
    /// The device ("" for the sampler, which is the host's).
    pub device: String,
    pub first_ms: u64,
    pub calls: u64,
}

impl fmt::Display for ReplayGap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = self.first_ms as f64 / 1000.0;
        match self.what {
            Unanswered::BioTap => write!(
                f,
                "{}: the replayed config watched L3 from {at:.1} s where the recorded daemon did not ({} bio tap call{} unanswered): the replay takes L3 as blind there and leaves it; live, the daemon would stay at L3 until its tap saw mergeable I/O, so merging may be off longer than this replay shows",
                self.device,
                self.calls,
                if self.calls == 1 { "" } else { "s" }
            ),
            Unanswered::Sampler => write!(
                f,
                "merge-path sampler: the replayed config sampled from {at:.1} s where the recorded daemon did not ({} call{} unanswered): those spans priced nothing, so prices stay as recorded or unknown; live, this config may price (and step down) sooner than this replay shows",
                self.calls,
                if self.calls == 1 { "" } else { "s" }
            ),
        }
    }
}

impl ReplayFs {
    pub fn new(ticks: Vec<TickRecord>) -> Self {
        let kernel_release = ticks.iter().find_map(|t| t.kernel_release.clone());
        ReplayFs {
            ticks,
            index: 0,
            attrs: BTreeMap::new(),
            dirs: BTreeMap::new(),
            devices: Vec::new(),
            written: BTreeMap::new(),
            calls: VecDeque::new(),
            kernel_release,
            unanswered: BTreeMap::new(),
        }
    }

    /// Notes a call of `what` on `dev` the recording holds no answer for.
    fn unanswered(&mut self, what: Unanswered, dev: &str) {
        let now_ms = self.ticks.get(self.index).map_or(0, |t| t.t_ms);
        let e = self
            .unanswered
            .entry((what, dev.to_string()))
            .or_insert(UnansweredSince {
                first_ms: now_ms,
                calls: 0,
            });
        e.calls += 1;
    }

    /// What the replay asked and the recording could not answer, in device order.
    pub fn gaps(&self) -> Vec<ReplayGap> {
        self.unanswered
            .iter()
            .map(|((what, device), since)| ReplayGap {
                what: *what,
                device: device.clone(),
                first_ms: since.first_ms,
                calls: since.calls,
            })
            .collect()
    }

    /// Takes the first answer of this tick that `matches`: the replayed policy asks in the
    /// recorded order when its config is the recorded one; a call the recording does not
    /// hold (another config asks what the recorded daemon did not) gets None.
    fn take_call(&mut self, matches: impl Fn(&Call) -> bool) -> Option<Call> {
        let i = self.calls.iter().position(matches)?;
        self.calls.remove(i)
    }

    fn take_tap(&mut self, dev: &str, kind: fn(&Call) -> Option<&str>) -> Option<Call> {
        self.take_call(|c| kind(c) == Some(dev))
    }

    /// A tap call the recording holds no answer for.
    fn unrecorded_tap(&mut self, dev: &str) -> TapError {
        self.unanswered(Unanswered::BioTap, dev);
        TapError::Io {
            path: format!("replay:{dev}"),
            message: "the recording holds no bio tap answer for this call (the replayed config taps where the recorded daemon did not)".into(),
        }
    }

    fn tap_answer(&mut self, dev: &str, kind: fn(&Call) -> Option<&str>) -> Result<(), TapError> {
        match self.take_tap(dev, kind) {
            Some(
                Call::TapAvailable { error, .. }
                | Call::TapOpen { error, .. }
                | Call::TapPause { error, .. }
                | Call::TapClose { error, .. },
            ) => error.map_or(Ok(()), Err),
            _ => Err(self.unrecorded_tap(dev)),
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
        self.calls = t.calls.iter().cloned().collect();
        t.t_ms
    }

    fn not_found(dev: &str, rel: &str) -> FsError {
        FsError::NotFound {
            path: format!("replay:/sys/block/{dev}/{rel}"),
        }
    }
}

impl Sysfs for ReplayFs {
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

impl BioTap for ReplayFs {
    fn tap_available(&mut self, dev: &str) -> Result<(), TapError> {
        self.tap_answer(dev, |c| match c {
            Call::TapAvailable { dev, .. } => Some(dev),
            _ => None,
        })
    }
    fn tap_open(&mut self, dev: &str, _params: &TapParams) -> Result<(), TapError> {
        self.tap_answer(dev, |c| match c {
            Call::TapOpen { dev, .. } => Some(dev),
            _ => None,
        })
    }
    fn tap_drain(&mut self, dev: &str, batch: TapBatch<'_>) -> Result<TapDrain, TapError> {
        let TapBatch { out, max } = batch;
        let call = self.take_tap(dev, |c| match c {
            Call::TapDrain { dev, .. } => Some(dev),
            _ => None,
        });
        let Some(Call::TapDrain {
            events,
            bios,
            lost,
            dropped,
            error,
            ..
        }) = call
        else {
            return Err(self.unrecorded_tap(dev));
        };
        if let Some(e) = error {
            return Err(e);
        }
        let dir = |d: u8| if d == 0 { Dir::Read } else { Dir::Write };
        let old = bios.iter().flat_map(|&(t_ns, d, sector, nr_sectors)| {
            [EventKind::GetRq, EventKind::Issue].map(|kind| TapEvent {
                t_ns,
                kind,
                dir: dir(d),
                sector,
                nr_sectors,
            })
        });
        let new = events
            .iter()
            .map(|&(t_ns, k, d, sector, nr_sectors)| TapEvent {
                t_ns,
                kind: match k {
                    1 => EventKind::Issue,
                    2 => EventKind::BackMerge,
                    3 => EventKind::FrontMerge,
                    _ => EventKind::GetRq,
                },
                dir: dir(d),
                sector,
                nr_sectors,
            });
        let mut made = 0usize;
        let mut over = 0u64;
        for e in old.chain(new) {
            if e.counts_as_bio() {
                if made >= max {
                    over += 1;
                    continue;
                }
                made += 1;
            }
            out.push(e);
        }
        Ok(TapDrain {
            lost,
            dropped: dropped + over,
        })
    }
    fn tap_pause(&mut self, dev: &str) -> Result<(), TapError> {
        self.tap_answer(dev, |c| match c {
            Call::TapPause { dev, .. } => Some(dev),
            _ => None,
        })
    }
    fn tap_close(&mut self, dev: &str) -> Result<(), TapError> {
        // Closing what was never opened is nothing to do, recorded or not.
        let _ = self.take_tap(dev, |c| match c {
            Call::TapClose { dev, .. } => Some(dev),
            _ => None,
        });
        Ok(())
    }
}

impl MergeSampler for ReplayFs {
    fn merge_sampler_open(&mut self, _period_ns: u64) -> Result<(), PerfError> {
        match self.take_call(|c| matches!(c, Call::SamplerOpen { .. })) {
            Some(Call::SamplerOpen { error: None }) => Ok(()),
            Some(Call::SamplerOpen {
                error: Some(message),
            }) => Err(PerfError::Symbols {
                path: "recorded".into(),
                message,
            }),
            _ => {
                self.unanswered(Unanswered::Sampler, "");
                Err(PerfError::Unsupported {
                    path: "replay (the recording holds no sampler answer for this call)".into(),
                })
            }
        }
    }
    fn merge_sampler_drain(&mut self) -> MergeSamples {
        let mut s = MergeSamples::default();
        if let Some(Call::SamplerDrain {
            period_ns,
            total,
            merge_path,
            beyond_one_hit,
            front_lookup,
            lost,
            by_submitter,
        }) = self.take_call(|c| matches!(c, Call::SamplerDrain { .. }))
        {
            s.by_submitter = by_submitter
                .into_iter()
                .map(|(k, c)| {
                    (
                        k,
                        c.map(|[merge_path, beyond_one_hit, front_lookup]| PathCounts {
                            merge_path,
                            beyond_one_hit,
                            front_lookup,
                        }),
                    )
                })
                .collect();
            s.period_ns = period_ns;
            s.total = total;
            s.merge_path = merge_path;
            s.beyond_one_hit = beyond_one_hit;
            s.front_lookup = front_lookup;
            s.lost = lost;
        } else {
            self.unanswered(Unanswered::Sampler, "");
        }
        s
    }
}

impl HostFacts for ReplayFs {
    fn kernel_release(&mut self) -> Option<String> {
        self.kernel_release.clone()
    }
}

/// The config the recorded daemon started with, and how many times a reload changed it
/// during the recording (None: a recording made before the config was recorded).
pub fn recorded_config(ticks: &[TickRecord]) -> Option<(&Config, usize)> {
    let mut configs = ticks.iter().filter_map(|t| t.config.as_deref());
    let first = configs.next()?;
    Some((first, configs.count()))
}

/// Runs a controller over a recording; returns every decision, tick by tick.
pub fn replay(ticks: Vec<TickRecord>, controller: &mut dyn Controller) -> Vec<Decision> {
    replay_with_gaps(ticks, controller).0
}

/// [`replay`], and what the replayed policy asked that the recording could not answer.
pub fn replay_with_gaps(
    ticks: Vec<TickRecord>,
    controller: &mut dyn Controller,
) -> (Vec<Decision>, Vec<ReplayGap>) {
    let mut fs = ReplayFs::new(ticks);
    let mut out = Vec::new();
    for i in 0..fs.len() {
        let t = fs.seek(i);
        out.extend(controller.tick(t, &mut fs));
    }
    let gaps = fs.gaps();
    (out, gaps)
}
