//! `ferromq-io`: the sockets of plain MQTT connections, owned by compiled code.
//!
//! A [`SocketSet`] holds the non-blocking sockets of one engine's connections in one
//! epoll set (`epoll`). The event loop that orchestrates (Python's asyncio) watches
//! only the epoll descriptor; when it is readable, [`SocketSet::poll`] reads each
//! ready socket once into one shared arena and feeds the engine, and
//! [`SocketSet::flush`] sends each dirty connection's output with one `send`. No
//! Python object exists per connection and no Python runs per read or per write.
//!
//! What a connection keeps here is a small record: its descriptor, the peer, the
//! listener it came in on, a few flags and, only while a frame is unfinished or the
//! kernel's send buffer is full, a boxed [`Buffers`]. An idle connection holds no
//! buffer at all (`docs/memory.md`).
//!
//! Flow control is the transports' (asyncio's), moved here: output the kernel does not
//! take is kept and sent when the socket is writable again; above the high-water
//! mark the engine is told the connection is not writable (it queues the session's
//! deliveries) and reading stops, until the kept output falls to a quarter of the
//! mark. Reading also stops while the engine holds the connection's input (a rate or
//! the memory budget) until the engine's `ResumeReading`.
//!
//! Routing, in a node of several shards ([`SocketSet::set_shards`]): a socket the
//! listeners accepted is not an engine connection until its CONNECT is whole and
//! names its client id's owner (`ferromq_core::bus::connect_owner`). This shard's
//! becomes a connection fed what was read; another's leaves the set with those bytes
//! for [`SocketSet::take_handovers`], and the caller sends it to its owner. A socket
//! still routing at the connect timeout is closed and counted.
//!
//! Ends: the peer's end of stream or a socket error ends the connection at once; the
//! engine's `Close` ([`SocketSet::close`]) sends what is kept first, as a transport's
//! `close` does. Either way the engine is told (`connection_lost`) and the end is
//! queued for [`SocketSet::take_closed`], where the caller gives back what it counted
//! for the connection (admission's slots).

mod epoll;
pub mod sys;

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use bytes::Bytes;
use ferromq_core::bus::connect_owner;
use ferromq_core::engine::{ConnId, Engine, Framing};

use epoll::{Epoll, HANG_UP, READ, WRITE};

/// Free bytes a read is offered at least, past an unfinished frame.
const MIN_FREE: usize = 4096;
/// Events taken from the kernel per [`SocketSet::poll`].
const READY_PER_POLL: usize = 1024;

/// The input of a connection the engine holds (a publish rate, the memory budget).
const INPUT_HELD: u8 = 1;
/// The kept output is above the high-water mark.
const WRITE_PAUSED: u8 = 2;
/// The engine closed the connection; it ends once its kept output is sent.
const CLOSING: u8 = 4;

/// The bit of an epoll token's low half that marks a routing socket's slot, not an
/// engine connection id (those are dense slot numbers, far below it).
const ROUTING_BIT: u32 = 1 << 31;

/// The bytes one connection keeps between reads and writes: never allocated for an
/// idle connection.
#[derive(Default)]
struct Buffers {
    /// An unfinished frame's bytes, read but not yet used by the engine.
    unread: Vec<u8>,
    /// Output the kernel did not take yet, from `sent` on.
    unsent: Vec<u8>,
    sent: usize,
}

impl Buffers {
    fn unsent(&self) -> &[u8] {
        &self.unsent[self.sent..]
    }

    fn is_empty(&self) -> bool {
        self.unread.is_empty() && self.sent == self.unsent.len()
    }
}

struct Socket {
    fd: OwnedFd,
    /// Told apart from an earlier socket of the same connection id in epoll's tokens.
    generation: u32,
    listener: u16,
    flags: u8,
    /// The epoll interest registered now.
    interest: u32,
    peer: SocketAddr,
    buffers: Option<Box<Buffers>>,
}

impl Socket {
    /// `slot` is the connection id, or a routing slot with [`ROUTING_BIT`] set.
    fn token(&self, slot: u32) -> u64 {
        (u64::from(self.generation) << 32) | u64::from(slot)
    }

    fn unread_len(&self) -> usize {
        self.buffers.as_ref().map_or(0, |b| b.unread.len())
    }

    fn unsent_len(&self) -> usize {
        self.buffers.as_ref().map_or(0, |b| b.unsent().len())
    }

    fn buffers(&mut self) -> &mut Buffers {
        self.buffers.get_or_insert_with(Box::default)
    }

