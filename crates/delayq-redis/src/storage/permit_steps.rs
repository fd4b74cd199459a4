//! The permits of a topic of several partitions when a step of a pop goes missing or comes
//! late (`permits.rs`), on a real redis-server and a manual clock: the test plays the
//! instance that died or stalled by calling the scripts of one step itself, and checks what
//! every other consumer then gets. Each case would fail with its rule removed from the
//! scripts: a grant that frees before its time, a take that outlasts its permit, a touch
//! that does not hold its permit longer, an ACTIVE task without a permit, a hold that only
//! news can lift.

use std::sync::Arc;
use std::time::Duration;

use delayq::{Clock, FlowLimits, ManualClock, NewTask, PopOptions, Queue, StorageContext};
use delayq_testkit::RedisServer;

use super::permits::{GRANT_GRACE_MS, KEY_HOLD_MS};
use super::{InstanceState, RedisStorage};
use crate::keys::partition_of;
use crate::options::RedisOptions;
use crate::scripts::{Reply, SCRIPTS, int};

const T: &str = "wide";
const PARTS: u32 = 4;
const START: u64 = 1_700_000_000_000;
const TTR: u64 = 1_000;

struct Setup {
    _server: RedisServer,
    clock: ManualClock,
    storage: Arc<RedisStorage>,
    queue: Queue,
}

impl Setup {
    async fn new(limits: Option<FlowLimits>) -> Setup {
        let server = RedisServer::start();
        let clock = ManualClock::new(START);
        let ctx = StorageContext::new(Arc::new(clock.clone()));
        let options = RedisOptions::new(server.url()).partitions(PARTS);
        let storage = crate::start(ctx.clone(), options).await.expect("start");
        let queue = Queue::new(storage.clone(), ctx);
        if let Some(l) = limits {
            queue.set_limits(T, l).await.expect("set limits");
        }
        Setup {
            _server: server,
            clock,
            storage,
            queue,
        }
    }

    fn state(&self) -> &Arc<InstanceState> {
        &self.storage.state
    }

    async fn add(&self, id: &str, key: Option<&str>) {
        let mut task = NewTask::new(T, id).ttr_ms(TTR);
        if let Some(k) = key {
            task = task.key(k);
        }
        self.queue.add(task).await.expect("add");
    }

    /// The ids a pop that does not wait gets now.
    async fn pop_now(&self) -> Vec<String> {
        let options = PopOptions::default().count(10).timeout_ms(0);
        let got = self.queue.pop(T, options).await.expect("pop");
        got.into_iter().map(|d| d.id).collect()
    }

    /// `permit_grant` for one candidate, as an instance about to die would ask: whether it
    /// was granted, and the keys it says to hold back.
    async fn grant(&self, receipt: &str, id: &str, key: &str) -> (bool, Vec<String>) {
        let s = self.state();
        let now = s.ctx.clock.now_ms();
        let mut inv = s.permit_invocation(&SCRIPTS.permit_grant, T, now, now);
        inv.arg(GRANT_GRACE_MS)
            .arg("0")
            .arg(1)
            .arg(KEY_HOLD_MS)
            .arg(1)
            .arg(receipt)
            .arg(key)
            .arg(TTR)
            .arg(partition_of(id, PARTS));
        let reply = s.run_permit("granting", &inv, T).await.expect("grant");
        let p = &reply.payload;
        let granted = p.get(2).and_then(int) == Some(1);
        let holds = p
            .get(4..)
            .unwrap_or_default()
            .chunks(3)
            .filter_map(|h| crate::scripts::text(&h[0]))
            .collect();
        (granted, holds)
    }

    /// `flow_take` on the partition of `id`: of `id` with the permit `receipt` lasting until
    /// `until` (`None`: no grant, only holds), holding back `holds`; returns whether the task
    /// was taken.
    async fn take(&self, id: &str, grant: Option<(&str, u64)>, holds: &[&str]) -> bool {
        let s = self.state();
        let p = partition_of(id, PARTS);
        let pk = s.keys.partition(T, p);
        let now = s.ctx.clock.now_ms();
        let mut inv = s.invocation(&SCRIPTS.flow_take, &pk, T, p, now);
        inv.arg(100).arg("0");
        match grant {
            Some((receipt, until)) => inv.arg(1).arg(id).arg(receipt).arg(until),
            None => inv.arg(0),
        };
        inv.arg(holds.len());
        for key in holds {
            inv.arg(*key).arg(now + KEY_HOLD_MS);
        }
        let reply = s.run_one("taking", &inv, T, p).await.expect("take");
        reply.payload.get(2).and_then(int) == Some(1)
    }

