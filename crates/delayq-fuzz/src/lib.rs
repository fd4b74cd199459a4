//! delayq's fuzz targets, as plain functions of the fuzzer's bytes.
//!
//! Each target feeds its input to one of delayq's parsers of untrusted bytes, the way the
//! server does, and checks what the parser promises: no panic whatever the input, and, for
//! input it accepts, the properties listed on the target. A target panics exactly when it
//! finds a bug. The AFL++ harness in `fuzz/` (outside the workspace: it needs `cargo afl`)
//! calls [`run`]; `tests/fuzz_replay.rs` feeds every committed corpus and crash file through
//! the same functions in the ordinary test suite. `docs/testing.md` says how to run them.
//!
//! | target | parser | input |
//! | --- | --- | --- |
//! | `api_request` | the server's JSON body reader and every request type | a request body |
//! | `beanstalk_command` | beanstalkd's line reader and command parser | bytes from a client |
//! | `record_codec` | the embedded backend's record codec | one log or snapshot record |
//! | `log_segment` | log recovery: segment scan, torn tail cut | a segment file (with a flag byte) |
//! | `log_snapshot` | log recovery: the snapshot reader | a snapshot file (with a flag byte) |
//!
//! The two file targets take a first byte of flags. Unless bit 0 is set, the checksums of
//! the frames are recomputed before the file is written, so that mutations reach the readers
//! behind the checksum instead of all stopping at it; with bit 0 set the bytes are used as
//! they are (to reach the checksum check itself).

mod files;
mod parsers;

pub use files::{log_segment, log_snapshot};
pub use parsers::{api_request, beanstalk_command, record_codec};

/// One fuzz target: its name (the corpus directory's name) and its function.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// The target's name, also the name of its directories under `fuzz/corpus/` and
    /// `fuzz/crashes/`.
    pub name: &'static str,
    /// Runs one input; panics when it finds a bug.
    pub run: fn(&[u8]),
}

/// Every target.
pub const TARGETS: &[Target] = &[
    Target {
        name: "api_request",
        run: api_request,
    },
    Target {
        name: "beanstalk_command",
        run: beanstalk_command,
    },
    Target {
        name: "record_codec",
        run: record_codec,
    },
    Target {
        name: "log_segment",
        run: log_segment,
    },
    Target {
        name: "log_snapshot",
        run: log_snapshot,
    },
];

/// The target called `name`, if there is one.
pub fn target(name: &str) -> Option<Target> {
    TARGETS.iter().copied().find(|t| t.name == name)
}

/// Runs target `name` on `data`. Panics on an unknown name, or when the target finds a bug.
pub fn run(name: &str, data: &[u8]) {
    let target = target(name).unwrap_or_else(|| {
        let names: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
        panic!("unknown fuzz target {name:?}; the targets are {names:?}")
    });
    (target.run)(data);
}