    /// Free the buffers once they hold nothing (an idle connection keeps none).
    fn shrink(&mut self) {
        if self.buffers.as_ref().is_some_and(|b| b.is_empty()) {
            self.buffers = None;
        }
    }

    /// The interest the flags and the kept output call for.
    fn wanted(&self) -> u32 {
        let reading = self.flags & (INPUT_HELD | WRITE_PAUSED | CLOSING) == 0;
        let writing = self.unsent_len() > 0;
        (if reading { READ } else { 0 }) | (if writing { WRITE } else { 0 })
    }

    /// Register the interest the socket needs now, when it changed.
    fn rearm(&mut self, epoll: &Epoll, conn: ConnId) -> io::Result<()> {
        let wanted = self.wanted();
        if wanted != self.interest {
            epoll.modify(self.fd.as_raw_fd(), wanted, self.token(conn))?;
            self.interest = wanted;
        }
        Ok(())
    }
}

/// A connection that ended: what its owner counted for it is given back from this.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closed {
    /// None for a socket that ended while routing (no engine connection yet).
    pub conn: Option<ConnId>,
    pub listener: u16,
    pub peer: SocketAddr,
}

/// A socket whose CONNECT names another shard: the caller sends it there.
#[derive(Debug)]
pub struct Handover {
    pub fd: OwnedFd,
    pub listener: u16,
    pub peer: SocketAddr,
    /// What it sent so far: its CONNECT, and whatever came behind it.
    pub data: Vec<u8>,
    pub owner: u16,
}

/// A node of several shards: how sockets are routed.
struct Shards {
    here: u16,
    count: u16,
    max_packet_size: u32,
    connect_timeout_ms: u64,
}

/// A socket waiting for its CONNECT.
struct Routing {
    socket: Socket,
    deadline: u64,
}

/// What a send did to a connection.
enum Sent {
    Done,
    /// The kept output went above the high-water mark: the engine must stop writing.
    Paused,
    /// The socket failed: the connection ends.
    Failed,
}

/// The sockets of one engine's connections; see the crate's header.
pub struct SocketSet {
    epoll: Epoll,
    /// By connection id (the engine's ids are dense slot numbers).
    sockets: Vec<Option<Socket>>,
    open: usize,
    next_generation: u32,
    arena: Vec<u8>,
    ready: Vec<libc::epoll_event>,
    closed: Vec<Closed>,
    high_water: usize,
    /// Listener names by number, for the engine's connections (the stream's records).
    listener_names: Vec<Box<str>>,
    shards: Option<Shards>,
    routing: Vec<Option<Routing>>,
    free_routing: Vec<u32>,
    handovers: Vec<Handover>,
    /// Routing sockets closed at the connect timeout, ever.
    routing_timeouts: u64,
    next_expiry: u64,
}

impl SocketSet {
    /// An empty set reading into an arena of `arena_size` bytes; a connection's kept
    /// output above `high_water` bytes pauses it.
    pub fn new(arena_size: usize, high_water: usize) -> io::Result<Self> {
        Ok(Self {
            epoll: Epoll::new()?,
            sockets: Vec::new(),
            open: 0,
            next_generation: 0,
            arena: vec![0; arena_size.max(2 * MIN_FREE)],
            ready: Vec::with_capacity(READY_PER_POLL),
            closed: Vec::new(),
            high_water,
            listener_names: Vec::new(),
            shards: None,
            routing: Vec::new(),
            free_routing: Vec::new(),
            handovers: Vec::new(),
            routing_timeouts: 0,
            next_expiry: 0,
        })
    }

    /// The listeners' names, by number.
    pub fn set_listener_names(&mut self, names: Vec<Box<str>>) {
        self.listener_names = names;
    }

    /// Route new sockets as shard `here` of `count` ([`SocketSet::adopt`]): a CONNECT
    /// larger than `max_packet_size` stays here (its engine refuses it), a socket
    /// without its CONNECT after `connect_timeout_ms` is closed.
    pub fn set_shards(
        &mut self,
        here: u16,
        count: u16,
        max_packet_size: u32,
        connect_timeout_ms: u64,
    ) {
        self.shards = Some(Shards {
            here,
            count,
            max_packet_size,
            connect_timeout_ms,
        });
    }

    /// Routing sockets closed at the connect timeout, ever.
    pub fn routing_timeouts(&self) -> u64 {
        self.routing_timeouts
    }

    /// The sockets to send to their owner shards since the last call.
    pub fn take_handovers(&mut self) -> Vec<Handover> {
        std::mem::take(&mut self.handovers)
    }

