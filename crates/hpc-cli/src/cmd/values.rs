//! The closed sets of values that options take, as clap value enums: `--help` lists
//! them, shell completion offers them, and a typo is refused by clap with the list.
//! Each maps to the name the library parses, so the libraries keep one spelling.

/// `hpc perftest --backend`: the transport backend for every pair.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Shared memory on one node; between nodes a fabric's libfabric provider (in a
    /// build with `ofi`), verbs with an HCA, else TCP.
    Auto,
    /// Shared memory (both ranks on one node).
    Shm,
    /// TCP.
    Tcp,
    /// libfabric (an `hpc` built with `--features ofi`; `HPC_OFI_PROVIDER` picks the
    /// provider).
    Ofi,
    /// InfiniBand verbs (needs an HCA).
    Verbs,
    /// MPI point-to-point (an `hpc` built with `--features mpi`, under mpirun or srun).
    Mpi,
}

impl Backend {
    /// The name `hpc_rdma::Choice` parses.
    pub fn name(self) -> String {
        value_name(self)
    }
}

/// `hpc selftest --collectives`: the engine that progresses the collectives.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// Progress only inside test and wait.
    Inline,
    /// A progress thread per rank.
    Thread,
    /// A progress process per node (under `hpc run --proxy`).
    Proxy,
    /// MPI's own immediate collectives (an `hpc` built with `--features mpi`).
    Mpi,
}

impl Engine {
    /// The name `hpc_comm::Engine` parses.
    pub fn name(self) -> String {
        value_name(self)
    }
}

/// The name clap gives `value` (the one `--help` lists and the command line takes):
/// the library's own spelling, which `every_value_parses_in_its_library` checks, so
/// the names are written once, in the library.
fn value_name(value: impl clap::ValueEnum) -> String {
    value
        .to_possible_value()
        .expect("no value is skipped")
        .get_name()
        .to_owned()
}

/// `hpc topo --policy`: how ranks are laid out over the node's cores.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Consecutive blocks of cores in topology order.
    #[value(alias = "core")]
    Compact,
    /// Round-robin over NUMA nodes (or packages).
    #[value(alias = "scatter")]
    Spread,
    /// One rank per NUMA node.
    #[value(alias = "numa-per-rank")]
    Numa,
    /// One rank per package.
    #[value(aliases = ["package-per-rank", "socket"])]
    Package,
}

impl From<Policy> for hpc_topology::Policy {
    fn from(p: Policy) -> Self {
        match p {
            Policy::Compact => hpc_topology::Policy::Compact,
            Policy::Spread => hpc_topology::Policy::Spread,
            Policy::Numa => hpc_topology::Policy::NumaPerRank,
            Policy::Package => hpc_topology::Policy::PackagePerRank,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn every_value_parses_in_its_library() {
        for b in Backend::value_variants() {
            assert!(b.name().parse::<hpc_rdma::Choice>().is_ok(), "{b:?}");
        }
        for e in Engine::value_variants() {
            // `mpi` parses only in a build with MPI.
            if *e != Engine::Mpi || cfg!(feature = "mpi") {
                assert!(e.name().parse::<hpc_comm::Engine>().is_ok(), "{e:?}");
                // The library's own spelling, not one its case-blind parser forgives.
                assert_eq!(
                    e.name().parse::<hpc_comm::Engine>().unwrap().name(),
                    e.name()
                );
            }
        }
        for p in Policy::value_variants() {
            let name = p.to_possible_value().unwrap().get_name().to_string();
            assert_eq!(
                name.parse::<hpc_topology::Policy>().unwrap(),
                hpc_topology::Policy::from(*p)
            );
        }
    }
}
