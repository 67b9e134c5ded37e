//! The cost of an admin API listing with 10,000 connected clients (issue 14,
//! "Numbers"): how long one `Engine::sessions` call holds the event loop, i.e. how
//! long message flow waits for one `GET /api/v1/clients` page.
//!
//! - `page_1000`: the first page of 1,000 (`MAX_PAGE`), no filter;
//! - `filter_miss`: a client id prefix nothing has, which examines the whole scan
//!   budget (`SCAN_BUDGET` slots) and returns an empty page: the worst call;
//! - `every_page`: all 10,000 through `next` at 1,000 a page (ten calls in all).
//!
//! Run: `cargo bench -p ferromq-core --bench admin` (`-- --rounds=N`, default 101);
//! prints the median and the 99th percentile of each in microseconds.

use std::hint::black_box;
use std::time::Instant;

use ferromq_core::codec::{Connect, Packet, Properties, ProtocolVersion, Utf8Bytes};
use ferromq_core::engine::{Engine, EngineConfig, SessionFilter, MAX_PAGE};
use ferromq_core::topic::ShareStrategy;

const CLIENTS: usize = 10_000;

/// One measured call; returns what it found, so the work is not optimised away.
type Case<'a> = (&'static str, Box<dyn FnMut() -> usize + 'a>);

fn connected_engine() -> Engine {
    let mut engine = Engine::new(EngineConfig::default(), ShareStrategy::default());
    for n in 0..CLIENTS {
        let conn = engine.open(0);
        let connect = Packet::Connect(Box::new(Connect {
            protocol: ProtocolVersion::V5,
            clean_start: true,
            keep_alive: 60,
            properties: Properties::new(),
            client_id: Utf8Bytes::try_from(format!("device-{n:05}").as_str()).expect("UTF-8"),
            will: None,
            username: None,
            password: None,
        }));
        let wire = connect.to_bytes(ProtocolVersion::V5).expect("encodable");
        engine.feed(conn, &wire, 0);
    }
    engine.take_output(|_, _| {});
    engine
}

fn measure(rounds: usize, mut call: impl FnMut() -> usize) -> (f64, f64) {
    let mut micros: Vec<f64> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            black_box(call());
            start.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    micros.sort_by(f64::total_cmp);
    let at = |q: f64| micros[((micros.len() - 1) as f64 * q) as usize];
    (at(0.5), at(0.99))
}

fn main() {
    let rounds = std::env::args()
        .find_map(|arg| arg.strip_prefix("--rounds=").map(str::to_owned))
        .map_or(101, |n| n.parse().expect("--rounds=N"));
    let engine = connected_engine();
    let all = SessionFilter::default();
    let miss = SessionFilter {
        client_id_prefix: Some("no-such-"),
        ..SessionFilter::default()
    };
    let cases: [Case<'_>; 3] = [
        (
            "page_1000",
            Box::new(|| engine.sessions(&all, 0, MAX_PAGE).items.len()),
        ),
        (
            "filter_miss",
            Box::new(|| engine.sessions(&miss, 0, MAX_PAGE).items.len()),
        ),
        (
            "every_page",
            Box::new(|| {
                let (mut cursor, mut seen) = (Some(0), 0);
                while let Some(at) = cursor {
                    let page = engine.sessions(&all, at, MAX_PAGE);
                    seen += page.items.len();
                    cursor = page.next;
                }
                assert_eq!(seen, CLIENTS);
                seen
            }),
        ),
    ];
    println!("{CLIENTS} connected clients, {rounds} rounds");
    for (name, mut call) in cases {
        let (median, p99) = measure(rounds, &mut call);
        println!("{name:>12}: median {median:9.1} µs   p99 {p99:9.1} µs");
    }
}
