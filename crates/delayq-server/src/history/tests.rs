//! Tests of the history: sampling, series, instances, bounds. Time is given explicitly.

use std::time::Duration;

use super::*;

fn act(added: u64, fired_at_1ms: u64, finished: u64, failed: u64) -> TopicActivity {
    // Fires all at <= 1 ms: bucket 1 and up of the cumulative histogram.
    let mut lat = vec![fired_at_1ms; LATENESS_BUCKETS];
    lat[0] = 0;
    TopicActivity::from_parts(added, finished, failed, 0, lat)
}

fn topic(name: &str, a: TopicActivity) -> (String, TopicActivity) {
    (name.to_owned(), a)
}

const T0: u64 = 1_800_000_000_000;

#[test]
fn covered_table() {
    let table = [
        (0, 1_000, 5_000, 1_000),
        (4_000, 1_000, 4_500, 500),
        (4_000, 1_000, 4_000, 1),
        (60_000, 60_000, 90_000, 30_000),
    ];
    for (start, step, end, want) in table {
        assert_eq!(covered_ms(start, step, end), want, "{start} {step} {end}");
    }
}

#[test]
fn coarser_step_table() {
    let table = [
        (1_000, 0, 1_000),
        (1_000, 1, 1_000),
        (1_000, 1_000, 1_000),
        (1_000, 1_001, 2_000),
        (1_000, 10_000, 10_000),
        (60_000, 10_000, 60_000),
        (60_000, 90_000, 120_000),
        (1_000, u64::MAX, 3_600_000),
        (60_000, 7_200_000, 3_600_000),
    ];
    for (ring, asked, want) in table {
        assert_eq!(
            coarser_step(ring, asked),
            want,
            "ring {ring}, asked {asked}"
        );
    }
}

#[test]
fn coarser_series_sum_counts_and_histograms() {
    let h = History::new();
    h.start("local".into(), T0);
    // T0 is a whole 10 s: seconds T0..T0+20 s, 1 add each; fires at <= 1 ms in the first
    // 10 s, one at +Inf in the second.
    h.record_own(T0, &[]);
    for i in 1..=20u64 {
        let late = if i > 10 { 10 } else { i };
        let mut lat = vec![late; LATENESS_BUCKETS];
        lat[0] = 0;
        let mut a = TopicActivity::from_parts(i, 0, 0, 0, lat);
        if i > 10 {
            *a.lateness_cumulative.last_mut().unwrap() = late + 1;
            a.fired = late + 1;
        }
        h.record_own(T0 + i * 1_000, &[topic("a", a)]);
    }
    assert_eq!(T0 % 10_000, 0);
    let s = h.series_with_step(None, 10_000);
    assert_eq!(s.step_ms, 10_000);
    // The hour kept (seconds T0 - 3 580 s ..= T0 + 19 s) starts on a whole 10 s here.
    assert_eq!(s.added.len(), 360);
    assert_eq!(s.start_ms, T0 - 3_580_000);
    let n = s.added.len();
    // [T0, T0 + 10 s) and [T0 + 10 s, T0 + 20 s): one add a second.
    assert_eq!(&s.added[n - 2..], &[1.0, 1.0]);
    assert_eq!(s.lateness_p99_ms[n - 2], Some(1));
    assert_eq!(s.lateness_p99_ms[n - 1], Some(5_000));
    assert_eq!(s.lateness_p50_ms[n - 1], Some(5_000), "its only fire");
    assert_eq!(s.lateness_p50_ms[n - 3], None, "nothing fired");
    // Asking the ring's own step is `series`.
    assert_eq!(h.series_with_step(None, 1), h.series(None));
}

