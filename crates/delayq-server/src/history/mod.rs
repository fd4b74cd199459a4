//! The activity history behind the dashboard's charts: tasks added, fired, finished and
//! failed per second, and fire lateness (p50/p99), over the last hour, for every topic and
//! for all topics together; and in Redis mode, every instance of the deployment.
//!
//! Why here: the library counts (cheaply, cumulatively: [`delayq::Queue::activity`]); turning
//! counts into rates over time needs a clock and memory, which belong to a running server,
//! not to every user of the library.
//!
//! How: a sampler task ([`History::spawn_sampler`], started by `delayq serve`) reads the
//! queue's activity every second and adds the difference since the last reading to bounded
//! rings (`ring.rs`):
//!
//! | ring               | step  | buckets | covers | bytes                  |
//! |--------------------|-------|---------|--------|------------------------|
//! | all topics         | 1 s   | 3 600   | 1 h    | 244 800                |
//! | per topic          | 60 s  | 60      | 1 h    | 4 080 (+ ~500 of state) |
//!
//! A bucket holds the four counters and the 13 lateness buckets as `u32` (68 bytes), so the
//! percentiles of any bucket are computed when asked ([`History::series`]). A topic's ring is
//! made at its first activity and dropped after an hour without any: 1 000 active topics
//! cost about 5 MB, an idle one nothing. docs/operations.md has the budget.
//!
//! Redis mode (`publish.rs`): every [`PUBLISH_EVERY_MS`] each instance writes its cumulative
//! activity and its last seconds into the meta store (one `HSET`) and reads every instance's
//! entry (one `HGETALL`); the others' differences are added into the same rings, so the
//! series are the sum over the deployment, and [`History::instances`] lists every instance.
//! An instance whose entry is older than [`ALIVE_WITHIN_MS`] shows as gone; entries older
//! than an hour are removed by whichever instance sees them. The newest few seconds of the
//! summed series may still grow when the others' next entries arrive.

mod publish;
mod ring;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use delayq::metrics::{LATENESS_BUCKETS, lateness_quantile};
use delayq::{Queue, TopicActivity};
use parking_lot::Mutex;
use tokio::task::JoinHandle;

use self::publish::{Entry, NAMESPACE, SECONDS_KEPT};
use self::ring::{ADDED, Bucket, COUNTERS, Delta, FAILED, FINISHED, FIRED, Ring};

/// Step of the all-topics ring.
pub const TOTAL_STEP_MS: u64 = 1_000;
/// Buckets of the all-topics ring (an hour of seconds).
pub const TOTAL_BUCKETS: usize = 3_600;
/// Step of a topic's ring.
pub const TOPIC_STEP_MS: u64 = 60_000;
/// Buckets of a topic's ring (an hour of minutes).
pub const TOPIC_BUCKETS: usize = 60;
/// How often the sampler reads the queue's activity.
pub const SAMPLE_EVERY_MS: u64 = 1_000;
/// How often an instance publishes its entry and reads the others' (Redis mode): two Redis
/// commands per period, 0.4 a second (docs/operations.md).
pub const PUBLISH_EVERY_MS: u64 = 5_000;
/// An instance whose newest entry is older than this shows as gone.
pub const ALIVE_WITHIN_MS: u64 = 3 * PUBLISH_EVERY_MS + 2_000;
/// An instance's entry older than this is removed (and its history forgotten).
pub const FORGET_AFTER_MS: u64 = 3_600_000;
/// A peer first seen that started at most this long before this process counts from zero,
/// like one that started after it: instances of a deployment usually start together, and
/// which of two reads the other first must not decide whether the early activity of one is
/// counted (its "new since the previous entry" is gone once it has published twice). Its
/// activity is at most this old, so crediting it to the minute it is seen is close enough.
pub const FIRST_SIGHT_GRACE_MS: u64 = 30_000;
/// The window of [`InstanceView::rates`].
pub const RATE_WINDOW_MS: u64 = 10_000;

/// The id this process shows under when its storage is its own (memory, embedded).
pub const LOCAL_INSTANCE: &str = "local";

