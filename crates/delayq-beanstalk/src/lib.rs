//! beanstalkd's text protocol (its `doc/protocol.txt`, version 1.12) for delayq.
//!
//! docs/design.md §7 asks delayq to speak beanstalkd's protocol on a second listener,
//! so that every beanstalkd client library and console works with it unchanged. This crate
//! holds the protocol itself, apart from any socket or queue, so that it can be tested byte
//! for byte against what beanstalkd does:
//!
//! - [`proto::LineReader`] cuts a byte stream into command lines with beanstalkd's limits
//!   (224 bytes including `\r\n`; a longer line is discarded up to its end and answered with
//!   `BAD_FORMAT`).
//! - [`proto::Command::parse`] turns one line into a command, with beanstalkd's quirks kept
//!   (commands are recognised by prefix, in beanstalkd's order; which commands refuse trailing
//!   bytes and which accept them; `JOB_TOO_BIG` decided before trailing garbage on `put`).
//! - [`proto::Reply`] writes every answer, and [`proto::stats`] the YAML documents of `stats`,
//!   `stats-tube`, `stats-job` and `list-tubes*`, with beanstalkd 1.12's keys in its order.
//!
//! [`server`] is the listener that maps these commands onto a delayq `Queue` (tubes →
//! topics, job ids → task ids, reservations held per connection), in mini-redis's shape: a
//! connection that frames bytes and holds the timeouts, a session per connection whose
//! `apply` runs one command and answers a [`proto::Reply`] without a socket (one file per
//! command group, the `stats*` documents apart), and the state every connection shares.
//! docs/beanstalk.md describes it for users.

pub mod proto;
pub mod server;

/// The beanstalkd version whose protocol this crate speaks, shown as `version` by `stats`.
pub const PROTOCOL_VERSION: &str = "1.12";

pub use server::{
    BeanstalkAddr, BeanstalkError, BeanstalkOptions, BeanstalkServer, Control,
    DEFAULT_MAX_CONNECTIONS, DEFAULT_READ_TIMEOUT_MS,
};
