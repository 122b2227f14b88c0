//! The board file of a node: its name in `/dev/shm`, who creates and removes
//! it, and the check that the node's ranks can read each other's memory.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::boot::{node_leader, Boot};
use hpc_board::board::{self, Board};
use hpc_board::{Error, Result};

static BOARDS: AtomicU64 = AtomicU64::new(0);

/// The first byte of a node leader's part that says it could not create the
/// board (the reason follows); a part that names the board starts with the
/// count of proxies among its members (0 or 1).
const CREATE_FAILED: u8 = 0xff;

/// Board files are `/dev/shm/hpc-coll-<creator pid>-<n>-<random>`.
pub(super) const BOARD_PREFIX: &str = "hpc-coll-";

/// Removes the board files in `/dev/shm` that process `pid` created and did not
/// remove, and returns how many: a launcher calls it for each process it reaps, so
/// that a rank killed while it set a communicator up (before the name could go)
/// leaves nothing behind. Call it only for a process that has exited.
pub fn remove_boards_of(pid: u32) -> usize {
    let prefix = format!("{BOARD_PREFIX}{pid}-");
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return 0;
    };
    let mut n = 0;
    for e in dir.flatten() {
        if e.file_name().to_string_lossy().starts_with(&prefix)
            && std::fs::remove_file(e.path()).is_ok()
        {
            tracing::debug!(path = %hpc_io::message::path(&e.path()), pid, "removed a dead process's board");
            n += 1;
        }
    }
    n
}

/// The name of a board file in `/dev/shm`, removed when dropped: the rank that
/// created the file holds it until every process that opens the file by name has
/// done so, and every error path of the set-up drops it, so that no set-up that
/// fails leaves a board behind.
pub(super) struct BoardName(pub(super) Option<PathBuf>);

impl BoardName {
    /// Removes the name now (the mappings stay).
    pub(super) fn unlink(&mut self) {
        if let Some(p) = self.0.take() {
            if let Err(e) = std::fs::remove_file(&p) {
                tracing::debug!(path = %hpc_io::message::path(&p), error = %e, "removing a board file");
            }
        }
    }
}

impl Drop for BoardName {
    fn drop(&mut self) {
        self.unlink();
    }
}

/// Creates the boards of a new communicator, one per node: the node's lowest
/// rank creates it (mode 0600), the node's ranks map it and publish their pids.
/// Without a proxy the name is removed as soon as every rank mapped the board;
/// with one, the returned [`BoardName`] keeps it until the proxy mapped it too.
/// Ranks on other nodes get pid 0 (never "dead").
pub(super) fn make_board(
    boot: &dyn Boot,
    extra: usize,
) -> Result<(Arc<Board>, Vec<u32>, BoardName)> {
    let (me, size) = (boot.rank(), boot.size());
    let leader = node_leader(boot, me);
    // Each rank's part: whether it counts a proxy among the board's members
    // (the `Proxy` engine's), then, from the node's first rank, the board's
    // path; empty where that rank could not create it.
    let mut path = vec![extra as u8];
    let mut created = None;
    let mut name = BoardName(None);
    if me == leader {
        let p = PathBuf::from(format!(
            "/dev/shm/{BOARD_PREFIX}{}-{}-{:x}",
            std::process::id(),
            BOARDS.fetch_add(1, Ordering::Relaxed),
            hpc_runtime::random_u64()?
        ));
        let b = Board::create(&p, size + extra)
            .map_err(|e| Error::transport_from("creating the node's board", e));
        match b {
            Ok(b) => {
                path.extend_from_slice(p.to_string_lossy().as_bytes());
                created = Some(b);
                name = BoardName(Some(p));
            }
            Err(e) => {
                // Tell the others before failing so that nobody waits for us,
                // and why: the launcher stops the job at the first rank that
                // ends, and that was often another rank of the node, whose
                // message then said only "could not create" (a full
                // `/dev/shm` was named by no line of the job's output).
                let mut failed = vec![CREATE_FAILED];
                failed.extend_from_slice(hpc_io::message::chain(&e).as_bytes());
                let _ = boot.allgather(&failed);
                return Err(e);
            }
        }
    }
    let parts = boot.allgather(&path)?;
    let failed = |r: usize| parts[r].is_empty() || parts[r][0] == CREATE_FAILED;
    if let Some(r) = (0..size).find(|&r| node_leader(boot, r) == r && failed(r)) {
        let why = String::from_utf8_lossy(parts[r].get(1..).unwrap_or_default());
        return Err(Error::transport(if why.is_empty() {
            format!("rank {r} could not create its node's board")
        } else {
            format!(
                "rank {r} could not create its node's board: {}",
                hpc_io::message::cut(&hpc_io::message::escape_controls(&why))
            )
        }));
    }
    // Ranks that chose the `Proxy` engine and ranks that did not: said so
    // (the one read "rank 1 is lost: rank 1 finalized before joining
    // allgather", the other "mapping the node's board", the board being for
    // another count of members).
    if let Some(r) = (0..size).find(|&r| parts[r].first().is_some_and(|&x| x != extra as u8)) {
        let with = |proxy: bool| if proxy { "with" } else { "without" };
        return Err(Error::Unsupported(format!(
            "rank {r} made this communicator {} the Proxy engine and rank {me} {} it: \
             every rank must choose the same engine (Inline and Thread may be mixed)",
            with(extra == 0),
            with(extra > 0)
        )));
    }
    let p = PathBuf::from(String::from_utf8_lossy(&parts[leader][1..]).into_owned());
    let board = match created {
        Some(b) => b,
        None => Board::open(&p, size + extra)
            .map_err(|e| Error::transport_from("mapping the node's board", e))?,
    };
    board.set_pid(me, std::process::id());
    let my_node = boot.node_of(me);
    // Only where another process will read this one's memory: a rank on this
    // node, or the proxy.
    if extra > 0 || (0..size).any(|r| r != me && boot.node_of(r) == my_node) {
        allow_peer_reads();
    }
    let mut mine = std::process::id().to_le_bytes().to_vec();
    mine.extend_from_slice(&(std::ptr::addr_of!(CMA_PROBE) as u64).to_le_bytes());
    let all = boot.allgather(&mine)?;
    // Every rank of the node opened the file before it took part in that allgather:
    // without a proxy to come, nobody needs the name any more.
    if extra == 0 {
        name.unlink();
    }
    let word = |b: &[u8], at: usize| {
        b.get(at..at + 8)
            .map(|w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8])))
    };
    let pids: Vec<u32> = all
        .iter()
        .enumerate()
        .map(|(r, b)| {
            if boot.node_of(r) == my_node {
                u32::from_le_bytes(b.get(..4).and_then(|w| w.try_into().ok()).unwrap_or([0; 4]))
            } else {
                0
            }
        })
        .collect();
    // Every rank reads a word of the next rank on its node that is another
    // process, and all learn the outcome: a blocked cross-memory attach fails
    // here, on every rank alike, rather than in the first large collective.
    let next = (1..size)
        .map(|i| (me + i) % size)
        .find(|&r| pids[r] != 0 && pids[r] != pids[me]);
    let probe: i32 = match next.map(|r| (r, word(&all[r], 4))) {
        Some((r, Some(addr))) => {
            let mut got = 0u64;
            // SAFETY: `got` is 8 writable bytes of this process.
            match unsafe { board::cma_read(pids[r], addr, std::ptr::addr_of_mut!(got).cast(), 8) } {
                Ok(()) if got == CMA_PROBE => 0,
                Ok(()) => -1,
                Err(e) => e.raw_os_error().unwrap_or(-1),
            }
        }
        _ => 0,
    };
    let mut verdict = probe.to_le_bytes().to_vec();
    verdict.extend_from_slice(&(next.unwrap_or(me) as u32).to_le_bytes());
    let verdicts = boot.allgather(&verdict)?;
    for (r, v) in verdicts.iter().enumerate() {
        let code = i32::from_le_bytes(v.get(..4).and_then(|w| w.try_into().ok()).unwrap_or([0; 4]));
        if code != 0 {
            let peer = u32::from_le_bytes(
                v.get(4..8)
                    .and_then(|w| w.try_into().ok())
                    .unwrap_or([0; 4]),
            );
            return Err(cma_blocked(r, peer as usize, code));
        }
    }
    Ok((Arc::new(board), pids, name))
}