/// Rates and lateness over time, for one topic or all: bucket `i` covers
/// `[start_ms + i * step_ms, start_ms + (i + 1) * step_ms)`. The last bucket may be partly
/// covered (up to `end_ms`); its rates are over the covered part.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct Series {
    /// The start of the first bucket, epoch ms.
    pub start_ms: u64,
    /// The length of a bucket, ms.
    pub step_ms: u64,
    /// The time of the newest sample, epoch ms (0 before the first one).
    pub end_ms: u64,
    /// Tasks added per second, per bucket.
    pub added: Vec<f64>,
    /// Tasks fired (DELAYED → READY by due) per second, per bucket.
    pub fired: Vec<f64>,
    /// Tasks finished per second, per bucket.
    pub finished: Vec<f64>,
    /// Failed attempts (releases, buries, ttr expiries) per second, per bucket.
    pub failed: Vec<f64>,
    /// Median fire lateness (ms, the upper bound of its histogram bucket), per bucket;
    /// `None` where nothing fired.
    pub lateness_p50_ms: Vec<Option<u64>>,
    /// 99th percentile of fire lateness, like `lateness_p50_ms`.
    pub lateness_p99_ms: Vec<Option<u64>>,
}

/// Per-second rates over the last [`RATE_WINDOW_MS`] (or what is known of it).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct Rates {
    /// Tasks added per second.
    pub added: f64,
    /// Tasks fired per second.
    pub fired: f64,
    /// Tasks finished per second.
    pub finished: f64,
    /// Failed attempts per second.
    pub failed: f64,
    /// The window the rates are over, ms (0: not known yet).
    pub window_ms: u64,
}

/// One instance of the deployment as the dashboard shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct InstanceView {
    /// The instance's id ([`LOCAL_INSTANCE`] when the storage is this process's own).
    pub id: String,
    /// Whether it is this process.
    pub this: bool,
    /// When it was last heard of (its clock, epoch ms).
    pub last_seen_ms: u64,
    /// Whether it was heard of within [`ALIVE_WITHIN_MS`].
    pub alive: bool,
    /// When it started counting, epoch ms.
    pub started_ms: u64,
    /// Its activity over all topics since it started (cumulative).
    pub totals: TopicActivity,
    /// Its rates over the last seconds.
    pub rates: Rates,
}

/// The history of one server. Cheap to clone; clones share it.
#[derive(Debug, Clone, Default)]
pub struct History {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug)]
struct Inner {
    total: Ring,
    topics: HashMap<String, Ring>,
    /// The time of the newest sample (0: none yet).
    last_sample_ms: u64,
    /// Bucket numbers end at the middle of the newest sampled interval.
    last_mid_ms: u64,
    /// This process's id and when it started counting.
    this: String,
    started_ms: u64,
    /// This process's own last reading, per topic.
    own_last: HashMap<String, TopicActivity>,
    /// This process's own totals per second (not summed with others), for publishing.
    own_secs: VecDeque<(u64, Delta)>,
    /// This process's own reading as of its last published entry.
    own_published: HashMap<String, TopicActivity>,
    /// Every instance known, this one included.
    instances: BTreeMap<String, Peer>,
}

/// What is known of one instance.
#[derive(Debug, Default)]
struct Peer {
    last_seen_ms: u64,
    started_ms: u64,
    totals: TopicActivity,
    /// Its last cumulative reading per topic (other instances only).
    topics: HashMap<String, TopicActivity>,
    /// The newest of its seconds already added into the total ring.
    merged_to_sec: Option<u64>,
    /// (time, totals) readings of the last [`RATE_WINDOW_MS`] or so.
    readings: VecDeque<(u64, TopicActivity)>,
}

impl Default for Inner {
    fn default() -> Self {
        Inner {
            total: Ring::new(TOTAL_STEP_MS, TOTAL_BUCKETS),
            topics: HashMap::new(),
            last_sample_ms: 0,
            last_mid_ms: 0,
            this: LOCAL_INSTANCE.to_owned(),
            started_ms: 0,
            own_last: HashMap::new(),
            own_secs: VecDeque::new(),
            own_published: HashMap::new(),
            instances: BTreeMap::new(),
        }
    }
}

impl History {
    /// An empty history; nothing is recorded until a sampler runs.
    pub fn new() -> Self {
        History::default()
    }