    /// The epoll descriptor: readable while a socket of the set is ready.
    pub fn fd(&self) -> RawFd {
        self.epoll.fd()
    }

    /// Open connections.
    pub fn len(&self) -> usize {
        self.open
    }

    pub fn is_empty(&self) -> bool {
        self.open == 0
    }

    fn socket(&self, conn: ConnId) -> Option<&Socket> {
        self.sockets.get(conn as usize).and_then(Option::as_ref)
    }

    /// The client's address of connection `conn`, while it is open here.
    pub fn peer(&self, conn: ConnId) -> Option<SocketAddr> {
        self.socket(conn).map(|s| s.peer)
    }

    /// The listener connection `conn` came in on, while it is open here.
    pub fn listener(&self, conn: ConnId) -> Option<u16> {
        self.socket(conn).map(|s| s.listener)
    }

    /// Own socket `fd` from `peer` on listener number `listener`. In a node of
    /// several shards with `route`, it waits for its CONNECT first (see the crate's
    /// header) and None is returned; otherwise it is an engine connection at once, fed
    /// `preread` (bytes read before it came here: another shard's), and its id is
    /// returned. On an error the socket is closed and the engine knows no connection.
    #[allow(clippy::too_many_arguments)]
    pub fn adopt(
        &mut self,
        engine: &mut Engine,
        fd: OwnedFd,
        listener: u16,
        peer: SocketAddr,
        route: bool,
        preread: &[u8],
        now: u64,
    ) -> io::Result<Option<ConnId>> {
        sys::prepare(&fd)?;
        let socket = self.new_socket(fd, listener, peer);
        match &self.shards {
            Some(shards) if route => {
                let deadline = now + shards.connect_timeout_ms;
                self.route(Routing { socket, deadline })?;
                Ok(None)
            }
            _ => self.connect(engine, socket, preread, now).map(Some),
        }
    }

    fn new_socket(&mut self, fd: OwnedFd, listener: u16, peer: SocketAddr) -> Socket {
        self.next_generation = self.next_generation.wrapping_add(1);
        Socket {
            fd,
            generation: self.next_generation,
            listener,
            flags: 0,
            interest: 0,
            peer,
            buffers: None,
        }
    }

    /// Watch `routing` for its CONNECT.
    fn route(&mut self, mut routing: Routing) -> io::Result<()> {
        let slot = self.free_routing.pop().unwrap_or(self.routing.len() as u32);
        let token = routing.socket.token(slot | ROUTING_BIT);
        self.epoll.add(routing.socket.fd.as_raw_fd(), READ, token)?;
        routing.socket.interest = READ;
        if slot as usize == self.routing.len() {
            self.routing.push(Some(routing));
        } else {
            self.routing[slot as usize] = Some(routing);
        }
        Ok(())
    }

    /// Make `socket` an engine connection, fed `preread`.
    fn connect(
        &mut self,
        engine: &mut Engine,
        mut socket: Socket,
        preread: &[u8],
        now: u64,
    ) -> io::Result<ConnId> {
        let conn = engine.open_framed(now, Framing::Mqtt);
        if let Some(name) = self.listener_names.get(usize::from(socket.listener)) {
            engine.set_listener(conn, name);
        }
        let registered = if socket.interest == 0 {
            self.epoll
                .add(socket.fd.as_raw_fd(), READ, socket.token(conn))
        } else {
            self.epoll
                .modify(socket.fd.as_raw_fd(), READ, socket.token(conn))
        };
        if let Err(error) = registered {
            engine.connection_lost(conn, now);
            return Err(error);
        }
        socket.interest = READ;
        let slot = conn as usize;
        if self.sockets.len() <= slot {
            self.sockets.resize_with(slot + 1, || None);
        }
        self.sockets[slot] = Some(socket);
        self.open += 1;
        if !preread.is_empty() {
            let used = feed(engine, conn, preread, now);
            self.after_feed(engine, conn, &preread[used..], now);
        }
        Ok(conn)
    }

