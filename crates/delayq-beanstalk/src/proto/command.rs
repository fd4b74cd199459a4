//! Parsing one command line, the way beanstalkd 1.12's `prot.c` does.
//!
//! beanstalkd recognises a command by *prefix*, trying the names in a fixed order
//! (`which_cmd`), then parses the arguments with small readers:
//!
//! - an integer argument may be preceded by any number of spaces, must start with a digit and
//!   must fit its type (`u32` or `u64`); the *last* argument of most commands must end the
//!   line exactly (no trailing space), while `reserve-with-timeout` and `kick` ignore what
//!   follows their number;
//! - a tube name for `use`, `watch`, `ignore` and `stats-tube` is everything after the one
//!   space of the prefix, checked as a whole (so a second space is `BAD_FORMAT`); `pause-tube`
//!   reads its name after any spaces, even with none after the command word;
//! - commands without arguments refuse anything after their name, except `quit`, which is
//!   matched by prefix alone;
//! - `put` decides `JOB_TOO_BIG` before it looks for trailing garbage, so a too-big job with
//!   garbage after it is still answered `JOB_TOO_BIG` (and its body skipped).
//!
//! Every quirk is kept because clients and their test suites see them; the table tests below
//! pin each one, and the differential tests run the same lines against beanstalkd itself.

use thiserror::Error;

use super::is_valid_tube;

/// A parsed command. Tube names are kept as bytes checked by [`super::is_valid_tube`]; they
/// are ASCII, so `String` would also do, but the protocol is bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `put <pri> <delay> <ttr> <bytes>`: a body of `bytes` bytes and `\r\n` follows.
    Put {
        /// Priority, lower first.
        pri: u32,
        /// Seconds before the job is ready.
        delay: u32,
        /// Time to run in seconds, as sent (beanstalkd raises 0 to 1).
        ttr: u32,
        /// The body's length, without its `\r\n`.
        bytes: u32,
    },
    /// `use <tube>`.
    Use(Vec<u8>),
    /// `reserve`.
    Reserve,
    /// `reserve-with-timeout <seconds>`. beanstalkd 1.12 reads the number with C's `strtol`
    /// into an `int`: no digits read as 0, a value past 32 bits wraps, and a negative timeout
    /// waits like `reserve`.
    ReserveWithTimeout(i32),
    /// `reserve-job <id>`.
    ReserveJob(u64),
    /// `delete <id>`.
    Delete(u64),
    /// `release <id> <pri> <delay>`.
    Release {
        /// The job.
        id: u64,
        /// Its new priority.
        pri: u32,
        /// Seconds before it is ready again.
        delay: u32,
    },
    /// `bury <id> <pri>`.
    Bury {
        /// The job.
        id: u64,
        /// Its new priority.
        pri: u32,
    },
    /// `touch <id>`.
    Touch(u64),
    /// `watch <tube>`.
    Watch(Vec<u8>),
    /// `ignore <tube>`.
    Ignore(Vec<u8>),
    /// `peek <id>`.
    Peek(u64),
    /// `peek-ready`.
    PeekReady,
    /// `peek-delayed`.
    PeekDelayed,
    /// `peek-buried`.
    PeekBuried,
    /// `kick <bound>`.
    Kick(u32),
    /// `kick-job <id>`.
    KickJob(u64),
    /// `stats-job <id>`.
    StatsJob(u64),
    /// `stats-tube <tube>`.
    StatsTube(Vec<u8>),
    /// `stats`.
    Stats,
    /// `list-tubes`.
    ListTubes,
    /// `list-tube-used`.
    ListTubeUsed,
    /// `list-tubes-watched`.
    ListTubesWatched,
    /// `pause-tube <tube> <seconds>`.
    PauseTube {
        /// The tube.
        tube: Vec<u8>,
        /// How long, in seconds (beanstalkd pauses at least a moment even for 0).
        delay: u32,
    },
    /// `quit`.
    Quit,
}

