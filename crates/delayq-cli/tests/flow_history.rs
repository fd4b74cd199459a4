//! The history check of flow limits in Redis mode (issue 26, docs/flow-control.md): three real
//! `delayq serve --redis` processes over one private redis-server (each topic in one
//! partition, its limits in it), and again over a private Redis Cluster of three masters
//! (each topic in four partitions, its limits counted by its permits), 30 consumers spread over
//! them (HTTP `/pop` + `/finish`, and beanstalk `reserve-with-timeout` + `delete` watching
//! every tube), a topic with `max_active`, a topic with `rate_per_s` + `burst` and a topic of
//! keyed tasks with `max_active_per_key`, a ttr short enough that abandoned tasks run it out
//! and come back. Halfway through, one instance is SIGKILLed with its consumers' tasks in
//! hand: those hold their slots until their ttr passes, and the other two go on.
//!
//! Every hand-out is recorded with the consumer's own timestamps (the machine's wall clock,
//! which is also the clock of the redis-server the instances read their time from):
//! - its ACTIVE interval, from after the pop's reply arrived to before the finish was sent,
//!   cut at the pop's send time + ttr − a margin (the ttr runs from the script's clock reading,
//!   which is after the send, so the task cannot leave ACTIVE by its ttr before that). The
//!   task's true ACTIVE time contains this interval, so their overlap can only under-count:
//!   at no instant may more than `max_active` of the limited topic's intervals overlap, nor
//!   more than `max_active_per_key` of one key's.
//! - its hand-out time (when the reply arrived), for the rate: over any window of `w` seconds
//!   at most `rate × (w + slack) + burst` hand-outs (see [`RATE_SLACK_S`] for the slack).
//!
//! Removing the pop script's check (`allowance` in crates/delayq-redis/src/scripts/lib.lua
//! returning `want, nil`) makes the first two assertions fail; leaving every keyed task in
//! READY (`key_room` returning nil) makes the per-key one fail. On the Cluster, removing the
//! permits' checks (`permit_grant.lua`) does the same.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use delayq_client::{Client, ClientOptions, MaxRetries, NewTask, PopOptions};
use delayq_testkit::history::now_us;
use delayq_testkit::{RedisCluster, RedisServer};
use serde_json::{Value, json};
use support::http_history::Rng;
use support::{Server, free_port};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufStream};
use tokio::net::TcpStream;

/// The topic limited by `max_active`.
const ACTIVE_TOPIC: &str = "flow-active";
const MAX_ACTIVE: usize = 4;
/// The topic limited by `rate_per_s` and `burst`.
const RATE_TOPIC: &str = "flow-rate";
const RATE_PER_S: f64 = 40.0;
/// Its rate on the Cluster, where a pop of a topic of several partitions takes four round
/// trips to three masters: low enough that the consumers could go faster, so that the check
/// would see a rate not kept.
const CLUSTER_RATE_PER_S: f64 = 20.0;
const BURST: u64 = 5;
/// The topic of keyed tasks limited by `max_active_per_key`.
const KEYED_TOPIC: &str = "flow-keyed";
const PER_KEY: usize = 2;
/// The keys its tasks spread over (round robin).
const KEYS: usize = 5;
const TOPICS: [&str; 3] = [ACTIVE_TOPIC, RATE_TOPIC, KEYED_TOPIC];
/// Ready tasks added to each topic before the consumers start: more than the run hands out
/// at the rate, so both topics are held back by their limits the whole run.
const TASKS: usize = 500;
/// The tasks' ttr: short, so an abandoned task comes back within the run.
const TTR_MS: u64 = 400;
/// How much of the ttr an interval gives up at its end: the scripts' clock is the redis-server's
/// and the ttr runs in whole milliseconds from a reading a little above it (docs/clock.md).
const TTR_MARGIN_US: u64 = 25_000;
/// The slack of the rate bound, in seconds. A hand-out is recorded when its reply arrives,
/// some time after the script took the token: the reply travels through Redis, the instance
/// and the HTTP or beanstalk connection, on a machine whose two cores are shared by three
/// instances, redis-server, the consumers and whatever else runs. A window of `w` seconds of
/// reply times holds the hand-outs of a window of the scripts' clock `w` + the spread of
/// those reply latencies long, so the bound allows that spread, generously (it adds
/// `RATE_PER_S × RATE_SLACK_S` = 20 hand-outs; without the check the topic goes several
/// times faster than its rate).
const RATE_SLACK_S: f64 = 0.5;
const INSTANCES: usize = 3;
const HTTP_CONSUMERS: usize = 20;
const BEANSTALK_CONSUMERS: usize = 10;
/// How long the consumers take tasks; the last instance is SIGKILLed halfway.
const RUN: Duration = Duration::from_secs(8);
/// One in this many HTTP deliveries is abandoned to its ttr (and each HTTP consumer's first).
const ABANDON_ONE_IN: u64 = 20;
/// A pop's long-poll, and a beanstalk reserve's timeout (whole seconds in that protocol).
const POP_TIMEOUT_MS: u64 = 1_000;
/// A reply that takes longer than this is a hang, reported as such.
const REPLY_TIMEOUT: Duration = Duration::from_secs(15);