#[test]
fn own_samples_become_per_second_rates() {
    let h = History::new();
    h.start("local".into(), T0);
    h.record_own(T0, &[topic("a", act(0, 0, 0, 0))]);
    // Second 1: a adds 10, fires 4; second 2: b appears with 3 adds, a finishes 2.
    h.record_own(T0 + 1_000, &[topic("a", act(10, 4, 0, 0))]);
    h.record_own(
        T0 + 2_000,
        &[topic("a", act(10, 4, 2, 1)), topic("b", act(3, 0, 0, 0))],
    );
    let s = h.series(None);
    assert_eq!(s.step_ms, TOTAL_STEP_MS);
    assert_eq!(s.added.len(), TOTAL_BUCKETS);
    assert_eq!(s.end_ms, T0 + 2_000);
    let n = s.added.len();
    assert_eq!(&s.added[n - 2..], &[10.0, 3.0]);
    assert_eq!(&s.fired[n - 2..], &[4.0, 0.0]);
    assert_eq!(&s.finished[n - 2..], &[0.0, 2.0]);
    assert_eq!(&s.failed[n - 2..], &[0.0, 1.0]);
    assert_eq!(&s.lateness_p99_ms[n - 2..], &[Some(1), None]);
    assert_eq!(s.start_ms + (n as u64 - 1) * s.step_ms, T0 + 1_000);

    let a = h.series(Some("a"));
    assert_eq!(a.step_ms, TOPIC_STEP_MS);
    assert_eq!(a.added.len(), TOPIC_BUCKETS);
    // T0 is 20 s into its minute; 2.5 s of it are covered... the rates are over the covered part.
    let last = a.added.len() - 1;
    let minute_start = a.start_ms + last as u64 * TOPIC_STEP_MS;
    let covered = (T0 + 2_000 - minute_start) as f64 / 1_000.0;
    assert!(
        (a.added[last] - 10.0 / covered).abs() < 1e-9,
        "{}",
        a.added[last]
    );
    assert_eq!(a.lateness_p50_ms[last], Some(1));
    assert_eq!(h.topics(), ["a", "b"]);
    // An unknown topic: zeros over the same window, no lateness.
    let none = h.series(Some("nope"));
    assert_eq!(none.start_ms, a.start_ms);
    assert!(none.added.iter().all(|&r| r == 0.0));
    assert!(none.lateness_p99_ms.iter().all(Option::is_none));

    let inst = h.instances();
    assert_eq!(inst.len(), 1);
    assert!(inst[0].this && inst[0].alive);
    assert_eq!(inst[0].totals.added, 13);
    assert_eq!(inst[0].rates.window_ms, 2_000);
    assert!((inst[0].rates.added - 6.5).abs() < 1e-9);
}

#[test]
fn a_restart_of_the_counters_is_not_negative() {
    let h = History::new();
    h.start("local".into(), T0);
    h.record_own(T0, &[topic("a", act(100, 0, 0, 0))]);
    h.record_own(T0 + 1_000, &[topic("a", act(2, 0, 0, 0))]);
    let s = h.series(None);
    assert_eq!(*s.added.last().unwrap(), 2.0);
}

#[test]
fn memory_stays_bounded_and_quiet_topics_are_dropped() {
    let h = History::new();
    h.start("local".into(), T0);
    let topics = 1_000;
    let names: Vec<String> = (0..topics).map(|t| format!("t{t:04}")).collect();
    let mut now = T0;
    // Every topic is active in the first minute only, one topic always (one add a second).
    // The first two minutes are sampled each second, then two hours every 10 s.
    let mut s = 0u64;
    while s < 7_200 {
        let act_now: Vec<(String, TopicActivity)> = names
            .iter()
            .enumerate()
            .map(|(t, name)| topic(name, act(if t == 0 { s } else { s.min(60) }, 0, 0, 0)))
            .collect();
        h.record_own(now, &act_now);
        if s == 120 {
            let bytes = h.ring_bytes();
            assert_eq!(bytes, TOTAL_BUCKETS * 68 + topics * TOPIC_BUCKETS * 68);
            assert!(bytes < 5_000_000, "{bytes} bytes for {topics} topics");
        }
        let step = if s < 120 { 1 } else { 10 };
        s += step;
        now += step * 1_000;
    }
    // After an hour without activity only the busy topic keeps a ring.
    assert_eq!(h.topics(), ["t0000"]);
    assert_eq!(h.ring_bytes(), (TOTAL_BUCKETS + TOPIC_BUCKETS) * 68);
    let s = h.series(None);
    assert_eq!(s.added.len(), TOTAL_BUCKETS);
    let adds: f64 = s.added.iter().sum();
    assert!(
        (3_590.0..=3_600.0).contains(&adds),
        "one add a second over the hour: {adds}"
    );
}

