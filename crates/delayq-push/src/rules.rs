//! The pure decisions of a delivery, apart from any socket or clock so each is tested by a
//! table: the token bucket that bounds a target's rate, the signature, what an answer means
//! (finish, or release with which delay and which error), and how `Retry-After` is read.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// How many bytes of a failed answer are kept in the task's error.
pub const KEPT_ANSWER_BYTES: usize = 1_024;
/// How many bytes of an answer are read at most; the rest is not read (the connection is then
/// closed instead of reused).
pub const READ_ANSWER_BYTES: usize = 64 * 1_024;

/// A token bucket: `rate_per_s` tokens a second, at most `burst` saved. Time is given, in
/// milliseconds, so the bucket is pure.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate_per_ms: f64,
    burst: f64,
    tokens: f64,
    last_ms: u64,
}

impl TokenBucket {
    /// A full bucket at `now_ms`.
    pub fn new(rate_per_s: f64, burst: u32, now_ms: u64) -> Self {
        TokenBucket {
            rate_per_ms: rate_per_s / 1_000.0,
            burst: f64::from(burst.max(1)),
            tokens: f64::from(burst.max(1)),
            last_ms: now_ms,
        }
    }

    fn refill(&mut self, now_ms: u64) {
        let elapsed = now_ms.saturating_sub(self.last_ms) as f64;
        self.tokens = (self.tokens + elapsed * self.rate_per_ms).min(self.burst);
        self.last_ms = self.last_ms.max(now_ms);
    }

    /// Takes up to `want` whole tokens. Returns how many were taken, or, when none is there,
    /// `Err` with how many milliseconds until one is.
    pub fn take(&mut self, now_ms: u64, want: u32) -> Result<u32, u64> {
        self.refill(now_ms);
        let whole = self.tokens.floor().min(f64::from(want));
        if whole >= 1.0 {
            self.tokens -= whole;
            return Ok(whole as u32);
        }
        let missing = 1.0 - self.tokens;
        Err((missing / self.rate_per_ms).ceil().max(1.0) as u64)
    }

    /// Gives back tokens taken for calls that were not made (nothing was ready).
    pub fn refund(&mut self, n: u32) {
        self.tokens = (self.tokens + f64::from(n)).min(self.burst);
    }
}

/// The `Delayq-Signature` header's value: `t=<unix ms>,v1=<hex HMAC-SHA256 of "t.body">`.
pub fn signature(secret: &[u8], t_ms: u64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(t_ms.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let mut hex = String::with_capacity(digest.len() * 2);
    for b in digest {
        hex.push_str(&format!("{b:02x}"));
    }
    format!("t={t_ms},v1={hex}")
}

/// The call timeout of a target that sets none: the task's ttr less a margin (a tenth, at
/// most 1 s), so that the release carrying the push error lands before the ttr would expire
/// and redeliver the task with a plain "ttr expired".
pub fn default_timeout_ms(ttr_ms: u64) -> u64 {
    ttr_ms.saturating_sub((ttr_ms / 10).min(1_000)).max(1)
}

/// Reads a `Retry-After` value as a delay in ms from `now_ms`: seconds, or an HTTP date (a
/// date in the past is 0). `None` when it is neither.
pub fn parse_retry_after(value: &str, now_ms: u64) -> Option<u64> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(secs.saturating_mul(1_000));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    let at_ms = at
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_millis()
        .min(u128::from(u64::MAX)) as u64;
    Some(at_ms.saturating_sub(now_ms))
}

/// How one call ended, as the dispatcher saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallResult {
    /// The target answered with this status; the first bytes of its answer; its
    /// `Retry-After` header, read as a delay.
    Answered {
        /// The HTTP status.
        status: u16,
        /// The first bytes of the body (at most [`KEPT_ANSWER_BYTES`]).
        head: Vec<u8>,
        /// The delay a `Retry-After` header asked for.
        retry_after_ms: Option<u64>,
    },
    /// No answer within the timeout.
    TimedOut {
        /// The timeout that passed.
        after_ms: u64,
    },
    /// No connection, a TLS failure, a reset, or an address `push_allow` refuses.
    Connect {
        /// What went wrong.
        reason: String,
    },
}

