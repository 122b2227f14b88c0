//! Building a communicator's engine on its node's board.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::board_file::make_board;
use super::boot::Boot;
use super::options::{default_spin, online_cpus, progress_cpus, usable_progress_cpus};
use super::places::{net_backend, ProxyPlaces};
use super::{AgentWake, Comm, CommOptions, Engine, DEFAULT_STAGE_MAX};
use crate::engines::{self, inline::Host, Driver};
use crate::executor::{self, Core};
use crate::proxy;
use hpc_board::board::Board;
use hpc_board::{Error, Result};

/// Next id of a communicator on a shared network transport (agreed by its members).
static NET_IDS: AtomicU64 = AtomicU64::new(0);

impl Comm {
    /// Builds the communicator of `boot`'s members in its steps: the DPU-placed
    /// proxy's (no board), or the network id, the node's board, the engine's
    /// driver, and the removal of the board's name once everyone mapped it.
    pub(super) fn build(
        boot: &dyn Boot,
        world_ranks: Vec<usize>,
        opts: CommOptions,
        timeout: Duration,
        transport: Option<Arc<hpc_rdma::Transport>>,
    ) -> Result<Comm> {
        let (me, size) = (boot.rank(), boot.size());
        let nodes: Vec<usize> = (0..size).map(|r| boot.node_of(r)).collect();
        let spans = nodes.iter().any(|&n| n != nodes[me]);
        if opts.engine == Engine::Proxy && opts.placement == Some(crate::Placement::Dpu) {
            return Comm::build_dpu(boot, world_ranks, nodes, spans, opts, timeout);
        }
        let proxy_net = spans && opts.engine == Engine::Proxy;
        // Whether the parent has a network path is the same on all its ranks, whether
        // this rank's group spans nodes is not: what every rank of the parent must do
        // alike (the id allgather below) goes by the first. Under the Proxy engine
        // the ranks' network path carries point-to-point messages only.
        let parent_net = transport.is_some();
        let transport = if spans { transport } else { None };
        if spans && transport.is_none() {
            return Err(Error::Unsupported(
                "a communicator across nodes needs its parent's network path".into(),
            ));
        }
        let id = agree_net_id(boot, parent_net)?;
        let net = transport.as_ref().map(|t| executor::Net {
            t: t.clone(),
            world: world_ranks.clone(),
            local: nodes.iter().map(|&n| n == nodes[me]).collect(),
            id: (id & 0xffff) as u16,
        });
        let extra = usize::from(opts.engine == Engine::Proxy);
        let (board, pids, mut board_name) = make_board(boot, extra)?;
        let setup = Setup {
            me,
            size,
            nodes: &nodes,
            board,
            pids,
            world_ranks: &world_ranks,
            opts: &opts,
            timeout,
            stage_max: opts.stage_max.unwrap_or(DEFAULT_STAGE_MAX),
            spin: opts.spin.unwrap_or_default(),
        };
        let mut proxy_backend = None;
        let (driver, note): (Box<dyn Driver>, String) = match opts.engine {
            Engine::Proxy => {
                let (driver, note, backend) = setup.proxy(boot, proxy_net, net)?;
                proxy_backend = backend;
                (driver, note)
            }
            Engine::Thread => setup.thread(net)?,
            _ => setup.inline(net),
        };
        // Everyone, the proxy included, mapped the board: its name can go (on an
        // error above, dropping `board_name` removed it).
        boot.allgather(&[])?;
        board_name.unlink();
        let note = match (&proxy_backend, spans) {
            (Some(b), _) => format!(
                "{note}; other nodes through the proxies over {b}, point-to-point messages \
                 over {}",
                net_backend(&transport, &world_ranks, &nodes, me)
            ),
            (None, true) => format!(
                "{note}; other nodes over {}",
                net_backend(&transport, &world_ranks, &nodes, me)
            ),
            (None, false) => note,
        };
        let mut comm = Comm::assemble(me, world_ranks, opts, timeout, driver, note);
        comm.nodes = nodes;
        comm.net = transport;
        Ok(comm)
    }

