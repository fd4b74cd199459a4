//! The lifecycle rules of docs/design.md §2 as pure functions.
//!
//! Every backend asks these functions what a transition does instead of deciding for itself,
//! so the rules live in one place: which operation is allowed in which state
//! ([`check_op`]), whether a receipt still belongs to the current attempt ([`check_receipt`]),
//! and where a failed attempt goes next ([`after_failure`]: retries, backoff, DEAD).

use crate::backoff::Backoff;
use crate::task::{MaxRetries, Millis, State};

/// An operation a caller asks for on one existing task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// ACTIVE → FINISHED.
    Finish,
    /// ACTIVE → READY/DELAYED/DEAD (a failure).
    Release,
    /// ACTIVE: restart the ttr.
    Touch,
    /// DELAYED/READY/ACTIVE → CANCELLED.
    Cancel,
    /// DEAD → READY.
    Requeue,
    /// ACTIVE → DEAD with the reason "buried" (rule 13).
    Bury,
    /// DELAYED/READY → a new due (rule 15).
    Reschedule,
    /// DEAD or DELAYED → READY (beanstalkd's kick-job).
    Kick,
    /// READY, DELAYED or DEAD → ACTIVE: one task taken by id (beanstalkd's reserve-job).
    Take,
}

impl Op {
    /// The verb, for error messages.
    pub fn name(self) -> &'static str {
        match self {
            Op::Finish => "finish",
            Op::Release => "release",
            Op::Touch => "touch",
            Op::Cancel => "cancel",
            Op::Requeue => "requeue",
            Op::Bury => "bury",
            Op::Reschedule => "reschedule",
            Op::Kick => "kick",
            Op::Take => "take",
        }
    }
}

/// Why a transition was refused (a 409 in the API).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The task is not in a state the operation applies to.
    #[error("cannot {} a task that is {state}", op.name())]
    WrongState {
        /// The task's state.
        state: State,
        /// The operation refused.
        op: Op,
    },
    /// The receipt belongs to an earlier attempt: the task was redelivered since.
    #[error("the receipt belongs to an earlier attempt; the task was redelivered")]
    StaleReceipt,
    /// A reschedule to a due at or after the task's expiry, which would expire the task
    /// before it could be handed out.
    #[error(
        "cannot reschedule to {due_ms}: the task expires at {expires_at_ms}, and a due must \
         come before the expiry"
    )]
    PastExpiry {
        /// The due asked for.
        due_ms: Millis,
        /// The task's expiry.
        expires_at_ms: Millis,
    },
}

/// Checks that a new due of a task comes before its expiry, if it has one (rule 15 with
/// docs/design.md §11).
pub fn check_due_before_expiry(
    due_ms: Millis,
    expires_at_ms: Option<Millis>,
) -> Result<(), Refusal> {
    match expires_at_ms {
        Some(expires_at_ms) if due_ms >= expires_at_ms => Err(Refusal::PastExpiry {
            due_ms,
            expires_at_ms,
        }),
        _ => Ok(()),
    }
}

/// Whether a task with this expiry may no longer be handed out at `now` (docs/design.md §11):
/// at its expiry it is already too late.
pub fn is_expired(expires_at_ms: Option<Millis>, now: Millis) -> bool {
    expires_at_ms.is_some_and(|at| at <= now)
}

/// Checks that `op` applies to a task in `state` (rules 7 and 8).
pub fn check_op(state: State, op: Op) -> Result<(), Refusal> {
    let allowed = match op {
        Op::Finish | Op::Release | Op::Touch | Op::Bury => state == State::Active,
        Op::Cancel => matches!(state, State::Delayed | State::Ready | State::Active),
        Op::Requeue => state == State::Dead,
        Op::Reschedule => matches!(state, State::Delayed | State::Ready),
        Op::Kick => matches!(state, State::Dead | State::Delayed),
        Op::Take => matches!(state, State::Ready | State::Delayed | State::Dead),
    };
    if allowed {
        Ok(())
    } else {
        Err(Refusal::WrongState { state, op })
    }
}

/// Checks a receipt passed by a consumer against the current attempt's (rule 8). A consumer
/// may omit it (seqdelay clients do); a receipt that is given must match.
pub fn check_receipt(current: &str, given: Option<&str>) -> Result<(), Refusal> {
    match given {
        Some(given) if given != current => Err(Refusal::StaleReceipt),
        _ => Ok(()),
    }
}

/// Where a task goes after a failed attempt (release, handler error or ttr expiry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// Redeliver: READY when `due_ms <= now`, else DELAYED until `due_ms`.
    Retry {
        /// The redelivery count after this failure.
        retries: u32,
        /// When the task is ready again.
        due_ms: Millis,
    },
    /// Out of retries: DEAD, never silently finished (rule 5).
    Dead,
}

