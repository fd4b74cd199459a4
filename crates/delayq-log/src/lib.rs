//! STUB: replaced by the append-only log implementation.
