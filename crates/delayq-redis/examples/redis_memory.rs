//! Redis memory per delayed task, as a user would see it: `N` tasks with 100-byte bodies, due
//! in an hour, ids like an application's (`order-<n>`), added through `Queue::add_batch` in
//! batches of 1 000 by a few concurrent producers, into one topic and then into 1 000 topics,
//! each run on a fresh redis-server of its own with Redis's default configuration (no
//! persistence). Prints `used_memory` per task and beyond the body, then where the bytes go:
//! each key kind of one partition (`MEMORY USAGE`, encoding, entries) and one record's size.
//!
//! `cargo run --release -p delayq-redis --example redis_memory -- [tasks] [--topics 1,1000]
//! [--body 100] [--partitions 4]`
//!
//! The last line of each run is a machine-readable summary (`memory_beyond_body_b=...`) that
//! `scripts/bench` reads.

use std::sync::Arc;
use std::time::Instant;

use delayq::{NewTask, Queue, StorageContext, SystemClock};
use delayq_redis::RedisOptions;
use delayq_testkit::{RedisServer, cli};

const BATCH: usize = 1_000;
const PRODUCERS: usize = 4;
const DELAY_MS: u64 = 3_600_000;

struct Args {
    tasks: usize,
    topics: Vec<usize>,
    body: usize,
    partitions: u32,
}

fn args() -> Args {
    let mut out = Args {
        tasks: 1_000_000,
        topics: vec![1, 1_000],
        body: 100,
        partitions: RedisOptions::new("redis://unused").partitions,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().unwrap_or_else(|| panic!("{name} needs a value"));
        match a.as_str() {
            "--topics" => {
                out.topics = value("--topics")
                    .split(',')
                    .map(|t| t.parse().expect("--topics: numbers separated by commas"))
                    .collect();
            }
            "--body" => out.body = value("--body").parse().expect("--body: a byte count"),
            "--partitions" => {
                out.partitions = value("--partitions")
                    .parse()
                    .expect("--partitions: a count");
            }
            n => out.tasks = n.parse().expect("tasks: a count"),
        }
    }
    out
}

fn used_memory(server: &RedisServer) -> u64 {
    server
        .info_field("memory", "used_memory")
        .and_then(|v| v.parse().ok())
        .expect("used_memory")
}

/// `redis-cli` on the server, its answer trimmed.
fn ask(server: &RedisServer, args: &[&str]) -> String {
    cli(server.port(), args).trim().to_owned()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = args();
    for &topics in &args.topics {
        measure(&args, topics).await;
    }
}

fn topic_name(topics: usize, k: usize) -> String {
    if topics == 1 {
        "orders".to_owned()
    } else {
        format!("orders-{k}")
    }
}