fn entry(at: u64, started: u64, topics: &[(String, TopicActivity)], secs: &[(u64, u64)]) -> Entry {
    let secs = secs.iter().map(|&(sec, added)| {
        let mut d = Delta::default();
        d.counts[ADDED] = added;
        (sec, d)
    });
    Entry::new(at, started, topics, secs, &[])
}

/// Two instances started together: whichever reads the other first, the early adds of the
/// one that started a moment earlier are counted, even when its entry says nothing is new
/// any more (it published twice before being read).
#[test]
fn a_peer_started_just_before_us_counts_from_zero() {
    let h = History::new();
    h.start("me".into(), T0);
    h.record_own(T0, &[]);
    h.merge_peer(
        "peer",
        &entry(
            T0 + 10_000,
            T0 - 6,
            &[topic("orders", act(3, 0, 0, 0))],
            &[],
        ),
    );
    h.record_own(T0 + 11_000, &[]);
    // Each bucket's rate times the time it covers (the newest up to the series' end).
    let s = h.series(Some("orders"));
    let adds: f64 = s
        .added
        .iter()
        .enumerate()
        .map(|(i, rate)| {
            let start = s.start_ms + i as u64 * s.step_ms;
            rate * s.end_ms.saturating_sub(start).clamp(1, s.step_ms) as f64 / 1_000.0
        })
        .sum();
    assert!(
        (adds - 3.0).abs() < 1e-6,
        "the peer's 3 adds: {adds} in {s:?}"
    );
}

#[test]
fn other_instances_are_summed_and_listed() {
    let h = History::new();
    h.start("me".into(), T0);
    h.record_own(T0, &[]);
    h.record_own(T0 + 1_000, &[topic("a", act(5, 0, 0, 0))]);
    // A peer that started before us: its totals so far are a baseline; its seconds are news.
    h.merge_peer(
        "peer",
        &entry(
            T0 + 1_000,
            T0 - 60_000,
            &[topic("a", act(100, 0, 0, 0))],
            &[(T0, 7)],
        ),
    );
    // Its next entry: 6 more adds in topic a, in the second of T0 + 1 s.
    h.record_own(T0 + 2_000, &[topic("a", act(5, 0, 0, 0))]);
    h.merge_peer(
        "peer",
        &entry(
            T0 + 2_000,
            T0 - 60_000,
            &[topic("a", act(106, 0, 0, 0))],
            &[(T0, 7), (T0 + 1_000, 6)],
        ),
    );
    // The same entry again adds nothing.
    h.merge_peer(
        "peer",
        &entry(
            T0 + 2_000,
            T0 - 60_000,
            &[topic("a", act(106, 0, 0, 0))],
            &[(T0, 7), (T0 + 1_000, 6)],
        ),
    );
    let s = h.series(None);
    let n = s.added.len();
    // Second T0: our 5 + the peer's 7; second T0+1s: the peer's 6 (ours was 0).
    assert_eq!(&s.added[n - 2..], &[12.0, 6.0]);
    let a = h.series(Some("a"));
    let minute_adds: f64 = a.added.iter().sum();
    assert!(minute_adds > 0.0);
    let inst = h.instances();
    let ids: Vec<&str> = inst.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(ids, ["me", "peer"]);
    assert!(inst[0].this && !inst[1].this);
    assert!(inst[1].alive);
    assert_eq!(inst[1].totals.added, 106);
    assert_eq!(inst[0].totals.added, 5);

    // Not heard of for a while: shown as gone; after an hour: forgotten.
    h.record_own(T0 + 2_000 + ALIVE_WITHIN_MS + 1, &[]);
    assert!(!h.instances()[1].alive);
    h.record_own(T0 + 2_000 + FORGET_AFTER_MS + 1, &[]);
    h.inner.lock().forget_gone_peers();
    assert_eq!(h.instances().len(), 1);
}