/// One hand-out as a consumer saw it, in epoch microseconds of the test's clock.
#[derive(Debug, Clone)]
struct Handout {
    topic: String,
    /// Which task (its body's second word): the same over HTTP and beanstalk.
    task: String,
    /// The task's flow-control key (from its body: a beanstalk job does not carry it).
    key: Option<String>,
    /// Over beanstalk (else HTTP).
    beanstalk: bool,
    /// When its reply arrived.
    got: u64,
    /// The end of the interval the task was surely ACTIVE.
    end: u64,
    abandoned: bool,
    /// The finish or delete came after the ttr had passed (404, 409, `NOT_FOUND`).
    late: bool,
}

impl Handout {
    /// The latest instant the task may have left ACTIVE by its ttr, minus the margin.
    fn ttr_end(sent: u64) -> u64 {
        sent + TTR_MS * 1000 - TTR_MARGIN_US
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flow_limits_hold_across_redis_instances() {
    let redis = RedisServer::start();
    check_history(&redis.url(), RATE_PER_S).await;
}

/// The same over a Cluster, where each topic has four partitions (the Cluster's default)
/// in different slots: the limits are counted by each topic's permits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flow_limits_hold_across_redis_instances_over_a_cluster() {
    let cluster = RedisCluster::start_masters_only();
    check_history(&cluster.url(), CLUSTER_RATE_PER_S).await;
}

/// The run and its checks (the module doc) with the instances on the Redis at `url`, the
/// rated topic at `rate` hand-outs a second.
async fn check_history(url: &str, rate: f64) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let mut servers = Vec::new();
    let mut beanstalk_ports = Vec::new();
    for i in 0..INSTANCES {
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let log = dir.path().join(format!("server-{i}.log"));
        servers.push(Server::start_logged(
            &["--redis", url, "--beanstalk-listen", &listen],
            &[],
            &log,
        ));
        beanstalk_ports.push(port);
    }
    let http = reqwest::Client::new();
    set_limits(&http, &servers[0].url, rate).await;
    // Every instance reads the same limits (they live in Redis).
    for s in &servers {
        for topic in TOPICS {
            let url = format!("{}/limits?topic={topic}", s.url);
            let got = envelope(http.get(&url).send().await).await;
            assert_eq!(got["total"], 1, "{url}: {got}");
        }
    }
    let options = ClientOptions::default().request_timeout(REPLY_TIMEOUT);
    let clients: Vec<Client> = servers
        .iter()
        .map(|s| Client::with_options(&s.url, None, options.clone()).expect("a client"))
        .collect();
    for topic in TOPICS {
        let tasks: Vec<NewTask> = (0..TASKS)
            .map(|i| {
                let task = NewTask::new(topic, format!("t-{i}"))
                    .ttr_ms(TTR_MS)
                    .max_retries(MaxRetries::Unlimited);
                // The body is the topic (a beanstalk job's reply names no tube), the task's
                // name (a beanstalk job id is not the task's id), then the key.
                if topic == KEYED_TOPIC {
                    let key = format!("m-{}", i % KEYS);
                    task.body(format!("{topic} t-{i} {key}")).key(key)
                } else {
                    task.body(format!("{topic} t-{i}"))
                }
            })
            .collect();
        for chunk in tasks.chunks(100) {
            for item in clients[0].add_batch(chunk).await.expect("add a batch") {
                assert!(item.result.is_ok(), "{item:?}");
            }
        }
    }

