//! The shared conformance suite against the Redis backend, one redis-server per test: with
//! one partition a topic (the default on one Redis), and in `partitioned` with four, so that
//! the plans across partitions (pop, peek, kick) and the topic-wide flow limits (the topic's
//! permits) meet every rule on standalone Redis too.

mod support;

delayq_conformance::suite!(|ctx| async move { support::served(ctx).await });
delayq_conformance::flow_suite!(|ctx| async move { support::served(ctx).await });

mod partitioned {
    use super::support;

    delayq_conformance::suite!(|ctx| async move {
        support::served_with_options(ctx, |o| o.partitions(4)).await
    });
    delayq_conformance::flow_suite!(|ctx| async move {
        support::served_with_options(ctx, |o| o.partitions(4)).await
    });
}
