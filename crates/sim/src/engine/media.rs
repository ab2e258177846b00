//! What serves a request: the device's media and its service-time model.
//!
//! SSD: a per-request overhead (read/write, up to a quarter of random variation: garbage
//! collection, channel contention, so latency has a tail), bandwidth shared by
//! `parallelism` channels, a large request striped over channels in 64 KiB units. HDD: one
//! head; seek time grows with the square root of the distance, a random rotational delay
//! unless the request starts where the last one ended, transfer at the bandwidth, requests
//! served in dispatch order. dm devices are bio-based and serve nothing themselves (their
//! table is here because it is what stands in for media; splitting is in dm.rs).

use super::dm::DmTable;
use super::slab::Request;
use super::us_to_ns;
use crate::rng::SplitMix64;
use crate::scenario::{DeviceKind, DeviceSpec};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

#[derive(Debug, Clone)]
pub(super) enum Media {
    Ssd {
        overhead_ns: [u64; 2],
        ns_per_sector: f64,
    },
    Hdd {
        overhead_ns: u64,
        min_seek_ns: f64,
        max_seek_ns: f64,
        rev_ns: u64,
        ns_per_sector: f64,
    },
    Dm {
        table: DmTable,
        /// Device indexes of the table's members.
        members: Vec<u32>,
    },
}

/// The device's servers (SSD channels; one head for an HDD).
pub(super) struct Servers {
    /// When each server is next free, as a min-heap so picking the earliest free one is
    /// O(log n).
    free_at: BinaryHeap<Reverse<u64>>,
    /// Where the HDD's head stopped.
    head_sector: u64,
}

/// What [`Media::from_spec`] builds: the media, the default tag depth, the server count.
pub(super) struct MediaSetup {
    pub(super) media: Media,
    pub(super) default_depth: u32,
    pub(super) servers: Servers,
}

impl Media {
    /// The media a device spec describes (a dm table's members are wired afterwards).
    pub(super) fn from_spec(spec: &DeviceSpec) -> MediaSetup {
        let (media, default_depth, parallel) = match spec.kind {
            DeviceKind::Ssd => {
                let par = spec.parallelism.unwrap_or(8);
                let bw = spec.bandwidth_mb_s.unwrap_or(500.0) * 1e6;
                (
                    Media::Ssd {
                        overhead_ns: [
                            us_to_ns(spec.read_overhead_us.unwrap_or(80.0)),
                            us_to_ns(spec.write_overhead_us.unwrap_or(20.0)),
                        ],
                        ns_per_sector: 512.0 * 1e9 / (bw / par as f64),
                    },
                    32,
                    par as usize,
                )
            }
            DeviceKind::Hdd => {
                let bw = spec.bandwidth_mb_s.unwrap_or(150.0) * 1e6;
                let rpm = spec.rpm.unwrap_or(7200) as f64;
                (
                    Media::Hdd {
                        overhead_ns: 50_000,
                        min_seek_ns: spec.min_seek_us.unwrap_or(500.0) * 1000.0,
                        max_seek_ns: spec.max_seek_us.unwrap_or(15_000.0) * 1000.0,
                        rev_ns: (60e9 / rpm) as u64,
                        ns_per_sector: 512.0 * 1e9 / bw,
                    },
                    32,
                    1,
                )
            }
            DeviceKind::DmLinear | DeviceKind::DmStripe => (
                Media::Dm {
                    table: DmTable {
                        stripe: spec.kind == DeviceKind::DmStripe,
                        chunk_sectors: spec.chunk_kb.unwrap_or(128) as u64 * 2,
                        member_sectors: Vec::new(),
                    },
                    members: Vec::new(),
                },
                0,
                0,
            ),
        };
        MediaSetup {
            media,
            default_depth,
            servers: Servers {
                free_at: (0..parallel).map(|_| Reverse(0)).collect(),
                head_sector: 0,
            },
        }
    }

    /// A dm device's table and member device indexes.
    #[inline]
    pub(super) fn dm(&self) -> Option<(&DmTable, &[u32])> {
        match self {
            Media::Dm { table, members } => Some((table, members)),
            _ => None,
        }
    }

    pub(super) fn dm_mut(&mut self) -> Option<(&mut DmTable, &mut Vec<u32>)> {
        match self {
            Media::Dm { table, members } => Some((table, members)),
            _ => None,
        }
    }

    #[inline]
    pub(super) fn is_dm(&self) -> bool {
        matches!(self, Media::Dm { .. })
    }

    /// When request `rq`, dispatched at `now`, completes; books the server it takes.
    #[inline]
    pub(super) fn service_end_ns(
        &self,
        srv: &mut Servers,
        rq: &Request,
        capacity_sectors: u64,
        rng: &mut SplitMix64,
        now: u64,
    ) -> u64 {
        match self {
            Media::Ssd {
                overhead_ns,
                ns_per_sector,
            } => {
                // A large request is striped over up to `parallelism` channels in 64 KiB
                // units; the per-request overhead varies by up to a quarter.
                let units = (rq.nr_sectors as usize)
                    .div_ceil(128)
                    .clamp(1, srv.free_at.len().max(1));
                let ovh = overhead_ns[rq.dir.idx()];
                let svc = ovh
                    + rng.below(ovh / 4 + 1)
                    + (rq.nr_sectors as f64 * ns_per_sector / units as f64) as u64;
                match srv.free_at.peek_mut() {
                    Some(mut top) => {
                        let end = top.0.max(now) + svc;
                        *top = Reverse(end);
                        end
                    }
                    None => now + svc,
                }
            }
            Media::Hdd {
                overhead_ns,
                min_seek_ns,
                max_seek_ns,
                rev_ns,
                ns_per_sector,
            } => {
                let start = srv.free_at.peek().map_or(now, |r| r.0).max(now);
                let dist = rq.sector.abs_diff(srv.head_sector);
                let (seek, rot) = if dist == 0 {
                    (0, 0)
                } else {
                    let frac = (dist as f64 / capacity_sectors.max(1) as f64).min(1.0);
                    (
                        (min_seek_ns + (max_seek_ns - min_seek_ns) * frac.sqrt()) as u64,
                        rng.below(*rev_ns),
                    )
                };
                let xfer = (rq.nr_sectors as f64 * ns_per_sector) as u64;
                let end = start + overhead_ns + seek + rot + xfer;
                srv.head_sector = rq.end_sector();
                if let Some(mut top) = srv.free_at.peek_mut() {
                    *top = Reverse(end);
                }
                end
            }
            Media::Dm { .. } => now,
        }
    }
}
