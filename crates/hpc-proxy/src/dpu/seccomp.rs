//! The seccomp filter of a DPU proxy: no reach into host memory.

use hpc_board::{Error, Result};

// ---------------------------------------------------------------------------
// The proxy's side.

/// Makes the calls that reach another process's memory fail with `EPERM` in
/// every thread of this process: `process_vm_readv`, `process_vm_writev`,
/// `pidfd_getfd` (taking a rank's descriptors, e.g. a memfd) and `ptrace`.
/// What a proxy in DPU placement must do without, enforced (a guard of the
/// design, not a security boundary: it does not check the architecture).
pub fn forbid_host_memory() -> Result<()> {
    let stmt = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let denied = [
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_pidfd_getfd,
        libc::SYS_ptrace,
    ];
    // The system call number (offset 0 of `seccomp_data`), then one test per call.
    let mut filter = vec![stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0)];
    for (i, nr) in denied.iter().enumerate() {
        // Equal: jump to the EPERM return after the remaining tests and ALLOW.
        let to_deny = (denied.len() - i) as u8;
        filter.push(libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: to_deny,
            jf: 0,
            k: *nr as u32,
        });
    }
    filter.push(stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW));
    filter.push(stmt(
        libc::BPF_RET | libc::BPF_K,
        libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
    ));
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_mut_ptr(),
    };
    // SAFETY: prctl and seccomp(2) with a valid filter program that lives across
    // the call; the filter only answers four system calls with EPERM.
    let rc = unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            -1
        } else {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                libc::SECCOMP_FILTER_FLAG_TSYNC,
                &prog as *const libc::sock_fprog,
            ) as i32
        }
    };
    if rc != 0 {
        return Err(Error::Unsupported(format!(
            "the DPU proxy could not forbid itself cross-memory access (seccomp): {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}
