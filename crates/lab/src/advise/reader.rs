//! The streaming reader: an [`Analyzer`] takes a trace one line at a time (tracing
//! filesystem text or blkparse's), hands each block event to its device's
//! [`DeviceAcc`], and at the end turns every device into a [`DeviceReport`] with the
//! rules' recommendations. A line that is not a block event is counted and skipped, the
//! first few quoted with their line numbers; nothing here panics on bad input.

use super::accumulator::{
    DeviceAcc, MAX_DEVICES, MAX_ERROR_EXAMPLES, MAX_LINE_BYTES, MIN_RATE_SPAN_NS,
};
use super::report::{Analysis, BadLine, DeviceReport};
use super::rules::recommend;
use anyhow::Context as _;
use mergetune_kernel::devices::DevNumber;
use mergetune_kernel::trace::{BlockEvent, EventKind, is_blkparse_summary};
use mergetune_logic::config::PolicyConfig;
use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;

/// The most sectors one bio or request can carry: the kernel counts its size in bytes in an
/// `unsigned int` (`bi_iter.bi_size`, `__data_len`), so at most 4 GiB - 1.
pub const MAX_EXTENT_SECTORS: u64 = (u32::MAX >> 9) as u64;
/// The end of the largest block device Linux can address, in sectors: a device's size in
/// bytes is a signed 64-bit `loff_t`.
pub const MAX_DEVICE_SECTORS: u64 = (i64::MAX >> 9) as u64;

/// Whether `count` sectors at `sector` can be one bio or request of a block device.
pub fn possible_extent(sector: u64, count: u32) -> bool {
    u64::from(count) <= MAX_EXTENT_SECTORS
        && sector
            .checked_add(u64::from(count))
            .is_some_and(|end| end <= MAX_DEVICE_SECTORS)
}

/// A parse error's reason without the pieces of the line it quotes: a file that is no
/// trace (`advise /etc/shadow`) must not have its content echoed to a terminal or a log,
/// so a bad line is told by number and reason only.
pub fn without_quotes(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut chars = message.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            out.push(c);
            continue;
        }
        // A quoted piece of the line (Rust's `{:?}`: an inner quote is escaped).
        let mut escaped = false;
        for q in chars.by_ref() {
            match (escaped, q) {
                (false, '\\') => escaped = true,
                (false, '"') => break,
                _ => escaped = false,
            }
        }
    }
    let out = out.split_whitespace().collect::<Vec<_>>().join(" ");
    out.replace(" ,", ",")
        .trim_end_matches(|c: char| c.is_whitespace() || c == ':')
        .to_string()
}

/// The streaming reader: feed lines, then [`Analyzer::finish`].
#[derive(Debug, Clone, Default)]
pub struct Analyzer {
    filter: Option<DevNumber>,
    t0: Option<u64>,
    devices: BTreeMap<DevNumber, DeviceAcc>,
    pub lines: u64,
    pub events: u64,
    pub bad_lines: u64,
    pub bad_examples: Vec<BadLine>,
    /// Block events of kinds advise does not use (`block_getrq`, unknown `block_*`, ...).
    pub other_events: u64,
    /// Events of devices not selected by `--device`.
    pub filtered_out: u64,
    /// Events beyond [`MAX_DEVICES`] devices.
    pub too_many_devices: u64,
    /// Events naming no device (plug, unplug).
    pub no_device: u64,
    /// Events whose size or sector no block device can have, dropped (see
    /// [`possible_extent`]).
    pub impossible_extents: u64,
    pub merge_events_seen: bool,
    pub completion_events_seen: bool,
    /// The traced device's I/O scheduler, from the capture's `# scheduler NAME` header.
    pub scheduler: Option<mergetune_kernel::scheduler::Scheduler>,
    summary_reached: bool,
}

impl Analyzer {
    pub fn new(filter: Option<DevNumber>) -> Self {
        Analyzer {
            filter,
            ..Default::default()
        }
    }

