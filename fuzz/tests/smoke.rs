//! A short seeded mutation run of every fuzz target, under an allocator that aborts on any
//! allocation a fuzz input cannot back. `STRATA_FUZZ_SECS` sets the time per target (default
//! 3 s) and `STRATA_FUZZ_SEED` the seed (default: from the clock, printed).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use strata_fuzz::alloc_guard::BoundedAlloc;
use strata_fuzz::targets::ALL;

#[global_allocator]
static ALLOC: BoundedAlloc = BoundedAlloc;

#[test]
fn every_target_survives_mutations_of_its_seeds() {
    let seed = std::env::var("STRATA_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    let secs: f64 = std::env::var("STRATA_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    println!("fuzz smoke: seed {seed}, {secs} s per target");
    for target in ALL {
        let seeds = target.seeds();
        assert!(!seeds.is_empty(), "{} has seeds", target.name());
        let report = strata_fuzz::smoke(target, seed, Duration::from_secs_f64(secs))
            .unwrap_or_else(|e| panic!("{e}"));
        println!(
            "fuzz smoke: {:<20} {:>8} inputs, {:>7} decoded, {} seeds",
            target.name(),
            report.inputs,
            report.decoded,
            seeds.len()
        );
        // Every seed is a valid input of its target: a target that decodes nothing is broken.
        assert!(
            report.decoded >= 1,
            "{} decoded none of its seeds",
            target.name()
        );
    }
}
