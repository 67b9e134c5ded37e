//! `partition_batches` run a fixed number of times over the records of
//! `benches/kafka_batch.rs` (10,000 records, keys like `site/42/device/1234`, 6
//! partitions), for counting its instructions under valgrind, which a loaded machine's
//! timings cannot resolve (the registry format's cost is a few ns a record):
//!
//! ```text
//! cargo build --release -p ferromq-core --example kafka_batch_count
//! for format in none plain confluent; do
//!   valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \
//!     target/release/examples/kafka_batch_count $format 200 10 2>&1 | grep 'I *refs'
//! done
//! ```
//!
//! `none` builds the records only; (a format's count − none's) / (10 × 10,000) is the
//! encoder's instructions per record for that value format.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::process::ExitCode;

use ferromq_core::export::kafka::{partition_batches, ValueFormat};
use ferromq_core::export::RecordList;

const RECORDS: usize = 10_000;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: kafka_batch_count none|plain|confluent VALUE_BYTES ROUNDS";
    let (Some(format), Some(value_len), Some(rounds)) = (
        args.get(1),
        args.get(2).and_then(|n| n.parse::<usize>().ok()),
        args.get(3).and_then(|n| n.parse::<usize>().ok()),
    ) else {
        eprintln!("{usage}");
        return ExitCode::FAILURE;
    };
    let format = match format.as_str() {
        "none" => None,
        "plain" => Some(ValueFormat::Plain),
        "confluent" => Some(ValueFormat::Confluent { schema_id: 1 }),
        _ => {
            eprintln!("{usage}");
            return ExitCode::FAILURE;
        }
    };
    let mut list = RecordList::default();
    let value = vec![b'v'; value_len];
    for i in 0..RECORDS {
        let key = format!("site/{}/device/{}", i % 100, i % 1000);
        list.push(key.as_bytes(), &value, 1_700_000_000_000 + i as i64);
    }
    let partitions = NonZeroU32::new(6).expect("non-zero");
    if let Some(format) = format {
        for _ in 0..rounds {
            black_box(partition_batches(
                list.iter(),
                partitions,
                1_000_000,
                format,
            ));
        }
    }
    ExitCode::SUCCESS
}
