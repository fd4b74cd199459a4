//! The shared conformance suite against the Redis backend, one redis-server per test.

mod support;

delayq_conformance::suite!(|ctx| async move { support::served(ctx).await });
