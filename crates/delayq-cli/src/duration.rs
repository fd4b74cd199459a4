//! Durations and instants as people write and read them: the functions live in
//! `delayq-bench` (whose flags take durations too) and are shared from there.

pub use delayq_bench::duration::*;