    /// Waits (in real time, the promoter works after the clock moved) until `check` holds.
    async fn eventually<F: std::future::Future<Output = bool>>(
        &self,
        what: &str,
        check: impl Fn() -> F,
    ) {
        for _ in 0..200 {
            if check().await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("{what}: not within 5 s");
    }
}

/// An instance granted a permit and died before taking the task: the slot stays held until
/// the task's ttr and the grace would have passed, then frees by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_never_taken_holds_its_slot_for_its_ttr_and_grace_only() {
    let s = Setup::new(Some(FlowLimits::max_active(1))).await;
    s.add("a", None).await;
    let (granted, _) = s.grant("000000000000dead", "a", "").await;
    assert!(granted);
    assert!(
        s.pop_now().await.is_empty(),
        "the lost grant holds the slot"
    );
    s.clock.advance(TTR + GRANT_GRACE_MS - 1);
    assert!(s.pop_now().await.is_empty(), "until its time passes");
    s.clock.advance(1);
    assert_eq!(s.pop_now().await, ["a"]);
}

/// A take that comes so late that the task's ttr would outlast its permit is refused, and
/// the task stays READY for the next pop; one within its permit goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_that_would_outlast_its_permit_is_refused() {
    let s = Setup::new(Some(FlowLimits::max_active(2))).await;
    s.add("a", None).await;
    let now = s.clock.now_ms();
    assert!(
        !s.take("a", Some(("0000000000000001", now + TTR - 1)), &[])
            .await
    );
    assert_eq!(
        s.queue.get(T, "a").await.unwrap().state,
        delayq::State::Ready
    );
    assert!(
        s.take("a", Some(("0000000000000002", now + TTR)), &[])
            .await
    );
    let a = s.queue.get(T, "a").await.unwrap();
    assert_eq!(a.state, delayq::State::Active);
}

/// A touched task keeps its slot past its first ttr (its permit is held longer first); its
/// finish frees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_touch_holds_the_permit_as_long_as_the_task() {
    let s = Setup::new(Some(FlowLimits::max_active(1))).await;
    s.add("a", None).await;
    s.add("b", None).await;
    let got = s
        .queue
        .pop(T, PopOptions::default().timeout_ms(0))
        .await
        .unwrap();
    let first = &got[0];
    s.clock.advance(TTR - 100);
    let deadline = s
        .queue
        .touch(T, &first.id, Some(&first.receipt))
        .await
        .expect("touch");
    assert_eq!(deadline, s.clock.now_ms() + TTR);
    s.clock.advance(500);
    assert!(
        s.pop_now().await.is_empty(),
        "past its first ttr, the touched task still holds the slot"
    );
    s.queue
        .finish(T, &first.id, Some(&first.receipt))
        .await
        .unwrap();
    assert_eq!(s.pop_now().await.len(), 1);
}

/// Every way a task leaves ACTIVE gives its slot back: cancel and delete here (finish,
/// release, bury and the ttr are conformance cases). A reserve-job holds a permit like a
/// pop, whatever the limits say.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_delete_and_reserve_job_keep_the_count() {
    let s = Setup::new(Some(FlowLimits::max_active(1))).await;
    for id in ["a", "b", "c", "d", "e"] {
        s.add(id, None).await;
    }
    let first = s.pop_now().await;
    assert_eq!(first.len(), 1);
    s.queue.cancel(T, &first[0]).await.unwrap();
    let second = s.pop_now().await;
    assert_eq!(second.len(), 1, "a cancel frees the slot");
    s.queue.delete(T, &second[0]).await.unwrap();
    let third = s.pop_now().await;
    assert_eq!(third.len(), 1, "a delete frees the slot");
    let rest: Vec<&str> = ["a", "b", "c", "d", "e"]
        .into_iter()
        .filter(|id| ![&first[0], &second[0], &third[0]].contains(&&id.to_string()))
        .collect();
    let taken = s.queue.take(T, rest[0]).await.expect("reserve-job");
    s.queue.finish(T, &third[0], None).await.unwrap();
    assert!(
        s.pop_now().await.is_empty(),
        "the task taken by id holds the slot"
    );
    s.queue
        .finish(T, &taken.id, Some(&taken.receipt))
        .await
        .unwrap();
    assert_eq!(s.pop_now().await.len(), 1);
}

