//! libFuzzer entry point for every target: `STRATA_FUZZ_TARGET=<name>` picks one (see
//! `strata_fuzz::targets::ALL`). Built by `benches/fuzz.sh campaign` with coverage
//! instrumentation on the stable toolchain.

#![no_main]

use std::sync::OnceLock;

use strata_fuzz::alloc_guard::{self, BoundedAlloc};
use strata_fuzz::Target;

#[global_allocator]
static ALLOC: BoundedAlloc = BoundedAlloc;

fn target() -> Target {
    static TARGET: OnceLock<Target> = OnceLock::new();
    *TARGET.get_or_init(|| {
        let name = std::env::var("STRATA_FUZZ_TARGET").unwrap_or_else(|_| "request".into());
        Target::from_name(&name).unwrap_or_else(|| panic!("unknown fuzz target {name}"))
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    alloc_guard::set_current_input(data);
    target().run(data);
});
