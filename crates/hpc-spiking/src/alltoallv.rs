//! The targeted spike exchange: each spike goes only to the ranks that hold
//! targets of its source (an `ialltoallv` through an `hpc-comm` engine),
//! beside the allgather of [`crate::exchange`], in which
//! every rank receives every spike.
//!
//! Before the run every rank tells the others which sources have synapses onto its
//! neurons (an allgather of one bit per source); each rank then knows, for each of
//! its own neurons, the ranks to send its spikes to. Rank 0 receives every spike in
//! addition, for the spike file and the statistics; the volume the other ranks
//! receive is the measure of the scheme.
//!
//! Per interval the ranks exchange their send counts (an alltoall of one `u64`
//! per pair) and then the spikes (`ialltoallv`), which the engine progresses while
//! the caller works. A rank receives the spikes in rank order, as from the
//! allgather but filtered; delivery sums integers, so the spikes of the run do not
//! change (tested).

use std::sync::Arc;

use crate::exchange::{AnyExchange, Engine, LocalExchange, SpikeExchange};
use crate::Block;
use anyhow::{bail, Result};
use hpc_runtime::World;

/// What the simulation needs from an exchange.
pub trait Exchange {
    /// Exchanges this rank's spikes of an interval (into `out`: every spike this
    /// rank must deliver or record, in rank order) while running `work`; returns
    /// `work`'s result and its seconds.
    fn spikes<R>(
        &mut self,
        local: &[u32],
        out: &mut Vec<u32>,
        work: impl FnOnce() -> R,
    ) -> Result<(R, f64)>;

    /// Gathers every rank's `local` words into `out`, in rank order (all ranks
    /// give as many).
    fn words(&mut self, local: &[u32], out: &mut Vec<u32>) -> Result<()>;
}

/// An allgather exchange ([`SpikeExchange`]) as an [`Exchange`]: every rank receives every spike.
pub struct Gather<E>(pub E);

impl<E: SpikeExchange> Exchange for Gather<E> {
    fn spikes<R>(
        &mut self,
        local: &[u32],
        out: &mut Vec<u32>,
        work: impl FnOnce() -> R,
    ) -> Result<(R, f64)> {
        self.0.overlap(local, out, work)
    }

    fn words(&mut self, local: &[u32], out: &mut Vec<u32>) -> Result<()> {
        self.0.overlap(local, out, || ()).map(|_| ())
    }
}

/// The exchange of a run that chooses at its start between the allgather and the
/// targeted exchange (the microcircuit's `--exchange`): in memory on one rank,
/// else the allgather of an engine ([`AnyExchange`]) or the [`TargetedExchange`].
/// Public for a network of your own that offers both.
pub enum RunExchange {
    /// One rank: its own spikes.
    Local(LocalExchange),
    /// Every rank receives every spike.
    Gather(AnyExchange),
    /// Each spike goes to the ranks with its targets (and rank 0).
    Targeted(Box<TargetedExchange>),
}

impl RunExchange {
    /// The exchange between the ranks of `world` through `engine`: the targeted
    /// one when `targeted` gives this rank's `(needed, block, gid_bits)` as
    /// [`TargetedExchange::new`] takes them (through the inline engine when
    /// `engine` is `world`, whose collectives have no alltoallv), else the
    /// allgather; in memory on one rank either way.
    pub fn new(
        engine: Engine,
        world: Arc<World>,
        targeted: Option<(&[bool], Block, u32)>,
    ) -> Result<RunExchange> {
        if world.size() == 1 {
            return Ok(RunExchange::Local(LocalExchange::group(1).remove(0)));
        }
        if let Some((needed, block, gid_bits)) = targeted {
            let engine = engine.collectives().unwrap_or(hpc_comm::Engine::Inline);
            let ex = TargetedExchange::new(&world, engine, needed, block, gid_bits)?;
            return Ok(RunExchange::Targeted(Box::new(ex)));
        }
        Ok(RunExchange::Gather(AnyExchange::new(engine, world)?))
    }
}

impl Exchange for RunExchange {
    fn spikes<R>(
        &mut self,
        local: &[u32],
        out: &mut Vec<u32>,
        work: impl FnOnce() -> R,
    ) -> Result<(R, f64)> {
        match self {
            RunExchange::Local(x) => x.overlap(local, out, work),
            RunExchange::Gather(x) => x.overlap(local, out, work),
            RunExchange::Targeted(x) => x.spikes(local, out, work),
        }
    }