/// Limits set on a topic whose tasks are ACTIVE already count those tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_set_over_active_tasks_count_them() {
    let s = Setup::new(None).await;
    for id in ["a", "b", "c"] {
        s.add(id, None).await;
    }
    let options = PopOptions::default().count(2).timeout_ms(0);
    let held = s.queue.pop(T, options).await.unwrap();
    assert_eq!(held.len(), 2);
    s.queue
        .set_limits(T, FlowLimits::max_active(2))
        .await
        .unwrap();
    assert!(s.pop_now().await.is_empty(), "two ACTIVE already");
    s.queue
        .finish(T, &held[0].id, Some(&held[0].receipt))
        .await
        .unwrap();
    assert_eq!(s.pop_now().await.len(), 1);
}

/// A key the permits refused is held back in its partition; if the news that it has room
/// again never comes (the instance that freed the permit died), the partition lets it go by
/// itself once the hold's time passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_key_goes_again_by_itself_when_its_news_is_lost() {
    let s = Setup::new(Some(FlowLimits::default().with_max_active_per_key(1))).await;
    // Two tasks of one key in two partitions.
    let ids: Vec<String> = (0..100)
        .map(|i| format!("k-{i}"))
        .filter(|id| partition_of(id, PARTS) < 2)
        .collect();
    let a = ids.iter().find(|id| partition_of(id, PARTS) == 0).unwrap();
    let b = ids.iter().find(|id| partition_of(id, PARTS) == 1).unwrap();
    s.add(a, Some("m")).await;
    s.add(b, Some("m")).await;
    // A permit of key m, as one held by a consumer, then a refusal of b's grant.
    let (granted, _) = s.grant("00000000000000aa", a, "m").await;
    assert!(granted);
    let (granted, holds) = s.grant("00000000000000bb", b, "m").await;
    assert_eq!((granted, holds), (false, vec!["m".to_owned()]));
    assert!(!s.take(b, None, &["m"]).await);
    // b waits in its partition (a stays READY in its own: no pop has asked for it yet).
    assert_eq!(s.queue.stats(T).await.unwrap().held_back.key, 1);
    // The permit frees (its holder finished) but the news of it is lost: the script runs,
    // its reply is dropped.
    let st = s.state();
    let now = st.ctx.clock.now_ms();
    let mut inv = st.permit_invocation(&SCRIPTS.permit_release, T, now, now);
    inv.arg(0).arg(0).arg(1).arg("00000000000000aa");
    let _: redis::Value = inv
        .invoke_async(&mut st.redis.conn())
        .await
        .expect("release");
    let got = s.pop_now().await;
    assert_eq!(got, std::slice::from_ref(a), "a was never held back");
    s.queue.finish(T, a, None).await.unwrap();
    assert!(s.pop_now().await.is_empty(), "b is still held back");
    s.clock.advance(KEY_HOLD_MS);
    s.eventually("the hold ends by itself", || async {
        s.queue.stats(T).await.unwrap().held_back.key == 0
    })
    .await;
    assert_eq!(s.pop_now().await, std::slice::from_ref(b));
}

/// A plain pop script on a partition whose limits are topic-wide hands nothing out (only a
/// grant does), so an instance that does not know of the permits cannot pass a limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_with_topic_wide_limits_hands_nothing_out_without_a_grant() {
    let s = Setup::new(Some(FlowLimits::max_active(5))).await;
    s.add("a", None).await;
    let st = s.state();
    let p = partition_of("a", PARTS);
    let pk = st.keys.partition(T, p);
    let now = st.ctx.clock.now_ms();
    let mut inv = st.invocation(&SCRIPTS.pop, &pk, T, p, now);
    inv.arg(5).arg("0").arg("000000000000").arg(100);
    let value = inv.invoke_async(&mut st.redis.conn()).await.unwrap();
    let reply = Reply::parse(value, "popping").unwrap();
    assert_eq!(reply.payload.first().and_then(int), Some(0));
    assert_eq!(s.pop_now().await, ["a"], "a grant does");
}
