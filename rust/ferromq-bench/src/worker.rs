//! One event-loop thread of the generator: a `mio` poll over its share of the clients.
//!
//! Each loop turn: open the connections that are due (paced at the worker's share of
//! `connect_rate`), wake rate-limited publishers whose timer expired, pump every
//! runnable publisher and flush it, then wait in `epoll` (edge-triggered) for at most
//! 5 ms, or not at all while a publisher still has budget left. A readable socket is
//! read in 64 KiB chunks into one buffer the worker lends to whichever connection is
//! readable; each chunk is appended to the client's input and decoded at once, and
//! the replies are flushed before the next chunk. With `sub_read_rate` a subscriber
//! reads at most that many bytes a second (a token bucket holding 10 ms of it): out
//! of tokens it stops reading before `WouldBlock` and a read timer resumes it, so
//! the broker sees a consumer slower than its publishers. A publisher becomes runnable again
//! on an acknowledgement, on writability or on its timer, never by scanning: the loop
//! costs O(events), not O(clients).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Buf;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use socket2::{Domain, Protocol, Socket, Type};

use crate::client::{Client, Ctx, Next, Pump, RoleState, RunParams, State, Tally};
use crate::link::{Connector, Link, Received};
use crate::scenario::ClientSpec;
use crate::shared::{Counters, Instants, Phase, Shared};
use crate::stats::SeqTracker;

const READ_CHUNK: usize = 64 * 1024;
const MAX_WAIT_NS: u64 = 5_000_000;
const KEEP_ALIVE_CHECK_NS: u64 = 1_000_000_000;
/// Error messages a worker keeps for the report.
const MAX_ERRORS: usize = 10;

/// What a worker hands back when the run stops.
#[derive(Debug, Default)]
pub struct WorkerResult {
    pub tally: Tally,
    /// `(publisher id, messages sent)`.
    pub publishers: Vec<(u32, u64)>,
    /// `(subscriber index, trackers per publisher id)`.
    pub subscribers: Vec<(u32, HashMap<u32, SeqTracker>)>,
    pub errors: Vec<String>,
    /// CPU time this thread used, when the kernel tells it.
    pub cpu_ns: Option<u64>,
}

pub struct WorkerSetup {
    pub index: usize,
    pub clients: Vec<ClientSpec>,
    pub shared: Arc<Shared>,
    pub run: Arc<RunParams>,
    pub connector: Arc<Connector>,
    pub dest: SocketAddr,
    /// Nanoseconds between two connection attempts of this worker; 0 for no pacing.
    pub connect_interval: u64,
}

struct Worker {
    poll: Poll,
    clients: Vec<Client>,
    links: Vec<Option<Link>>,
    write_blocked: Vec<bool>,
    queued: Vec<bool>,
    runnable: Vec<usize>,
    timers: BinaryHeap<Reverse<(u64, usize)>>,
    timer_armed: Vec<bool>,
    /// Paced subscribers' read tokens (bytes) and when they were last refilled, and
    /// the timers that resume their reads.
    read_tokens: Vec<(f64, u64)>,
    read_timers: BinaryHeap<Reverse<(u64, usize)>>,
    read_timer_armed: Vec<bool>,
    to_connect: VecDeque<usize>,
    next_connect: u64,
    read_buf: Box<[u8]>,
    tally: Tally,
    errors: Vec<String>,
    instants: Instants,
    publishing: bool,
    setup: WorkerSetup,
}

/// The client of the earliest timer in `timers` if it is due at `now`, taken off.
fn pop_due(timers: &mut BinaryHeap<Reverse<(u64, usize)>>, now: u64) -> Option<usize> {
    let &Reverse((due, i)) = timers.peek()?;
    (due <= now).then(|| {
        timers.pop();
        i
    })
}

