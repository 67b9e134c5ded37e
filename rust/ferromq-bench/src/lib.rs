//! ferromq-bench: an MQTT load generator built not to be the bottleneck.
//!
//! The clients run in a few Rust threads, each an edge-triggered `mio` loop over its
//! share of the connections ([`worker`]); every packet goes through `ferromq-core`'s
//! codec, and a publish allocates nothing (a template PUBLISH with its stamp patched in
//! place, [`payload`]). Scenarios follow the Open MQTT Benchmark (`p2p`, `fanin`,
//! `fanout`, `sharedsub`, `conn`, [`scenario`]). Each payload carries run id,
//! publisher id, sequence and send time, so subscribers measure end-to-end latency in
//! an HDR histogram and account loss, duplicates and reordering per publisher
//! ([`stats`]). [`run`] drives one run and returns a [`Report`]; [`run_json`] is the
//! same with JSON in and out, for the Python binding.
//!
//! The generator only connects to loopback addresses (127.0.0.0/8).

mod client;
pub mod config;
mod link;
pub mod payload;
pub mod report;
mod run;
pub mod scenario;
mod shared;
pub mod stats;
mod worker;

pub use config::{Config, Scenario};
pub use report::Report;
pub use run::run;

/// Why a run could not be carried out (a finished run with losses is not an error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BenchError {
    /// The configuration is invalid; nothing was started.
    Config(String),
    /// The run could not complete: clients could not connect, a worker failed.
    Run(String),
}

impl std::fmt::Display for BenchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BenchError::Config(message) | BenchError::Run(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for BenchError {}

/// [`run`] with the config as JSON and the [`Report`] as JSON.
pub fn run_json(config_json: &str) -> Result<String, BenchError> {
    let report = run(&Config::from_json(config_json)?)?;
    serde_json::to_string(&report)
        .map_err(|err| BenchError::Run(format!("cannot serialise the report: {err}")))
}