    /// One read of routing socket `slot`; once its CONNECT is whole, it becomes a
    /// connection here or a hand-over.
    fn read_routing(&mut self, engine: &mut Engine, slot: u32, now: u64) {
        let shards = self.shards.as_ref().expect("routing needs shards");
        let (here, count, max) = (shards.here, shards.count, shards.max_packet_size);
        let routing = self.routing[slot as usize]
            .as_mut()
            .expect("checked by the caller");
        let fd = routing.socket.fd.as_raw_fd();
        let unread = &mut routing.socket.buffers().unread;
        unread.reserve(MIN_FREE);
        let owner = match sys::read_into(fd, unread) {
            Ok(0) => return self.end_routing(slot, false),
            Ok(_) => connect_owner(unread, max, here, count),
            Err(error) if sys::would_block(&error) => return,
            Err(_) => return self.end_routing(slot, false),
        };
        let Some(owner) = owner else { return };
        let Routing { mut socket, .. } = self.take_routing(slot);
        let data = std::mem::take(&mut socket.buffers().unread);
        socket.buffers = None;
        if owner == here {
            let (listener, peer) = (socket.listener, socket.peer);
            if self.connect(engine, socket, &data, now).is_err() {
                // Not watched (out of memory): closed, its slots given back.
                self.closed.push(Closed {
                    conn: None,
                    listener,
                    peer,
                });
            }
            return;
        }
        self.epoll.delete(socket.fd.as_raw_fd());
        self.handovers.push(Handover {
            fd: socket.fd,
            listener: socket.listener,
            peer: socket.peer,
            data,
            owner,
        });
    }

    fn take_routing(&mut self, slot: u32) -> Routing {
        self.free_routing.push(slot);
        self.routing[slot as usize]
            .take()
            .expect("checked by the caller")
    }

    /// Routing socket `slot` ended before its CONNECT (at the connect timeout when
    /// `timed_out`).
    fn end_routing(&mut self, slot: u32, timed_out: bool) {
        let Routing { socket, .. } = self.take_routing(slot);
        self.epoll.delete(socket.fd.as_raw_fd());
        self.routing_timeouts += u64::from(timed_out);
        self.closed.push(Closed {
            conn: None,
            listener: socket.listener,
            peer: socket.peer,
        });
    }

    /// Close the routing sockets past their connect timeout; looked at every 250 ms.
    fn expire_routing(&mut self, now: u64) {
        if now < self.next_expiry {
            return;
        }
        self.next_expiry = now + 250;
        for slot in 0..self.routing.len() {
            if self.routing[slot]
                .as_ref()
                .is_some_and(|r| r.deadline <= now)
            {
                self.end_routing(slot as u32, true);
            }
        }
    }

    /// Read each ready socket once and feed the engine; send kept output where the
    /// kernel has room again. The caller flushes the engine's output after.
    pub fn poll(&mut self, engine: &mut Engine, now: u64) -> io::Result<()> {
        let mut ready = std::mem::take(&mut self.ready);
        let waited = self.epoll.wait(&mut ready);
        for event in &ready {
            let (token, events) = (event.u64, event.events);
            let slot = token as u32;
            if slot & ROUTING_BIT != 0 {
                let slot = slot & !ROUTING_BIT;
                let current = self.routing.get(slot as usize).and_then(Option::as_ref);
                if current.is_some_and(|r| r.socket.token(slot | ROUTING_BIT) == token) {
                    self.read_routing(engine, slot, now);
                }
                continue;
            }
            let conn = slot as ConnId;
            let Some(socket) = self.socket(conn) else {
                continue;
            };
            if socket.token(conn) != token {
                continue; // a socket since gone, its id taken again
            }
            if events & WRITE != 0 {
                self.send_unsent(engine, conn, now);
            }
            let Some(socket) = self.socket(conn) else {
                continue;
            };
            if events & READ != 0 && socket.interest & READ != 0 {
                self.read(engine, conn, now);
            } else if events & HANG_UP != 0 {
                self.lost(engine, conn, now);
            }
        }
        self.ready = ready;
        waited
    }

    /// Send the engine's output: each connection owned here gets one `send` of all of
    /// it; the others' (connections on the event loop's transports) go to `other`.
    ///
    /// Routing sockets past the connect timeout are closed here: the broker flushes
    /// at every tick of its clock, also when no socket is ready.
    pub fn flush(&mut self, engine: &mut Engine, now: u64, mut other: impl FnMut(ConnId, Bytes)) {
        self.expire_routing(now);
        let mut paused = Vec::new();
        let mut failed = Vec::new();
        let (epoll, sockets, high_water) = (&self.epoll, &mut self.sockets, self.high_water);
        engine.take_output(|conn, bytes| {
            match sockets.get_mut(conn as usize).and_then(Option::as_mut) {
                Some(socket) => match send(epoll, socket, conn, &bytes, high_water) {
                    Sent::Done => {}
                    Sent::Paused => paused.push(conn),
                    Sent::Failed => failed.push(conn),
                },
                None => other(conn, bytes),
            }
        });
        for conn in paused {
            engine.set_writable(conn, false, now);
        }
        for conn in failed {
            self.lost(engine, conn, now);
        }
    }

