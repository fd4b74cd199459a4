//! Configuration: flag > environment > TOML file > default, every bad value named with its
//! accepted range, and what `serve` does with a configuration it cannot run.
//!
//! Environment variables are process-wide (and setting them needs `unsafe`, which the
//! workspace forbids), so the cases that use them run in a child process: this test binary
//! re-runs itself with the variables set and the `child` test reading them.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use clap::Parser;
use delayq_daemon::config::{FsyncPolicy, LogFormat, StorageConfig};
use delayq_daemon::{ServeArgs, ServerConfig, ServerError};

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

/// Command-line arguments of a case.
type Args<'a> = &'a [&'a str];
/// Environment variables of a case.
type Env<'a> = &'a [(&'a str, &'a str)];

const CHILD: &str = "DELAYQ_SERVER_CONFIG_TEST_CHILD";
const ARG_SEP: char = '\u{1f}';

/// Resolves a configuration from `args` and `env` in a child process; returns its summary or
/// its error message.
fn resolve_in_child(args: &[&str], env: &[(&str, &str)]) -> Result<String, String> {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child", "--nocapture", "--test-threads=1"]);
    for (key, _) in std::env::vars() {
        if key.starts_with("DELAYQ_") {
            cmd.env_remove(key);
        }
    }
    cmd.env(CHILD, args.join(&ARG_SEP.to_string()));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    for line in stdout.lines() {
        if let Some(ok) = line.strip_prefix("RESULT ") {
            return Ok(ok.to_owned());
        }
        if let Some(err) = line.strip_prefix("ERROR ") {
            return Err(err.to_owned());
        }
    }
    panic!(
        "the child said nothing useful:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The child side: only does something when run by [`resolve_in_child`].
#[test]
fn child() {
    let Ok(joined) = std::env::var(CHILD) else {
        return;
    };
    let mut argv = vec!["delayq-serve".to_owned()];
    argv.extend(
        joined
            .split(ARG_SEP)
            .filter(|a| !a.is_empty())
            .map(str::to_owned),
    );
    let result = Cli::try_parse_from(argv)
        .map_err(|e| e.to_string().replace('\n', " "))
        .and_then(|cli| ServerConfig::from_args(&cli.serve).map_err(|e| e.to_string()));
    match result {
        Ok(c) => println!("\nRESULT {}", summary(&c)),
        Err(e) => println!("\nERROR {e}"),
    }
}

fn summary(c: &ServerConfig) -> String {
    let tokens: Vec<String> = c
        .tokens
        .iter()
        .map(|t| match &t.topics {
            None => t.token.clone(),
            Some(topics) => format!("{}@{}", t.token, topics.join(",")),
        })
        .collect();
    format!(
        "listen={} max_batch={} ttr={} retries={} tokens={}",
        c.listen,
        c.limits.max_batch,
        c.defaults.ttr_ms,
        c.defaults.max_retries.as_i64(),
        tokens.join(";")
    )
}

fn temp_toml(text: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let path = std::env::temp_dir().join(format!(
        "delayq-server-test-{}-{}.toml",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn precedence_is_flag_then_env_then_file_then_default() {
    let file = temp_toml(
        "listen = \"127.0.0.1:7001\"\n[limits]\nmax_batch = 7\n[defaults]\nttr_ms = 1111\nmax_retries = 9\n",
    );
    let config = file.to_str().unwrap();
    let table: [(Args, Env, &str); 5] = [
        (
            &[],
            &[],
            "listen=127.0.0.1:9280 max_batch=10000 ttr=30000 retries=3 tokens=",
        ),
        (
            &["--config", config],
            &[],
            "listen=127.0.0.1:7001 max_batch=7 ttr=1111 retries=9 tokens=",
        ),
        (
            &[],
            &[
                ("DELAYQ_CONFIG", config),
                ("DELAYQ_MAX_BATCH", "8"),
                ("DELAYQ_DEFAULT_MAX_RETRIES", "-1"),
            ],
            "listen=127.0.0.1:7001 max_batch=8 ttr=1111 retries=-1 tokens=",
        ),
        (
            &[
                "--config",
                config,
                "--max-batch",
                "9",
                "--listen",
                "0.0.0.0:1",
            ],
            &[("DELAYQ_MAX_BATCH", "8"), ("DELAYQ_LISTEN", "127.0.0.1:2")],
            "listen=0.0.0.0:1 max_batch=9 ttr=1111 retries=9 tokens=",
        ),
        (
            &[],
            &[("DELAYQ_AUTH_TOKENS", "admin-1 orders-1@orders,orders-2")],
            "listen=127.0.0.1:9280 max_batch=10000 ttr=30000 retries=3 tokens=admin-1;orders-1@orders,orders-2",
        ),
    ];
    for (args, env, want) in table {
        assert_eq!(
            resolve_in_child(args, env),
            Ok(want.to_owned()),
            "{args:?} {env:?}"
        );
    }
    let _ = std::fs::remove_file(file);
}

#[test]
fn tokens_of_flags_or_environment_replace_those_of_the_file() {
    let file = temp_toml("[[tokens]]\ntoken = \"file-1\"\ntopics = [\"orders\"]\n");
    let config = file.to_str().unwrap();
    let table: [(Args, Env, &str); 3] = [
        (&["--config", config], &[], "tokens=file-1@orders"),
        (
            &["--config", config],
            &[("DELAYQ_AUTH_TOKENS", "env-1")],
            "tokens=env-1",
        ),
        (
            &["--config", config, "--auth-token", "flag-1"],
            &[("DELAYQ_AUTH_TOKENS", "env-1")],
            "tokens=flag-1",
        ),
    ];
    for (args, env, want) in table {
        let got = resolve_in_child(args, env).expect("resolves");
        assert!(got.ends_with(want), "{args:?} {env:?}: {got}");
    }
    let _ = std::fs::remove_file(file);
}

#[test]
fn bad_values_name_the_flag_or_key_and_the_range() {
    let file_bad_range = temp_toml("[limits]\nmax_batch = 0\n");
    let file_bad_type = temp_toml("[limits]\nmax_pop_timeout_ms = \"soon\"\n");
    let file_unknown = temp_toml("lisen = \"127.0.0.1:1\"\n");
    let file_unknown_nested = temp_toml("[limits]\nmax_bach = 5\n");
    let file_bool = temp_toml("fsync = true\n");
    let (f1, f2, f3) = (
        file_bad_range.to_str().unwrap(),
        file_bad_type.to_str().unwrap(),
        file_unknown.to_str().unwrap(),
    );
    let (f4, f5) = (
        file_unknown_nested.to_str().unwrap(),
        file_bool.to_str().unwrap(),
    );
    let table: [(Args, Env, &[&str]); 16] = [
        (
            &[],
            &[("DELAYQ_MAX_BATCH", "0")],
            &["--max-batch", "DELAYQ_MAX_BATCH", "1 to 100000"],
        ),
        (
            &["--max-batch", "lots"],
            &[],
            &["--max-batch", "\"lots\"", "1 to 100000"],
        ),
        (
            &["--config", f1],
            &[],
            &["limits.max_batch", f1, "1 to 100000"],
        ),
        (&["--config", f2], &[], &["limits.max_pop_timeout_ms", f2]),
        (
            &["--config", f2],
            &[],
            &["\"soon\"", "a whole number from 0 to 3600000"],
        ),
        (&["--config", f4], &[], &["unknown key limits.max_bach", f4]),
        (
            &["--config", f5],
            &[],
            &["fsync in", f5, "true", "always, interval, never"],
        ),
        (
            &[],
            &[("DELAYQ_DEFAULT_MAX_RETRIES", "many")],
            &[
                "--default-max-retries",
                "DELAYQ_DEFAULT_MAX_RETRIES",
                "\"many\"",
                "-1 (no limit)",
            ],
        ),
        (&["--config", f3], &[], &["lisen", f3]),
        (
            &["--config", "/nonexistent/delayq.toml"],
            &[],
            &["/nonexistent/delayq.toml"],
        ),
        (
            &["--fsync", "sometimes"],
            &[],
            &["--fsync", "always, interval, never"],
        ),
        (
            &[],
            &[("DELAYQ_LISTEN", "localhost")],
            &["--listen", "DELAYQ_LISTEN", "127.0.0.1:9280"],
        ),
        (&["--redis", "http://x"], &[], &["--redis", "redis://"]),
        (
            &["--default-pop-timeout-ms", "70000"],
            &[],
            &["--default-pop-timeout-ms", "--max-pop-timeout-ms"],
        ),
        (
            &["--max-page-size", "5000"],
            &[],
            &["--max-page-size", "1 to 1000"],
        ),
        (
            &["--log-format", "xml"],
            &[],
            &["--log-format", "text, json"],
        ),
    ];
    for (args, env, needles) in table {
        let err = resolve_in_child(args, env).expect_err("an error");
        for needle in needles {
            assert!(
                err.contains(needle),
                "{args:?} {env:?}: {err:?} lacks {needle:?}"
            );
        }
    }
    for f in [
        file_bad_range,
        file_bad_type,
        file_unknown,
        file_unknown_nested,
        file_bool,
    ] {
        let _ = std::fs::remove_file(f);
    }
}

#[test]
fn help_lists_every_setting_with_its_variable_range_and_default() {
    use clap::CommandFactory as _;
    let help = Cli::command().render_long_help().to_string();
    let table = [
        (
            "--listen <ADDR>",
            "DELAYQ_LISTEN",
            "[default: 127.0.0.1:9280]",
        ),
        (
            "--data-dir <DIR>",
            "DELAYQ_DATA_DIR",
            "[default: ./delayq-data]",
        ),
        ("--max-batch <N>", "DELAYQ_MAX_BATCH", "[default: 10000]"),
        (
            "--max-pop-timeout-ms <MS>",
            "DELAYQ_MAX_POP_TIMEOUT_MS",
            "[default: 60000]",
        ),
        (
            "--default-max-retries <N>",
            "DELAYQ_DEFAULT_MAX_RETRIES",
            "[default: 3]",
        ),
        (
            "--fsync <always|interval|never>",
            "DELAYQ_FSYNC",
            "[default: interval]",
        ),
    ];
    for (flag, env, default) in table {
        let at = help
            .find(flag)
            .unwrap_or_else(|| panic!("{flag} missing:\n{help}"));
        let entry = &help[at..];
        let end = entry[2..].find("\n      --").map_or(entry.len(), |i| i + 2);
        let entry = &entry[..end];
        assert!(entry.contains(env) && entry.contains(default), "{entry}");
    }
    assert!(
        help.contains("Accepts a whole number from 1 to 100000."),
        "{help}"
    );
    assert!(
        !help.contains("DELAYQ_AUTH_TOKENS="),
        "token values from the environment are never shown"
    );
}

#[test]
fn flags_parse_in_process() {
    let cli = Cli::try_parse_from([
        "serve",
        "--storage",
        "memory",
        "--fsync",
        "always",
        "--log-format",
        "json",
        "--max-long-polls",
        "5",
        "--retention-ms",
        "0",
        "--auth-token",
        "t1",
        "--auth-token",
        "t2@a,b",
    ])
    .unwrap();
    // The parent's environment could interfere only through DELAYQ_* variables, which CI does
    // not set; the env cases above run in a clean child.
    let c = ServerConfig::from_args(&cli.serve).unwrap();
    assert_eq!(c.storage, StorageConfig::Memory);
    assert_eq!(c.log_format, LogFormat::Json);
    assert_eq!(c.http.max_long_polls, 5);
    assert_eq!(c.defaults.retention_ms, 0);
    assert_eq!(c.tokens.len(), 2);
    assert_eq!(
        c.tokens[1].topics,
        Some(vec!["a".to_owned(), "b".to_owned()])
    );
    let dbg = format!("{c:?}");
    assert!(
        !dbg.contains("t1") && dbg.contains("redacted"),
        "tokens are not printed: {dbg}"
    );

    let cli =
        Cli::try_parse_from(["serve", "--fsync", "interval", "--fsync-interval-ms", "25"]).unwrap();
    let c = ServerConfig::from_args(&cli.serve).unwrap();
    assert!(matches!(
        c.storage,
        StorageConfig::Embedded {
            fsync: FsyncPolicy::Interval(interval),
            ..
        } if interval == std::time::Duration::from_millis(25)
    ));
}

#[tokio::test]
async fn serve_builds_sentinel_and_cluster_modes_and_names_a_busy_address() {
    // Nothing listens there: the queue is built (Redis need not be up at start) and a
    // request fails as unavailable, naming the deployment.
    for (url, named) in [
        ("redis+sentinel://127.0.0.1:1/mymaster", "mymaster"),
        ("redis+cluster://127.0.0.1:1", "cluster 127.0.0.1:1"),
    ] {
        let mut redis = ServerConfig::default();
        redis.storage = StorageConfig::Redis { url: url.into() };
        redis.redis_wait_replicas = 1;
        let queue = delayq_daemon::build_queue(&redis).await.expect(url);
        let err = queue.stats("t").await.unwrap_err();
        assert_eq!(err.kind(), delayq::ErrorKind::Unavailable, "{err}");
        assert!(err.to_string().contains(named), "{err}");
        let _ = queue.shutdown().await;
    }
    let mut bad = ServerConfig::default();
    bad.storage = StorageConfig::Redis {
        url: "redis+sentinel://127.0.0.1:1".into(),
    };
    let err = delayq_daemon::build_queue(&bad).await.unwrap_err();
    assert!(err.to_string().contains("master-name"), "{err}");

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut busy = ServerConfig::default();
    busy.storage = StorageConfig::Memory;
    busy.listen = taken.local_addr().unwrap();
    let err = delayq_daemon::serve(busy.clone(), async {})
        .await
        .unwrap_err();
    assert!(matches!(err, ServerError::Bind { .. }), "{err:?}");
    assert!(err.to_string().contains(&busy.listen.to_string()), "{err}");
}

#[tokio::test]
async fn serve_runs_and_stops_on_its_shutdown_future() {
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = free.local_addr().unwrap();
    drop(free);
    let mut config = ServerConfig::default();
    config.storage = StorageConfig::Memory;
    config.listen = addr;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(delayq_daemon::serve(config, async {
        let _ = stopped.await;
    }));
    let url = format!("http://{addr}/healthz");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let Ok(resp) = reqwest::get(&url).await {
            assert_eq!(resp.status(), 200);
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the server never answered"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    stop.send(()).unwrap();
    let result = tokio::time::timeout(std::time::Duration::from_secs(10), running)
        .await
        .unwrap()
        .unwrap();
    assert!(result.is_ok(), "{result:?}");
}