    /// The series of `topic`, or of all topics together (`None`): per-second rates and
    /// lateness over the last hour. All topics have [`TOTAL_STEP_MS`] steps, one topic
    /// [`TOPIC_STEP_MS`]; a topic without activity in the last hour has all zeros.
    pub fn series(&self, topic: Option<&str>) -> Series {
        self.series_with_step(topic, 0)
    }

    /// Like [`History::series`] with coarser buckets of `step_ms` (rounded up to a multiple
    /// of the ring's step, at most an hour): e.g. the hour of all topics in 360 buckets of
    /// 10 s for a chart. Counts and lateness histograms are summed over the ring's buckets,
    /// so the rates and percentiles are those of the coarser buckets. The first bucket may
    /// be partly before the hour kept; its rates are over the part kept.
    pub fn series_with_step(&self, topic: Option<&str>, step_ms: u64) -> Series {
        let inner = self.inner.lock();
        let (ring, ring_step, len) = match topic {
            None => (Some(&inner.total), TOTAL_STEP_MS, TOTAL_BUCKETS),
            Some(t) => (inner.topics.get(t), TOPIC_STEP_MS, TOPIC_BUCKETS),
        };
        let step = coarser_step(ring_step, step_ms);
        series_of(
            ring,
            (ring_step, len),
            step,
            inner.last_mid_ms,
            inner.last_sample_ms,
        )
    }

    /// The topics with activity in the last hour, by name.
    pub fn topics(&self) -> Vec<String> {
        let mut names: Vec<String> = self.inner.lock().topics.keys().cloned().collect();
        names.sort();
        names
    }

    /// Every instance known: this one, and in Redis mode the others that published in the
    /// last hour, by id.
    pub fn instances(&self) -> Vec<InstanceView> {
        let inner = self.inner.lock();
        let now = inner.last_sample_ms;
        inner
            .instances
            .iter()
            .map(|(id, p)| InstanceView {
                id: id.clone(),
                this: *id == inner.this,
                last_seen_ms: p.last_seen_ms,
                alive: now.saturating_sub(p.last_seen_ms) <= ALIVE_WITHIN_MS,
                started_ms: p.started_ms,
                totals: p.totals.clone(),
                rates: rates_of(&p.readings),
            })
            .collect()
    }

    /// Starts the sampler of `queue` (see the module doc); it ends when the queue shuts down
    /// or the handle is aborted.
    pub fn spawn_sampler(&self, queue: Queue) -> JoinHandle<()> {
        let history = self.clone();
        tokio::spawn(async move { history.run(queue).await })
    }

    async fn run(self, queue: Queue) {
        let instance = queue.storage().instance();
        let shared = instance.is_some();
        let now = queue.context().clock.now_ms();
        self.start(instance.unwrap_or_else(|| LOCAL_INSTANCE.to_owned()), now);
        let clock = Arc::clone(&queue.context().clock);
        let mut last_publish: Option<u64> = None;
        let mut failures: u32 = 0;
        self.record_own(now, &queue.activity());
        loop {
            // Sampling just after each whole second of the queue's clock puts the middle of
            // every sampled interval near the middle of a second: each second's bucket gets
            // one sample, whatever the jitter of the wake-ups.
            let next = (clock.now_ms() / SAMPLE_EVERY_MS + 1) * SAMPLE_EVERY_MS;
            clock.sleep_until(next).await;
            if queue.is_closing() {
                return;
            }
            let now = clock.now_ms();
            self.record_own(now, &queue.activity());
            if !shared || last_publish.is_some_and(|t| now < t + PUBLISH_EVERY_MS) {
                continue;
            }
            last_publish = Some(now);
            match self.exchange(&queue, now).await {
                Ok(()) => failures = 0,
                Err(e) => {
                    failures = failures.saturating_add(1);
                    if failures == 1 || failures.is_multiple_of(60) {
                        tracing::warn!(error = %e, failures, "publishing this instance's activity failed");
                    }
                }
            }
        }
    }

    /// Names this process and the time it starts counting.
    fn start(&self, id: String, now_ms: u64) {
        let mut inner = self.inner.lock();
        inner.this = id;
        inner.started_ms = now_ms;
    }

