//! `SocketSet`: the Python face of `ferromq_io::SocketSet`, the plain connections'
//! sockets owned by compiled code. `IOHub` (the Cython module) registers its epoll
//! descriptor with the event loop and calls `poll` when it is readable and `flush`
//! once per loop tick; the listeners `accept` and `adopt` sockets. Each call is per
//! loop tick or per connection, never per message or per read.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd, RawFd};

use ferromq_io::sys;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::engine::Engine;
use crate::errors;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<SocketSet>()?;
    Ok(())
}

#[pyclass(module = "ferromq._core", unsendable)]
pub(crate) struct SocketSet {
    inner: ferromq_io::SocketSet,
    engine: Py<Engine>,
}

#[pymethods]
impl SocketSet {
    /// The sockets of `engine`'s connections, read into one arena of `arena_size`
    /// bytes; output a connection keeps above `write_high_water` bytes pauses it.
    #[new]
    fn new(engine: Py<Engine>, arena_size: usize, write_high_water: usize) -> PyResult<Self> {
        Ok(Self {
            inner: ferromq_io::SocketSet::new(arena_size, write_high_water)
                .map_err(errors::socket_error)?,
            engine,
        })
    }

    /// The epoll descriptor to watch for reading.
    fn fileno(&self) -> RawFd {
        self.inner.fd()
    }

    /// Open connections.
    #[getter]
    fn connections(&self) -> usize {
        self.inner.len()
    }

    /// A connection waiting on the listening socket `listener_fd`, as `(fd, host,
    /// port)` (the caller owns `fd`); None when none waits. Raises OSError.
    #[staticmethod]
    fn accept(listener_fd: RawFd) -> PyResult<Option<(RawFd, String, u16)>> {
        Ok(sys::accept(listener_fd)
            .map_err(errors::socket_error)?
            .map(|(fd, peer)| match peer {
                Some(peer) => (fd.into_raw_fd(), peer.ip().to_string(), peer.port()),
                None => (fd.into_raw_fd(), String::new(), 0),
            }))
    }

    /// The listeners' names, by number (the engine's connections carry theirs).
    fn set_listener_names(&mut self, names: Vec<String>) {
        self.inner
            .set_listener_names(names.into_iter().map(String::into_boxed_str).collect());
    }

    /// Route new sockets as shard `here` of `count`: each waits for its CONNECT, then
    /// is served here or handed over (`take_handovers`); none longer than
    /// `connect_timeout_ms`.
    fn set_shards(&mut self, here: u16, count: u16, max_packet_size: u32, connect_timeout_ms: u64) {
        self.inner
            .set_shards(here, count, max_packet_size, connect_timeout_ms);
    }

    /// Routing sockets closed at the connect timeout, ever.
    #[getter]
    fn routing_timeouts(&self) -> u64 {
        self.inner.routing_timeouts()
    }

    /// Own socket `fd` (taken over: closed here on an error too) from `host`:`port`
    /// on listener number `listener`. With `route` in a node of several shards it
    /// waits for its CONNECT first and None is returned; otherwise it is a new engine
    /// connection at once, fed `preread` first, and its id is returned.
    #[pyo3(signature = (fd, listener, host, port, route, preread, now))]
    #[allow(clippy::too_many_arguments)]
    fn adopt(
        &mut self,
        py: Python<'_>,
        fd: RawFd,
        listener: u16,
        host: &str,
        port: u16,
        route: bool,
        preread: &[u8],
        now: u64,
    ) -> PyResult<Option<u32>> {
        // SAFETY: the caller hands the descriptor over, as documented.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let ip: IpAddr = host.parse().map_err(|_| {
            errors::bad_argument(format!("peer host {host:?} is not an IP address"))
        })?;
        let mut engine = self.engine.bind(py).borrow_mut();
        let peer = SocketAddr::new(ip, port);
        self.inner
            .adopt(&mut engine.inner, fd, listener, peer, route, preread, now)
            .map_err(errors::socket_error)
    }

    /// The sockets whose CONNECT named another shard, as `[(fd, listener, host, port,
    /// data, owner), ...]`: the caller owns each `fd` and sends it with `data`.
    fn take_handovers<'py>(
        &mut self,
        py: Python<'py>,
    ) -> Vec<(RawFd, u16, String, u16, Bound<'py, PyBytes>, u16)> {
        self.inner
            .take_handovers()
            .into_iter()
            .map(|handover| {
                (
                    handover.fd.into_raw_fd(),
                    handover.listener,
                    handover.peer.ip().to_string(),
                    handover.peer.port(),
                    PyBytes::new(py, &handover.data),
                    handover.owner,
                )
            })
            .collect()
    }

    /// Read every ready socket once into the engine; send kept output where there is
    /// room again.
    fn poll(&mut self, py: Python<'_>, now: u64) -> PyResult<()> {
        let mut engine = self.engine.bind(py).borrow_mut();
        self.inner
            .poll(&mut engine.inner, now)
            .map_err(errors::socket_error)
    }

    /// Send the engine's output to the connections owned here; returns the others'
    /// as `[(conn, bytes), ...]` (connections on the event loop's transports).
    fn flush<'py>(&mut self, py: Python<'py>, now: u64) -> PyResult<Bound<'py, PyList>> {
        let others = PyList::empty(py);
        let mut result = Ok(());
        let mut engine = self.engine.bind(py).borrow_mut();
        self.inner.flush(&mut engine.inner, now, |conn, bytes| {
            if result.is_ok() {
                result = others.append((conn, PyBytes::new(py, &bytes)));
            }
        });
        result.map(|()| others)
    }

    /// The engine closed `conn`: end it once its output is sent. False when it is not
    /// owned here.
    fn close(&mut self, py: Python<'_>, conn: u32, now: u64) -> bool {
        let mut engine = self.engine.bind(py).borrow_mut();
        self.inner.close(&mut engine.inner, conn, now)
    }

    /// The engine gives `conn`'s input back: read it again. False when it is not
    /// owned here.
    fn resume_reading(&mut self, py: Python<'_>, conn: u32, now: u64) -> bool {
        let mut engine = self.engine.bind(py).borrow_mut();
        self.inner.resume_reading(&mut engine.inner, conn, now)
    }

    /// The connections that ended since the last call, as `[(conn, listener, host),
    /// ...]` (`conn` None: a socket that ended while routing).
    fn take_closed(&mut self) -> Vec<(Option<u32>, u16, String)> {
        self.inner
            .take_closed()
            .into_iter()
            .map(|closed| (closed.conn, closed.listener, closed.peer.ip().to_string()))
            .collect()
    }

    /// `(host, port)` of connection `conn`'s client while it is owned here.
    fn peer(&self, conn: u32) -> Option<(String, u16)> {
        self.inner
            .peer(conn)
            .map(|peer| (peer.ip().to_string(), peer.port()))
    }

    /// The number of the listener `conn` came in on, while it is owned here.
    fn listener(&self, conn: u32) -> Option<u16> {
        self.inner.listener(conn)
    }

    /// End every connection owned here (the broker stops).
    fn close_all(&mut self, py: Python<'_>, now: u64) {
        let mut engine = self.engine.bind(py).borrow_mut();
        self.inner.close_all(&mut engine.inner, now);
    }
}