/// Decides the fate of a failed attempt (rules 4, 5, 6).
///
/// `retries` is how many redeliveries happened before the failed attempt. `delay_override` is a
/// consumer's explicit `delay_ms` on release, which wins over the backoff. With no backoff and
/// no override the redelivery is immediate.
pub fn after_failure(
    max_retries: MaxRetries,
    backoff: Option<&Backoff>,
    retries: u32,
    now: Millis,
    delay_override: Option<u64>,
) -> AfterFailure {
    if !max_retries.allows(retries) {
        return AfterFailure::Dead;
    }
    let retries = retries.saturating_add(1);
    let wait = delay_override
        .or_else(|| backoff.map(|b| b.delay_for(retries)))
        .unwrap_or(0);
    AfterFailure::Retry {
        retries,
        due_ms: now.saturating_add(wait),
    }
}

/// The state a task is in when it is (re)scheduled for `due_ms` at `now`: never READY before
/// its due (rule 1).
pub fn scheduled_state(due_ms: Millis, now: Millis) -> State {
    if due_ms <= now {
        State::Ready
    } else {
        State::Delayed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_op_applies_in_which_state() {
        use State::*;
        // One row per state: finish, release, touch, cancel, requeue, bury, reschedule, kick,
        // take.
        let table = [
            (
                Delayed,
                [false, false, false, true, false, false, true, true, true],
            ),
            (
                Ready,
                [false, false, false, true, false, false, true, false, true],
            ),
            (
                Active,
                [true, true, true, true, false, true, false, false, false],
            ),
            (Finished, [false; 9]),
            (Cancelled, [false; 9]),
            (
                Dead,
                [false, false, false, false, true, false, false, true, true],
            ),
        ];
        let ops = [
            Op::Finish,
            Op::Release,
            Op::Touch,
            Op::Cancel,
            Op::Requeue,
            Op::Bury,
            Op::Reschedule,
            Op::Kick,
            Op::Take,
        ];
        for (state, allowed) in table {
            for (op, ok) in ops.into_iter().zip(allowed) {
                assert_eq!(check_op(state, op).is_ok(), ok, "{op:?} in {state:?}");
            }
        }
    }

    #[test]
    fn receipts() {
        assert_eq!(check_receipt("r2", None), Ok(()));
        assert_eq!(check_receipt("r2", Some("r2")), Ok(()));
        assert_eq!(check_receipt("r2", Some("r1")), Err(Refusal::StaleReceipt));
    }

    #[test]
    fn failures_follow_retries_and_backoff() {
        let sched = Backoff::Schedule {
            ms: vec![120_000, 600_000],
        };
        let three = MaxRetries::Limited(3);
        type Row<'a> = (
            MaxRetries,
            Option<&'a Backoff>,
            u32,
            Option<u64>,
            AfterFailure,
        );
        let table: [Row; 9] = [
            (
                three,
                None,
                0,
                None,
                AfterFailure::Retry {
                    retries: 1,
                    due_ms: 1_000,
                },
            ),
            (
                three,
                None,
                2,
                None,
                AfterFailure::Retry {
                    retries: 3,
                    due_ms: 1_000,
                },
            ),
            (three, None, 3, None, AfterFailure::Dead),
            (MaxRetries::Limited(0), None, 0, None, AfterFailure::Dead),
            (
                MaxRetries::Unlimited,
                None,
                1_000_000,
                None,
                AfterFailure::Retry {
                    retries: 1_000_001,
                    due_ms: 1_000,
                },
            ),
            (
                three,
                Some(&sched),
                0,
                None,
                AfterFailure::Retry {
                    retries: 1,
                    due_ms: 121_000,
                },
            ),
            (
                three,
                Some(&sched),
                1,
                None,
                AfterFailure::Retry {
                    retries: 2,
                    due_ms: 601_000,
                },
            ),
            (
                three,
                Some(&sched),
                2,
                None,
                AfterFailure::Retry {
                    retries: 3,
                    due_ms: 601_000,
                },
            ),
            (
                three,
                Some(&sched),
                0,
                Some(5),
                AfterFailure::Retry {
                    retries: 1,
                    due_ms: 1_005,
                },
            ),
        ];
        for (max, backoff, retries, delay, want) in table {
            assert_eq!(
                after_failure(max, backoff, retries, 1_000, delay),
                want,
                "{max:?} {backoff:?} {retries} {delay:?}"
            );
        }
    }

    #[test]
    fn max_retries_three_means_four_deliveries() {
        let mut retries = 0;
        let mut deliveries = 1;
        while let AfterFailure::Retry { retries: r, .. } =
            after_failure(MaxRetries::Limited(3), None, retries, 0, None)
        {
            retries = r;
            deliveries += 1;
        }
        assert_eq!(deliveries, 4);
    }

    #[test]
    fn scheduled_state_is_never_early() {
        assert_eq!(scheduled_state(10, 9), State::Delayed);
        assert_eq!(scheduled_state(10, 10), State::Ready);
        assert_eq!(scheduled_state(10, 11), State::Ready);
    }
}