async fn measure(args: &Args, topics: usize) {
    let server = RedisServer::start();
    let ctx = StorageContext::new(Arc::new(SystemClock::new()));
    let options = RedisOptions::new(server.url()).partitions(args.partitions);
    let storage = delayq_redis::start(ctx.clone(), options)
        .await
        .expect("start");
    let queue = Queue::new(storage, ctx);
    // Register the topics first, so the figure is the tasks' alone.
    for k in 0..topics {
        let topic = topic_name(topics, k);
        queue.add(NewTask::new(&topic, "warmup")).await.unwrap();
        queue.delete(&topic, "warmup").await.unwrap();
    }
    let before = used_memory(&server);
    let started = Instant::now();
    let batches = args.tasks.div_ceil(BATCH);
    let body = "x".repeat(args.body);
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (queue, body, tasks) = (queue.clone(), body.clone(), args.tasks);
            tokio::spawn(async move {
                // Batch b holds ids b*1000.. and goes to one topic, as an application adding
                // its own orders would.
                for b in (p..batches).step_by(PRODUCERS) {
                    let topic = topic_name(topics, b % topics);
                    let batch = (b * BATCH..((b + 1) * BATCH).min(tasks))
                        .map(|n| {
                            NewTask::new(&topic, format!("order-{n}"))
                                .body(body.clone())
                                .delay_ms(DELAY_MS)
                        })
                        .collect();
                    for r in queue.add_batch(batch).await.expect("add_batch") {
                        r.expect("added");
                    }
                }
            })
        })
        .collect();
    for p in producers {
        p.await.expect("producer");
    }
    let took = started.elapsed().as_secs_f64();
    let after = used_memory(&server);
    let per_task = (after - before) as f64 / args.tasks as f64;
    let beyond = per_task - args.body as f64;
    println!(
        "{} tasks, {topics} topic(s) of {} partitions, {}-byte bodies, due in 1 h: added in {took:.1} s ({:.0}/s)",
        args.tasks,
        args.partitions,
        args.body,
        args.tasks as f64 / took
    );
    println!(
        "  used_memory {before} -> {after} B: {per_task:.1} B per delayed task, {beyond:.1} B beyond the body"
    );
    let field = |name: &str| server.info_field("memory", name).unwrap_or_default();
    println!(
        "  of which clients' buffers {} B, scripts {} B (INFO memory after the adds)",
        field("mem_clients_normal"),
        field("used_memory_scripts_eval"),
    );
    breakdown(&server, &topic_name(topics, 0));
    // A dict that grew keeps its old table until Redis has moved every bucket, one step per
    // access of that key: right after the adds a grown table may still be on its way.
    let moved = settle(&server, topics, args.partitions);
    let settled = (used_memory(&server) - before) as f64 / args.tasks as f64 - args.body as f64;
    println!(
        "  after {moved} more lookups (Redis finishes moving grown tables): {settled:.1} B beyond the body"
    );
    println!(
        "memory_beyond_body_b={beyond:.1} tasks={} topics={topics} body={}",
        args.tasks, args.body
    );
    queue.shutdown().await.unwrap();
}

/// Looks up as many absent members in every `records` hash and `delayed` set as they hold
/// entries (each lookup moves a bucket of a table being grown). Returns how many.
fn settle(server: &RedisServer, topics: usize, partitions: u32) -> u64 {
    const LOOKUPS: &str = "local n = tonumber(redis.call('HLEN', KEYS[1])) \
        for i = 1, n do redis.call('HEXISTS', KEYS[1], '') end \
        local m = tonumber(redis.call('ZCARD', KEYS[2])) \
        for i = 1, m do redis.call('ZSCORE', KEYS[2], '') end \
        return n + m";
    let mut moved = 0;
    for k in 0..topics {
        for p in 0..partitions {
            let base = format!("dq:{{{}#{p}}}:", topic_name(topics, k));
            let (records, delayed) = (format!("{base}records"), format!("{base}delayed"));
            moved += ask(server, &["EVAL", LOOKUPS, "2", &records, &delayed])
                .parse::<u64>()
                .unwrap_or(0);
        }
    }
    moved
}

/// Where the bytes go, in partition 0 of `topic`.
fn breakdown(server: &RedisServer, topic: &str) {
    let base = format!("dq:{{{topic}#0}}:");
    let records = format!("{base}records");
    let entries: f64 = ask(server, &["HLEN", &records]).parse().unwrap_or(0.0);
    if entries == 0.0 {
        return;
    }
    println!("  partition 0 of {topic}: {entries} tasks");
    for suffix in ["records", "delayed", "info"] {
        let key = format!("{base}{suffix}");
        let usage: f64 = ask(server, &["MEMORY", "USAGE", &key, "SAMPLES", "0"])
            .parse()
            .unwrap_or(0.0);
        let encoding = ask(server, &["OBJECT", "ENCODING", &key]);
        println!(
            "    {suffix:8} {encoding:10} MEMORY USAGE {usage:.0} B = {:.1} B per task",
            usage / entries
        );
    }
    let sample = ask(server, &["HRANDFIELD", &records]);
    let raw = ask(server, &["--no-raw", "HGET", &records, &sample]);
    let len = ask(server, &["HSTRLEN", &records, &sample]);
    println!("    one record: {sample} -> {len} bytes: {raw}");
}