pub fn run_worker(setup: WorkerSetup) -> io::Result<WorkerResult> {
    let run = setup.run.clone();
    let clients: Vec<Client> = setup
        .clients
        .iter()
        .map(|spec| Client::new(spec.clone(), &run))
        .collect();
    let n = clients.len();
    let mut worker = Worker {
        poll: Poll::new()?,
        clients,
        links: (0..n).map(|_| None).collect(),
        write_blocked: vec![false; n],
        queued: vec![false; n],
        runnable: Vec::new(),
        timers: BinaryHeap::new(),
        timer_armed: vec![false; n],
        read_tokens: vec![(0.0, 0); n],
        read_timers: BinaryHeap::new(),
        read_timer_armed: vec![false; n],
        to_connect: (0..n).collect(),
        next_connect: 0,
        read_buf: vec![0u8; READ_CHUNK].into_boxed_slice(),
        tally: Tally::default(),
        errors: Vec::new(),
        instants: Instants::default(),
        publishing: false,
        setup,
    };
    worker.event_loop()?;
    Ok(worker.finish())
}

fn connect_socket(source: Option<IpAddr>, dest: SocketAddr) -> io::Result<TcpStream> {
    let socket = Socket::new(Domain::for_address(dest), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_nonblocking(true)?;
    socket.set_tcp_nodelay(true)?;
    if let Some(ip) = source {
        // The port is chosen at connect(), against the whole 4-tuple: bound with
        // port 0 alone, the kernel searches its ephemeral range for a port no other
        // socket on this address holds, milliseconds a bind at 100,000 connections.
        set_bind_address_no_port(&socket)?;
        socket.bind(&SocketAddr::new(ip, 0).into())?;
    }
    match socket.connect(&dest.into()) {
        Ok(()) => {}
        Err(err) if err.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(err) => return Err(err),
    }
    Ok(TcpStream::from_std(socket.into()))
}

fn set_bind_address_no_port(socket: &Socket) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let on: libc::c_int = 1;
    // SAFETY: a valid descriptor and a c_int option of the size given.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// CPU time of the calling thread, from the scheduler's own accounting.
fn thread_cpu_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().next()?.parse().ok()
}

impl Worker {
    fn now(&self) -> u64 {
        self.setup.shared.clock.now()
    }

    fn counters(&self) -> &Counters {
        &self.setup.shared.counters[self.setup.index]
    }

    fn event_loop(&mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(1024);
        let mut next_keep_alive = 0;
        loop {
            let now = self.now();
            let phase = self.setup.shared.phase();
            if phase == Phase::Stop {
                return Ok(());
            }
            if phase >= Phase::Publishing && !self.publishing {
                self.publishing = true;
                self.instants = self.setup.shared.instants();
                for i in 0..self.clients.len() {
                    self.make_runnable(i);
                }
            }
            self.open_due_connections(now);
            while let Some(i) = pop_due(&mut self.read_timers, now) {
                self.read_timer_armed[i] = false;
                self.read(i);
                self.flush(i);
            }
            while let Some(i) = pop_due(&mut self.timers, now) {
                self.timer_armed[i] = false;
                self.make_runnable(i);
            }
            if now >= next_keep_alive {
                next_keep_alive = now + KEEP_ALIVE_CHECK_NS;
                self.send_keep_alives(now);
            }
            self.pump_runnable();
            let timeout = self.wait_ns(self.now());
            self.poll
                .poll(&mut events, Some(Duration::from_nanos(timeout)))
                .or_else(|err| match err.kind() {
                    io::ErrorKind::Interrupted => Ok(()),
                    _ => Err(err),
                })?;
            for event in events.iter() {
                let i = event.token().0;
                if event.is_writable() {
                    self.write_blocked[i] = false;
                }
                self.on_ready(i);
            }
        }
    }

    fn wait_ns(&self, now: u64) -> u64 {
        if !self.runnable.is_empty() {
            return 0;
        }
        let mut wait = MAX_WAIT_NS;
        for timers in [&self.timers, &self.read_timers] {
            if let Some(Reverse((due, _))) = timers.peek() {
                wait = wait.min(due.saturating_sub(now));
            }
        }
        if !self.to_connect.is_empty() {
            wait = wait.min(self.next_connect.saturating_sub(now));
        }
        wait
    }

    fn open_due_connections(&mut self, now: u64) {
        let interval = self.setup.connect_interval;
        while now >= self.next_connect {
            let Some(i) = self.to_connect.pop_front() else {
                return;
            };
            self.open(i, now);
            if interval > 0 {
                self.next_connect = self.next_connect.max(now) + interval;
            }
        }
    }

