//! The pure core of delayq.
//!
//! Everything here is plain data and plain functions: the task model and its lifecycle rules
//! (DESIGN §1–§2), the retry/backoff policy, input validation and the hierarchical timing
//! wheel. Nothing here does IO, reads a clock or needs an async runtime: every function that
//! depends on time takes `now` (epoch milliseconds) as an argument, so the rules can be tested
//! exactly and reused by every storage backend.

pub mod wheel;