#[test]
fn a_peer_that_started_after_us_counts_from_zero_and_a_restart_too() {
    let h = History::new();
    h.start("me".into(), T0);
    h.record_own(T0, &[]);
    h.record_own(T0 + 1_000, &[]);
    h.merge_peer(
        "p",
        &entry(T0 + 1_000, T0 + 500, &[topic("a", act(4, 0, 0, 0))], &[]),
    );
    h.merge_peer(
        "p",
        &entry(T0 + 1_500, T0 + 1_200, &[topic("a", act(1, 0, 0, 0))], &[]),
    );
    let a = h.series(Some("a"));
    assert_eq!(a.added.iter().filter(|&&r| r > 0.0).count(), 1);
    let p = h.instances().into_iter().find(|i| i.id == "p").unwrap();
    assert_eq!(p.totals.added, 1);
    assert_eq!(p.started_ms, T0 + 1_200);
    // 4 + 1 adds in topic a's minute.
    let ring_adds = h.inner.lock().topics["a"]
        .get((T0 + 1_000) / TOPIC_STEP_MS)
        .unwrap()
        .counts[ADDED];
    assert_eq!(ring_adds, 5);
}

/// Waits (real time, generously bounded) until `check` holds.
async fn wait_for(what: &str, check: impl Fn() -> bool) {
    let began = std::time::Instant::now();
    while !check() {
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "waited for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The sampler over a real in-memory queue on a manual clock: every second the clock moves,
/// the queue's activity lands in that second's bucket, under the local instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sampler_reads_the_queue_every_second() {
    use delayq::{ManualClock, NewTask, StorageContext};

    let clock = ManualClock::new(T0 + 300);
    let queue = Queue::memory_with(StorageContext::new(Arc::new(clock.clone())));
    let h = History::new();
    let sampler = h.spawn_sampler(queue.clone());
    wait_for("the first sample", || h.series(None).end_ms == T0 + 300).await;
    for second in 1..=3u64 {
        for i in 0..second {
            queue
                .add(NewTask::new("t", format!("{second}-{i}")).delay_ms(60_000))
                .await
                .unwrap();
        }
        // Just after the next whole second: the sampler wakes and reads.
        clock.set(T0 + second * 1_000 + 1);
        wait_for("the sample", || {
            h.series(None).end_ms == T0 + second * 1_000 + 1
        })
        .await;
    }
    let s = h.series(None);
    let n = s.added.len();
    assert_eq!(&s.added[n - 3..], &[1.0, 2.0, 3.0]);
    let inst = h.instances();
    assert_eq!(inst.len(), 1);
    assert_eq!(inst[0].id, LOCAL_INSTANCE);
    assert_eq!(inst[0].totals.added, 6);
    assert_eq!(h.topics(), ["t"]);
    queue.shutdown().await.unwrap();
    sampler.abort();
}

#[test]
fn a_peer_first_seen_brings_what_it_says_is_new() {
    let h = History::new();
    h.start("me".into(), T0);
    h.record_own(T0 + 1_000, &[]);
    // It started before us and did 100 adds; 4 of them since its previous entry.
    let mut recent = Delta::default();
    recent.counts[ADDED] = 4;
    let e = Entry::new(
        T0 + 1_000,
        T0 - 60_000,
        &[topic("a", act(100, 0, 0, 0))],
        std::iter::empty(),
        &[("a".to_owned(), recent)],
    );
    h.merge_peer("p", &e);
    let minute = (T0 + 1_000) / TOPIC_STEP_MS;
    assert_eq!(
        h.inner.lock().topics["a"].get(minute).unwrap().counts[ADDED],
        4
    );
    // Seen again: the difference of the cumulative counts, not `recent` again.
    let e = Entry::new(
        T0 + 6_000,
        T0 - 60_000,
        &[topic("a", act(102, 0, 0, 0))],
        std::iter::empty(),
        &[],
    );
    h.merge_peer("p", &e);
    assert_eq!(
        h.inner.lock().topics["a"].get(minute).unwrap().counts[ADDED],
        6
    );
}
