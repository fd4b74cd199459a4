//! The conformance suite against the embedded durable backend (fsync `always`, the strictest
//! policy, so every acknowledged change has been through the log's full path).

delayq_conformance::suite!(start);
delayq_conformance::flow_suite!(start);

async fn start(
    ctx: delayq::StorageContext,
) -> std::sync::Arc<delayq::storage::embedded::EmbeddedStorage> {
    let dir = delayq_conformance::scratch_dir(env!("CARGO_TARGET_TMPDIR"));
    let options = delayq::storage::embedded::EmbeddedOptions::new(dir)
        .fsync(delayq_log::FsyncPolicy::Always)
        .shards(4);
    let (storage, _) = delayq::storage::embedded::start(ctx, options)
        .await
        .expect("embedded storage starts");
    storage
}
