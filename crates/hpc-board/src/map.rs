//! Shared mappings of files (the board, `SharedBuf`s, the proxy's view of a
//! rank's `SharedBuf`), below the modules that map.

/// Maps the first `len` bytes of file `fd` shared, readable and writable, at
/// an address the kernel picks.
pub fn map_shared(fd: std::os::fd::BorrowedFd<'_>, len: usize) -> std::io::Result<*mut u8> {
    // SAFETY: a new mapping where the kernel chooses, so it aliases nothing; the
    // descriptor is borrowed, so open, for this call; the kernel checks it and the
    // length.
    let p = unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            len,
            rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
            rustix::mm::MapFlags::SHARED,
            fd,
            0,
        )
    }?;
    Ok(p.cast())
}
