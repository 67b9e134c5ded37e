//! The coordinator: spawns the workers, walks the run through its phases, and builds
//! the report from what the workers hand back.
//!
//! Timeline: every client connects (and subscribes) → `warmup` seconds of publishing
//! that is not measured → the measured window (`duration` seconds, or until every
//! publisher has sent `count` measured messages) → drain (no new publishes; wait until
//! every expected delivery arrived and every QoS 1/2 flow completed, at most
//! `drain_timeout`) → DISCONNECT. The coordinator polls the workers' counters every
//! 10 ms and prints the progress line once per second.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::client::RunParams;
use crate::config::{Config, Scenario};
use crate::link::Connector;
use crate::report::{build_report, Outcome, Report};
use crate::scenario::{plan, Plan};
use crate::shared::{Instants, Phase, Shared, Totals};
use crate::worker::{run_worker, WorkerResult, WorkerSetup};
use crate::BenchError;

const TICK: Duration = Duration::from_millis(10);
const SECOND_NS: u64 = 1_000_000_000;

fn secs_ns(seconds: f64) -> u64 {
    (seconds * 1e9) as u64
}

/// Run one benchmark to completion against the broker the config names.
pub fn run(config: &Config) -> Result<Report, BenchError> {
    config.validate()?;
    let plan = plan(config);
    let threads = match config.threads {
        0 => thread::available_parallelism().map_or(1, usize::from),
        n => n as usize,
    }
    .clamp(1, plan.clients.len().max(1));
    // Distinguishes this run's messages from any a persistent session kept.
    let run_id = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() ^ (d.as_secs() as u32))
        ^ std::process::id();
    let shared = Arc::new(Shared::new(threads));
    let run = Arc::new(RunParams::new(config, run_id));
    let dest = SocketAddr::new(config.destination_ip()?, config.port);
    let connector = Arc::new(Connector::from_config(config)?);
    let connect_interval = if config.connect_rate > 0.0 {
        (threads as f64 * 1e9 / config.connect_rate) as u64
    } else {
        0
    };
    let mut shares = vec![Vec::new(); threads];
    for (n, spec) in plan.clients.iter().enumerate() {
        shares[n % threads].push(spec.clone());
    }
    let handles: Vec<_> = shares
        .into_iter()
        .enumerate()
        .map(|(index, clients)| {
            let setup = WorkerSetup {
                index,
                clients,
                shared: shared.clone(),
                run: run.clone(),
                connector: connector.clone(),
                dest,
                connect_interval,
            };
            thread::Builder::new()
                .name(format!("ferromq-bench-{index}"))
                .spawn(move || run_worker(setup))
        })
        .collect::<Result<_, _>>()
        .map_err(|err| BenchError::Run(format!("cannot start a worker thread: {err}")))?;
    let outcome = Coordinator::new(config, &plan, &shared).coordinate();
    shared.set_phase(Phase::Stop);
    let mut results = Vec::with_capacity(threads);
    for handle in handles {
        match handle.join() {
            Ok(Ok(result)) => results.push(result),
            Ok(Err(err)) => return Err(BenchError::Run(format!("worker failed: {err}"))),
            Err(_) => return Err(BenchError::Run("a worker thread panicked".into())),
        }
    }
    match outcome {
        Ok(outcome) => {
            let totals = shared.totals();
            Ok(build_report(
                config, &plan, &outcome, &totals, results, threads,
            ))
        }
        Err(message) => Err(BenchError::Run(with_first_error(message, &results))),
    }
}

fn with_first_error(message: String, results: &[WorkerResult]) -> String {
    match results.iter().flat_map(|r| &r.errors).next() {
        Some(first) => format!("{message}; first error: {first}"),
        None => message,
    }
}

struct Coordinator<'a> {
    config: &'a Config,
    plan: &'a Plan,
    shared: &'a Shared,
    total_clients: u64,
    next_progress: u64,
    last_progress: Totals,
}

