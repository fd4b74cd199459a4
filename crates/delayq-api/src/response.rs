//! The `data` of the answers other than task views: add results, the results of acks, the
//! counters of `/stats` and `/topics`, and health.

use std::collections::BTreeMap;

use delayq_core::{AddOutcome, HeldBack, State, TopicStats};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::state;
use crate::task::TaskDelivery;

/// The result of a single add.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AddData {
    /// The topic.
    pub topic: String,
    /// The id.
    pub id: String,
    /// `added`, `replaced` or `existed` (a `keep` of an existing task).
    #[schema(example = "added")]
    pub outcome: AddOutcome,
    /// Whether the task existed before this add.
    pub existed: bool,
}

impl AddData {
    /// The result of adding (topic, id) with `outcome`.
    pub fn new(topic: String, id: String, outcome: AddOutcome) -> Self {
        AddData {
            topic,
            id,
            outcome,
            existed: !matches!(outcome, AddOutcome::Added),
        }
    }
}

/// The result of one task of a batch add.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BatchItem {
    /// The task's id.
    pub id: String,
    /// The task's topic.
    pub topic: String,
    /// 0 if added, else the HTTP status this task alone would have got.
    pub code: u16,
    /// `ok`, or what went wrong.
    pub message: String,
    /// `added`, `replaced` or `existed`; `null` on failure.
    pub outcome: Option<AddOutcome>,
}

/// The `data` of `POST /add`: [`AddData`] for one task, a list of [`BatchItem`] for a batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum AddResponse {
    /// One task.
    One(AddData),
    /// A batch: one result per task, in order.
    Batch(Vec<BatchItem>),
}

/// The result of one task of a batch finish.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FinishItem {
    /// The task's topic.
    pub topic: String,
    /// The task's id.
    pub id: String,
    /// 0 if finished, else the HTTP status this task alone would have got (404 unknown, 409
    /// not ACTIVE or a stale receipt, 400 invalid).
    pub code: u16,
    /// `ok`, or what went wrong.
    pub message: String,
}

/// The `data` of a batch `POST /finish`: one result per task, in the order given. (A single
/// finish answers `null`.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FinishBatchData {
    /// The results, in the order of the request's `tasks`.
    pub items: Vec<FinishItem>,
}

/// The `data` of `POST /pop`: one task (or `null`) without `count`, a list with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum PopData {
    /// With `count`: the tasks taken, maybe none.
    Many(Vec<TaskDelivery>),
    /// Without `count`: the task taken.
    One(Box<TaskDelivery>),
}

impl PopData {
    /// The tasks, however they were written.
    pub fn into_vec(self) -> Vec<TaskDelivery> {
        match self {
            PopData::Many(list) => list,
            PopData::One(one) => vec![*one],
        }
    }
}

/// The result of `POST /release`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ReleaseData {
    /// The new state's code: 0 delayed, 1 ready, 5 dead.
    #[serde(with = "state::code")]
    #[schema(value_type = u8)]
    pub state: State,
    /// The new state's name.
    #[serde(with = "state::name")]
    #[schema(value_type = String)]
    pub state_name: State,
}

impl From<State> for ReleaseData {
    fn from(state: State) -> Self {
        ReleaseData {
            state,
            state_name: state,
        }
    }
}

/// The result of `POST /touch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TouchData {
    /// The new ttr deadline, epoch ms.
    pub deadline_ms: u64,
}

/// The result of `POST /requeue`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RequeueData {
    /// How many tasks went from DEAD to READY.
    pub requeued: u64,
}

/// The answer of `POST /pause` and `POST /resume`: the topic's pause as it now stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PauseData {
    /// The topic.
    pub topic: String,
    /// Whether it is paused.
    pub paused: bool,
    /// When the pause ends by itself, epoch ms; null when it lasts until resumed.
    pub paused_until_ms: Option<u64>,
}

/// The counters of one topic: seqdelay's (`ready`, `delayed`, `active`, `finished`,
/// `cancelled`, `total`) and delayq's (`dead`, `next_due_ms`, `paused`, `paused_until_ms`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct StatsView {
    /// Waiting for their due time.
    pub delayed: u64,
    /// Waiting for a consumer.
    pub ready: u64,
    /// Held by consumers.
    pub active: u64,
    /// Out of retries.
    pub dead: u64,
    /// Finished, still retained.
    pub finished: u64,
    /// Cancelled, still retained.
    pub cancelled: u64,
    /// All records.
    pub total: u64,
    /// The earliest due time among delayed tasks, epoch ms.
    pub next_due_ms: Option<u64>,
    /// Whether the topic is paused: it hands nothing out (docs/design.md §2 rule 14).
    #[serde(default)]
    pub paused: bool,
    /// When the pause ends by itself, epoch ms; null while not paused or paused until resumed.
    #[serde(default)]
    pub paused_until_ms: Option<u64>,
    /// Tasks whose expiry passed before they were handed out (gone DEAD or dropped),
    /// cumulative (docs/flow-control.md).
    #[serde(default)]
    pub expired: u64,
    /// READY tasks a pop could not take now because of the topic's flow limits, by the
    /// limit that holds them (docs/flow-control.md); absent when none are held back.
    #[serde(default, skip_serializing_if = "HeldBack::is_none")]
    pub held_back: HeldBack,
    /// The push figures of a topic with a push target on the answering instance; absent
    /// otherwise (docs/push.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push: Option<crate::push::PushFigures>,
}

