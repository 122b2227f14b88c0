//! Byte counts as people read them, below the modules that print them.

pub use hpc_io::message::format_bytes;
