//! Replays every committed fuzz input through its target, in the ordinary test suite: the
//! corpus (`fuzz/corpus/<target>/`, the fuzzer's seeds and what it kept as new coverage) and
//! every input that once found a bug (`fuzz/crashes/<target>/`, kept after the fix as a
//! regression test). A target panics exactly when it finds a bug, so each must run clean.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use delayq_fuzz::TARGETS;

/// The files of `fuzz/<kind>/<target>/`, sorted (none when the directory does not exist).
fn inputs(kind: &str, target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz")
        .join(kind)
        .join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.is_file() && p.file_name().is_none_or(|n| n != "README.md"))
        .collect();
    files.sort();
    files
}

fn replay(kind: &str) -> usize {
    let mut failures = Vec::new();
    let mut count = 0;
    for target in TARGETS {
        for path in inputs(kind, target.name) {
            let data = std::fs::read(&path).expect("read a fuzz input");
            count += 1;
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| (target.run)(&data))) {
                let why = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default();
                failures.push(format!("{}: {why}", path.display()));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "inputs that fail:\n{}",
        failures.join("\n")
    );
    count
}

#[test]
fn every_target_has_a_corpus_and_it_replays_clean() {
    for target in TARGETS {
        assert!(
            !inputs("corpus", target.name).is_empty(),
            "fuzz/corpus/{} is empty",
            target.name
        );
    }
    assert!(replay("corpus") > 0);
}

#[test]
fn every_crash_found_replays_clean_since_its_fix() {
    replay("crashes");
}
