//! dm-linear and dm-stripe: bio-based devices that split a bio onto their members.
//!
//! A dm table maps the dm device's sectors onto members: concatenated (linear) or in
//! `chunk_kb` stripes. A bio is split at chunk or member boundaries and the pieces are
//! submitted to the members under the submitter's plug, so pieces of consecutive bios can
//! merge there. The dm device counts one I/O per bio (started at submission, completed
//! when its last piece completes), never merges and has no scheduler.

use super::Simulation;
use super::slab::Bio;
use crate::cost::Step;

/// A dm table: how a dm device maps its sectors onto members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DmTable {
    pub stripe: bool,
    /// dm-stripe chunk size in sectors.
    pub chunk_sectors: u64,
    /// Capacity each member contributes, in sectors.
    pub member_sectors: Vec<u64>,
}

/// One piece of a split dm bio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Index into the table's members.
    pub member: usize,
    pub member_sector: u64,
    pub nr_sectors: u32,
    /// Where this piece starts on the dm device.
    pub dm_sector: u64,
}

impl DmTable {
    pub fn capacity_sectors(&self) -> u64 {
        if self.stripe {
            let per = self.member_sectors.iter().copied().min().unwrap_or(0);
            let per = per - per % self.chunk_sectors.max(1);
            per * self.member_sectors.len() as u64
        } else {
            self.member_sectors.iter().sum()
        }
    }

    /// Splits `[sector, sector + nr)` at chunk (stripe) or member (linear) boundaries.
    pub fn map(&self, sector: u64, nr_sectors: u32, out: &mut Vec<Piece>) {
        out.clear();
        let end = sector + nr_sectors as u64;
        let mut s = sector;
        let n = self.member_sectors.len() as u64;
        if n == 0 {
            return;
        }
        while s < end {
            if self.stripe {
                let cs = self.chunk_sectors.max(1);
                let chunk = s / cs;
                let off = s % cs;
                let len = (cs - off).min(end - s);
                out.push(Piece {
                    member: (chunk % n) as usize,
                    member_sector: (chunk / n) * cs + off,
                    nr_sectors: len as u32,
                    dm_sector: s,
                });
                s += len;
            } else {
                let mut base = 0u64;
                let mut placed = false;
                for (m, &size) in self.member_sectors.iter().enumerate() {
                    if s < base + size {
                        let len = (base + size - s).min(end - s);
                        out.push(Piece {
                            member: m,
                            member_sector: s - base,
                            nr_sectors: len as u32,
                            dm_sector: s,
                        });
                        s += len;
                        placed = true;
                        break;
                    }
                    base += size;
                }
                if !placed {
                    // Past the end: the kernel would fail the bio; we wrap onto member 0.
                    let len = end - s;
                    out.push(Piece {
                        member: 0,
                        member_sector: s % self.member_sectors[0].max(1),
                        nr_sectors: len as u32,
                        dm_sector: s,
                    });
                    s = end;
                }
            }
        }
    }
}

impl Simulation {
    /// A bio entered dm device `bio.dev`: count it, split it, submit the pieces.
    pub(super) fn dm_submit(&mut self, b: u32, j: usize) {
        let bio = self.bios[b as usize];
        let d = bio.dev as usize;
        let ph = self.cur_phase;
        let now = self.now_ns;
        self.devs[d].cnt.started(now);
        // The scratch vector is taken out while the pieces are submitted (no allocation
        // per bio once it has grown) and put back afterwards.
        let mut pieces = std::mem::take(&mut self.pieces);
        match self.devs[d].media.dm() {
            Some((table, _)) => table.map(bio.sector, bio.nr_sectors, &mut pieces),
            None => pieces.clear(),
        }
        self.acc[ph][d].bios[bio.dir.idx()] += 1;
        self.charge(ph, d, Step::DmSplit, pieces.len() as u64);
        self.bios[b as usize].remaining = pieces.len() as u32;
        for p in &pieces {
            let Some((_, members)) = self.devs[d].media.dm() else {
                continue;
            };
            let member = members[p.member];
            let child = self.bios.alloc(Bio {
                submit_ns: now,
                parent: b,
                ..Bio::new(
                    bio.job,
                    member,
                    bio.dir,
                    bio.sync,
                    p.member_sector,
                    p.nr_sectors,
                )
            });
            self.submit_bio(child, j);
        }
        self.pieces = pieces;
    }

    /// A piece of dm bio `parent` completed; the last one completes the dm bio.
    pub(super) fn dm_piece_done(&mut self, parent: u32) {
        let p = parent as usize;
        self.bios[p].remaining -= 1;
        if self.bios[p].remaining != 0 {
            return;
        }
        let pb = self.bios[p];
        let pd = pb.dev as usize;
        let now = self.now_ns;
        self.devs[pd]
            .cnt
            .io_done(pb.dir, pb.nr_sectors as u64, pb.submit_ns, now);
        self.acc[self.cur_phase][pd].io_done(pb.dir, pb.nr_sectors as u64);
        self.end_bio(parent, pd);
    }

    /// The dm table of a dm device.
    pub fn dm_table(&self, dev: &str) -> Option<&DmTable> {
        let d = self.dev_index(dev)?;
        self.devs[d].media.dm().map(|(t, _)| t)
    }
}