    /// Adds this process's own reading at `now_ms` (cumulative, per topic).
    fn record_own(&self, now_ms: u64, activity: &[(String, TopicActivity)]) {
        let mut inner = self.inner.lock();
        let inner = &mut *inner;
        let prev = inner.last_sample_ms;
        // The interval since the last reading is credited to the bucket of its middle.
        let mid = if prev == 0 || now_ms <= prev {
            now_ms.saturating_sub(SAMPLE_EVERY_MS / 2)
        } else {
            prev + (now_ms - prev) / 2
        };
        let mut sum = Delta::default();
        let mut totals = TopicActivity::default();
        for (topic, after) in activity {
            let d = Delta::between(inner.own_last.get(topic), after);
            if !d.is_zero() {
                inner
                    .topics
                    .entry(topic.clone())
                    .or_insert_with(|| Ring::new(TOPIC_STEP_MS, TOPIC_BUCKETS))
                    .add(mid, &d);
                sum.add(&d);
            }
            add_activity(&mut totals, after);
        }
        inner.own_last = activity.iter().cloned().collect();
        // The total ring moves every second, active or not.
        inner.total.add(mid, &sum);
        inner.last_sample_ms = inner.last_sample_ms.max(now_ms);
        inner.last_mid_ms = inner.last_mid_ms.max(mid);
        let sec = mid - mid % TOTAL_STEP_MS;
        match inner.own_secs.back_mut() {
            Some((s, d)) if *s == sec => d.add(&sum),
            _ => inner.own_secs.push_back((sec, sum)),
        }
        while inner
            .own_secs
            .front()
            .is_some_and(|(s, _)| s + SECONDS_KEPT * 1_000 <= sec)
        {
            inner.own_secs.pop_front();
        }
        let this = inner.this.clone();
        let started = inner.started_ms;
        let me = inner.instances.entry(this).or_default();
        me.last_seen_ms = now_ms;
        me.started_ms = started;
        me.totals = totals.clone();
        push_reading(&mut me.readings, now_ms, totals);
        inner.forget_quiet_topics();
    }

    /// Publishes this instance's entry, reads every instance's, adds the others' news and
    /// removes entries older than [`FORGET_AFTER_MS`].
    async fn exchange(&self, queue: &Queue, now_ms: u64) -> delayq::Result<()> {
        let (id, entry, published) = {
            let inner = self.inner.lock();
            // A topic this instance never did anything with is left out (a topic's entry is
            // made on first use, which may have failed).
            let own: Vec<(String, TopicActivity)> = inner
                .own_last
                .iter()
                .filter(|(_, v)| v.added + v.fired + v.finished + v.failed + v.dead > 0)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let recent: Vec<(String, Delta)> = own
                .iter()
                .map(|(k, v)| (k.clone(), Delta::between(inner.own_published.get(k), v)))
                .filter(|(_, d)| !d.is_zero())
                .collect();
            // The newest second may still grow (two samples can fall in one second), and a
            // reader takes each second once: only complete seconds are published.
            let open = inner.own_secs.back().map(|(s, _)| *s);
            let secs = inner
                .own_secs
                .iter()
                .filter(|(s, d)| Some(*s) != open && !d.is_zero())
                .cloned();
            (
                inner.this.clone(),
                Entry::new(now_ms, inner.started_ms, &own, secs, &recent),
                own,
            )
        };
        let settings = queue.settings();
        settings.put(NAMESPACE, &id, entry.encode()).await?;
        self.inner.lock().own_published = published.into_iter().collect();
        let all = settings.list(NAMESPACE).await?;
        let mut stale = Vec::new();
        for (key, raw) in &all {
            if *key == id {
                continue;
            }
            match Entry::decode(raw) {
                Some(e) if now_ms.saturating_sub(e.at) > FORGET_AFTER_MS => stale.push(key.clone()),
                Some(e) => self.merge_peer(key, &e),
                None => {
                    tracing::debug!(instance = key, "skipping an entry this version cannot read")
                }
            }
        }
        for key in stale {
            settings.delete(NAMESPACE, &key).await?;
            self.inner.lock().instances.remove(&key);
        }
        self.inner.lock().forget_gone_peers();
        Ok(())
    }