    fn words(&mut self, local: &[u32], out: &mut Vec<u32>) -> Result<()> {
        match self {
            RunExchange::Targeted(x) => x.words(local, out),
            _ => self.spikes(local, out, || ()).map(|_| ()),
        }
    }
}

/// [`SpikeExchange`] that sends each spike to the ranks that need it.
pub struct TargetedExchange {
    comm: hpc_comm::Comm,
    /// This rank's first neuron.
    first: u32,
    gid_mask: u32,
    /// For each neuron of this rank, the ranks to send its spikes to.
    dest: Vec<Vec<u16>>,
    send: Vec<u32>,
    send_counts: Vec<usize>,
    recv_counts: Vec<usize>,
    counts_out: Vec<u64>,
    counts_in: Vec<u64>,
    fill: Vec<usize>,
}

impl TargetedExchange {
    /// Sets up the exchange (collective over `world`): `needed[s]` is whether
    /// source `s` has synapses onto this rank; `block` is this rank's neurons.
    pub fn new(
        world: &World,
        engine: hpc_comm::Engine,
        needed: &[bool],
        block: Block,
        gid_bits: u32,
    ) -> Result<TargetedExchange> {
        let size = world.size();
        if size > u16::MAX as usize {
            bail!("the targeted exchange supports at most 65535 ranks");
        }
        let mut bits = vec![0u8; needed.len().div_ceil(8)];
        for (s, &n) in needed.iter().enumerate() {
            if n {
                bits[s / 8] |= 1 << (s % 8);
            }
        }
        let all = world.allgather(&bits)?;
        let mut dest = vec![Vec::new(); block.len as usize];
        for (r, b) in all.iter().enumerate() {
            if b.len() != bits.len() {
                bail!(
                    "rank {r} sent {} bytes of targets, expected {}",
                    b.len(),
                    bits.len()
                );
            }
            for (i, d) in dest.iter_mut().enumerate() {
                let s = block.first as usize + i;
                if r == 0 || b[s / 8] & (1 << (s % 8)) != 0 {
                    d.push(r as u16);
                }
            }
        }
        let comm = hpc_comm::Comm::new(world, engine)?;
        Ok(TargetedExchange {
            comm,
            first: block.first,
            gid_mask: crate::exchange::gid_mask(gid_bits),
            dest,
            send: Vec::new(),
            send_counts: vec![0; size],
            recv_counts: vec![0; size],
            counts_out: vec![0; size],
            counts_in: vec![0; size],
            fill: vec![0; size],
        })
    }
}

impl Exchange for TargetedExchange {
    fn words(&mut self, local: &[u32], out: &mut Vec<u32>) -> Result<()> {
        out.clear();
        out.resize(local.len() * self.comm.size(), 0);
        self.comm.allgather(local, &mut out[..])?;
        Ok(())
    }

    fn spikes<R>(
        &mut self,
        local: &[u32],
        out: &mut Vec<u32>,
        work: impl FnOnce() -> R,
    ) -> Result<(R, f64)> {
        self.send_counts.iter_mut().for_each(|c| *c = 0);
        for &code in local {
            let gid = code & self.gid_mask;
            let i = gid.wrapping_sub(self.first) as usize;
            let Some(d) = self.dest.get(i) else {
                bail!("spike of neuron {gid}, not a neuron of this rank");
            };
            for &r in d {
                self.send_counts[r as usize] += 1;
            }
        }
        let mut at = 0;
        for (f, &c) in self.fill.iter_mut().zip(&self.send_counts) {
            *f = at;
            at += c;
        }
        self.send.clear();
        self.send.resize(at, 0);
        for &code in local {
            let i = ((code & self.gid_mask) - self.first) as usize;
            for &r in &self.dest[i] {
                self.send[self.fill[r as usize]] = code;
                self.fill[r as usize] += 1;
            }
        }
        for (o, &c) in self.counts_out.iter_mut().zip(&self.send_counts) {
            *o = c as u64;
        }
        self.comm
            .alltoall(&self.counts_out[..], &mut self.counts_in[..])?;
        for (r, &c) in self.recv_counts.iter_mut().zip(&self.counts_in) {
            *r = c as usize;
        }
        out.clear();
        out.resize(self.recv_counts.iter().sum(), 0);
        let req = self.comm.ialltoallv(
            &self.send[..],
            &self.send_counts,
            &mut out[..],
            &self.recv_counts,
        )?;
        crate::exchange::work_then_wait(work, || Ok(req.wait()?))
    }
}
