//! What an instance publishes about itself in Redis mode, and how a reader turns the entries
//! of other instances into deltas.
//!
//! Each instance stores one entry in the meta store (namespace [`NAMESPACE`], key = its
//! instance id, the one its leases and events carry): the time of its clock when it wrote the
//! entry, when it started counting, its cumulative activity per topic, what of it is new since
//! its previous entry (for a reader that has no earlier reading of it), and its own
//! per-second totals of the last [`SECONDS_KEPT`] seconds. Cumulative per-topic counters make
//! a missed reading harmless (the next one covers both); the per-second totals let a reader add
//! another instance's seconds into the right second of its own 1-s ring, so the summed
//! series has no spikes at the publishing period. The entry is JSON: small, and readable with
//! `redis-cli HGET dq:meta:instances <id>` when someone wonders.

use std::collections::BTreeMap;

use delayq::TopicActivity;
use delayq::metrics::LATENESS_BUCKETS;
use serde::{Deserialize, Serialize};

use super::ring::Delta;

/// The meta store namespace of the entries.
pub(crate) const NAMESPACE: &str = "instances";

/// How many seconds of per-second totals an entry carries: more than two publishing periods,
/// so one missed reading loses no second.
pub(crate) const SECONDS_KEPT: u64 = 15;

/// The entry's format version.
const VERSION: u32 = 1;

/// One instance's published entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Entry {
    /// Format version ([`VERSION`]).
    pub v: u32,
    /// The instance's clock (the queue's) when it wrote the entry, epoch ms.
    pub at: u64,
    /// When the instance started counting, epoch ms.
    pub started: u64,
    /// Per topic: `[added, finished, failed, dead, lateness cumulative…]`, cumulative since
    /// `started`.
    pub topics: BTreeMap<String, Vec<u64>>,
    /// Per second with activity: `[second start ms, added, fired, finished, failed, fires
    /// per lateness bucket…]`, the instance's own totals over all topics.
    pub secs: Vec<Vec<u64>>,
    /// Per topic with activity since the instance's previous entry: that activity, `[added,
    /// fired, finished, failed, fires per lateness bucket…]`. A reader that sees this
    /// instance for the first time has no earlier reading to subtract: it takes this.
    #[serde(default)]
    pub recent: BTreeMap<String, Vec<u64>>,
}

impl Entry {
    /// An entry from the instance's state.
    pub fn new(
        at: u64,
        started: u64,
        topics: &[(String, TopicActivity)],
        secs: impl Iterator<Item = (u64, Delta)>,
        recent: &[(String, Delta)],
    ) -> Entry {
        Entry {
            v: VERSION,
            at,
            started,
            topics: topics
                .iter()
                .map(|(name, a)| {
                    let mut v = vec![a.added, a.finished, a.failed, a.dead];
                    v.extend(&a.lateness_cumulative);
                    (name.clone(), v)
                })
                .collect(),
            secs: secs
                .map(|(sec, d)| {
                    let mut v = vec![sec];
                    v.extend(d.to_flat());
                    v
                })
                .collect(),
            recent: recent
                .iter()
                .map(|(name, d)| (name.clone(), d.to_flat()))
                .collect(),
        }
    }

    /// The entry as stored.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("an entry always serializes")
    }

    /// An entry as stored; `None` for anything this version cannot read (a newer format, or
    /// damage), which the reader skips.
    pub fn decode(raw: &[u8]) -> Option<Entry> {
        let e: Entry = serde_json::from_slice(raw).ok()?;
        (e.v == VERSION).then_some(e)
    }

    /// The cumulative activity per topic; topics whose list is malformed are left out.
    pub fn activity(&self) -> Vec<(String, TopicActivity)> {
        self.topics
            .iter()
            .filter(|(_, v)| v.len() == 4 + LATENESS_BUCKETS)
            .map(|(name, v)| {
                let a = TopicActivity::from_parts(v[0], v[1], v[2], v[3], v[4..].to_vec());
                (name.clone(), a)
            })
            .collect()
    }

    /// What each topic did since the instance's previous entry; malformed ones are left out.
    pub fn recent(&self) -> impl Iterator<Item = (&str, Delta)> + '_ {
        self.recent
            .iter()
            .filter_map(|(name, flat)| Some((name.as_str(), Delta::from_flat(flat)?)))
    }

    /// The per-second totals: (second start ms, delta); malformed ones are left out.
    pub fn seconds(&self) -> impl Iterator<Item = (u64, Delta)> + '_ {
        self.secs.iter().filter_map(|v| {
            let (&sec, rest) = v.split_first()?;
            Some((sec, Delta::from_flat(rest)?))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_refuse_what_they_cannot_read() {
        let a = TopicActivity::from_parts(5, 4, 3, 2, vec![1; LATENESS_BUCKETS]);
        let d = Delta {
            counts: [1, 2, 3, 4],
            ..Delta::default()
        };
        let e = Entry::new(
            2_000,
            1_000,
            &[("orders".to_owned(), a.clone())],
            [(1_000, d.clone())].into_iter(),
            &[("orders".to_owned(), d.clone())],
        );
        let back = Entry::decode(&e.encode()).expect("decodes");
        assert_eq!(back, e);
        assert_eq!(back.activity(), vec![("orders".to_owned(), a)]);
        assert_eq!(back.seconds().collect::<Vec<_>>(), vec![(1_000, d.clone())]);
        assert_eq!(back.recent().collect::<Vec<_>>(), vec![("orders", d)]);

        let table: [&[u8]; 4] = [
            b"",
            b"not json",
            br#"{"v":2,"at":1,"started":1,"topics":{},"secs":[]}"#,
            br#"{"v":1,"at":"x"}"#,
        ];
        for raw in table {
            assert_eq!(Entry::decode(raw), None, "{}", String::from_utf8_lossy(raw));
        }
        // Malformed parts are skipped, the rest is read.
        let partial = br#"{"v":1,"at":1,"started":1,"topics":{"a":[1,2]},"secs":[[5],[]]}"#;
        let e = Entry::decode(partial).expect("the envelope is fine");
        assert!(e.activity().is_empty());
        assert_eq!(e.seconds().count(), 0);
    }
}