    let stop = Arc::new(AtomicBool::new(false));
    // Set just before the last instance is killed: its consumers' failures are expected.
    let killed = Arc::new(AtomicBool::new(false));
    let alive = Arc::new(AtomicBool::new(false));
    let gone_if = |instance: usize| {
        Arc::clone(if instance == INSTANCES - 1 {
            &killed
        } else {
            &alive
        })
    };
    // The holds and abandons vary from run to run; the timing does anyway.
    let seed = now_us();
    let mut consumers = Vec::new();
    for n in 0..HTTP_CONSUMERS {
        let client = clients[n % INSTANCES].clone();
        // Every topic has consumers on every instance.
        let topic = TOPICS[(n / INSTANCES) % TOPICS.len()];
        let (stop, gone, rng) = (
            Arc::clone(&stop),
            gone_if(n % INSTANCES),
            Rng(seed ^ n as u64),
        );
        consumers.push(tokio::spawn(http_consumer(client, topic, rng, stop, gone)));
    }
    for n in 0..BEANSTALK_CONSUMERS {
        let port = beanstalk_ports[n % INSTANCES];
        let (stop, gone) = (Arc::clone(&stop), gone_if(n % INSTANCES));
        let rng = Rng(seed ^ (100 + n) as u64);
        consumers.push(tokio::spawn(beanstalk_consumer(port, rng, stop, gone)));
    }
    tokio::time::sleep(RUN / 2).await;
    killed.store(true, Ordering::SeqCst);
    let killed_at = now_us();
    servers[INSTANCES - 1].kill9();
    tokio::time::sleep(RUN / 2).await;
    stop.store(true, Ordering::SeqCst);
    let mut handouts = Vec::new();
    for c in consumers {
        handouts.extend(c.await.expect("a consumer panicked"));
    }

    let of = |topic: &str| -> Vec<Handout> {
        handouts
            .iter()
            .filter(|h| h.topic == topic)
            .cloned()
            .collect()
    };
    let (active, rated, keyed) = (of(ACTIVE_TOPIC), of(RATE_TOPIC), of(KEYED_TOPIC));
    let count = |hs: &[Handout], f: fn(&Handout) -> bool| hs.iter().filter(|h| f(h)).count();
    // Nothing but a ttr running out gives a task back here, so a task handed out again, over
    // either protocol, is a ttr expiry seen redelivered.
    let redelivered = |hs: &[Handout]| {
        let mut tasks: Vec<&str> = hs.iter().map(|h| h.task.as_str()).collect();
        let all = tasks.len();
        tasks.sort_unstable();
        tasks.dedup();
        all - tasks.len()
    };
    for (topic, hs) in [
        (ACTIVE_TOPIC, &active),
        (RATE_TOPIC, &rated),
        (KEYED_TOPIC, &keyed),
    ] {
        eprintln!(
            "{topic}: {} hand-outs ({} over beanstalk), {} abandoned, {} finished late, {} redeliveries",
            hs.len(),
            count(hs, |h| h.beanstalk),
            count(hs, |h| h.abandoned),
            count(hs, |h| h.late),
            redelivered(hs),
        );
    }