    /// Adds what another instance's entry says happened since its last entry seen.
    fn merge_peer(&self, id: &str, e: &Entry) {
        let mut inner = self.inner.lock();
        let inner = &mut *inner;
        let known = inner.instances.contains_key(id);
        let our_start = inner.started_ms;
        let peer = inner.instances.entry(id.to_owned()).or_default();
        let mut news: Vec<(String, Delta)> = Vec::new();
        if known && e.at <= peer.last_seen_ms {
            return; // nothing new
        }
        // A peer first seen counts from zero if it started while we were counting (or just
        // before, FIRST_SIGHT_GRACE_MS); otherwise its totals so far are a baseline, and its
        // news are what its entry says is new since its previous one.
        let counts_from_zero = !known && e.started.saturating_add(FIRST_SIGHT_GRACE_MS) > our_start;
        if !known && !counts_from_zero {
            news.extend(e.recent().map(|(t, d)| (t.to_owned(), d)));
        }
        let restarted = known && e.started != peer.started_ms;
        let mut totals = TopicActivity::default();
        let mut now_topics = HashMap::new();
        for (topic, after) in e.activity() {
            let before = if restarted {
                None
            } else {
                peer.topics.get(&topic)
            };
            if known || counts_from_zero {
                let d = Delta::between(before, &after);
                if !d.is_zero() {
                    news.push((topic.clone(), d));
                }
            }
            add_activity(&mut totals, &after);
            now_topics.insert(topic, after);
        }
        peer.topics = now_topics;
        peer.last_seen_ms = e.at;
        peer.started_ms = e.started;
        peer.totals = totals.clone();
        push_reading(&mut peer.readings, e.at, totals);
        let merged_to = if restarted { None } else { peer.merged_to_sec };
        let mut newest = merged_to;
        let seconds: Vec<(u64, Delta)> = e
            .seconds()
            .filter(|(s, _)| merged_to.is_none_or(|m| *s > m))
            .collect();
        for (sec, _) in &seconds {
            newest = Some(newest.map_or(*sec, |n| n.max(*sec)));
        }
        peer.merged_to_sec = newest;
        // The per-topic news is credited to the minute of the entry's time.
        for (topic, d) in news {
            inner
                .topics
                .entry(topic)
                .or_insert_with(|| Ring::new(TOPIC_STEP_MS, TOPIC_BUCKETS))
                .add(e.at, &d);
        }
        for (sec, d) in seconds {
            inner.total.add(sec, &d);
        }
    }

    /// Bytes the rings hold now (for tests and the documented budget).
    pub fn ring_bytes(&self) -> usize {
        let inner = self.inner.lock();
        inner.total.heap_bytes() + inner.topics.values().map(Ring::heap_bytes).sum::<usize>()
    }
}

impl Inner {
    /// Drops the rings of topics with no activity in the last hour.
    fn forget_quiet_topics(&mut self) {
        let Some(newest) = self.total.newest() else {
            return;
        };
        let now_minute = newest * TOTAL_STEP_MS / TOPIC_STEP_MS;
        let oldest_kept = now_minute.saturating_sub(TOPIC_BUCKETS as u64 - 1);
        self.topics
            .retain(|_, ring| !ring.quiet_since(oldest_kept.saturating_sub(1)));
    }

    /// Forgets instances not heard of for [`FORGET_AFTER_MS`] (their entries are gone too).
    fn forget_gone_peers(&mut self) {
        let now = self.last_sample_ms;
        let this = self.this.clone();
        self.instances
            .retain(|id, p| *id == this || now.saturating_sub(p.last_seen_ms) <= FORGET_AFTER_MS);
    }
}

fn add_activity(sum: &mut TopicActivity, a: &TopicActivity) {
    sum.added += a.added;
    sum.fired += a.fired;
    sum.finished += a.finished;
    sum.failed += a.failed;
    sum.dead += a.dead;
    if sum.lateness_cumulative.len() < a.lateness_cumulative.len() {
        sum.lateness_cumulative
            .resize(a.lateness_cumulative.len(), 0);
    }
    for (s, x) in sum
        .lateness_cumulative
        .iter_mut()
        .zip(&a.lateness_cumulative)
    {
        *s += x;
    }
}

