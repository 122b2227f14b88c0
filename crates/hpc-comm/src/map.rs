//! Shared mappings of files (the board, `SharedBuf`s, the proxy's view of a
//! rank's `SharedBuf`), below the modules that map.

/// Maps the first `len` bytes of file `fd` shared, readable and writable, at
/// an address the kernel picks.
pub(crate) fn map_shared(fd: std::os::fd::RawFd, len: usize) -> std::io::Result<*mut u8> {
    // SAFETY: a new mapping where the kernel chooses, so it aliases nothing; the
    // kernel checks the descriptor and the length, the result is checked below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(p.cast())
    }
}