/// Why a line is not a command, as the reply the client gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ParseError {
    /// `BAD_FORMAT`: a known command with malformed arguments.
    #[error("BAD_FORMAT")]
    BadFormat,
    /// `UNKNOWN_COMMAND`: no command starts the line.
    #[error("UNKNOWN_COMMAND")]
    UnknownCommand,
    /// `JOB_TOO_BIG`: a `put` whose body is larger than the limit; the connection must skip
    /// `skip` bytes (the body and its `\r\n`) before the next command.
    #[error("JOB_TOO_BIG")]
    JobTooBig {
        /// Bytes to discard from the connection.
        skip: u64,
    },
}

/// The command names in beanstalkd's matching order (`which_cmd`): the first prefix that
/// matches wins, so longer names come before their own prefixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Name {
    Put,
    PeekJob,
    PeekReady,
    PeekDelayed,
    PeekBuried,
    ReserveTimeout,
    ReserveJob,
    Reserve,
    Delete,
    Release,
    Bury,
    Kick,
    KickJob,
    Touch,
    StatsJob,
    StatsTube,
    Stats,
    Use,
    Watch,
    Ignore,
    ListTubesWatched,
    ListTubeUsed,
    ListTubes,
    Quit,
    PauseTube,
}

const NAMES: &[(&[u8], Name)] = &[
    (b"put ", Name::Put),
    (b"peek ", Name::PeekJob),
    (b"peek-ready", Name::PeekReady),
    (b"peek-delayed", Name::PeekDelayed),
    (b"peek-buried", Name::PeekBuried),
    (b"reserve-with-timeout ", Name::ReserveTimeout),
    (b"reserve-job ", Name::ReserveJob),
    (b"reserve", Name::Reserve),
    (b"delete ", Name::Delete),
    (b"release ", Name::Release),
    (b"bury ", Name::Bury),
    (b"kick ", Name::Kick),
    (b"kick-job ", Name::KickJob),
    (b"touch ", Name::Touch),
    (b"stats-job ", Name::StatsJob),
    (b"stats-tube ", Name::StatsTube),
    (b"stats", Name::Stats),
    (b"use ", Name::Use),
    (b"watch ", Name::Watch),
    (b"ignore ", Name::Ignore),
    (b"list-tubes-watched", Name::ListTubesWatched),
    (b"list-tube-used", Name::ListTubeUsed),
    (b"list-tubes", Name::ListTubes),
    (b"quit", Name::Quit),
    (b"pause-tube", Name::PauseTube),
];

impl Command {
    /// Parses one command line (without its `\r\n`); `max_job_size` is the largest body a
    /// `put` may announce.
    pub fn parse(line: &[u8], max_job_size: u32) -> Result<Command, ParseError> {
        // beanstalkd works on a C string: a NUL inside the line is "possible maliciousness".
        if line.contains(&0) {
            return Err(ParseError::BadFormat);
        }
        let (name, prefix) = NAMES
            .iter()
            .find(|(prefix, _)| line.starts_with(prefix))
            .map(|(prefix, name)| (*name, prefix.len()))
            .ok_or(ParseError::UnknownCommand)?;
        let args = Args(&line[prefix..]);
        Ok(match name {
            Name::Put => return parse_put(args, max_job_size),
            Name::PeekJob => Command::Peek(args.last_u64()?),
            Name::PeekReady => args.none(Command::PeekReady)?,
            Name::PeekDelayed => args.none(Command::PeekDelayed)?,
            Name::PeekBuried => args.none(Command::PeekBuried)?,
            // The rest of the line is not looked at.
            Name::ReserveTimeout => Command::ReserveWithTimeout(args.strtol()? as i32),
            Name::ReserveJob => Command::ReserveJob(args.last_u64()?),
            Name::Reserve => args.none(Command::Reserve)?,
            Name::Delete => Command::Delete(args.last_u64()?),
            Name::Release => parse_release(args)?,
            Name::Bury => {
                let (id, rest) = args.u64()?;
                Command::Bury {
                    id,
                    pri: rest.last_u32()?,
                }
            }
            Name::Kick => Command::Kick(args.strtoul()? as u32),
            Name::KickJob => Command::KickJob(args.last_u64()?),
            Name::Touch => Command::Touch(args.last_u64()?),
            Name::StatsJob => Command::StatsJob(args.last_u64()?),
            Name::StatsTube => Command::StatsTube(args.tube()?),
            Name::Stats => args.none(Command::Stats)?,
            Name::Use => Command::Use(args.tube()?),
            Name::Watch => Command::Watch(args.tube()?),
            Name::Ignore => Command::Ignore(args.tube()?),
            Name::ListTubesWatched => args.none(Command::ListTubesWatched)?,
            Name::ListTubeUsed => args.none(Command::ListTubeUsed)?,
            Name::ListTubes => args.none(Command::ListTubes)?,
            Name::Quit => Command::Quit,
            Name::PauseTube => parse_pause_tube(args)?,
        })
    }
}

