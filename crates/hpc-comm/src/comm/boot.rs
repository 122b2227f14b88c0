//! How the future members of a communicator exchange bytes while it is built:
//! the world's collectives, or for a split its parent's.

use hpc_runtime::World;

use super::Comm;
use hpc_board::Result;

/// Something that can run an allgather of bytes among the future members.
pub(super) trait Boot {
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    fn node_of(&self, r: usize) -> usize;
    fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>>;
    /// The allgather among every process that takes part (the parent's ranks of a
    /// split: the members of every new group), each part at [`Boot::index_of`].
    fn allgather_all(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.allgather(mine)
    }
    /// Where member `r`'s part is in [`Boot::allgather_all`]'s result.
    fn index_of(&self, r: usize) -> usize {
        r
    }
    /// Whether every process that takes part is a member (not a split, whose
    /// groups may take different steps).
    fn uniform(&self) -> bool {
        true
    }
}

impl Boot for World {
    fn rank(&self) -> usize {
        World::rank(self)
    }
    fn size(&self) -> usize {
        World::size(self)
    }
    fn node_of(&self, r: usize) -> usize {
        World::node_of(self, r)
    }
    fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        Ok(World::allgather(self, mine)?)
    }
}

/// A subgroup bootstrapped through its parent communicator (every parent
/// rank takes part in each exchange; members only use their group's parts).
pub(super) struct SubBoot<'a> {
    pub(super) parent: &'a Comm,
    pub(super) members: Vec<usize>,
    pub(super) rank: usize,
}

impl Boot for SubBoot<'_> {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.members.len()
    }
    fn node_of(&self, r: usize) -> usize {
        self.parent.nodes[self.members[r]]
    }
    fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let all = self.parent.allgather_bytes(mine)?;
        Ok(self.members.iter().map(|&m| all[m].clone()).collect())
    }
    fn allgather_all(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.parent.allgather_bytes(mine)
    }
    fn index_of(&self, r: usize) -> usize {
        self.members[r]
    }
    fn uniform(&self) -> bool {
        false
    }
}

/// The lowest rank on `r`'s node: it creates the node's board.
pub(super) fn node_leader(boot: &dyn Boot, r: usize) -> usize {
    let node = boot.node_of(r);
    (0..boot.size())
        .find(|&q| boot.node_of(q) == node)
        .unwrap_or(r)
}