    // The limits themselves.
    let peak = max_overlap(&active);
    eprintln!(
        "{ACTIVE_TOPIC}: at most {} recorded ACTIVE intervals overlap (max_active {MAX_ACTIVE})",
        peak.count
    );
    // Both limits are checked before either fails, so a failure shows both.
    let mut broken = Vec::new();
    if peak.count > MAX_ACTIVE {
        broken.push(format!(
            "{} tasks of {ACTIVE_TOPIC} were ACTIVE at once at {} µs (max_active {MAX_ACTIVE}); \
             their recorded intervals (µs): {:?}",
            peak.count, peak.at, peak.intervals
        ));
    }
    let worst = worst_window(&rated, rate);
    eprintln!(
        "{RATE_TOPIC}: the fullest window against its bound: {} hand-outs in {:.3} s, bound {:.1} \
         (rate {rate}/s, burst {BURST}, slack {RATE_SLACK_S} s); it needs a slack of {:.0} ms",
        worst.count,
        worst.seconds,
        worst.bound,
        ((worst.count as f64 - BURST as f64) / rate - worst.seconds).max(0.0) * 1000.0
    );
    if worst.count as f64 > worst.bound {
        broken.push(format!(
            "{} hand-outs of {RATE_TOPIC} within {:.3} s (from {} µs): more than rate \
             {rate}/s × ({:.3} s + slack {RATE_SLACK_S} s) + burst {BURST} = {:.1}",
            worst.count, worst.seconds, worst.from, worst.seconds, worst.bound
        ));
    }
    let mut busiest_key = 0;
    for k in 0..KEYS {
        let key = format!("m-{k}");
        let of_key: Vec<Handout> = keyed
            .iter()
            .filter(|h| h.key.as_deref() == Some(key.as_str()))
            .cloned()
            .collect();
        let peak = max_overlap(&of_key);
        busiest_key = busiest_key.max(peak.count);
        if peak.count > PER_KEY {
            broken.push(format!(
                "{} tasks of key {key} of {KEYED_TOPIC} were ACTIVE at once at {} µs \
                 (max_active_per_key {PER_KEY}); their recorded intervals (µs): {:?}",
                peak.count, peak.at, peak.intervals
            ));
        }
    }
    eprintln!(
        "{KEYED_TOPIC}: at most {busiest_key} recorded ACTIVE intervals of one key overlap \
         (max_active_per_key {PER_KEY})"
    );
    assert!(broken.is_empty(), "{}", broken.join("\n"));

    // The two instances left went on after the kill.
    let after = handouts.iter().filter(|h| h.got > killed_at).count();
    eprintln!("{after} hand-outs after the last instance was SIGKILLed");
    assert!(after >= 100, "only {after} hand-outs after the kill");

    // Enough went through for the checks to mean something.
    for (topic, hs) in [
        (ACTIVE_TOPIC, &active),
        (RATE_TOPIC, &rated),
        (KEYED_TOPIC, &keyed),
    ] {
        assert!(hs.len() >= 100, "{topic}: only {} hand-outs", hs.len());
        assert!(
            count(hs, |h| h.beanstalk) >= 5,
            "{topic}: only {} hand-outs over beanstalk",
            count(hs, |h| h.beanstalk)
        );
        assert!(
            count(hs, |h| h.abandoned) >= HTTP_CONSUMERS / TOPICS.len(),
            "{topic}: each HTTP consumer abandons its first task"
        );
        let again = redelivered(hs);
        assert!(
            again >= 3,
            "{topic}: only {again} ttr expiries were seen redelivered"
        );
    }
    assert!(
        peak.count >= 2 && busiest_key >= 2,
        "the consumers of {ACTIVE_TOPIC} or of one key of {KEYED_TOPIC} never held tasks at \
         the same time"
    );
}

/// `POST /limits` of both topics.
async fn set_limits(http: &reqwest::Client, url: &str, rate: f64) {
    for body in [
        json!({"topic": ACTIVE_TOPIC, "max_active": MAX_ACTIVE}),
        json!({"topic": RATE_TOPIC, "rate_per_s": rate, "burst": BURST}),
        json!({"topic": KEYED_TOPIC, "max_active_per_key": PER_KEY}),
    ] {
        let reply = http.post(format!("{url}/limits")).json(&body).send().await;
        envelope(reply).await;
    }
}

/// The `data` of a 200 envelope.
async fn envelope(reply: reqwest::Result<reqwest::Response>) -> Value {
    let reply = reply.expect("an HTTP reply");
    let status = reply.status();
    let body: Value = reply.json().await.expect("a JSON envelope");
    assert_eq!(status, 200, "{body}");
    body["data"].clone()
}

/// The task's name and key its body names after its topic (see the adds).
fn task_and_key(body: &str) -> (String, Option<String>) {
    let mut words = body.split(' ').skip(1);
    let task = words.next().unwrap_or_default().to_owned();
    (task, words.next().map(str::to_owned))
}