impl StatsView {
    /// The view of `stats` as they stand at `now`: a pause whose end has passed shows as over.
    pub fn at(stats: TopicStats, now: u64) -> Self {
        StatsView::from(TopicStats {
            pause: stats.pause.at(now),
            ..stats
        })
    }
}

impl From<TopicStats> for StatsView {
    fn from(s: TopicStats) -> Self {
        StatsView {
            delayed: s.delayed,
            ready: s.ready,
            active: s.active,
            dead: s.dead,
            finished: s.finished,
            cancelled: s.cancelled,
            total: s.total,
            next_due_ms: s.next_due_ms,
            paused: s.pause.paused,
            paused_until_ms: s.pause.until_ms.filter(|_| s.pause.paused),
            expired: s.expired,
            held_back: s.held_back,
            push: None,
        }
    }
}

/// The `data` of `GET /stats?topic=T`: seqdelay's `{topic, stats}` and, beside them, the same
/// counters at the top level (delayq's shape).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TopicStatsData {
    /// The topic.
    pub topic: String,
    /// Its counters (seqdelay's place for them).
    pub stats: StatsView,
    /// The same counters, at the top level.
    #[serde(flatten)]
    pub counters: StatsView,
}

impl TopicStatsData {
    /// The answer for `topic` with `stats`.
    pub fn new(topic: String, stats: StatsView) -> Self {
        TopicStatsData {
            topic,
            stats,
            counters: stats,
        }
    }
}

/// The `data` of `GET /stats` without a topic: seqdelay's `{"topics": {name: counters}}` and,
/// beside it, each topic's counters under its own name (delayq's shape). A topic named
/// `topics` appears only inside `topics`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AllStats {
    /// The counters by topic name (seqdelay's place for them).
    pub topics: BTreeMap<String, StatsView>,
    /// The same counters under each topic's name, at the top level.
    #[serde(flatten)]
    pub by_name: BTreeMap<String, StatsView>,
}

impl AllStats {
    /// The answer for these topics.
    pub fn new(topics: BTreeMap<String, StatsView>) -> Self {
        let mut by_name = topics.clone();
        // The key belongs to seqdelay's map; a topic of that name would collide with it.
        by_name.remove("topics");
        AllStats { topics, by_name }
    }
}

/// The `data` of `GET /stats`: of one topic when `topic` is given, else of all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum StatsData {
    /// `GET /stats?topic=T` (boxed: one topic's counters twice outweigh the map of `All`).
    Topic(Box<TopicStatsData>),
    /// `GET /stats`.
    All(AllStats),
}

/// One topic and its counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TopicEntry {
    /// The topic.
    pub name: String,
    /// Its counters.
    pub stats: StatsView,
}

/// The result of `GET /topics`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TopicList {
    /// The topics with records, by name.
    pub topics: Vec<TopicEntry>,
    /// How many.
    pub total: u64,
}

/// No result: the `data` of a success that returns nothing is `null`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
pub struct NoData;

/// The result of `GET /healthz` and `GET /readyz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `alive` or `ready`.
    pub status: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn counters(ready: u64) -> StatsView {
        StatsView {
            ready,
            total: ready,
            ..StatsView::default()
        }
    }

    #[test]
    fn stats_carry_both_shapes() {
        let one = serde_json::to_value(TopicStatsData::new("t".into(), counters(2))).unwrap();
        assert_eq!(one["topic"], json!("t"));
        assert_eq!(one["stats"]["ready"], json!(2));
        assert_eq!(one["ready"], json!(2));

        let all = AllStats::new(BTreeMap::from([
            ("a".to_owned(), counters(1)),
            ("topics".to_owned(), counters(3)),
        ]));
        let v = serde_json::to_value(&all).unwrap();
        assert_eq!(v["topics"]["a"]["ready"], json!(1));
        assert_eq!(v["topics"]["topics"]["ready"], json!(3));
        assert_eq!(v["a"]["ready"], json!(1));
        let back: AllStats = serde_json::from_value(v).unwrap();
        assert_eq!(back.topics, all.topics);
    }

    #[test]
    fn add_answers_read_back() {
        for data in [
            AddResponse::One(AddData::new("t".into(), "a".into(), AddOutcome::Existed)),
            AddResponse::Batch(vec![BatchItem {
                id: "b".into(),
                topic: "t".into(),
                code: 409,
                message: "exists".into(),
                outcome: None,
            }]),
        ] {
            let text = serde_json::to_string(&data).unwrap();
            assert_eq!(serde_json::from_str::<AddResponse>(&text).unwrap(), data);
        }
        let finished = FinishBatchData {
            items: vec![FinishItem {
                topic: "t".into(),
                id: "a".into(),
                code: 409,
                message: "stale receipt".into(),
            }],
        };
        let v = serde_json::to_value(&finished).unwrap();
        assert_eq!(
            v,
            json!({"items": [{"topic": "t", "id": "a", "code": 409, "message": "stale receipt"}]})
        );
        assert_eq!(
            serde_json::from_value::<FinishBatchData>(v).unwrap(),
            finished
        );
        let v = serde_json::to_value(ReleaseData::from(State::Dead)).unwrap();
        assert_eq!(v, json!({"state": 5, "state_name": "dead"}));
    }
}
