//! Run one benchmark from a JSON config without Python, for the Rust-only loop:
//! `cargo run --release -p ferromq-bench --example bench -- '{"scenario": "p2p"}'`.
//! Prints the report as JSON on stdout; progress goes to stderr.

use std::process::ExitCode;

fn main() -> ExitCode {
    let config = std::env::args().nth(1).unwrap_or_else(|| "{}".into());
    match ferromq_bench::run_json(&config) {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("ferromq-bench: {err}");
            ExitCode::FAILURE
        }
    }
}
