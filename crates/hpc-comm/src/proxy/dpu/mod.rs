//! A rank's side of a proxy placed as on a DPU (see [`hpc_proxy::dpu`]): a
//! link over the transport and registered memory, no shared file.

mod client;

pub(crate) use client::{Carried, Client};