/// A consumer over HTTP: pops one task of `topic`, holds it a little and finishes it, or now
/// and then abandons it to its ttr, until `stop`, or until its instance is `gone` (then a
/// failed call ends it).
async fn http_consumer(
    client: Client,
    topic: &str,
    mut rng: Rng,
    stop: Arc<AtomicBool>,
    gone: Arc<AtomicBool>,
) -> Vec<Handout> {
    let mut seen = Vec::new();
    let options = PopOptions::default().timeout_ms(POP_TIMEOUT_MS);
    while !stop.load(Ordering::SeqCst) {
        let sent = now_us();
        let got = match client.pop(topic, options).await {
            Ok(got) => got,
            Err(_) if gone.load(Ordering::SeqCst) => break,
            Err(e) => panic!("pop of {topic}: {e}"),
        };
        let arrived = now_us();
        for d in got {
            let (task, key) = task_and_key(&d.body);
            let mut h = Handout {
                topic: d.topic.clone(),
                task,
                key,
                beanstalk: false,
                got: arrived,
                end: Handout::ttr_end(sent),
                // Each consumer's first task too, so every run has its ttr expiries (and
                // the limited topic's slots are held by them for a while at the start).
                abandoned: seen.is_empty() || rng.below(ABANDON_ONE_IN) == 0,
                late: false,
            };
            if !h.abandoned {
                tokio::time::sleep(Duration::from_millis(5 + rng.below(50))).await;
                let finishing = now_us();
                match client.finish(&d.topic, &d.id, Some(&d.receipt)).await {
                    Ok(()) => h.end = h.end.min(finishing),
                    // Held past its ttr (a slow turn of this busy machine): handed out again.
                    Err(e) if matches!(e.status(), Some(404 | 409)) => {
                        h.late = true;
                        h.end = h.end.min(finishing);
                    }
                    // Its instance was killed: the finish may or may not have been done, so the
                    // task was surely ACTIVE only until it was sent.
                    Err(_) if gone.load(Ordering::SeqCst) => h.end = h.end.min(finishing),
                    Err(e) => panic!("finish of {}/{}: {e}", d.topic, d.id),
                }
            }
            seen.push(h);
        }
    }
    seen
}

/// A consumer over beanstalk watching every tube: reserves with a timeout, holds the job a
/// little and deletes it, until `stop`, or until its instance is `gone` (then a failed
/// exchange ends it).
async fn beanstalk_consumer(
    port: u16,
    mut rng: Rng,
    stop: Arc<AtomicBool>,
    gone: Arc<AtomicBool>,
) -> Vec<Handout> {
    let stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect to the beanstalk port");
    let mut conn = BufStream::new(stream);
    for (command, want) in [
        (format!("watch {ACTIVE_TOPIC}"), "WATCHING 2"),
        (format!("watch {RATE_TOPIC}"), "WATCHING 3"),
        (format!("watch {KEYED_TOPIC}"), "WATCHING 4"),
        ("ignore default".to_owned(), "WATCHING 3"),
    ] {
        let reply = request(&mut conn, &command).await.expect("a reply");
        assert_eq!(reply.0, want, "{command}");
    }
    let mut seen = Vec::new();
    let timeout_s = POP_TIMEOUT_MS / 1000;
    let failed = |command: &str, e: String| {
        assert!(gone.load(Ordering::SeqCst), "beanstalk {command:?}: {e}");
    };
    while !stop.load(Ordering::SeqCst) {
        let sent = now_us();
        let reserve = format!("reserve-with-timeout {timeout_s}");
        let (line, body) = match request(&mut conn, &reserve).await {
            Ok(reply) => reply,
            Err(e) => {
                failed(&reserve, e);
                break;
            }
        };
        let arrived = now_us();
        if line == "TIMED_OUT" {
            continue;
        }
        let id = line
            .strip_prefix("RESERVED ")
            .and_then(|rest| rest.split(' ').next())
            .unwrap_or_else(|| panic!("reserve answered {line:?}"))
            .to_owned();
        // The tasks' body is their topic (a job's reply names no tube), then their name and key.
        let body = String::from_utf8(body).expect("a text body");
        let topic = body.split(' ').next().unwrap_or_default().to_owned();
        let (task, key) = task_and_key(&body);
        let mut h = Handout {
            topic,
            task,
            key,
            beanstalk: true,
            got: arrived,
            end: Handout::ttr_end(sent),
            abandoned: false,
            late: false,
        };
        tokio::time::sleep(Duration::from_millis(5 + rng.below(50))).await;
        let deleting = now_us();
        let delete = format!("delete {id}");
        match request(&mut conn, &delete).await.map(|(reply, _)| reply) {
            Ok(reply) if reply == "DELETED" => h.end = h.end.min(deleting),
            // Held past its ttr: handed out again.
            Ok(reply) if reply == "NOT_FOUND" => {
                h.late = true;
                h.end = h.end.min(deleting);
            }
            Ok(other) => panic!("{delete} answered {other:?}"),
            // Its instance was killed: the delete may or may not have been done, so the job
            // was surely ACTIVE only until it was sent.
            Err(e) => {
                failed(&delete, e);
                h.end = h.end.min(deleting);
                seen.push(h);
                break;
            }
        }
        seen.push(h);
    }
    seen
}