    /// Feeds one line (1-based number, for messages).
    pub fn feed_line(&mut self, line_no: usize, raw: &str) {
        self.lines += 1;
        let line = raw.trim();
        if let Some(name) = line.strip_prefix("# scheduler ") {
            // Only a scheduler name: a forged header is not taken as one.
            let name = name.trim();
            if let Ok(s) = name.parse() {
                self.scheduler = Some(s);
            }
            return;
        }
        if self.summary_reached || line.is_empty() || line.starts_with('#') {
            return;
        }
        if is_blkparse_summary(line) {
            self.summary_reached = true;
            return;
        }
        match mergetune_kernel::trace::parse_event(line) {
            Ok(ev) => self.feed_event(&ev),
            Err(e) => self.bad_line(line_no, without_quotes(&e.message)),
        }
    }

    pub fn feed_event(&mut self, ev: &BlockEvent) {
        self.events += 1;
        if let Some((sector, count)) = ev.extent
            && !possible_extent(sector, count)
        {
            // A corrupt or forged line: believed, 4294967295 sectors made "90 TB/s" and a
            // confident recommendation.
            self.impossible_extents += 1;
            return;
        }
        match ev.kind {
            EventKind::BackMerge | EventKind::FrontMerge => self.merge_events_seen = true,
            EventKind::Issue | EventKind::Complete => self.completion_events_seen = true,
            EventKind::Other | EventKind::GetRq | EventKind::Insert | EventKind::Remap => {
                self.other_events += 1
            }
            _ => {}
        }
        let Some((major, minor)) = ev.dev else {
            self.no_device += 1;
            return;
        };
        let dev = DevNumber { major, minor };
        if self.filter.is_some_and(|f| f != dev) {
            self.filtered_out += 1;
            return;
        }
        let t0 = *self.t0.get_or_insert(ev.t_ns);
        if !self.devices.contains_key(&dev) && self.devices.len() >= MAX_DEVICES {
            self.too_many_devices += 1;
            return;
        }
        self.devices
            .entry(dev)
            .or_insert_with(|| DeviceAcc::new(dev))
            .feed(ev, t0);
    }

    /// Reads a whole trace from a reader, line by line (invalid UTF-8 is replaced, a line
    /// longer than [`MAX_LINE_BYTES`] is skipped as bad).
    pub fn read_from(&mut self, mut r: impl BufRead) -> std::io::Result<()> {
        use mergetune_kernel::lines::{Line, read_line_bounded};
        let mut buf = Vec::with_capacity(256);
        let mut n = 0usize;
        loop {
            match read_line_bounded(&mut r, &mut buf, MAX_LINE_BYTES)? {
                Line::Eof => return Ok(()),
                Line::Whole => {
                    n += 1;
                    self.feed_line(n, &String::from_utf8_lossy(&buf));
                }
                Line::TooLong => {
                    n += 1;
                    self.lines += 1;
                    self.bad_line(
                        n,
                        format!("longer than {MAX_LINE_BYTES} bytes: not a block event"),
                    );
                }
            }
        }
    }

    fn bad_line(&mut self, line: usize, message: String) {
        self.bad_lines += 1;
        if self.bad_examples.len() < MAX_ERROR_EXAMPLES {
            self.bad_examples.push(BadLine { line, message });
        }
    }

    pub fn devices(&self) -> impl Iterator<Item = &DeviceAcc> {
        self.devices.values()
    }

    pub fn device(&self, dev: DevNumber) -> Option<&DeviceAcc> {
        self.devices.get(&dev)
    }

    pub fn finish(self, cfg: &PolicyConfig) -> Analysis {
        let mut notes = self.skipped_notes();
        let without_bios = self.devices_without_advice(&mut notes);
        let devices: Vec<DeviceReport> = self
            .devices
            .values()
            .filter(|d| d.total_bios() > 0 && d.span_ns() >= MIN_RATE_SPAN_NS)
            .map(|d| {
                // No merge events but as many requests as bios: nothing merged, known.
                let known = self.merge_events_seen || (d.issues > 0 && d.issues >= d.total_bios());
                let mut r = DeviceReport::build(d, known);
                (r.recommended_level, r.recommendations) = recommend(&r, cfg);
                r
            })
            .collect();
        Analysis {
            lines: self.lines,
            events: self.events,
            bad_lines: self.bad_lines,
            bad_examples: self.bad_examples,
            notes,
            devices,
            devices_without_bios: without_bios,
            scheduler: self.scheduler,
        }
    }

