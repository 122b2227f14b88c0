//! The `Mpi` engine (feature `mpi`): the MPI library's own immediate
//! collectives; see `mpi_engine.rs` for the calls.

use std::sync::Arc;

use super::{Driver, Job, Pending, Split, Ticket};
use crate::mpi_engine::{self, MpiComm};
use hpc_board::Result;

/// The `Mpi` engine.
pub(crate) struct Mpi {
    pub comm: MpiComm,
}

impl Driver for Mpi {
    fn start(&self, job: Job<'_>) -> Result<Ticket> {
        Ok(Arc::new(Request(self.comm.start(job)?)))
    }

    fn message(
        &self,
        m: &super::Message,
        bufs: (*const u8, usize, *mut u8, usize),
        stage: Option<crate::job::Stage>,
    ) -> Option<Result<Ticket>> {
        Some(
            self.comm
                .message(m, bufs, stage)
                .map(|p| Arc::new(Request(p)) as Ticket),
        )
    }

    fn split(&self, s: &Split<'_>) -> Option<Result<Box<dyn Driver>>> {
        Some(
            self.comm
                .split(s.color, s.key)
                .map(|comm| Box::new(Mpi { comm }) as Box<dyn Driver>),
        )
    }
}

/// An MPI request.
struct Request(mpi_engine::Pending);

impl Pending for Request {
    fn test(&self, _: &dyn Driver) -> bool {
        self.0.test()
    }

    fn wait(&self, _: &dyn Driver, out: Option<&mut [u8]>) -> Result<()> {
        self.0.wait(out)
    }

    fn matched(&self) -> Option<(usize, u16)> {
        self.0.matched()
    }

    fn cancel(&self, _: &dyn Driver) {
        // Collectives cannot be cancelled in MPI: finish it.
        let _ = self.0.wait(None);
    }
}