/// Sends one beanstalk command and reads its reply line, and the data of a `RESERVED`; an
/// error or a closed connection is reported, a hang panics.
async fn request(
    conn: &mut BufStream<TcpStream>,
    command: &str,
) -> Result<(String, Vec<u8>), String> {
    let exchange = async {
        conn.write_all(format!("{command}\r\n").as_bytes()).await?;
        conn.flush().await?;
        let mut line = String::new();
        if conn.read_line(&mut line).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let line = line.trim_end().to_owned();
        let mut data = Vec::new();
        if let Some(len) = line
            .strip_prefix("RESERVED ")
            .and_then(|rest| rest.rsplit(' ').next()?.parse::<usize>().ok())
        {
            data = vec![0; len + 2];
            conn.read_exact(&mut data).await?;
            data.truncate(len);
        }
        std::io::Result::Ok((line, data))
    };
    match tokio::time::timeout(REPLY_TIMEOUT, exchange).await {
        Ok(reply) => reply.map_err(|e| e.to_string()),
        Err(_) => panic!("beanstalk {command:?}: no reply within {REPLY_TIMEOUT:?}"),
    }
}

/// The most intervals that overlap at one instant, where, and which.
struct Overlap {
    count: usize,
    at: u64,
    intervals: Vec<(u64, u64)>,
}

/// Sweeps the ACTIVE intervals `[got, end]`; an interval cut to nothing (a reply that came
/// after the ttr's end) says nothing and is left out. At equal instants ends go first: the
/// intervals lie strictly inside the true ones, so touching ones did not overlap.
fn max_overlap(hs: &[Handout]) -> Overlap {
    let intervals: Vec<(u64, u64)> = hs
        .iter()
        .filter(|h| h.end > h.got)
        .map(|h| (h.got, h.end))
        .collect();
    let mut events: Vec<(u64, i32)> = intervals
        .iter()
        .flat_map(|&(start, end)| [(start, 1), (end, -1)])
        .collect();
    events.sort_unstable();
    let (mut now, mut best) = (
        0i32,
        Overlap {
            count: 0,
            at: 0,
            intervals: Vec::new(),
        },
    );
    for (at, step) in events {
        now += step;
        if now as usize > best.count {
            best.count = now as usize;
            best.at = at;
        }
    }
    best.intervals = intervals
        .into_iter()
        .filter(|&(start, end)| start <= best.at && best.at < end)
        .collect();
    best
}

/// The window of hand-outs that comes closest to (or goes furthest past) the rate's bound.
struct Window {
    count: usize,
    from: u64,
    seconds: f64,
    bound: f64,
}

/// Every window from one hand-out to a later one (the fullest window of any length starts
/// and ends at hand-outs), against `rate × (w + slack) + burst`.
fn worst_window(hs: &[Handout], rate: f64) -> Window {
    let mut times: Vec<u64> = hs.iter().map(|h| h.got).collect();
    times.sort_unstable();
    let mut worst = Window {
        count: 0,
        from: 0,
        seconds: 0.0,
        bound: f64::INFINITY,
    };
    for (i, &from) in times.iter().enumerate() {
        for (j, &to) in times.iter().enumerate().skip(i) {
            let seconds = (to - from) as f64 / 1e6;
            let bound = rate * (seconds + RATE_SLACK_S) + BURST as f64;
            let count = j - i + 1;
            if count as f64 - bound > worst.count as f64 - worst.bound {
                worst = Window {
                    count,
                    from,
                    seconds,
                    bound,
                };
            }
        }
    }
    worst
}
