//! The clocks a trace is recorded and aligned on.

use rustix::time::{clock_gettime, ClockId};

/// Nanoseconds of `CLOCK_MONOTONIC`: every timestamp of a trace (shared by the
/// processes of one boot of one machine, containers included).
pub fn monotonic_ns() -> u64 {
    ns(clock_gettime(ClockId::Monotonic))
}

/// Nanoseconds of `CLOCK_REALTIME` (since the Unix epoch).
fn realtime_ns() -> u64 {
    ns(clock_gettime(ClockId::Realtime))
}

fn ns(t: rustix::time::Timespec) -> u64 {
    u64::try_from(t.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(t.tv_nsec).unwrap_or(0))
}

/// Both clocks at one moment: the realtime clock read between two readings of the
/// monotonic one, paired with their middle.
pub fn base() -> (u64, u64) {
    let m0 = monotonic_ns();
    let r = realtime_ns();
    let m1 = monotonic_ns();
    (r, m0 + (m1 - m0) / 2)
}

/// This machine's boot (`/proc/sys/kernel/random/boot_id`): processes with the same
/// one share `CLOCK_MONOTONIC`. Empty when it cannot be read.
pub fn boot_id() -> String {
    hpc_io::read::read_regular_to_string("/proc/sys/kernel/random/boot_id", 256)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The host's name (uname's node name).
pub fn host() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}
