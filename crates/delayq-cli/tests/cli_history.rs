//! The real binary under mixed load and SIGKILLs, with every operation recorded and checked
//! (DESIGN §2 rules 1, 3, 4, 7, 8; issue 16 items 1 and 3).
//!
//! Each round, a few HTTP clients add, pop, finish, release, touch, cancel, delete, requeue
//! and get tasks of two topics through a plain HTTP client, and beanstalk clients put,
//! reserve, delete, release and bury jobs of a third (a tube) over the servers' beanstalk
//! ports (the HTTP clients pop, cancel, requeue and read those too), while the test SIGKILLs a server
//! at a random moment (embedded: the one server, `--fsync always`; Redis: one of two
//! `delayq serve --redis` instances over a private redis-server with AOF `appendfsync
//! always`), restarts it, reads back every add of the round that was acknowledged, and runs
//! the history checker of `delayq_testkit::history` over the whole history so far. At the
//! end the load stops, consumers drain the topics, and every acknowledged task must be found
//! finished, cancelled or dead.
//!
//! A beanstalk operation goes into the same history: `put` is an add (its task id, the job
//! id, learnt from the reply), `reserve` a pop (the reply names no due and no receipt: the
//! delivery gets due 0, the put's ttr and a receipt of the client's own), `delete` of a held
//! job a finish, `release` a release with its delay, `bury` a release with no delay asked (it
//! ends the hold; the job is dead until a requeue, beanstalk's kick). A connection that drops
//! gives its jobs back without a word, so every job it held gets a release of unknown outcome.
//!
//! By default each test runs a few rounds (a bounded CI run). `scripts/soak` runs the same
//! tests for minutes: `DELAYQ_SOAK_SECS` sets the duration, `DELAYQ_SOAK_MODE`
//! (`embedded`, `redis`, `both`) the modes, `DELAYQ_SOAK_BIN` the binary (the release build),
//! `DELAYQ_SOAK_SEED` the random choices, `DELAYQ_SOAK_CLOCK_SLACK_MS` how far the server's
//! clock may lag (default 0: none).

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use delayq_testkit::RedisServer;
use delayq_testkit::history::{
    Answer, CheckOptions, Delivery, History, Op, Outcome, Recorder, TaskKey,
};
use support::http_history::{Client, Rng};
use support::{DELAYQ, Server, free_port};
use tempfile::TempDir;

/// The topics of the HTTP adds.
const TOPICS: [&str; 2] = ["hist-a", "hist-b"];
/// The tube of the beanstalk puts (only they add there: their ids are job ids).
const TUBE: &str = "hist-bs";
/// Every topic of the load: HTTP clients pop from all, the drain empties all.
const ALL_TOPICS: [&str; 3] = ["hist-a", "hist-b", TUBE];
/// Concurrent beanstalk clients during a round.
const BEANSTALK_CLIENTS: usize = 2;
/// The ttr of every beanstalk put, in seconds.
const BEANSTALK_TTR_S: u64 = 2;
/// Concurrent clients during a round.
const CLIENTS: usize = 4;
/// The servers' retention of finished and cancelled records.
const RETENTION_MS: u64 = 60_000;
/// Rounds of a bounded (CI) run.
const CI_ROUNDS: usize = 4;
/// How long one request may take before its outcome is unknown.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Embedded,
    Redis,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Embedded => "embedded",
            Mode::Redis => "redis",
        }
    }
}

#[test]
fn embedded_sigkill_rounds_keep_every_promise() {
    run(Mode::Embedded);
}

#[test]
fn redis_sigkill_rounds_keep_every_promise() {
    run(Mode::Redis);
}

/// How long and how to run: a few rounds by default, minutes under `scripts/soak`.
struct Plan {
    soak: Option<Duration>,
    bin: String,
}