    /// The communicator of a `Proxy` engine placed as on a DPU: no board, the
    /// proxy reaches the ranks over the transport only; across nodes the
    /// proxies carry the steps between nodes.
    fn build_dpu(
        boot: &dyn Boot,
        world_ranks: Vec<usize>,
        nodes: Vec<usize>,
        spans: bool,
        opts: CommOptions,
        timeout: Duration,
    ) -> Result<Comm> {
        let me = boot.rank();
        let client = proxy::dpu::Client::start(
            me,
            world_ranks.clone(),
            &nodes,
            &opts.schedule,
            timeout,
            opts.spin.unwrap_or_default(),
            &|b| boot.allgather(b),
        )?;
        let driver = Box::new(engines::dpu::Dpu {
            client: Arc::new(client),
        });
        let mut note = "progress in the node's proxy, placed as on a DPU (registered memory, \
                        RMA and messages only)"
            .to_string();
        if spans {
            note.push_str("; other nodes through the nodes' DPU proxies");
        }
        let mut comm = Comm::assemble(me, world_ranks, opts, timeout, driver, note);
        comm.nodes = nodes;
        Ok(comm)
    }
}

/// One id per communicator on a transport, agreed by its members (and taken
/// by a group of a split within one node too, so that every rank of the
/// parent takes part in the same allgathers); 0 without a network path.
fn agree_net_id(boot: &dyn Boot, parent_net: bool) -> Result<u64> {
    if !parent_net {
        return Ok(0);
    }
    let all = boot.allgather(&NET_IDS.load(Ordering::Relaxed).to_le_bytes())?;
    let id = all
        .iter()
        .map(|b| u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8])))
        .max()
        .unwrap_or(0);
    NET_IDS.store(id + 1, Ordering::Relaxed);
    Ok(id)
}

/// What every engine's driver is built from, once the node's board exists.
struct Setup<'a> {
    me: usize,
    size: usize,
    nodes: &'a [usize],
    board: Arc<Board>,
    pids: Vec<u32>,
    world_ranks: &'a [usize],
    opts: &'a CommOptions,
    timeout: Duration,
    stage_max: usize,
    spin: Duration,
}