/// Whether beanstalkd counts `line` in `cmd-put`: a `put` whose four numbers it could read,
/// even when it is then refused (`JOB_TOO_BIG`, trailing bytes).
pub fn counts_as_put(line: &[u8]) -> bool {
    let Some(rest) = line.strip_prefix(b"put ") else {
        return false;
    };
    let read = || -> Result<(), ParseError> {
        let (_, rest) = Args(rest).u32()?;
        let (_, rest) = rest.u32()?;
        let (_, rest) = rest.u32()?;
        rest.u32()?;
        Ok(())
    };
    !line.contains(&0) && read().is_ok()
}

fn parse_release(args: Args<'_>) -> Result<Command, ParseError> {
    let (id, rest) = args.u64()?;
    let (pri, rest) = rest.u32()?;
    let delay = rest.last_u32()?;
    Ok(Command::Release { id, pri, delay })
}

fn parse_pause_tube(args: Args<'_>) -> Result<Command, ParseError> {
    let (tube, rest) = args.leading_name()?;
    let delay = rest.last_u32()?;
    if !is_valid_tube(tube) {
        return Err(ParseError::BadFormat);
    }
    Ok(Command::PauseTube {
        tube: tube.to_vec(),
        delay,
    })
}

fn parse_put(args: Args<'_>, max_job_size: u32) -> Result<Command, ParseError> {
    let (pri, rest) = args.u32()?;
    let (delay, rest) = rest.u32()?;
    let (ttr, rest) = rest.u32()?;
    let (bytes, rest) = rest.u32()?;
    if bytes > max_job_size {
        return Err(ParseError::JobTooBig {
            skip: u64::from(bytes) + 2,
        });
    }
    if !rest.0.is_empty() {
        return Err(ParseError::BadFormat);
    }
    Ok(Command::Put {
        pri,
        delay,
        ttr,
        bytes,
    })
}

/// The arguments after a command's name.
#[derive(Clone, Copy)]
struct Args<'a>(&'a [u8]);

impl<'a> Args<'a> {
    /// No arguments at all: the name must end the line.
    fn none(self, command: Command) -> Result<Command, ParseError> {
        if self.0.is_empty() {
            Ok(command)
        } else {
            Err(ParseError::BadFormat)
        }
    }

    /// beanstalkd's `read_u64`/`read_u32` with an end pointer: spaces, then a digit, then the
    /// digits; the rest is returned.
    fn number(self, max: u64) -> Result<(u64, Args<'a>), ParseError> {
        let s = trim_spaces(self.0);
        let digits = s.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 {
            return Err(ParseError::BadFormat);
        }
        let value = std::str::from_utf8(&s[..digits])
            .ok()
            .and_then(|d| d.parse::<u64>().ok())
            .filter(|&v| v <= max)
            .ok_or(ParseError::BadFormat)?;
        Ok((value, Args(&s[digits..])))
    }

