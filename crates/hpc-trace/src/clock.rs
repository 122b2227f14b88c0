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

/// When this process's parent started at the latest, on the realtime clock,
/// from `/proc`: for a rank, its launcher (`hpc run`, slurmstepd, the MPI
/// daemon), started with the job. `/proc` gives the start in whole clock
/// ticks (10 ms), rounded down; the end of that tick is returned, so that a
/// file finished before the parent started is never dated after it (an
/// earlier job's trace file, finished in the same tick as the next job's
/// launcher started, was taken for one written while that job ran). `None`
/// when `/proc` cannot tell.
pub fn parent_start() -> Option<std::time::SystemTime> {
    let stat = |pid: &str| {
        let text = hpc_io::read::read_regular_to_string(format!("/proc/{pid}/stat"), 4096).ok()?;
        // The fields after the command's name, which is in parentheses and may
        // hold blanks and parentheses itself.
        let (_, rest) = text.rsplit_once(')')?;
        Some(
            rest.split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>(),
        )
    };
    // Field 4 is the parent's id, 22 the start in clock ticks since the boot
    // (fields 3 and 22 are the 1st and 20th after the name).
    let ppid = stat("self")?.get(1)?.clone();
    let ticks: u64 = stat(&ppid)?.get(19)?.parse().ok()?;
    // SAFETY: sysconf reads a constant of the system; no memory is passed.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok()?;
    let started_ns = ticks.checked_add(1)?.checked_mul(1_000_000_000)? / hz.max(1);
    let since = ns(clock_gettime(ClockId::Boottime)).checked_sub(started_ns)?;
    std::time::SystemTime::now().checked_sub(std::time::Duration::from_nanos(since))
}
