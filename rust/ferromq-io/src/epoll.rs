//! A thin, safe face of one Linux epoll instance: create, control, wait without
//! blocking. Level-triggered: a socket that still has bytes is reported again at the
//! next wait, so one wait reads each ready socket once and no socket can starve the
//! others.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

pub(crate) const READ: u32 = (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
pub(crate) const WRITE: u32 = libc::EPOLLOUT as u32;
pub(crate) const HANG_UP: u32 = (libc::EPOLLHUP | libc::EPOLLERR) as u32;

pub(crate) struct Epoll(OwnedFd);

impl Epoll {
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: plain syscall; the descriptor it returns is owned from here on.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nothing else owns.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    pub(crate) fn add(&self, fd: RawFd, interest: u32, token: u64) -> io::Result<()> {
        self.control(libc::EPOLL_CTL_ADD, fd, interest, token)
    }

    pub(crate) fn modify(&self, fd: RawFd, interest: u32, token: u64) -> io::Result<()> {
        self.control(libc::EPOLL_CTL_MOD, fd, interest, token)
    }

    pub(crate) fn delete(&self, fd: RawFd) {
        // Failing means the descriptor was not registered: nothing to undo.
        let _ = self.control(libc::EPOLL_CTL_DEL, fd, 0, 0);
    }

    fn control(&self, op: libc::c_int, fd: RawFd, interest: u32, token: u64) -> io::Result<()> {
        let mut event = libc::epoll_event {
            events: interest,
            u64: token,
        };
        // SAFETY: `event` lives across the call; the kernel copies it.
        if unsafe { libc::epoll_ctl(self.fd(), op, fd, &mut event) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Fill `ready` (cleared first, up to its capacity) with what is ready now.
    pub(crate) fn wait(&self, ready: &mut Vec<libc::epoll_event>) -> io::Result<()> {
        ready.clear();
        let capacity = ready.capacity().min(libc::c_int::MAX as usize) as libc::c_int;
        loop {
            // SAFETY: the kernel writes at most `capacity` events into the spare
            // capacity of `ready`, and returns how many it wrote.
            let count = unsafe { libc::epoll_wait(self.fd(), ready.as_mut_ptr(), capacity, 0) };
            if count >= 0 {
                // SAFETY: the first `count` entries were written by the kernel.
                unsafe { ready.set_len(count as usize) };
                return Ok(());
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
    }
}
