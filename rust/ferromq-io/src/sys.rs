//! The socket syscalls the set makes, each wrapped once: accept, options, read, send.
//! Every call retries on EINTR, so callers see data, "would block" or a real error.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Retry `call` while it fails with EINTR; a negative result is the errno's error.
fn retrying(mut call: impl FnMut() -> isize) -> io::Result<usize> {
    loop {
        let result = call();
        if result >= 0 {
            return Ok(result as usize);
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// One connection waiting on listening socket `listener`, non-blocking and
/// close-on-exec, with its peer's address (None for a peer that is not IP); None when
/// none is waiting.
pub fn accept(listener: RawFd) -> io::Result<Option<(OwnedFd, Option<SocketAddr>)>> {
    // SAFETY: an all-zero sockaddr_storage is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
    let mut length = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let accepted = retrying(|| {
        // SAFETY: `storage` and `length` outlive the call and describe its buffer.
        unsafe {
            libc::accept4(
                listener,
                (&raw mut storage).cast(),
                &mut length,
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            ) as isize
        }
    });
    match accepted {
        // SAFETY: accept4 returned a fresh descriptor that nothing else owns.
        Ok(fd) => Ok(Some((
            unsafe { OwnedFd::from_raw_fd(fd as RawFd) },
            address(&storage),
        ))),
        Err(error) if error.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(error) => Err(error),
    }
}

/// The IP address in `storage`, as the kernel filled it.
fn address(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match libc::c_int::from(storage.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let inet =
                unsafe { &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(inet.sin_addr.s_addr));
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(inet.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let inet = unsafe {
                &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            let ip = Ipv6Addr::from(inet.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(inet.sin6_port),
                inet.sin6_flowinfo,
                inet.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Make `fd` non-blocking and, on TCP, send small writes at once (no Nagle), as the
/// event loops do for their transports.
pub fn prepare(fd: &OwnedFd) -> io::Result<()> {
    let raw = fd.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own.
    let flags = unsafe { libc::fcntl(raw, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(raw, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let on: libc::c_int = 1;
    // SAFETY: `on` outlives the call; failing (a Unix socket, as a relayed hand-over's)
    // leaves the socket as it is, which is what it needs.
    unsafe {
        libc::setsockopt(
            raw,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&raw const on).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    Ok(())
}

/// Read into `buffer`; 0 is the peer's end of stream.
pub fn read(fd: RawFd, buffer: &mut [u8]) -> io::Result<usize> {
    // SAFETY: the kernel writes at most `buffer.len()` bytes into it.
    retrying(|| unsafe { libc::read(fd, buffer.as_mut_ptr().cast(), buffer.len()) })
}

/// Read into the spare capacity of `buffer`, growing its length by what came.
pub fn read_into(fd: RawFd, buffer: &mut Vec<u8>) -> io::Result<usize> {
    let spare = buffer.spare_capacity_mut();
    // SAFETY: the kernel writes at most `spare.len()` bytes into the spare capacity.
    let count = retrying(|| unsafe { libc::read(fd, spare.as_mut_ptr().cast(), spare.len()) })?;
    // SAFETY: `count` bytes past the length were just written.
    unsafe { buffer.set_len(buffer.len() + count) };
    Ok(count)
}

/// Send what the kernel takes of `data` now (never raising SIGPIPE).
pub fn send(fd: RawFd, data: &[u8]) -> io::Result<usize> {
    // SAFETY: the kernel reads at most `data.len()` bytes from it.
    retrying(|| unsafe {
        libc::send(
            fd,
            data.as_ptr().cast(),
            data.len(),
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    })
}

/// Whether `error` only means "not now".
pub fn would_block(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::WouldBlock
}