    /// The engine closed connection `conn`: end it once its kept output is sent.
    /// False when it is not owned here.
    pub fn close(&mut self, engine: &mut Engine, conn: ConnId, now: u64) -> bool {
        let epoll = &self.epoll;
        let Some(socket) = self.sockets.get_mut(conn as usize).and_then(Option::as_mut) else {
            return false;
        };
        if socket.unsent_len() == 0 {
            self.lost(engine, conn, now);
            return true;
        }
        socket.flags |= CLOSING;
        if socket.rearm(epoll, conn).is_err() {
            self.lost(engine, conn, now);
        }
        true
    }

    /// The engine gives connection `conn`'s input back (`ResumeReading`): read it
    /// again. False when it is not owned here.
    pub fn resume_reading(&mut self, engine: &mut Engine, conn: ConnId, now: u64) -> bool {
        let epoll = &self.epoll;
        let Some(socket) = self.sockets.get_mut(conn as usize).and_then(Option::as_mut) else {
            return false;
        };
        socket.flags &= !INPUT_HELD;
        if socket.rearm(epoll, conn).is_err() {
            self.lost(engine, conn, now);
        }
        true
    }

    /// The connections that ended since the last call.
    pub fn take_closed(&mut self) -> Vec<Closed> {
        std::mem::take(&mut self.closed)
    }

    /// End every connection (the broker stops), kept output unsent.
    pub fn close_all(&mut self, engine: &mut Engine, now: u64) {
        for conn in 0..self.sockets.len() {
            self.lost(engine, conn as ConnId, now);
        }
        for slot in 0..self.routing.len() {
            if self.routing[slot].is_some() {
                self.end_routing(slot as u32, false);
            }
        }
    }

    /// One read of connection `conn`, fed to the engine.
    fn read(&mut self, engine: &mut Engine, conn: ConnId, now: u64) {
        let half = self.arena.len() / 2;
        let socket = self.sockets[conn as usize]
            .as_mut()
            .expect("checked by the caller");
        let fd = socket.fd.as_raw_fd();
        let held = socket.unread_len();
        if held > half {
            // A frame larger than half the arena is read into its own buffer.
            let mut unread = std::mem::take(&mut socket.buffers().unread);
            unread.reserve(held.max(MIN_FREE));
            match sys::read_into(fd, &mut unread) {
                Ok(0) => self.lost(engine, conn, now),
                Ok(_) => {
                    // Kept in place: copying the unfinished frame at every read would
                    // cost its size per read.
                    let used = feed(engine, conn, &unread, now);
                    unread.drain(..used);
                    if let Some(socket) = self.sockets[conn as usize].as_mut() {
                        socket.buffers().unread = unread;
                    }
                    self.settle(engine, conn, now);
                }
                Err(error) if sys::would_block(&error) => socket.buffers().unread = unread,
                Err(_) => self.lost(engine, conn, now),
            }
            return;
        }
        let mut arena = std::mem::take(&mut self.arena);
        if held > 0 {
            arena[..held].copy_from_slice(&socket.buffers().unread);
        }
        match sys::read(fd, &mut arena[held..]) {
            Ok(0) => self.lost(engine, conn, now),
            Ok(count) => {
                let end = held + count;
                let used = feed(engine, conn, &arena[..end], now);
                self.after_feed(engine, conn, &arena[used..end], now);
            }
            Err(error) if sys::would_block(&error) => {}
            Err(_) => self.lost(engine, conn, now),
        }
        self.arena = arena;
    }

    /// Keep `rest` (an unfinished frame) for connection `conn`'s next read, then
    /// [`SocketSet::settle`] it.
    fn after_feed(&mut self, engine: &mut Engine, conn: ConnId, rest: &[u8], now: u64) {
        if let Some(socket) = self.sockets.get_mut(conn as usize).and_then(Option::as_mut) {
            // An idle connection without buffers gets none for an empty rest.
            if !rest.is_empty() || socket.buffers.is_some() {
                let unread = &mut socket.buffers().unread;
                unread.clear();
                unread.extend_from_slice(rest);
            }
        }
        self.settle(engine, conn, now);
    }