impl<'a> Coordinator<'a> {
    fn new(config: &'a Config, plan: &'a Plan, shared: &'a Shared) -> Coordinator<'a> {
        Coordinator {
            config,
            plan,
            shared,
            total_clients: plan.clients.len() as u64,
            next_progress: SECOND_NS,
            last_progress: Totals::default(),
        }
    }

    fn now(&self) -> u64 {
        self.shared.clock.now()
    }

    /// Sleep one tick, print progress when a second has passed, return the totals.
    fn tick(&mut self, label: &str) -> Totals {
        thread::sleep(TICK);
        let totals = self.shared.totals();
        let now = self.now();
        if self.config.progress && now >= self.next_progress {
            self.next_progress += SECOND_NS;
            let last = std::mem::replace(&mut self.last_progress, totals);
            let inflight = if self.config.pub_qos > 0 {
                totals.sent - totals.acked
            } else {
                0
            };
            eprintln!(
                "[{:6.1}s] {label:<10} sent {:>9}/s  recv {:>9}/s  ready {}/{}  inflight {}  errors {}",
                now as f64 / 1e9,
                totals.sent - last.sent,
                totals.received - last.received,
                totals.ready,
                self.total_clients,
                inflight,
                totals.errors + totals.failed,
            );
        }
        totals
    }

    fn coordinate(&mut self) -> Result<Outcome, String> {
        let config = self.config;
        let mut connect_budget = secs_ns(config.connect_timeout);
        if config.connect_rate > 0.0 {
            connect_budget += secs_ns(self.total_clients as f64 / config.connect_rate);
        }
        let connect_deadline = self.now() + connect_budget;
        let mut totals = self.tick("connecting");
        while totals.ready + totals.failed < self.total_clients {
            if self.now() > connect_deadline {
                return Err(format!(
                    "only {} of {} clients connected within the connect timeout",
                    totals.ready, self.total_clients
                ));
            }
            totals = self.tick("connecting");
        }
        let all_ready = self.now();
        if totals.failed > 0 && config.scenario != Scenario::Conn {
            return Err(format!(
                "{} of {} clients could not connect",
                totals.failed, self.total_clients
            ));
        }
        if config.scenario == Scenario::Conn {
            let hold_end = self.now() + secs_ns(config.duration);
            while self.now() < hold_end {
                self.tick("holding");
            }
            return Ok(Outcome {
                all_ready,
                finished: self.now(),
                ..Outcome::default()
            });
        }
        self.publish(all_ready)
    }

    fn publish(&mut self, all_ready: u64) -> Result<Outcome, String> {
        let config = self.config;
        let publish_start = self.now();
        let measure_start = publish_start + secs_ns(config.warmup);
        let by_count = config.count > 0;
        let publish_end = if by_count {
            u64::MAX
        } else {
            measure_start + secs_ns(config.duration)
        };
        self.shared.start_publishing(Instants {
            publish_start,
            measure_start,
            publish_end,
        });
        let stall_limit = secs_ns(config.drain_timeout.max(1.0));
        let mut last_sent = (0, publish_start);
        loop {
            let totals = self.tick("publishing");
            let now = self.now();
            let finished = if by_count {
                totals.publishers_done >= u64::from(self.plan.publishers)
            } else {
                now >= publish_end
            };
            if totals.sent != last_sent.0 {
                last_sent = (totals.sent, now);
            }
            // A count run whose publishers all lost their connection would never end.
            if finished || (by_count && now - last_sent.1 > stall_limit) {
                break;
            }
        }
        let publish_end = if by_count { self.now() } else { publish_end };
        self.shared.set_phase(Phase::Draining);
        let drain_deadline = self.now() + secs_ns(config.drain_timeout);
        let drain_complete = loop {
            let totals = self.tick("draining");
            let delivered = totals.received_new >= totals.sent * self.plan.fan_out;
            let acked = config.pub_qos == 0 || totals.acked >= totals.sent;
            if delivered && acked {
                break true;
            }
            if self.now() > drain_deadline {
                break false;
            }
        };
        Ok(Outcome {
            all_ready,
            instants: Instants {
                publish_start,
                measure_start,
                publish_end,
            },
            received_end: if by_count { self.now() } else { publish_end },
            drain_complete,
            finished: self.now(),
        })
    }
}
