//! The conformance suite against the in-memory backend.

delayq_conformance::suite!(|ctx| async move { delayq::storage::memory::start(ctx, 4) });
delayq_conformance::flow_suite!(|ctx| async move { delayq::storage::memory::start(ctx, 4) });
