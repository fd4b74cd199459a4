//! The protocol, apart from sockets and queues: lines in, commands out, replies back.
//!
//! A connection feeds what it reads to a [`LineReader`], which yields command lines (or says
//! that a line was too long). Each line goes through [`Command::parse`]; a `put` is then
//! followed by its body of the announced size plus `\r\n`, which the connection reads itself
//! (the reader hands back what it read past the line). Every answer is a [`Reply`].
//!
//! The limits are beanstalkd's: a command line is at most [`LINE_MAX`] bytes including its
//! `\r\n`, a tube name at most [`TUBE_NAME_MAX`] bytes of [`is_name_byte`] characters, not
//! starting with `-`, and a job body at most the configured `max-job-size`
//! ([`DEFAULT_MAX_JOB_SIZE`] unless configured).

mod command;
mod line;
mod reply;
pub mod stats;

pub use command::{Command, ParseError, counts_as_put};
pub use line::{LineEvent, LineReader};
pub use reply::Reply;

/// The longest command line, including its `\r\n` (beanstalkd's `LINE_BUF_SIZE`).
pub const LINE_MAX: usize = 224;

/// The longest tube name in bytes (beanstalkd's `MAX_TUBE_NAME_LEN - 1`).
pub const TUBE_NAME_MAX: usize = 200;

/// beanstalkd's default `max-job-size` (`-z`): 65 535 bytes.
pub const DEFAULT_MAX_JOB_SIZE: u32 = 65_535;

/// The shortest time to run beanstalkd grants: a `put` or `release` asking for less gets this.
pub const MIN_TTR_SECONDS: u32 = 1;

/// Whether `b` may appear in a tube name: letters, digits and `-+/;.$_()`.
pub fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-+/;.$_()".contains(&b)
}

/// Whether `name` is a valid tube name: 1 to [`TUBE_NAME_MAX`] name bytes, not starting with
/// `-`.
pub fn is_valid_tube(name: &[u8]) -> bool {
    !name.is_empty()
        && name.len() <= TUBE_NAME_MAX
        && name.iter().all(|&b| is_name_byte(b))
        && name[0] != b'-'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tube_names() {
        let long = vec![b'a'; TUBE_NAME_MAX];
        let too_long = vec![b'a'; TUBE_NAME_MAX + 1];
        let table: &[(&[u8], bool)] = &[
            (b"default", true),
            (b"a", true),
            (b"A-z0-9+/;.$_()", true),
            (b"x-", true),
            (&long, true),
            (b"", false),
            (b"-x", false),
            (b"has space", false),
            (b"colon:", false),
            (b"star*", false),
            (&too_long, false),
        ];
        for (name, valid) in table {
            assert_eq!(
                is_valid_tube(name),
                *valid,
                "{:?}",
                String::from_utf8_lossy(name)
            );
        }
    }
}