impl Setup<'_> {
    /// The ranks' own path over `core`, polling `spin` in `wait`.
    fn host(
        &self,
        core: Core,
        spin: Duration,
        agent: bool,
        flush: Option<Arc<proxy::Client>>,
    ) -> Arc<Host> {
        Arc::new(Host::new(
            core,
            self.board.clone(),
            self.world_ranks.to_vec(),
            self.opts.schedule,
            self.timeout,
            spin,
            agent,
            flush,
        ))
    }

    fn core(&self, net: Option<executor::Net>) -> Core {
        let pids = self.pids.clone();
        Core::new(
            self.board.clone(),
            self.me,
            self.size,
            pids,
            net,
            self.stage_max,
        )
    }

    /// The `Proxy` engine's driver, its note and, across nodes, the name of
    /// the transport between the proxies. `net`: the ranks' own network path
    /// across nodes, for point-to-point messages.
    fn proxy(
        &self,
        boot: &dyn Boot,
        proxy_net: bool,
        net: Option<executor::Net>,
    ) -> Result<(Box<dyn Driver>, String, Option<String>)> {
        let (me, opts) = (self.me, self.opts);
        // Across nodes every collective goes to the proxies: the ranks'
        // own network path carries point-to-point messages only.
        let min = if proxy_net {
            0
        } else {
            opts.proxy_min.unwrap_or(0)
        };
        let own_copies = opts.own_copies.unwrap_or(false);
        let places = ProxyPlaces::of(self.nodes);
        let started = proxy::Client::start(
            self.board.clone(),
            me,
            self.size,
            &opts.schedule,
            self.timeout,
            self.spin,
            own_copies,
            (places.leads(me), proxy_net),
        );
        // Every rank says how its start went, so that all fail alike with
        // the reason: a node's first rank whose proxy did not serve ended
        // alone, the others then failing "rank 0 finalized before joining
        // allgather", or by their timeout, naming no proxy.
        let why = started.as_ref().err().map(|e| hpc_io::message::chain(e));
        let all = boot.allgather(why.as_deref().unwrap_or_default().as_bytes())?;
        if let Some((r, why)) = all.iter().enumerate().find(|(_, b)| !b.is_empty()) {
            return Err(Error::Unsupported(format!(
                "rank {r} could not start its node's proxy: {}",
                hpc_io::message::cut(&hpc_io::message::escape_controls(&String::from_utf8_lossy(
                    why
                )))
            )));
        }
        let client = Arc::new(started?.with_world(self.world_ranks.to_vec()));
        // Every rank of a split takes part, whether its group spans nodes
        // or not: the groups' set-ups run on the parent's collectives.
        let mut backend = None;
        if proxy_net || !boot.uniform() {
            let b = places.connect(boot, &client, me, self.nodes, self.timeout, proxy_net)?;
            backend = proxy_net.then_some(b);
        }
        // The ranks' own path serves collectives under `min` and every
        // point-to-point message: within the node over the board, across nodes
        // over the ranks' network path (as MVAPICH2-DPU keeps messages on the
        // host and offloads the collectives).
        let host = {
            // How long `wait` polls on this path: the proxy sleeps meanwhile,
            // so the node has a core per rank again if it has one per rank.
            let local = self.nodes.iter().filter(|&&n| n == self.nodes[me]).count();
            let host = self.host(
                self.core(net),
                default_spin(local),
                false,
                Some(client.clone()),
            );
            (host, min)
        };
        let mut note = if min > 0 {
            format!(
                "progress in the node's proxy process for blocks of {min} bytes \
                 and more, inside test/wait below"
            )
        } else {
            "progress in the node's proxy process".to_string()
        };
        if own_copies {
            note.push_str("; each rank copies its own block when it posts");
        }
        Ok((
            Box::new(engines::proxy::Proxy { client, host }),
            note,
            backend,
        ))
    }

    /// The `Thread` engine's driver (its agent spawned) and its note.
    fn thread(&self, net: Option<executor::Net>) -> Result<(Box<dyn Driver>, String)> {
        let mut core = self.core(net);
        let wake = self.opts.agent_wake.unwrap_or(AgentWake::Eager);
        core.agent_core = wake == AgentWake::Eager;
        let asked = progress_cpus(self.opts);
        let named = asked.is_some();
        let cpus = asked.and_then(|asked| {
            let source = if self.opts.progress_cpus.is_some() {
                "CommOptions::progress_cpus"
            } else {
                hpc_runtime::env::PROGRESS_CPUSET
            };
            let (cpus, warning) = usable_progress_cpus(asked, online_cpus().as_ref(), source);
            if let Some(w) = warning {
                tracing::warn!(rank = self.me, "{w}");
            }
            cpus
        });
        let note = match &cpus {
            Some(c) => format!("progress thread pinned to CPUs {c}"),
            None if named => {
                "progress thread unpinned: none of the progress CPUs named is online".to_string()
            }
            None => format!(
                "progress thread unpinned: no progress core reserved \
                 (set {} or CommOptions::progress_cpus)",
                hpc_runtime::env::PROGRESS_CPUSET
            ),
        };
        let note = format!("{note}; woken {}", wake.name());
        let driver = engines::thread::spawn(
            self.host(core, self.spin, true, None),
            cpus,
            wake == AgentWake::Eager,
        )?;
        tracing::info!(rank = self.me, "{note}");
        Ok((Box::new(driver), note))
    }

    /// The `Inline` engine's driver and its note.
    fn inline(&self, net: Option<executor::Net>) -> (Box<dyn Driver>, String) {
        let driver = engines::inline::Inline {
            host: self.host(self.core(net), self.spin, false, None),
            agent: Default::default(),
        };
        (Box::new(driver), "progress inside test/wait".to_string())
    }
}
