//! Fuzz targets for every decoder of bytes that reach Strata from outside: request frames from
//! the network, record batches, the files of a partition directory, the broker's checkpoints,
//! coordinator records and the tiering manifest.
//!
//! A target is a function `fn(&[u8])` that must return for every input: no panic, no abort and
//! no allocation larger than [`alloc_guard::LIMIT`] (a count the bytes cannot back). The same
//! targets run three ways:
//! - `cargo test -p strata-fuzz` runs a short seeded mutation smoke of each (CI), through
//!   [`smoke`], with [`alloc_guard::BoundedAlloc`] as the global allocator;
//! - `benches/fuzz.sh campaign` builds `strata-libfuzzer` with coverage instrumentation
//!   (`-C passes=sancov-module`, stable Rust) and runs libFuzzer on each target;
//! - `strata-netfuzz` sends mutated frames from [`seeds::request_frames`] over many connections
//!   to a running broker and checks that it keeps answering.
//!
//! Mutations are seeded ([`mutate::Mutator`]); a failing smoke prints the seed and the input.

pub mod alloc_guard;
pub mod mutate;
pub mod seeds;
pub mod targets;

use std::time::{Duration, Instant};

pub use targets::Target;

/// What one smoke run of a target did.
#[derive(Debug, Default, Clone, Copy)]
pub struct SmokeReport {
    pub inputs: u64,
    pub decoded: u64,
}

/// Runs `target` over its seeds and seeded mutations of them for `budget` (at least every seed
/// once). Returns the counts, or the first input that panicked, as hex.
pub fn smoke(target: Target, seed: u64, budget: Duration) -> Result<SmokeReport, String> {
    let seeds = target.seeds();
    let mut m = mutate::Mutator::new(seed);
    let mut report = SmokeReport::default();
    let started = Instant::now();
    let run = |input: &[u8], report: &mut SmokeReport| -> Result<(), String> {
        alloc_guard::set_current_input(input);
        let outcome = std::panic::catch_unwind(|| target.run(input));
        alloc_guard::set_current_input(&[]);
        report.inputs += 1;
        match outcome {
            Ok(true) => report.decoded += 1,
            Ok(false) => {}
            Err(_) => {
                return Err(format!(
                    "{} panicked (seed {seed}) on input {}",
                    target.name(),
                    hex(input)
                ))
            }
        }
        Ok(())
    };
    for s in &seeds {
        run(s, &mut report)?;
    }
    if seeds.is_empty() {
        return Ok(report);
    }
    while started.elapsed() < budget {
        for _ in 0..64 {
            let base = &seeds[m.below(seeds.len())];
            let other = &seeds[m.below(seeds.len())];
            let input = m.mutate(base, other, target.max_len());
            run(&input, &mut report)?;
        }
    }
    Ok(report)
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
