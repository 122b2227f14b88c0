//! What the DPU proxy keeps of each communicator and collective.

use super::wire::Part;
use crate::mailbox::Mailbox;
use crate::net::Failed;
use crate::session::{Cancel, Session};
use crate::steps::Run;
use hpc_rdma::RemoteKey;
use std::collections::{BTreeMap, HashMap};

/// What an operation of the proxy's transport was for.
pub enum Wait {
    /// The next request of this link rank.
    Request(usize),
    /// Reading the send (or receive, `recv`) span of collective `seq` of
    /// communicator `comm` of its member in `slot`.
    Get {
        comm: u64,
        seq: u64,
        slot: usize,
        recv: bool,
    },
    /// Writing the receive span of that member.
    Put { comm: u64, seq: u64, slot: usize },
    /// An answer going out.
    Answer,
    /// Reading the bytes of link rank `link`'s point-to-point send numbered
    /// `w` on its link.
    MessageGet { link: usize, w: u64 },
    /// Putting a message into link rank `link`'s receive `w`: the message's
    /// source and schedule tag.
    MessagePut {
        link: usize,
        w: u64,
        src: usize,
        tag: u32,
    },
}

/// A point-to-point receive posted to the proxy: its link rank and its
/// number on the link.
pub type RecvKey = (usize, u64);

/// A point-to-point send of a link rank: routed once its bytes are here
/// and every earlier send of that rank was routed, so that one sender's
/// messages leave in the order it sent them (a large one's RMA get may end
/// after a later small one came in its request).
pub struct Outgoing {
    /// Its communicator and number on the link.
    pub comm: u64,
    pub w: u64,
    /// Its source and destination (the communicator's ranks) and schedule tag.
    pub src: usize,
    pub dest: usize,
    pub tag: u32,
    /// Its bytes once here, or why they cannot be.
    pub data: Option<Result<Vec<u8>, String>>,
    /// The bytes of the proxy's budget admitted for it while it is read and
    /// routed (given back once it is).
    pub reserved: u64,
    /// Its size and why the proxy would not read it (its budget refused it):
    /// a message known by its size only.
    pub unheld: Option<(usize, String)>,
}

/// The data of one rank's part of a collective in the proxy (its life
/// cycle is the communicator's [`Session`]'s).
pub struct Slot {
    /// Taken when the schedules start.
    pub part: Option<Part>,
    pub send: Option<Vec<u8>>,
    pub recv: Option<Vec<u8>>,
}

/// What the DPU proxy keeps of a collective's data, beside its life cycle
/// in the communicator's [`Session`].
#[derive(Default)]
pub struct Group {
    /// The parts of the communicator's members on this node, by slot.
    pub slots: Vec<Option<Slot>>,
    /// The schedules in progress, until they finished or failed.
    pub run: Option<Run>,
    /// The receive span of each of the node's members, once started.
    pub spans: Vec<(RemoteKey, u64, usize)>,
    /// Each member's result, once the schedules finished, until delivered.
    pub results: Vec<Vec<u8>>,
    /// Messages from other nodes that came before the schedules started.
    pub early: Vec<(usize, usize, u32, Vec<u8>)>,
}

impl Group {
    /// The data of a collective of a communicator with `slots` members here.
    pub fn new(slots: usize) -> Group {
        Group {
            slots: (0..slots).map(|_| None).collect(),
            ..Group::default()
        }
    }
}

/// A communicator the proxy serves: the one its link was made for (id 0),
/// or a split of it, whose members tell the proxy they joined
/// ([`Request::Open`](super::wire::Request::Open)). Its collectives run here
/// with its own ranks, and go between nodes tagged with its id.
pub struct Served {
    /// The first communicator's rank of each of its ranks.
    pub members: Vec<usize>,
    /// Its rank of each member, by first-communicator rank.
    pub rank_of: HashMap<usize, usize>,
    /// The link rank of each member on this node (its slot), in rank order.
    pub links: Vec<usize>,
    /// Its rank of each slot.
    pub ranks: Vec<usize>,
    /// Each slot's number for it on its link, once it opened it.
    pub locals: Vec<Option<u32>>,
    /// The node indices of its ranks.
    pub nodes: Vec<usize>,
    /// The data of its collectives in flight.
    pub groups: BTreeMap<u64, Group>,
    /// The life cycle of its collectives: parts, failures, members gone,
    /// the window of those that ended (a cancel fails the collective on
    /// every node, [`Cancel::Collective`]).
    pub session: Session,
    /// Its point-to-point receives posted and messages held.
    pub mailbox: Mailbox<RecvKey>,
    /// Where each receive posted lands: the span of its rank's region.
    pub recvs: HashMap<RecvKey, (RemoteKey, u64, usize)>,
}

impl Served {
    /// A communicator of `members`; `first` is the first communicator's rank
    /// of each link rank and `node_of` the node of each of its ranks.
    pub fn new(members: Vec<usize>, first: &[usize], node_of: &[usize]) -> Served {
        let rank_of: HashMap<usize, usize> =
            members.iter().enumerate().map(|(i, &m)| (m, i)).collect();
        let (links, ranks): (Vec<usize>, Vec<usize>) = members
            .iter()
            .enumerate()
            .filter_map(|(i, m)| Some((first.iter().position(|f| f == m)?, i)))
            .unzip();
        let mut nodes: Vec<usize> = members.iter().map(|&m| node_of[m]).collect();
        nodes.sort_unstable();
        nodes.dedup();
        let n = links.len();
        Served {
            members,
            rank_of,
            links,
            session: Session::new(ranks.clone(), Cancel::Collective),
            ranks,
            locals: vec![None; n],
            nodes,
            groups: BTreeMap::new(),
            mailbox: Mailbox::default(),
            recvs: HashMap::new(),
        }
    }

    pub fn slot(&self, link: usize) -> Option<usize> {
        self.links.iter().position(|&l| l == link)
    }
}

/// What came from another node's proxy for a communicator.
pub enum FromNet {
    /// A step's message: (source, destination) as first-communicator
    /// ranks, the proxy's message tag, its collective's signature, the
    /// payload.
    Msg(usize, usize, u64, hpc_board::sig::Sig, Vec<u8>),
    /// A collective failed there.
    Failed(Failed),
}

/// What a proxy keeps at most for a communicator not opened here yet.
pub const UNOPENED_MAX: usize = 1 << 16;
