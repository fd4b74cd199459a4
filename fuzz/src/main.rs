//! The AFL++ harness: runs the fuzz target named by `DELAYQ_FUZZ_TARGET` (see
//! `crates/delayq-fuzz`) on every input AFL++ hands it. Built and run by `scripts/fuzz`.

fn main() {
    let name = std::env::var("DELAYQ_FUZZ_TARGET").unwrap_or_default();
    let Some(target) = delayq_fuzz::target(&name) else {
        let names: Vec<&str> = delayq_fuzz::TARGETS.iter().map(|t| t.name).collect();
        eprintln!("set DELAYQ_FUZZ_TARGET to one of {names:?}");
        std::process::exit(2);
    };
    afl::fuzz!(|data: &[u8]| {
        (target.run)(data);
    });
}