    fn u64(self) -> Result<(u64, Args<'a>), ParseError> {
        self.number(u64::MAX)
    }

    fn u32(self) -> Result<(u32, Args<'a>), ParseError> {
        let (v, rest) = self.number(u64::from(u32::MAX))?;
        Ok((v as u32, rest))
    }

    /// A number that must end the line (`read_u64` without an end pointer).
    fn last_u64(self) -> Result<u64, ParseError> {
        match self.u64()? {
            (v, rest) if rest.0.is_empty() => Ok(v),
            _ => Err(ParseError::BadFormat),
        }
    }

    fn last_u32(self) -> Result<u32, ParseError> {
        match self.u32()? {
            (v, rest) if rest.0.is_empty() => Ok(v),
            _ => Err(ParseError::BadFormat),
        }
    }

    /// C's `strtol`/`strtoul` prefix: white space, an optional sign, then the digits. Returns
    /// the sign, the magnitude (`None` past 64 bits: `ERANGE`) and how many digits there were.
    fn c_number(self) -> (bool, Option<u64>, usize) {
        let s = self.0;
        let start = s
            .iter()
            .position(|b| !b" \t\n\x0b\x0c\r".contains(b))
            .unwrap_or(s.len());
        let (negative, s) = match s[start..].first() {
            Some(b'-') => (true, &s[start + 1..]),
            Some(b'+') => (false, &s[start + 1..]),
            _ => (false, &s[start..]),
        };
        let digits = s.iter().take_while(|b| b.is_ascii_digit()).count();
        let magnitude = std::str::from_utf8(&s[..digits]).ok().and_then(|d| {
            if d.is_empty() {
                Some(0)
            } else {
                d.parse().ok()
            }
        });
        (negative, magnitude, digits)
    }

    /// `kick`'s count as C's `strtoul` reads it: at least one digit (beanstalkd checks), a
    /// negative number wraps, a value over 64 bits is an error. What follows is ignored; the
    /// caller cuts the result to the `unsigned int` beanstalkd stores it in.
    fn strtoul(self) -> Result<u64, ParseError> {
        match self.c_number() {
            (_, _, 0) | (_, None, _) => Err(ParseError::BadFormat),
            (negative, Some(v), _) => Ok(if negative { v.wrapping_neg() } else { v }),
        }
    }

    /// `reserve-with-timeout`'s number as C's `strtol` reads it in beanstalkd 1.12: no digits
    /// is 0 (only `ERANGE` is checked), a value outside `long` is an error. What follows is
    /// ignored; the caller cuts the result to the `int` beanstalkd stores it in.
    fn strtol(self) -> Result<i64, ParseError> {
        match self.c_number() {
            (_, None, _) => Err(ParseError::BadFormat),
            (false, Some(v), _) => i64::try_from(v).map_err(|_| ParseError::BadFormat),
            (true, Some(v), _) if v <= i64::MAX as u64 + 1 => Ok((v as i64).wrapping_neg()),
            (true, Some(_), _) => Err(ParseError::BadFormat),
        }
    }

    /// The whole rest of the line as a tube name.
    fn tube(self) -> Result<Vec<u8>, ParseError> {
        if is_valid_tube(self.0) {
            Ok(self.0.to_vec())
        } else {
            Err(ParseError::BadFormat)
        }
    }

    /// beanstalkd's `read_tube_name`: spaces, then the longest run of name bytes (at least
    /// one); the rest is returned.
    fn leading_name(self) -> Result<(&'a [u8], Args<'a>), ParseError> {
        let s = trim_spaces(self.0);
        let len = s.iter().take_while(|&&b| super::is_name_byte(b)).count();
        if len == 0 {
            return Err(ParseError::BadFormat);
        }
        Ok((&s[..len], Args(&s[len..])))
    }
}

fn trim_spaces(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|&b| b != b' ').unwrap_or(s.len());
    &s[start..]
}

#[cfg(test)]
mod tests {
    use super::*;
    use Command as C;
    use ParseError::{BadFormat, UnknownCommand};

