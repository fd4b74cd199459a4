//! `delayq data check|repair` through the real binary, on a data directory a real `delayq
//! serve` wrote: a clean directory checks ok; damage in the middle of a log stops the server
//! from starting and is reported with file and byte offset; repair (only with --yes) cuts it
//! back so the server starts again with what came before the damage.

mod support;

use std::path::Path;

use support::{Server, delayq};

fn segment_of(dir: &Path) -> std::path::PathBuf {
    // The shard with the most data: the topic hashes to one shard.
    let mut best = None;
    for shard in std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
    {
        for f in std::fs::read_dir(&shard)
            .unwrap()
            .map(|e| e.unwrap().path())
        {
            if f.extension().is_some_and(|e| e == "seg") {
                let len = std::fs::metadata(&f).unwrap().len();
                if best.as_ref().is_none_or(|(l, _)| len > *l) {
                    best = Some((len, f));
                }
            }
        }
    }
    best.expect("a segment").1
}

#[test]
fn check_and_repair_a_damaged_data_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let data_arg = data.to_str().unwrap();
    {
        let server = Server::start_with(&["--data-dir", data_arg, "--fsync", "always"]);
        for i in 0..40 {
            let id = format!("t{i}");
            server
                .run(&["add", "--topic", "orders", "--id", &id, "--delay", "1h"])
                .assert_code(0);
        }
    } // SIGKILL: what was acknowledged is on disk

    let ok = delayq(&["data", "check", "--data-dir", data_arg]);
    ok.assert_code(0);
    assert!(ok.stdout.contains(": ok"), "{}", ok.stdout);
    // The settings have a log of their own (format 3), checked like the shards'.
    let settings = data.join("settings").display().to_string();
    assert!(
        ok.stdout.contains(&format!("{settings}: ")),
        "checks {settings}: {}",
        ok.stdout
    );

    let seg = segment_of(&data);
    let mut bytes = std::fs::read(&seg).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x5a;
    std::fs::write(&seg, &bytes).unwrap();

    let check = delayq(&["data", "check", "--data-dir", data_arg]);
    check.assert_code(1);
    assert!(
        check.stdout.contains(&seg.display().to_string()),
        "names the file: {}",
        check.stdout
    );
    assert!(
        check.stdout.contains("byte offset"),
        "names the offset: {}",
        check.stdout
    );

    // The server refuses to start on damaged data, naming it.
    let port = support::free_port().to_string();
    let listen = format!("127.0.0.1:{port}");
    let refused = delayq(&["serve", "--listen", &listen, "--data-dir", data_arg]);
    refused.assert_code(1);
    assert!(
        refused.stderr.contains(&seg.display().to_string()),
        "{}",
        refused.stderr
    );

    delayq(&["data", "repair", "--data-dir", data_arg]).assert_code(1); // needs --yes
    let dry = delayq(&["data", "repair", "--data-dir", data_arg, "--dry-run"]);
    dry.assert_code(0);
    assert!(dry.stdout.contains("would"), "{}", dry.stdout);
    delayq(&["data", "check", "--data-dir", data_arg]).assert_code(1); // a dry run changes nothing
    let repaired = delayq(&["data", "repair", "--data-dir", data_arg, "--yes"]);
    repaired.assert_code(0);
    assert!(repaired.stdout.contains("cut"), "{}", repaired.stdout);
    delayq(&["data", "check", "--data-dir", data_arg]).assert_code(0);

    // It starts again, with the tasks from before the damage.
    let server = Server::start_with(&["--data-dir", data_arg]);
    let stats = server.json(&["stats", "--topic", "orders"]);
    let delayed = stats["delayed"].as_u64().unwrap();
    assert!(
        delayed > 0 && delayed < 40,
        "kept the prefix before the damage: {delayed}"
    );
}
