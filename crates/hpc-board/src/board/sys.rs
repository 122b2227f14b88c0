//! The system calls under the board: futexes on its words, cross-memory
//! attach between the ranks, and whether a rank's process is gone.

use std::io;
#[cfg(not(loom))]
use std::time::Duration;

#[cfg(not(loom))]
use super::AtomicU32;

/// Sleeps while `word` holds `seen`, for at most `timeout`; `false` if the
/// timeout ended the sleep (`true`: woken, or the word had moved already).
#[cfg(not(loom))]
pub(super) fn futex_wait(word: &AtomicU32, seen: u32, timeout: Duration) -> bool {
    use rustix::thread::futex;
    let ts = futex::Timespec {
        tv_sec: futex::Secs::try_from(timeout.as_secs()).unwrap_or(futex::Secs::MAX),
        tv_nsec: futex::Nsecs::from(timeout.subsec_nanos()),
    };
    // Not PRIVATE: the word lies in a shared mapping, other processes wake it.
    !matches!(
        futex::wait(word, futex::Flags::empty(), seen, Some(&ts)),
        Err(rustix::io::Errno::TIMEDOUT)
    )
}

#[cfg(not(loom))]
pub(super) fn futex_wake(word: &AtomicU32) {
    // Not PRIVATE (see `futex_wait`); wakes every waiter (the count is an
    // `int` to the kernel: `i32::MAX`, not `u32::MAX`, which reads as -1). A failure can only
    // mean a bad address, which a `&AtomicU32` is not.
    let _ =
        rustix::thread::futex::wake(word, rustix::thread::futex::Flags::empty(), i32::MAX as u32);
}

/// Copies `len` bytes at `remote` in process `pid` to `local` (one copy,
/// `process_vm_readv`). Loops over partial transfers.
///
/// # Safety
/// `local` must be valid for `len` bytes of writes and not aliased.
pub unsafe fn cma_read(pid: u32, remote: u64, local: *mut u8, len: usize) -> io::Result<()> {
    // SAFETY: the kernel writes the local range (valid per contract) and reads
    // the remote one in the other process.
    unsafe { cma(libc::process_vm_readv, "read", pid, local, remote, len) }
}

/// Copies `len` bytes from `local` to `remote` in process `pid` (`process_vm_writev`).
///
/// # Safety
/// `local` must be valid for `len` bytes of reads. The caller vouches that the
/// remote range is memory the other process lent for this purpose.
pub unsafe fn cma_write(pid: u32, local: *const u8, remote: u64, len: usize) -> io::Result<()> {
    // SAFETY: the kernel only reads the local range (valid per contract) and
    // writes the remote one in the other process.
    unsafe {
        cma(
            libc::process_vm_writev,
            "write",
            pid,
            local.cast_mut(),
            remote,
            len,
        )
    }
}

/// `process_vm_readv` or `process_vm_writev`.
type CmaCall = unsafe extern "C" fn(
    libc::pid_t,
    *const libc::iovec,
    libc::c_ulong,
    *const libc::iovec,
    libc::c_ulong,
    libc::c_ulong,
) -> libc::ssize_t;

/// Moves `len` bytes between `local` and `remote` in process `pid` with
/// `call` (`what` it does, for the error), looping over partial transfers.
///
/// # Safety
/// `local` must be valid for `len` bytes of what `call` does to it.
unsafe fn cma(
    call: CmaCall,
    what: &str,
    pid: u32,
    local: *mut u8,
    remote: u64,
    len: usize,
) -> io::Result<()> {
    let mut done = 0usize;
    while done < len {
        let l = libc::iovec {
            // SAFETY: `done < len`, within the caller's buffer.
            iov_base: unsafe { local.add(done) }.cast(),
            iov_len: len - done,
        };
        let r = libc::iovec {
            iov_base: (remote as usize + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: the local iovec lies in the caller's buffer (see the function's
        // contract); the remote one is only touched by the kernel in the other process.
        let n = unsafe { call(pid as libc::pid_t, &l, 1, &r, 1, 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("short CMA {what}"),
            ));
        }
        done += n as usize;
    }
    Ok(())
}

/// Whether process `pid` is gone (no `/proc` entry, or a zombie).
///
/// Only an answer that says so counts: a read of `/proc` that fails for
/// another reason (no file descriptor or memory left, on a loaded machine)
/// says nothing about the process, and a rank wrongly declared lost fails a
/// collective that would have finished; the kernel is then asked directly.
pub fn pid_dead(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    let gone = |e: &io::Error| {
        e.kind() == io::ErrorKind::NotFound
            || e.raw_os_error() == Some(rustix::io::Errno::SRCH.raw_os_error())
    };
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(e) if gone(&e) => true,
        Err(_) => no_such_process(pid),
        Ok(s) => match s
            .rsplit_once(')')
            .and_then(|(_, r)| r.trim_start().chars().next())
        {
            Some(state) => matches!(state, 'Z' | 'X'),
            None => no_such_process(pid),
        },
    }
}

/// Whether the kernel says there is no process `pid` (`kill(pid, 0)`).
pub(super) fn no_such_process(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    // Signal 0 sends nothing; it only checks that the process exists.
    rustix::process::test_kill_process(pid) == Err(rustix::io::Errno::SRCH)
}
