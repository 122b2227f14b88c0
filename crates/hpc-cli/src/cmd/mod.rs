//! One module per subcommand. Each exposes `Args` (clap) and `exec(Args) -> Result<i32>`
//! returning the process exit code.

pub mod bind;
pub mod doctor;
pub mod job;
pub mod perftest;
pub mod proxy;
pub mod run;
pub mod selftest;
pub mod topo;
