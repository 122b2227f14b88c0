//! The node board of hpc-rs's communicators, and what the layers above it
//! share: the layer under [`hpc-comm`](https://docs.rs/hpc-comm) (the
//! engines and the `Comm`) and [`hpc-proxy`](https://docs.rs/hpc-proxy) (the
//! per-node proxy process). Applications use `hpc-comm`, which re-exports the
//! types of this crate that are part of its interface ([`Error`], the buffer
//! traits, [`SharedBuf`](shm::SharedBuf)).
//!
//! * [`board`]: one file in `/dev/shm` mapped by every rank of a
//!   communicator on one node (and its proxy): per rank its pid, a futex
//!   doorbell, whether it left, and its last failed collectives; per ordered
//!   pair of ranks a ring of descriptors and staging slots. The protocol that
//!   lets a rank sleep without missing a message is argued in `SLEEP.md`
//!   beside this file and checked by the loom models.
//! * [`shm`]: buffers in shared memory that a proxy maps and copies with
//!   `memcpy`.
//! * [`sig`]: a collective's signature, so that ranks that disagree on a
//!   collective are told, not given wrong results.
//! * [`p2p`]: how a typed point-to-point message is named.
//! * [`Error`]: what the engines and the proxy report, typed.
//! * small pieces both sides use: [`backoff`] (spin, yield, sleep),
//!   [`busy`] (a loop's busy span on the timeline), [`map`] (shared
//!   mappings), [`sync`] (locks that survive a panic).
//!
//! No module imports one above it (`cargo xtask modcycles` checks).

pub mod backoff;
pub mod board;
mod buf;
pub mod busy;
mod error;
pub mod map;
pub mod p2p;
pub mod shm;
pub mod sig;
pub mod sync;
mod tag;

pub use buf::{bytes, bytes_mut, Buf, BufMut, Elem};
pub use error::{Error, Result, LISTED_RANKS};
pub use tag::{Tag, ANY_TAG};