    fn open(&mut self, i: usize, now: u64) {
        let result = connect_socket(self.clients[i].spec.source, self.setup.dest)
            .and_then(|socket| self.setup.connector.link(socket, i as u32))
            .and_then(|mut link| {
                self.poll.registry().register(
                    link.tcp_mut(),
                    Token(i),
                    Interest::READABLE | Interest::WRITABLE,
                )?;
                Ok(link)
            });
        match result {
            Ok(link) => {
                self.links[i] = Some(link);
                self.write_blocked[i] = false;
                self.clients[i].begin_connect(now);
            }
            Err(err) => self.fail(i, format!("cannot connect: {err}")),
        }
    }

    fn make_runnable(&mut self, i: usize) {
        if self.publishing && self.clients[i].is_publisher() && !self.queued[i] {
            self.queued[i] = true;
            self.runnable.push(i);
        }
    }

    fn ctx(&mut self) -> (Ctx<'_>, &mut [Client]) {
        let setup = &self.setup;
        let ctx = Ctx {
            now: setup.shared.clock.now(),
            run: &setup.run,
            instants: self.instants,
            tally: &mut self.tally,
            counters: &setup.shared.counters[setup.index],
        };
        (ctx, &mut self.clients)
    }

    fn pump_runnable(&mut self) {
        let batch = std::mem::take(&mut self.runnable);
        for i in batch {
            self.queued[i] = false;
            if self.clients[i].state != State::Ready || self.write_blocked[i] {
                continue;
            }
            let clock = self.setup.shared.clock;
            let (mut ctx, clients) = self.ctx();
            let outcome = clients[i].pump(&mut ctx, || clock.now());
            match outcome {
                Err(reason) => self.fail(i, reason),
                Ok(pump) => {
                    self.flush(i);
                    match pump {
                        Pump::More => self.make_runnable(i),
                        Pump::Until(due) if !self.timer_armed[i] => {
                            self.timer_armed[i] = true;
                            self.timers.push(Reverse((due, i)));
                        }
                        _ => {}
                    }
                }
            }
        }
    }

    fn send_keep_alives(&mut self, now: u64) {
        for i in 0..self.clients.len() {
            let run = &self.setup.run;
            if let Err(reason) = self.clients[i].keep_alive(now, run) {
                self.fail(i, reason);
            }
            self.flush(i);
        }
    }

    fn on_ready(&mut self, i: usize) {
        if self.links[i].is_none() {
            return;
        }
        if self.clients[i].state == State::TcpConnecting {
            self.finish_tcp_connect(i);
        }
        if self.links[i].is_some() && self.clients[i].state != State::TcpConnecting {
            self.read(i);
        }
        self.flush(i);
        self.make_runnable(i);
    }

    fn finish_tcp_connect(&mut self, i: usize) {
        let Some(link) = &self.links[i] else {
            return;
        };
        let socket = link.tcp();
        let status = match socket.take_error() {
            Ok(None) => socket.peer_addr().map(|_| ()),
            Ok(Some(err)) | Err(err) => Err(err),
        };
        match status {
            Ok(()) => {
                if let Err(reason) = self.clients[i].on_tcp_connected(&self.setup.run) {
                    self.fail(i, reason);
                }
            }
            // A spurious wake-up before the handshake finished.
            Err(err) if err.kind() == io::ErrorKind::NotConnected => {}
            Err(err) => self.fail(i, format!("cannot connect: {err}")),
        }
    }

    /// Bytes client `i` may read now (`sub_read_rate`); 0 arms its read timer.
    fn read_allowance(&mut self, i: usize) -> usize {
        let rate = self.setup.run.sub_read_rate;
        if rate <= 0.0 || !self.clients[i].is_subscriber() {
            return READ_CHUNK;
        }
        let now = self.now();
        let (tokens, last) = &mut self.read_tokens[i];
        let burst = (rate / 100.0).max(1.0);
        *tokens = (*tokens + (now.saturating_sub(*last) as f64) * rate / 1e9).min(burst);
        *last = now;
        if *tokens < 1.0 {
            if !self.read_timer_armed[i] {
                self.read_timer_armed[i] = true;
                let due = now + ((1.0 - *tokens) * 1e9 / rate) as u64 + 1;
                self.read_timers.push(Reverse((due, i)));
            }
            return 0;
        }
        (*tokens as usize).min(READ_CHUNK)
    }