/// The failure classes counted in `/stats` and `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureClass {
    /// A non-2xx answer.
    Status,
    /// No answer in time.
    Timeout,
    /// No connection (refused, reset, TLS, DNS, not allowed).
    Connect,
}

impl FailureClass {
    /// The class's name in stats and metrics.
    pub fn name(self) -> &'static str {
        match self {
            FailureClass::Status => "status",
            FailureClass::Timeout => "timeout",
            FailureClass::Connect => "connect",
        }
    }
}

/// What to do with the task after a call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// Finish it: the target took it.
    Finish,
    /// Release it: a failure of this class, recorded with this error, redelivered after
    /// `delay_ms` (a `Retry-After`) or, when `None`, after the task's own backoff.
    Release {
        /// Why, for stats.
        class: FailureClass,
        /// The task's last error.
        error: String,
        /// The delay instead of the backoff.
        delay_ms: Option<u64>,
    },
}

/// Decides what a call's result means (docs/design.md §8): 2xx finishes; any other status,
/// a timeout or a connection failure releases with the task's backoff, except that a
/// `Retry-After` on 429 or 503 is the delay (capped at `max_delay_ms`).
pub fn verdict(result: &CallResult, max_delay_ms: u64) -> Verdict {
    match result {
        CallResult::Answered { status, .. } if (200..300).contains(status) => Verdict::Finish,
        CallResult::Answered {
            status,
            head,
            retry_after_ms,
        } => {
            let delay_ms = match status {
                429 | 503 => retry_after_ms.map(|d| d.min(max_delay_ms)),
                _ => None,
            };
            let text = String::from_utf8_lossy(&head[..head.len().min(KEPT_ANSWER_BYTES)]);
            let error = if text.trim().is_empty() {
                format!("push: HTTP {status}")
            } else {
                format!("push: HTTP {status}: {}", text.trim())
            };
            Verdict::Release {
                class: FailureClass::Status,
                error,
                delay_ms,
            }
        }
        CallResult::TimedOut { after_ms } => Verdict::Release {
            class: FailureClass::Timeout,
            error: format!("push: no answer within {after_ms} ms"),
            delay_ms: None,
        },
        CallResult::Connect { reason } => Verdict::Release {
            class: FailureClass::Connect,
            error: format!("push: {reason}"),
            delay_ms: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_allows_the_burst_then_the_rate() {
        // (now_ms, want, expected)
        let mut b = TokenBucket::new(10.0, 3, 1_000);
        let steps: &[(u64, u32, Result<u32, u64>)] = &[
            (1_000, 5, Ok(3)),    // the whole burst at once
            (1_000, 1, Err(100)), // empty: one token every 100 ms
            (1_050, 1, Err(50)),  // half a token saved
            (1_100, 2, Ok(1)),    // one whole token
            (1_100, 1, Err(100)),
            (5_000, 10, Ok(3)),   // never more than the burst is saved
            (4_000, 1, Err(100)), // a clock going back does not add tokens
        ];
        for &(now, want, expected) in steps {
            assert_eq!(b.take(now, want), expected, "at {now} ms, want {want}");
        }
        b.refund(2);
        assert_eq!(b.take(5_000, 5), Ok(2));
    }

    #[test]
    fn a_slow_rate_waits_seconds() {
        let mut b = TokenBucket::new(0.5, 1, 0);
        assert_eq!(b.take(0, 1), Ok(1));
        assert_eq!(b.take(0, 1), Err(2_000));
        assert_eq!(b.take(2_000, 1), Ok(1));
    }

    #[test]
    fn signatures_match_known_values() {
        // Computed independently: python3 -c 'import hmac,hashlib;
        // print(hmac.new(b"k", b"1700000000000.hello", hashlib.sha256).hexdigest())'
        let cases: &[(&[u8], u64, &[u8], &str)] = &[
            (
                b"k",
                1_700_000_000_000,
                b"hello",
                "t=1700000000000,v1=a3e456261fc82309a7baf2c71e104e8b1822fd94aa50a99e506d26a9c3dd6ca1",
            ),
            (
                b"whsec_test",
                1,
                b"",
                "t=1,v1=eb99cf7166ccb885ed83f41eccdd0c6f555a89a301d4ab8475e40f58c3b19443",
            ),
        ];
        for &(secret, t, body, expected) in cases {
            assert_eq!(signature(secret, t, body), expected);
        }
        // Any change of key, time or body changes the signature.
        let base = signature(b"k", 1, b"x");
        assert_ne!(base, signature(b"K", 1, b"x"));
        assert_ne!(base, signature(b"k", 2, b"x"));
        assert_ne!(base, signature(b"k", 1, b"y"));
    }

    #[test]
    fn the_default_timeout_leaves_a_margin_before_the_ttr() {
        for (ttr, timeout) in [
            (1, 1),
            (10, 9),
            (400, 360),
            (10_000, 9_000),
            (30_000, 29_000),
        ] {
            assert_eq!(default_timeout_ms(ttr), timeout, "ttr {ttr}");
        }
    }

    #[test]
    fn retry_after_is_seconds_or_a_date() {
        let now = 1_445_412_480_000; // Wed, 21 Oct 2015 07:28:00 GMT
        let cases: &[(&str, Option<u64>)] = &[
            ("0", Some(0)),
            ("2", Some(2_000)),
            (" 120 ", Some(120_000)),
            ("Wed, 21 Oct 2015 07:28:05 GMT", Some(5_000)),
            ("Wed, 21 Oct 2015 07:27:00 GMT", Some(0)),
            ("-1", None),
            ("1.5", None),
            ("soon", None),
            ("", None),
        ];
        for &(value, expected) in cases {
            assert_eq!(parse_retry_after(value, now), expected, "{value:?}");
        }
    }

    #[test]
    fn verdicts_follow_the_status() {
        let answered = |status: u16, head: &[u8], retry: Option<u64>| CallResult::Answered {
            status,
            head: head.to_vec(),
            retry_after_ms: retry,
        };
        let release = |class, error: &str, delay_ms| Verdict::Release {
            class,
            error: error.into(),
            delay_ms,
        };
        let cases = vec![
            (answered(200, b"", None), Verdict::Finish),
            (answered(204, b"", Some(5)), Verdict::Finish),
            (answered(299, b"x", None), Verdict::Finish),
            (
                answered(500, b"boom\n", None),
                release(FailureClass::Status, "push: HTTP 500: boom", None),
            ),
            (
                answered(500, b"", Some(1_000)),
                release(FailureClass::Status, "push: HTTP 500", None),
            ),
            (
                answered(429, b"slow down", Some(2_000)),
                release(
                    FailureClass::Status,
                    "push: HTTP 429: slow down",
                    Some(2_000),
                ),
            ),
            (
                answered(503, b"", Some(10_000_000)),
                release(FailureClass::Status, "push: HTTP 503", Some(60_000)),
            ),
            (
                answered(503, b"", None),
                release(FailureClass::Status, "push: HTTP 503", None),
            ),
            (
                answered(301, b"", None),
                release(FailureClass::Status, "push: HTTP 301", None),
            ),
            (
                CallResult::TimedOut { after_ms: 50 },
                release(FailureClass::Timeout, "push: no answer within 50 ms", None),
            ),
            (
                CallResult::Connect {
                    reason: "connection refused".into(),
                },
                release(FailureClass::Connect, "push: connection refused", None),
            ),
        ];
        for (result, expected) in cases {
            assert_eq!(verdict(&result, 60_000), expected, "{result:?}");
        }
    }

    #[test]
    fn a_long_answer_is_cut_in_the_error() {
        let head = vec![b'a'; KEPT_ANSWER_BYTES + 100];
        let v = verdict(
            &CallResult::Answered {
                status: 500,
                head,
                retry_after_ms: None,
            },
            1,
        );
        let Verdict::Release { error, .. } = v else {
            panic!("{v:?}")
        };
        assert_eq!(error.len(), "push: HTTP 500: ".len() + KEPT_ANSWER_BYTES);
    }
}