    fn parse(line: &str) -> Result<Command, ParseError> {
        Command::parse(line.as_bytes(), 65_535)
    }

    fn tube(s: &str) -> Vec<u8> {
        s.as_bytes().to_vec()
    }

    #[test]
    fn commands_and_their_arguments() {
        let table: Vec<(&str, Result<Command, ParseError>)> = vec![
            (
                "put 1024 0 60 5",
                Ok(C::Put {
                    pri: 1024,
                    delay: 0,
                    ttr: 60,
                    bytes: 5,
                }),
            ),
            (
                "put  0   10 0 0",
                Ok(C::Put {
                    pri: 0,
                    delay: 10,
                    ttr: 0,
                    bytes: 0,
                }),
            ),
            (
                "put 4294967295 0 1 1",
                Ok(C::Put {
                    pri: u32::MAX,
                    delay: 0,
                    ttr: 1,
                    bytes: 1,
                }),
            ),
            ("put 4294967296 0 1 1", Err(BadFormat)),
            ("put 1 0 1", Err(BadFormat)),
            ("put 1 0 1 5 ", Err(BadFormat)),
            ("put 1 0 1 5x", Err(BadFormat)),
            ("put -1 0 1 5", Err(BadFormat)),
            (
                "put 1 0 1 65536",
                Err(ParseError::JobTooBig { skip: 65_538 }),
            ),
            // JOB_TOO_BIG is decided before trailing garbage.
            (
                "put 1 0 1 70000 junk",
                Err(ParseError::JobTooBig { skip: 70_002 }),
            ),
            ("use foo", Ok(C::Use(tube("foo")))),
            ("use  foo", Err(BadFormat)),
            ("use foo ", Err(BadFormat)),
            ("use -foo", Err(BadFormat)),
            ("use ", Err(BadFormat)),
            ("use", Err(UnknownCommand)),
            ("reserve", Ok(C::Reserve)),
            ("reserve ", Err(BadFormat)),
            ("reservex", Err(BadFormat)),
            ("reserve-with-timeout 5", Ok(C::ReserveWithTimeout(5))),
            ("reserve-with-timeout  0", Ok(C::ReserveWithTimeout(0))),
            // beanstalkd 1.12 reads it with strtol into an int and checks only ERANGE.
            ("reserve-with-timeout 5 junk", Ok(C::ReserveWithTimeout(5))),
            ("reserve-with-timeout x", Ok(C::ReserveWithTimeout(0))),
            ("reserve-with-timeout ", Ok(C::ReserveWithTimeout(0))),
            ("reserve-with-timeout  +7", Ok(C::ReserveWithTimeout(7))),
            ("reserve-with-timeout -1", Ok(C::ReserveWithTimeout(-1))),
            (
                "reserve-with-timeout 4294967296",
                Ok(C::ReserveWithTimeout(0)),
            ),
            (
                "reserve-with-timeout 2147483648",
                Ok(C::ReserveWithTimeout(i32::MIN)),
            ),
            ("reserve-with-timeout 9223372036854775808", Err(BadFormat)),
            (
                "reserve-with-timeout -9223372036854775808",
                Ok(C::ReserveWithTimeout(0)),
            ),
            ("reserve-with-timeout 99999999999999999999", Err(BadFormat)),
            // Without the space it is "reserve" with trailing bytes.
            ("reserve-with-timeout", Err(BadFormat)),
            ("reserve-job 7", Ok(C::ReserveJob(7))),
            ("reserve-job 7 ", Err(BadFormat)),
            ("delete 18446744073709551615", Ok(C::Delete(u64::MAX))),
            ("delete 18446744073709551616", Err(BadFormat)),
            ("delete  3", Ok(C::Delete(3))),
            ("delete", Err(UnknownCommand)),
            ("delete ", Err(BadFormat)),
            (
                "release 3 10 5",
                Ok(C::Release {
                    id: 3,
                    pri: 10,
                    delay: 5,
                }),
            ),
            ("release 3 10", Err(BadFormat)),
            ("release 3 10 5 ", Err(BadFormat)),
            ("bury 3 7", Ok(C::Bury { id: 3, pri: 7 })),
            ("bury 3", Err(BadFormat)),
            ("touch 9", Ok(C::Touch(9))),
            ("watch a.b", Ok(C::Watch(tube("a.b")))),
            ("ignore default", Ok(C::Ignore(tube("default")))),
            ("peek 1", Ok(C::Peek(1))),
            ("peek", Err(UnknownCommand)),
            ("peek-ready", Ok(C::PeekReady)),
            ("peek-ready ", Err(BadFormat)),
            ("peek-delayed", Ok(C::PeekDelayed)),
            ("peek-buried", Ok(C::PeekBuried)),
            ("peek-buriedx", Err(BadFormat)),
            ("kick 10", Ok(C::Kick(10))),
            ("kick  10 junk", Ok(C::Kick(10))),
            ("kick +3", Ok(C::Kick(3))),
            ("kick -1", Ok(C::Kick(u32::MAX))),
            ("kick 4294967297", Ok(C::Kick(1))),
            ("kick 18446744073709551616", Err(BadFormat)),
            ("kick x", Err(BadFormat)),
            ("kick ", Err(BadFormat)),
            ("kick-job 4", Ok(C::KickJob(4))),
            ("stats-job 4", Ok(C::StatsJob(4))),
            ("stats-tube default", Ok(C::StatsTube(tube("default")))),
            ("stats", Ok(C::Stats)),
            ("stats ", Err(BadFormat)),
            ("stats-jobs 4", Err(BadFormat)),
            ("list-tubes", Ok(C::ListTubes)),
            ("list-tubes ", Err(BadFormat)),
            ("list-tube-used", Ok(C::ListTubeUsed)),
            ("list-tubes-watched", Ok(C::ListTubesWatched)),
            (
                "pause-tube default 10",
                Ok(C::PauseTube {
                    tube: tube("default"),
                    delay: 10,
                }),
            ),
            // The name is read after any spaces, even none.
            (
                "pause-tubefoo 3",
                Ok(C::PauseTube {
                    tube: tube("foo"),
                    delay: 3,
                }),
            ),
            ("pause-tube default", Err(BadFormat)),
            ("pause-tube -x 1", Err(BadFormat)),
            ("pause-tube default 1 ", Err(BadFormat)),
            ("quit", Ok(C::Quit)),
            ("quitx", Ok(C::Quit)),
            ("", Err(UnknownCommand)),
            ("PUT 1 0 1 1", Err(UnknownCommand)),
            ("hello", Err(UnknownCommand)),
        ];
        for (line, want) in table {
            assert_eq!(parse(line), want, "{line:?}");
        }
    }

    #[test]
    fn a_nul_byte_is_bad_format() {
        assert_eq!(Command::parse(b"stats\0", 10), Err(BadFormat));
        assert_eq!(Command::parse(b"use a\0b", 10), Err(BadFormat));
    }

    #[test]
    fn the_job_size_limit_is_the_callers() {
        assert_eq!(
            Command::parse(b"put 0 0 1 10", 10),
            Ok(C::Put {
                pri: 0,
                delay: 0,
                ttr: 1,
                bytes: 10
            })
        );
        assert_eq!(
            Command::parse(b"put 0 0 1 11", 10),
            Err(ParseError::JobTooBig { skip: 13 })
        );
    }

    #[test]
    fn tube_names_at_the_limit() {
        let name = "n".repeat(200);
        assert_eq!(parse(&format!("use {name}")), Ok(C::Use(tube(&name))));
        assert_eq!(parse(&format!("use {name}n")), Err(BadFormat));
        assert_eq!(
            parse(&format!("pause-tube {name}n 1")),
            Err(BadFormat),
            "pause-tube checks the length too"
        );
    }
}