    fn read(&mut self, i: usize) {
        loop {
            let allowance = self.read_allowance(i);
            if allowance == 0 {
                return;
            }
            let Some(link) = &mut self.links[i] else {
                return;
            };
            match link.read_into(&mut self.read_buf[..allowance], &mut self.clients[i].inbuf) {
                Ok(Received::Closed) => {
                    return self.fail(i, "the broker closed the connection".into())
                }
                Ok(Received::Bytes(0)) => {}
                Ok(Received::Bytes(n)) => {
                    self.read_tokens[i].0 -= n as f64;
                    // Asked once per connection, before its CONNACK is read.
                    let awaiting_connack = self.clients[i].state == State::AwaitConnAck;
                    let resumed = awaiting_connack && link.tls_resumed();
                    let (mut ctx, clients) = self.ctx();
                    let outcome = clients[i].handle_input(&mut ctx);
                    if resumed && clients[i].state != State::AwaitConnAck {
                        ctx.tally.tls_resumed += 1;
                    }
                    match outcome {
                        Ok(Next::Continue) => self.flush(i),
                        Ok(Next::Reconnect) => return self.reconnect(i),
                        Err(reason) => return self.fail(i, reason),
                    }
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => return self.fail(i, format!("read failed: {err}")),
            }
        }
    }

    fn flush(&mut self, i: usize) {
        let now = self.now();
        let client = &mut self.clients[i];
        let Some(link) = &mut self.links[i] else {
            return;
        };
        if client.state == State::TcpConnecting || self.write_blocked[i] {
            return;
        }
        match link.flush() {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                self.write_blocked[i] = true;
                return;
            }
            Err(err) => return self.fail(i, format!("write failed: {err}")),
        }
        while !client.out.is_empty() {
            match link.write(&client.out) {
                Ok(n) => {
                    client.out.advance(n);
                    client.last_send = now;
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                    self.write_blocked[i] = true;
                    return;
                }
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => return self.fail(i, format!("write failed: {err}")),
            }
        }
    }

    fn close_socket(&mut self, i: usize) {
        if let Some(mut link) = self.links[i].take() {
            // Deregistering a socket we registered cannot fail in a way that matters:
            // it is dropped (and closed) right after.
            let _ = self.poll.registry().deregister(link.tcp_mut());
        }
        self.clients[i].drop_connection();
    }

    fn reconnect(&mut self, i: usize) {
        self.close_socket(i);
        self.tally.reconnects += 1;
        self.open(i, self.now());
    }

    fn fail(&mut self, i: usize, reason: String) {
        let counters = self.counters();
        if self.clients[i].state == State::Closed {
            return;
        }
        let counter = if self.clients[i].was_ready() {
            &counters.errors
        } else {
            &counters.failed
        };
        Counters::add(counter, 1);
        if self.errors.len() < MAX_ERRORS {
            let id = &self.clients[i].spec.client_id;
            self.errors.push(format!("{id}: {reason}"));
        }
        self.close_socket(i);
        self.clients[i].state = State::Closed;
    }

    /// Send DISCONNECT on every live connection, then hand back what was measured.
    fn finish(mut self) -> WorkerResult {
        for i in 0..self.clients.len() {
            if self.clients[i].state == State::Ready {
                let run = self.setup.run.clone();
                // Best effort: the run is over whatever the socket says.
                let _ = self.clients[i].disconnect(&run);
                self.flush(i);
            }
        }
        let mut result = WorkerResult {
            cpu_ns: thread_cpu_ns(),
            errors: std::mem::take(&mut self.errors),
            ..WorkerResult::default()
        };
        for client in self.clients {
            match client.role {
                RoleState::Publisher(p) => result.publishers.push((p.id, p.next_seq)),
                RoleState::Subscriber(s) => result.subscribers.push((s.index, s.streams)),
                RoleState::Idle => {}
            }
        }
        result.tally = self.tally;
        result
    }
}