impl Plan {
    /// The plan for `mode`, or none when a soak runs only the other mode.
    fn from_env(mode: Mode) -> Option<Plan> {
        let soak = std::env::var("DELAYQ_SOAK_SECS").ok().map(|s| {
            let secs: u64 = s
                .parse()
                .unwrap_or_else(|_| panic!("DELAYQ_SOAK_SECS={s:?} is not a number of seconds"));
            Duration::from_secs(secs)
        });
        if soak.is_some() {
            let modes = std::env::var("DELAYQ_SOAK_MODE").unwrap_or_else(|_| "both".into());
            match modes.as_str() {
                "both" => {}
                m if m == mode.name() => {}
                "embedded" | "redis" => return None,
                other => panic!("DELAYQ_SOAK_MODE={other:?}: expected embedded, redis or both"),
            }
        }
        let bin = std::env::var("DELAYQ_SOAK_BIN").unwrap_or_else(|_| DELAYQ.to_owned());
        Some(Plan { soak, bin })
    }

    fn more_rounds(&self, started: Instant, rounds: usize) -> bool {
        match self.soak {
            Some(limit) => started.elapsed() < limit,
            None => rounds < CI_ROUNDS,
        }
    }
}

fn run(mode: Mode) {
    let Some(plan) = Plan::from_env(mode) else {
        eprintln!("[{}] not in DELAYQ_SOAK_MODE; nothing to do", mode.name());
        return;
    };
    let seed = std::env::var("DELAYQ_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(delayq_testkit::history::now_us);
    eprintln!(
        "[{}] seed {seed} (DELAYQ_SOAK_SEED to repeat the choices)",
        mode.name()
    );
    let mut rng = Rng(seed);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut deployment = Deployment::start(mode, &plan.bin);
    let rec = Arc::new(Recorder::new());
    let urls = Arc::new(deployment.urls());
    let beanstalk_ports = Arc::new(deployment.beanstalk_ports.clone());
    let http = reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .build()
        .expect("an HTTP client");
    // main's SystemClock reads up to 1 ms behind the wall clock (docs/testing.md); a run may
    // allow for that to look for other violations.
    let clock_slack_ms = std::env::var("DELAYQ_SOAK_CLOCK_SLACK_MS")
        .ok()
        .map(|s| {
            s.parse()
                .expect("DELAYQ_SOAK_CLOCK_SLACK_MS is a number of ms")
        })
        .unwrap_or(0);
    let options = CheckOptions {
        retention_ms: RETENTION_MS,
        require_settled: false,
        clock_slack_ms,
    };
    let started = Instant::now();
    let (mut rounds, mut kills) = (0, 0);
    while plan.more_rounds(started, rounds) {
        let round_started = Instant::now();
        let round = Arc::new(Round {
            number: rounds,
            stop: AtomicBool::new(false),
            keys: Mutex::new(Vec::new()),
        });
        let clients: Vec<_> = (0..CLIENTS)
            .map(|n| {
                let mut client = Client {
                    n,
                    http: http.clone(),
                    rec: Arc::clone(&rec),
                    urls: Arc::clone(&urls),
                    rng: Rng(rng.next() ^ n as u64),
                    next_id: 0,
                };
                let round = Arc::clone(&round);
                runtime.spawn(async move { client.load(&round).await })
            })
            .collect();
        let beanstalk: Vec<_> = (0..BEANSTALK_CLIENTS)
            .map(|n| {
                let mut client = Beanstalk {
                    n: 100 + n,
                    rec: Arc::clone(&rec),
                    ports: Arc::clone(&beanstalk_ports),
                    rng: Rng(rng.next() ^ (100 + n) as u64),
                    conn: None,
                    held: Vec::new(),
                    reserves: 0,
                    puts: 0,
                };
                let round = Arc::clone(&round);
                runtime.spawn(async move { client.load(&round).await })
            })
            .collect();
        // Load, then a SIGKILL at a random moment while the clients keep going.
        std::thread::sleep(Duration::from_millis(500 + rng.below(1500)));
        let victim = rng.below(deployment.ports.len() as u64) as usize;
        deployment.kill9(victim);
        kills += 1;
        std::thread::sleep(Duration::from_millis(300));
        round.stop.store(true, Ordering::SeqCst);
        runtime.block_on(async {
            for c in clients {
                c.await.expect("a client task panicked");
            }
            for c in beanstalk {
                c.await.expect("a beanstalk client task panicked");
            }
        });
        deployment.restart(victim);
        // Read back every add of the round (the checker decides what "missing" means).
        let keys = std::mem::take(&mut *round.keys.lock().unwrap_or_else(PoisonError::into_inner));
        let mut reader = Client {
            n: CLIENTS,
            http: http.clone(),
            rec: Arc::clone(&rec),
            urls: Arc::clone(&urls),
            rng: Rng(rng.next()),
            next_id: 0,
        };
        runtime.block_on(async {
            for key in &keys {
                reader.get(key.clone()).await;
            }
        });
        rounds += 1;
        let history = rec.history();
        check(mode, &history, &options);
        let c = history.counts();
        eprintln!(
            "[{}] round {rounds}: {} adds read back; total ops {} (ok {}, failed {}, unknown {}), \
             deliveries {}, kills {kills}, violations 0, round {:.1} s, elapsed {:.0} s",
            mode.name(),
            keys.len(),
            c.total,
            c.ok,
            c.failed,
            c.unknown,
            c.deliveries,
            round_started.elapsed().as_secs_f64(),
            started.elapsed().as_secs_f64()
        );
    }
    // Drain, then every acknowledged task must be settled.
    let mut consumer = Client {
        n: CLIENTS + 1,
        http: http.clone(),
        rec: Arc::clone(&rec),
        urls: Arc::clone(&urls),
        rng: Rng(rng.next()),
        next_id: 0,
    };
    let busy = runtime.block_on(consumer.drain(&ALL_TOPICS));
    if !busy.is_empty() {
        eprintln!(
            "[{}] the topics did not drain (30 s without a delivery); their counters: {busy:?}",
            mode.name()
        );
    }
    let acked: Vec<TaskKey> = rec
        .history()
        .events
        .iter()
        .filter(|e| e.outcome == Outcome::Ok(Answer::Added { existed: false }))
        .filter_map(|e| e.op.key().cloned())
        .collect();
    runtime.block_on(async {
        for key in &acked {
            consumer.get(key.clone()).await;
        }
    });
    let history = rec.history();
    check(
        mode,
        &history,
        &CheckOptions {
            require_settled: true,
            ..options
        },
    );
    assert!(
        busy.is_empty(),
        "[{}] every task read back is settled, yet the counters say some are not: {busy:?}",
        mode.name()
    );
    let c = history.counts();
    let failures = history.failures();
    eprintln!(
        "[{}] failed or unknown, by operation and cause: {failures:#?}",
        mode.name()
    );
    let bs = BeanstalkCounts::of(&history);
    eprintln!(
        "[{}] done: {rounds} rounds, {} operations (ok {}, failed {}, unknown {}), {} deliveries, \
         {kills} kills, {} acknowledged adds all settled, violations 0, {:.0} s; beanstalk: {} \
         operations, {} puts acknowledged, {} reserves delivered, {} deletes, {} releases or \
         buries acknowledged",
        mode.name(),
        c.total,
        c.ok,
        c.failed,
        c.unknown,
        c.deliveries,
        acked.len(),
        started.elapsed().as_secs_f64(),
        bs.ops,
        bs.puts,
        bs.reserved,
        bs.deletes,
        bs.releases,
    );
    // The run must have exercised what it checks, or it proves nothing.
    assert!(rounds >= 1 && kills >= 1);
    assert!(
        acked.len() >= 10,
        "only {} adds were acknowledged",
        acked.len()
    );
    assert!(c.deliveries >= 10, "only {} deliveries", c.deliveries);
    assert!(
        bs.puts >= 5 && bs.reserved >= 1 && bs.deletes >= 1,
        "the beanstalk clients did too little: {} puts, {} reserves, {} deletes",
        bs.puts,
        bs.reserved,
        bs.deletes
    );
}

/// What the beanstalk clients (numbered from 100) did, acknowledged.
struct BeanstalkCounts {
    ops: usize,
    puts: usize,
    reserved: usize,
    deletes: usize,
    releases: usize,
}

impl BeanstalkCounts {
    fn of(history: &History) -> BeanstalkCounts {
        let mine: Vec<_> = history.events.iter().filter(|e| e.client >= 100).collect();
        let ok = |f: &dyn Fn(&Op) -> bool| {
            mine.iter()
                .filter(|e| matches!(e.outcome, Outcome::Ok(_)) && f(&e.op))
                .count()
        };
        BeanstalkCounts {
            ops: mine.len(),
            puts: ok(&|op| matches!(op, Op::Add { .. })),
            reserved: mine
                .iter()
                .filter(
                    |e| matches!(&e.outcome, Outcome::Ok(Answer::Delivered(d)) if !d.is_empty()),
                )
                .count(),
            deletes: ok(&|op| matches!(op, Op::Finish { .. })),
            releases: ok(&|op| matches!(op, Op::Release { .. })),
        }
    }
}

/// Panics with the violations, if any, and the events that show them.
fn check(mode: Mode, history: &History, options: &CheckOptions) {
    let violations = history.check(options);
    if violations.is_empty() {
        return;
    }
    let mut text = format!(
        "[{}] {} violations in a history of {} operations:\n",
        mode.name(),
        violations.len(),
        history.events.len()
    );
    for v in violations.iter().take(20) {
        text.push_str(&v.to_string());
    }
    panic!("{text}");
}

/// The servers under test: one embedded server, or two over one Redis.
struct Deployment {
    mode: Mode,
    bin: String,
    dir: TempDir,
    ports: Vec<u16>,
    beanstalk_ports: Vec<u16>,
    servers: Vec<Option<Server>>,
    redis: Option<RedisServer>,
}

impl Deployment {
    fn start(mode: Mode, bin: &str) -> Deployment {
        let (count, redis) = match mode {
            Mode::Embedded => (1, None),
            Mode::Redis => (2, Some(RedisServer::start_with_aof())),
        };
        let mut d = Deployment {
            mode,
            bin: bin.to_owned(),
            dir: tempfile::tempdir().expect("a temp dir"),
            ports: (0..count).map(|_| free_port()).collect(),
            beanstalk_ports: (0..count).map(|_| free_port()).collect(),
            servers: (0..count).map(|_| None).collect(),
            redis,
        };
        for i in 0..count {
            d.restart(i);
        }
        d
    }

    fn urls(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| format!("http://127.0.0.1:{p}"))
            .collect()
    }

    fn kill9(&mut self, i: usize) {
        if let Some(mut server) = self.servers[i].take() {
            server.kill9();
        }
    }

    fn restart(&mut self, i: usize) {
        let retention = RETENTION_MS.to_string();
        let data = self.dir.path().join("data");
        let mut args = vec![
            "--retention-ms".to_owned(),
            retention,
            "--beanstalk-listen".to_owned(),
            format!("127.0.0.1:{}", self.beanstalk_ports[i]),
        ];
        match self.mode {
            Mode::Embedded => args.extend([
                "--data-dir".to_owned(),
                data.to_string_lossy().into_owned(),
                "--fsync".to_owned(),
                "always".to_owned(),
            ]),
            Mode::Redis => {
                let url = self.redis.as_ref().expect("a redis").url();
                args.extend(["--redis".to_owned(), url]);
            }
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let log = self.dir.path().join(format!("server-{i}.log"));
        self.servers[i] = Some(Server::start_at(&self.bin, self.ports[i], &args, &log));
    }
}

/// What the clients of one round share.
struct Round {
    number: usize,
    stop: AtomicBool,
    /// The tasks added in this round (acknowledged or not), read back at its end.
    keys: Mutex<Vec<TaskKey>>,
}

impl Client {
    /// The mixed load until the round stops.
    async fn load(&mut self, round: &Round) {
        while !round.stop.load(Ordering::SeqCst) {
            let topic = TOPICS[self.rng.below(TOPICS.len() as u64) as usize];
            let roll = self.rng.below(100);
            match roll {
                0..40 => {
                    self.next_id += 1;
                    let id = format!("r{}-c{}-{}", round.number, self.n, self.next_id);
                    let key = TaskKey::new(topic, id);
                    round
                        .keys
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(key.clone());
                    self.add(key).await;
                }
                40..85 => {
                    // Beanstalk's jobs too, now and then (the beanstalk clients reserve most).
                    let topic = if self.rng.below(10) == 0 { TUBE } else { topic };
                    for d in self.pop(topic, None).await {
                        self.handle(d).await;
                    }
                }
                _ => {
                    let key = {
                        let keys = round.keys.lock().unwrap_or_else(PoisonError::into_inner);
                        if keys.is_empty() {
                            continue;
                        }
                        keys[self.rng.below(keys.len() as u64) as usize].clone()
                    };
                    match roll {
                        85..93 => self.cancel(key).await,
                        93..95 => self.delete(key).await,
                        95..97 => self.requeue(key).await,
                        _ => {
                            self.get(key).await;
                        }
                    }
                }
            }
        }
    }

    /// What a consumer does with a delivery: mostly finish, sometimes release, touch, or
    /// abandon it to its ttr.
    async fn handle(&mut self, d: Delivery) {
        tokio::time::sleep(Duration::from_millis(self.rng.below(50))).await;
        match self.rng.below(100) {
            0..60 => self.ack("finish", &d, None).await,
            60..80 => {
                let delay = self.rng.below(500);
                self.ack("release", &d, Some(delay)).await;
            }
            80..88 => {
                self.ack("touch", &d, None).await;
                self.ack("finish", &d, None).await;
            }
            _ => {}
        }
    }
}

/// A beanstalk connection: the stream and what it has read past the last reply.
struct BeanstalkConn {
    stream: tokio::net::TcpStream,
    buf: Vec<u8>,
}

/// Why a beanstalk request got no answer.
enum BeanstalkError {
    /// The connection was refused: nothing was sent.
    Connect(String),
    /// Sent, and then the connection failed or the answer took too long.
    Lost(String),
}

impl BeanstalkError {
    /// The recorded outcome: nothing happened, or it may have.
    fn outcome(self) -> Outcome {
        match self {
            BeanstalkError::Connect(e) => Outcome::Failed(e),
            BeanstalkError::Lost(e) => Outcome::Unknown(e),
        }
    }
}

/// One beanstalk client of the load, on one server's beanstalk port at a time, recording
/// everything it does in the same history as the HTTP clients.
struct Beanstalk {
    n: usize,
    rec: Arc<Recorder>,
    ports: Arc<Vec<u16>>,
    rng: Rng,
    conn: Option<BeanstalkConn>,
    /// The jobs this connection holds, with the receipt the client gave their delivery.
    held: Vec<(TaskKey, String)>,
    reserves: u64,
    puts: u64,
}

impl Beanstalk {
    /// The mixed load until the round stops; then the connection closes.
    async fn load(&mut self, round: &Round) {
        while !round.stop.load(Ordering::SeqCst) {
            if self.rng.below(100) < 40 {
                if let Some(key) = self.put().await {
                    round
                        .keys
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(key);
                }
            } else if let Some((key, receipt)) = self.reserve().await {
                tokio::time::sleep(Duration::from_millis(self.rng.below(50))).await;
                match self.rng.below(100) {
                    0..60 => self.settle(&key, &receipt, "delete", None).await,
                    60..80 => {
                        let delay_s = self.rng.below(2);
                        self.settle(&key, &receipt, "release", Some(delay_s)).await;
                    }
                    80..90 => self.settle(&key, &receipt, "bury", None).await,
                    // Abandoned to its ttr, or to the connection's end.
                    _ => self.held.push((key, receipt)),
                }
            } else {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        self.drop_conn();
    }

    /// Closes the connection: the server gives back the jobs it held, which the history
    /// records as releases of unknown outcome (the client cannot know when or whether).
    fn drop_conn(&mut self) {
        self.conn = None;
        for (key, receipt) in std::mem::take(&mut self.held) {
            let call = self.rec.invoke(
                self.n,
                Op::Release {
                    key,
                    receipt: Some(receipt),
                    delay_ms: Some(0),
                },
            );
            self.rec.complete(
                call,
                Outcome::Unknown("the connection closed; the server gives held jobs back".into()),
            );
        }
    }

    async fn connect(&mut self) -> Result<(), BeanstalkError> {
        if self.conn.is_some() {
            return Ok(());
        }
        let port = self.ports[self.rng.below(self.ports.len() as u64) as usize];
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| BeanstalkError::Connect(format!("connect: {e}")))?;
        self.conn = Some(BeanstalkConn {
            stream,
            buf: Vec::new(),
        });
        for (command, want) in [
            (format!("use {TUBE}"), format!("USING {TUBE}")),
            (format!("watch {TUBE}"), "WATCHING 2".to_owned()),
            ("ignore default".to_owned(), "WATCHING 1".to_owned()),
        ] {
            // Nothing of the queue changes here: a failure is a refused connection.
            match self.request(&command).await {
                Ok((line, _)) if line == want => {}
                Ok((line, _)) => panic!("{command:?} answered {line:?}"),
                Err(BeanstalkError::Connect(e) | BeanstalkError::Lost(e)) => {
                    self.drop_conn();
                    return Err(BeanstalkError::Connect(e));
                }
            }
        }
        Ok(())
    }

    /// Sends one command (line and any body) and reads its reply: the line, and the data of
    /// a `RESERVED`.
    async fn request(&mut self, command: &str) -> Result<(String, Vec<u8>), BeanstalkError> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let conn = self.conn.as_mut().expect("connected");
        let exchange = async {
            conn.stream.write_all(command.as_bytes()).await?;
            conn.stream.write_all(b"\r\n").await?;
            let mut chunk = [0u8; 4096];
            loop {
                if let Some(end) = conn.buf.windows(2).position(|w| w == b"\r\n") {
                    let line = String::from_utf8_lossy(&conn.buf[..end]).into_owned();
                    let data_len = line
                        .strip_prefix("RESERVED ")
                        .and_then(|r| r.rsplit(' ').next()?.parse::<usize>().ok());
                    let need = end + 2 + data_len.map_or(0, |n| n + 2);
                    if conn.buf.len() >= need {
                        let data = conn.buf[end + 2..need.saturating_sub(2).max(end + 2)].to_vec();
                        conn.buf.drain(..need);
                        return Ok((line, data));
                    }
                }
                let n = conn.stream.read(&mut chunk).await?;
                if n == 0 {
                    return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
                }
                conn.buf.extend_from_slice(&chunk[..n]);
            }
        };
        let result = match tokio::time::timeout(REQUEST_TIMEOUT, exchange).await {
            Ok(Ok(reply)) => return Ok(reply),
            Ok(Err(e)) => format!("{e}"),
            Err(_) => "timed out".to_owned(),
        };
        self.drop_conn();
        // The server is down: do not spin.
        tokio::time::sleep(Duration::from_millis(20)).await;
        Err(BeanstalkError::Lost(result))
    }

    /// A put: an add whose id the reply tells.
    async fn put(&mut self) -> Option<TaskKey> {
        self.puts += 1;
        // Mostly ready at once, so that the beanstalk clients reserve them.
        let delay_s = u64::from(self.rng.below(4) == 0);
        let add = |key: TaskKey| Op::Add {
            key,
            delay_ms: Some(delay_s * 1000),
            due_ms: None,
            ttr_ms: Some(BEANSTALK_TTR_S * 1000),
        };
        // Until the reply names the job, the add is recorded under an id of its own (a put
        // whose reply is lost names no task the history can read back).
        let unnamed = TaskKey::new(TUBE, format!("put-{}-{}-unanswered", self.n, self.puts));
        let call = self.rec.invoke(self.n, add(unnamed.clone()));
        if let Err(BeanstalkError::Connect(e) | BeanstalkError::Lost(e)) = self.connect().await {
            self.rec.complete(call, Outcome::Failed(e));
            return None;
        }
        let command = format!("put 0 {delay_s} {BEANSTALK_TTR_S} 1\r\nx");
        match self.request(&command).await {
            Ok((line, _)) => match line.strip_prefix("INSERTED ") {
                Some(id) => {
                    let key = TaskKey::new(TUBE, id);
                    let outcome = Outcome::Ok(Answer::Added { existed: false });
                    self.rec.complete_as(call, add(key.clone()), outcome);
                    Some(key)
                }
                None => {
                    self.rec.complete(call, Outcome::Failed(line));
                    None
                }
            },
            Err(e) => {
                self.rec.complete(call, e.outcome());
                None
            }
        }
    }

    /// A reserve that does not wait: a pop of the tube.
    async fn reserve(&mut self) -> Option<(TaskKey, String)> {
        let call = self.rec.invoke(self.n, Op::Pop { topic: TUBE.into() });
        if let Err(BeanstalkError::Connect(e) | BeanstalkError::Lost(e)) = self.connect().await {
            self.rec.complete(call, Outcome::Failed(e));
            return None;
        }
        match self.request("reserve-with-timeout 0").await {
            Ok((line, _)) => {
                if line == "TIMED_OUT" {
                    self.rec
                        .complete(call, Outcome::Ok(Answer::Delivered(Vec::new())));
                    return None;
                }
                let Some(id) = line
                    .strip_prefix("RESERVED ")
                    .and_then(|r| r.split(' ').next())
                else {
                    self.rec.complete(call, Outcome::Failed(line));
                    return None;
                };
                self.reserves += 1;
                let key = TaskKey::new(TUBE, id);
                let receipt = format!("bs-{}-{}", self.n, self.reserves);
                let delivery = Delivery {
                    key: key.clone(),
                    // beanstalk names no due: the add's delay and the releases bound it.
                    due_ms: 0,
                    ttr_ms: BEANSTALK_TTR_S * 1000,
                    receipt: receipt.clone(),
                    retries: 0,
                };
                self.rec
                    .complete(call, Outcome::Ok(Answer::Delivered(vec![delivery])));
                Some((key, receipt))
            }
            Err(e) => {
                self.rec.complete(call, e.outcome());
                None
            }
        }
    }

    /// `delete` (a finish), `release` with a delay in seconds, or `bury` (a release with no
    /// delay asked: it ends the hold) of a job this connection holds.
    async fn settle(&mut self, key: &TaskKey, receipt: &str, verb: &str, delay_s: Option<u64>) {
        let receipt = Some(receipt.to_owned());
        let (op, command, ok) = match verb {
            "delete" => (
                Op::Finish {
                    key: key.clone(),
                    receipt,
                },
                format!("delete {}", key.id),
                "DELETED",
            ),
            "release" => (
                Op::Release {
                    key: key.clone(),
                    receipt,
                    delay_ms: delay_s.map(|s| s * 1000),
                },
                format!("release {} 0 {}", key.id, delay_s.unwrap_or(0)),
                "RELEASED",
            ),
            _ => (
                Op::Release {
                    key: key.clone(),
                    receipt,
                    delay_ms: None,
                },
                format!("bury {} 0", key.id),
                "BURIED",
            ),
        };
        let call = self.rec.invoke(self.n, op);
        let outcome = match self.request(&command).await {
            Ok((line, _)) if line == ok => Outcome::Ok(Answer::Done),
            Ok((line, _)) => Outcome::Failed(line),
            Err(e) => e.outcome(),
        };
        self.rec.complete(call, outcome);
    }
}