/// Keeps the readings of the last [`RATE_WINDOW_MS`], plus the one just before it (so the
/// window is covered).
fn push_reading(readings: &mut VecDeque<(u64, TopicActivity)>, at: u64, totals: TopicActivity) {
    readings.push_back((at, totals));
    while readings.len() > 2 && readings[1].0 + RATE_WINDOW_MS <= at {
        readings.pop_front();
    }
}

/// Rates between the oldest and the newest reading; a restart in between counts from zero.
fn rates_of(readings: &VecDeque<(u64, TopicActivity)>) -> Rates {
    let (Some((t0, a0)), Some((t1, a1))) = (readings.front(), readings.back()) else {
        return Rates::default();
    };
    if t1 <= t0 {
        return Rates::default();
    }
    let d = Delta::between(Some(a0), a1);
    let secs = (t1 - t0) as f64 / 1_000.0;
    Rates {
        added: d.counts[ADDED] as f64 / secs,
        fired: d.counts[FIRED] as f64 / secs,
        finished: d.counts[FINISHED] as f64 / secs,
        failed: d.counts[FAILED] as f64 / secs,
        window_ms: t1 - t0,
    }
}

/// The series of `ring` (or of nothing: zeros) whose buckets are `(ring_step, len)`, over
/// its `len` buckets ending with the bucket of `end_mid_ms`, in output buckets of `step_ms`
/// (a multiple of `ring_step`). Rates are over the part of each output bucket covered by
/// the window and by samples up to `end_ms`.
fn series_of(
    ring: Option<&Ring>,
    (ring_step, len): (u64, usize),
    step_ms: u64,
    end_mid_ms: u64,
    end_ms: u64,
) -> Series {
    let last = end_mid_ms / ring_step;
    let first = last.saturating_sub(len as u64 - 1);
    let group_of = |b: u64| b * ring_step / step_ms;
    let n = (group_of(last) - group_of(first) + 1) as usize;
    let mut s = Series {
        start_ms: group_of(first) * step_ms,
        step_ms,
        end_ms,
        added: Vec::with_capacity(n),
        fired: Vec::with_capacity(n),
        finished: Vec::with_capacity(n),
        failed: Vec::with_capacity(n),
        lateness_p50_ms: Vec::with_capacity(n),
        lateness_p99_ms: Vec::with_capacity(n),
    };
    let empty = Bucket::default();
    let mut counts = [0u64; COUNTERS];
    let mut lateness = [0u64; LATENESS_BUCKETS];
    let mut covered = 0u64;
    for b in first..=last {
        let bucket = ring.and_then(|r| r.get(b)).unwrap_or(&empty);
        for (sum, c) in counts.iter_mut().zip(bucket.counts) {
            *sum += u64::from(c);
        }
        for (sum, c) in lateness.iter_mut().zip(bucket.lateness_counts()) {
            *sum += c;
        }
        covered += covered_ms(b * ring_step, ring_step, end_ms);
        if b == last || group_of(b + 1) != group_of(b) {
            let per_s = |c: usize| counts[c] as f64 * 1_000.0 / covered.max(1) as f64;
            s.added.push(per_s(ADDED));
            s.fired.push(per_s(FIRED));
            s.finished.push(per_s(FINISHED));
            s.failed.push(per_s(FAILED));
            s.lateness_p50_ms.push(lateness_quantile(&lateness, 0.5));
            s.lateness_p99_ms.push(lateness_quantile(&lateness, 0.99));
            counts = [0; COUNTERS];
            lateness = [0; LATENESS_BUCKETS];
            covered = 0;
        }
    }
    s
}

/// The output step for `asked` over a ring of `ring_step`: a multiple of it, at least one,
/// at most an hour's worth; 0 means the ring's own.
fn coarser_step(ring_step: u64, asked: u64) -> u64 {
    let hour = 3_600_000u64.max(ring_step);
    asked
        .div_ceil(ring_step)
        .max(1)
        .saturating_mul(ring_step)
        .min(hour / ring_step * ring_step)
}

/// How much of the bucket `[start, start + step)` is covered by samples up to `end`: the
/// whole step for a past bucket, the part up to `end` for the current one (at least 1 ms).
fn covered_ms(start: u64, step: u64, end: u64) -> u64 {
    end.saturating_sub(start).clamp(1, step)
}

#[cfg(test)]
mod tests;