    /// After a feed: free connection `conn`'s empty buffers, and stop reading it when
    /// the engine now holds its input.
    fn settle(&mut self, engine: &mut Engine, conn: ConnId, now: u64) {
        let epoll = &self.epoll;
        let Some(socket) = self.sockets.get_mut(conn as usize).and_then(Option::as_mut) else {
            return;
        };
        if let Some(buffers) = socket.buffers.as_mut().filter(|b| b.unread.is_empty()) {
            buffers.unread = Vec::new(); // a large frame's capacity goes too
        }
        socket.shrink();
        if engine.input_held(conn) {
            socket.flags |= INPUT_HELD;
        }
        if socket.rearm(epoll, conn).is_err() {
            self.lost(engine, conn, now);
        }
    }

    /// Connection `conn` is writable again: send what it kept; below a quarter of the
    /// high-water mark the engine may write to it again.
    fn send_unsent(&mut self, engine: &mut Engine, conn: ConnId, now: u64) {
        let (epoll, low_water) = (&self.epoll, self.high_water / 4);
        let socket = self.sockets[conn as usize]
            .as_mut()
            .expect("checked by the caller");
        let fd = socket.fd.as_raw_fd();
        let buffers = socket.buffers();
        while !buffers.unsent().is_empty() {
            match sys::send(fd, buffers.unsent()) {
                Ok(count) => buffers.sent += count,
                Err(error) if sys::would_block(&error) => break,
                Err(_) => return self.lost(engine, conn, now),
            }
        }
        if buffers.unsent().is_empty() {
            buffers.unsent = Vec::new();
            buffers.sent = 0;
        }
        let left = buffers.unsent().len();
        socket.shrink();
        if socket.flags & CLOSING != 0 && left == 0 {
            return self.lost(engine, conn, now);
        }
        let resumed = socket.flags & WRITE_PAUSED != 0 && left <= low_water;
        if resumed {
            socket.flags &= !WRITE_PAUSED;
        }
        if socket.rearm(epoll, conn).is_err() {
            return self.lost(engine, conn, now);
        }
        if resumed {
            engine.set_writable(conn, true, now);
        }
    }

    /// Connection `conn` ended: close its socket, tell the engine, queue the end.
    fn lost(&mut self, engine: &mut Engine, conn: ConnId, now: u64) {
        let Some(socket) = self.sockets.get_mut(conn as usize).and_then(Option::take) else {
            return;
        };
        self.epoll.delete(socket.fd.as_raw_fd());
        self.open -= 1;
        engine.connection_lost(conn, now);
        self.closed.push(Closed {
            conn: Some(conn),
            listener: socket.listener,
            peer: socket.peer,
        });
    }
}

/// Send `data` to `socket` after what it kept; keep what the kernel does not take.
fn send(epoll: &Epoll, socket: &mut Socket, conn: ConnId, data: &[u8], high_water: usize) -> Sent {
    let mut rest = data;
    if socket.unsent_len() == 0 {
        match sys::send(socket.fd.as_raw_fd(), data) {
            Ok(count) => rest = &data[count..],
            Err(error) if sys::would_block(&error) => {}
            Err(_) => return Sent::Failed,
        }
        if rest.is_empty() {
            return Sent::Done;
        }
    }
    let buffers = socket.buffers();
    if buffers.sent > buffers.unsent.len() / 2 {
        buffers.unsent.drain(..buffers.sent);
        buffers.sent = 0;
    }
    buffers.unsent.extend_from_slice(rest);
    let paused = socket.flags & WRITE_PAUSED == 0 && socket.unsent_len() > high_water;
    if paused {
        socket.flags |= WRITE_PAUSED;
    }
    if socket.rearm(epoll, conn).is_err() {
        return Sent::Failed;
    }
    if paused {
        Sent::Paused
    } else {
        Sent::Done
    }
}

/// `engine.feed`, with a panic ending the connection instead of unwinding further
/// (the read is dropped); returns the bytes used.
fn feed(engine: &mut Engine, conn: ConnId, data: &[u8], now: u64) -> usize {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        engine.feed(conn, data, now)
    }))
    .unwrap_or_else(|_| {
        engine.connection_lost(conn, now);
        data.len()
    })
}

#[cfg(test)]
mod tests {
    use super::Socket;

    /// What an idle connection costs here (`docs/memory.md`): a slot of the socket
    /// vector, no buffer.
    #[test]
    fn an_idle_connections_record_stays_small() {
        let size = std::mem::size_of::<Option<Socket>>();
        println!("socket slot: {size} B");
        assert!(size <= 56, "{size} B");
    }
}