/// A word whose address each rank publishes when it joins a communicator, for
/// its peers to read by cross-memory attach (see `make_board`).
static CMA_PROBE: u64 = 0x6870_632d_636d_6121;

/// Lets processes of this user read this one's memory by cross-memory attach
/// where Yama's `ptrace_scope` is 1 (Ubuntu's default), under which only a
/// process's ancestors may: the peer ranks are its siblings, the proxy is a
/// child of rank 0. Open MPI's shared-memory transport does the same. Fails
/// harmlessly (`EINVAL`) where Yama is absent.
fn allow_peer_reads() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: prctl with integer arguments only.
        let r = unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
        tracing::debug!(
            ok = r == 0,
            "PR_SET_PTRACER_ANY for peer ranks and the proxy"
        );
    });
}

/// The refusal of a communicator whose ranks may not read each other's memory.
fn cma_blocked(rank: usize, peer: usize, code: i32) -> Error {
    let why = if code > 0 {
        std::io::Error::from_raw_os_error(code).to_string()
    } else {
        "it read something other than the word the peer published".to_string()
    };
    Error::Unsupported(format!(
        "cross-memory attach between the ranks of this node is blocked: rank {rank} could not \
         read rank {peer}'s memory with process_vm_readv ({why}). Messages over stage_max bytes \
         move that way, and the proxy reaches buffers other than SharedBufs that way. Allow it: \
         kernel.yama.ptrace_scope 0 or 1 (each rank already sets PR_SET_PTRACER for 1), or \
         CAP_SYS_PTRACE for the ranks (containers: --cap-add SYS_PTRACE), and no seccomp filter \
         that blocks process_vm_readv/process_vm_writev; `hpc doctor` checks this"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rank 1 of two on one node, whose leader's part of the first exchange
    /// is given.
    struct Second(Vec<u8>);

    impl Boot for Second {
        fn rank(&self) -> usize {
            1
        }
        fn size(&self) -> usize {
            2
        }
        fn node_of(&self, _: usize) -> usize {
            0
        }
        fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
            Ok(vec![self.0.clone(), mine.to_vec()])
        }
    }

    /// A node's leader that could not create the board says why to the
    /// others: the launcher stops a job at its first rank to end, and when
    /// that was rank 1, its "rank 0 could not create its node's board" was
    /// the job's only word (a full `/dev/shm` named nowhere; once in a full
    /// suite, by the launcher test of a full `/dev/shm`).
    #[test]
    fn the_others_are_told_why_the_leader_could_not_create_the_board() {
        let mut failed = vec![CREATE_FAILED];
        failed.extend_from_slice(b"no room for the board's 2106304 bytes\x1b[2J");
        let e = make_board(&Second(failed), 0).err().unwrap().to_string();
        assert!(
            e.contains(
                "rank 0 could not create its node's board: no room for the board's 2106304 \
                 bytes\\u{1b}[2J"
            ),
            "{e}"
        );
        // A part of no byte (the leader said nothing more) still fails by name.
        let e = make_board(&Second(Vec::new()), 0)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.ends_with("rank 0 could not create its node's board"),
            "{e}"
        );
    }
}
