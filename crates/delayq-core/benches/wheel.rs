//! STUB: replaced by the wheel benchmarks.
fn main() {}
