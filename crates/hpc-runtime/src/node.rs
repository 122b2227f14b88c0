//! Which ranks share a node.

/// The node layout of a job: for every rank, its node id, and for every node, its ranks.
///
/// Node ids are assigned in order of the lowest rank on each node, so rank 0 is always
/// on node 0; local ranks follow global rank order within a node.
///
/// # Panics
///
/// Every method that takes a rank or a node panics, as a slice index does,
/// when it is not one of the job's, naming it and the job's ranks or nodes
/// ("rank 5 is not a rank of this job of 1 ranks"; it said "index out of
/// bounds: the len is 1 but the index is 5").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeMap {
    node_of: Vec<usize>,
    ranks: Vec<Vec<usize>>,
    names: Vec<String>,
}

impl NodeMap {
    /// Builds the map from the node name of each rank.
    pub fn from_names<S: AsRef<str>>(names: &[S]) -> NodeMap {
        let mut node_names: Vec<String> = Vec::new();
        let mut ranks: Vec<Vec<usize>> = Vec::new();
        let mut node_of = Vec::with_capacity(names.len());
        let mut index = std::collections::HashMap::new();
        for (rank, name) in names.iter().enumerate() {
            let name = name.as_ref();
            let id = *index.entry(name.to_string()).or_insert_with(|| {
                node_names.push(name.to_string());
                ranks.push(Vec::new());
                node_names.len() - 1
            });
            ranks[id].push(rank);
            node_of.push(id);
        }
        NodeMap {
            node_of,
            ranks,
            names: node_names,
        }
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.node_of.len()
    }
    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.ranks.len()
    }
    /// Node id of `rank`.
    pub fn node_of(&self, rank: usize) -> usize {
        match self.node_of.get(rank) {
            Some(&node) => node,
            None => panic!(
                "rank {rank} is not a rank of this job of {} ranks",
                self.size()
            ),
        }
    }
    /// Ranks on node `node`, ascending.
    pub fn ranks_on(&self, node: usize) -> &[usize] {
        &self.ranks[self.check_node(node)]
    }
    /// Name of node `node` (host name, or `HPC_NODE_NAME`).
    pub fn name(&self, node: usize) -> &str {
        &self.names[self.check_node(node)]
    }
    /// Position of `rank` among the ranks of its node.
    pub fn local_rank(&self, rank: usize) -> usize {
        let node = self.node_of(rank);
        self.ranks[node]
            .iter()
            .position(|&r| r == rank)
            .expect("a rank is listed on its own node")
    }
    /// Number of ranks on the node of `rank`.
    pub fn local_size(&self, rank: usize) -> usize {
        self.ranks[self.node_of(rank)].len()
    }
    /// Whether two ranks share a node.
    pub fn same_node(&self, a: usize, b: usize) -> bool {
        self.node_of(a) == self.node_of(b)
    }
    /// `node`, where it is one of the job's nodes.
    fn check_node(&self, node: usize) -> usize {
        if node >= self.node_count() {
            panic!(
                "node {node} is not a node of this job of {} nodes",
                self.node_count()
            );
        }
        node
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A rank or a node beyond the job's is named in the panic, with the
    /// job's size: "index out of bounds: the len is 1 but the index is 5".
    #[test]
    fn a_rank_or_node_beyond_the_job_is_named() {
        let m = NodeMap::from_names(&["a"]);
        let said = |f: &dyn Fn()| {
            let p = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_err();
            p.downcast_ref::<String>().cloned().unwrap_or_default()
        };
        let rank5 = "rank 5 is not a rank of this job of 1 ranks";
        assert_eq!(
            said(&|| {
                let _ = m.node_of(5);
            }),
            rank5
        );
        assert_eq!(
            said(&|| {
                let _ = m.local_rank(5);
            }),
            rank5
        );
        assert_eq!(
            said(&|| {
                let _ = m.local_size(5);
            }),
            rank5
        );
        assert_eq!(
            said(&|| {
                let _ = m.same_node(0, 5);
            }),
            rank5
        );
        let node3 = "node 3 is not a node of this job of 1 nodes";
        assert_eq!(
            said(&|| {
                let _ = m.ranks_on(3);
            }),
            node3
        );
        assert_eq!(
            said(&|| {
                let _ = m.name(3);
            }),
            node3
        );
    }

    #[test]
    fn two_nodes_interleaved() {
        let m = NodeMap::from_names(&["b", "a", "b", "a", "b"]);
        assert_eq!(m.node_count(), 2);
        assert_eq!(m.node_of(0), 0);
        assert_eq!(m.name(0), "b");
        assert_eq!(m.ranks_on(0), &[0, 2, 4]);
        assert_eq!(m.ranks_on(1), &[1, 3]);
        assert_eq!(m.local_rank(4), 2);
        assert_eq!(m.local_size(3), 2);
        assert!(m.same_node(1, 3));
        assert!(!m.same_node(0, 1));
    }

    proptest! {
        #[test]
        fn local_ranks_are_a_permutation(names in proptest::collection::vec(0u8..5, 1..80)) {
            let names: Vec<String> = names.iter().map(|n| format!("n{n}")).collect();
            let m = NodeMap::from_names(&names);
            let mut total = 0;
            for node in 0..m.node_count() {
                let rs = m.ranks_on(node);
                total += rs.len();
                for (i, &r) in rs.iter().enumerate() {
                    prop_assert_eq!(m.local_rank(r), i);
                    prop_assert_eq!(m.local_size(r), rs.len());
                    prop_assert_eq!(m.node_of(r), node);
                }
            }
            prop_assert_eq!(total, names.len());
        }
    }
}