    /// What the trace held that was skipped or dropped, and whether merges were seen or
    /// only estimated.
    fn skipped_notes(&self) -> Vec<String> {
        let skipped = [
            (self.bad_lines, "line(s) were not block events and were skipped".to_string()),
            (
                self.impossible_extents,
                format!(
                    "event(s) with a size or sector no block device can have (more than {MAX_EXTENT_SECTORS} sectors in one bio or request, or past sector {MAX_DEVICE_SECTORS}) were dropped"
                ),
            ),
            (
                self.other_events,
                "event(s) of kinds not used here (getrq, insert, remap, unknown block_*) were counted and ignored".to_string(),
            ),
            (self.filtered_out, "event(s) of other devices left out by --device".to_string()),
            (
                self.too_many_devices,
                format!("event(s) of devices beyond the first {MAX_DEVICES} were skipped"),
            ),
        ];
        let mut notes: Vec<String> = skipped
            .into_iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, what)| format!("{n} {what}"))
            .collect();
        if !self.merge_events_seen && self.devices.values().any(|d| d.issues < d.total_bios()) {
            notes.push(
                "no merge events (block_bio_backmerge/frontmerge) in the trace and fewer requests than bios: merges are estimated from contiguity"
                    .into(),
            );
        }
        notes
    }

    /// A note for each device the trace cannot advise on (no usable bio, or too short a
    /// span for a rate) and each whose clock steps back; the first kind also returned.
    fn devices_without_advice(&self, notes: &mut Vec<String>) -> Vec<String> {
        // A device whose queue events all lack a size (size 0: corrupt, or flushes only) has
        // no bio to judge merging by: advice from it would be advice from nothing.
        let mut without_bios = Vec::new();
        for d in self.devices.values().filter(|d| d.total_bios() == 0) {
            let why = if d.nodata == 0 {
                // Completions or issues only: no block_bio_queue line at all.
                format!(
                    "device {}: no bio queued (no block_bio_queue event; {} request(s) issued, {} completed): advise reads the queue events (`mergetune-lab trace capture` records them): no advice for it",
                    d.dev.traced(),
                    d.issues,
                    d.completes
                )
            } else {
                format!(
                    "device {}: no usable bio ({} queue event(s) without a size, {} request(s) issued): no advice for it",
                    d.dev.traced(),
                    d.nodata,
                    d.issues
                )
            };
            without_bios.push(why.clone());
            notes.push(why);
        }
        for d in self
            .devices
            .values()
            .filter(|d| d.total_bios() > 0 && d.span_ns() < MIN_RATE_SPAN_NS)
        {
            let why = format!(
                "device {}: its {} bio(s) span {:.6} s, less than {} ms: too little time for a rate (one bio, or timestamps that do not advance): no advice for it",
                d.dev.traced(),
                d.total_bios(),
                d.span_ns() as f64 / 1e9,
                MIN_RATE_SPAN_NS / 1_000_000
            );
            without_bios.push(why.clone());
            notes.push(why);
        }
        for d in self.devices.values().filter(|d| d.out_of_order > 0) {
            notes.push(format!(
                "device {}: the clock steps back {} time(s) (an event more than 1 ms earlier than the one before): rates are taken from its earliest to its latest timestamp",
                d.dev.traced(), d.out_of_order
            ));
        }
        without_bios
    }
}

/// Streams a trace file through an [`Analyzer`].
pub fn analyze_file(
    path: &Path,
    filter: Option<DevNumber>,
    cfg: &PolicyConfig,
) -> anyhow::Result<Analysis> {
    // A regular file only: a FIFO would block, /dev/zero never end.
    let f = mergetune_kernel::userfile::open_regular(path)
        .map_err(|e| anyhow::anyhow!("cannot open {e}"))?;
    let mut a = Analyzer::new(filter);
    a.read_from(std::io::BufReader::with_capacity(1 << 16, f))
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(a.finish(cfg))
}
