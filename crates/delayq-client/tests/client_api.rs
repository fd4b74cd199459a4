//! The typed client against the real server library, in process: every operation decodes the
//! server's answers into the core types, and refusals and transport failures come back as
//! the right [`ErrorKind`], retryable or not.

use delayq_client::{
    Ack, AddOutcome, Backoff, Call, Client, ClientOptions, ErrorKind, ListOptions, MaxRetries,
    NewTask, OnDuplicate, PopOptions, ReleaseOptions, State,
};
use delayq_daemon::ServerConfig;
use delayq_daemon::config::{StorageConfig, TokenConfig};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// A server on a free loopback port, stopped when dropped.
struct TestServer {
    url: String,
    _stop: oneshot::Sender<()>,
}

async fn start(tokens: Vec<TokenConfig>) -> TestServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    let mut config = ServerConfig::default();
    config.storage = StorageConfig::Memory;
    config.tokens = tokens;
    let queue = delayq_daemon::build_queue(&config).await.expect("queue");
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let shutdown = async {
            let _ = stopped.await;
        };
        let _ = delayq_daemon::run(listener, queue, &config, shutdown).await;
    });
    TestServer { url, _stop: stop }
}

#[tokio::test]
async fn every_operation_decodes_its_answer() {
    let server = start(Vec::new()).await;
    let client = Client::new(&server.url, None).expect("client");
    client.healthz().await.expect("healthz");
    client.readyz().await.expect("readyz");

    let task = NewTask::new("orders", "o-1")
        .body("{\"n\":1}")
        .ttr_ms(5_000)
        .max_retries(MaxRetries::Limited(1))
        .backoff(Backoff::Fixed { ms: 60_000 });
    assert_eq!(client.add(&task).await.expect("add"), AddOutcome::Added);
    let dup = client.add(&task).await.expect_err("duplicate");
    assert_eq!(dup.kind(), ErrorKind::Conflict);
    assert!(!dup.is_retryable());
    let keep = task.clone().on_duplicate(OnDuplicate::Keep);
    assert_eq!(client.add(&keep).await.expect("keep"), AddOutcome::Existed);

    let info = client.get("orders", "o-1").await.expect("get");
    assert_eq!(info.state, State::Ready);
    assert_eq!(info.ttr_ms, 5_000);
    assert_eq!(info.max_retries, 1);
    assert_eq!(info.backoff, Some(Backoff::Fixed { ms: 60_000 }));

    let popped = client
        .pop("orders", PopOptions::default().timeout_ms(1_000))
        .await
        .expect("pop");
    assert_eq!(popped.len(), 1);
    let receipt = popped[0].receipt.clone();
    let deadline = client
        .touch("orders", "o-1", Some(&receipt))
        .await
        .expect("touch");
    assert!(deadline > info.created_at_ms);
    let state = client
        .release(
            "orders",
            "o-1",
            &ReleaseOptions::default().receipt(&receipt).error("boom"),
        )
        .await
        .expect("release");
    assert_eq!(state, State::Delayed, "the backoff delays the redelivery");
    let stale = client
        .finish("orders", "o-1", Some(&receipt))
        .await
        .expect_err("stale receipt");
    assert_eq!(stale.kind(), ErrorKind::Conflict);

    client.cancel("orders", "o-1").await.expect("cancel");
    assert_eq!(
        client.get("orders", "o-1").await.expect("get").state,
        State::Cancelled
    );
    client.delete("orders", "o-1").await.expect("delete");
    let gone = client.get("orders", "o-1").await.expect_err("deleted");
    assert_eq!(gone.kind(), ErrorKind::NotFound);
    assert_eq!(gone.status(), Some(404));
    assert!(
        gone.to_string().contains("/get?topic=orders&id=o-1"),
        "{gone}"
    );
}

#[tokio::test]
async fn batches_lists_stats_and_dead_tasks() {
    let server = start(Vec::new()).await;
    let client = Client::new(&server.url, None).expect("client");
    let tasks: Vec<NewTask> = (0..5)
        .map(|i| NewTask::new("jobs", format!("j-{i}")).max_retries(MaxRetries::Limited(0)))
        .chain([NewTask::new("jobs", "j-0")])
        .collect();
    let items = client.add_batch(&tasks).await.expect("batch");
    assert_eq!(items.len(), 6);
    assert!(items[..5].iter().all(|item| item.is_ok()));
    let refused = items[5].result.as_ref().expect_err("duplicate in batch");
    assert_eq!(refused.code, 409);

    let popped = client
        .pop("jobs", PopOptions::default().count(5).timeout_ms(1_000))
        .await
        .expect("pop");
    assert_eq!(popped.len(), 5);
    for task in &popped {
        let state = client
            .release("jobs", &task.id, &ReleaseOptions::default())
            .await
            .expect("release");
        assert_eq!(state, State::Dead);
    }
    let dead = client
        .tasks(
            "jobs",
            &ListOptions::default().state(State::Dead).page_size(2),
        )
        .await
        .expect("list");
    assert_eq!((dead.total, dead.items.len()), (5, 2));
    assert!(dead.items.iter().all(|t| t.state == State::Dead));

    client.requeue("jobs", "j-0").await.expect("requeue");
    assert_eq!(client.requeue_all("jobs").await.expect("requeue all"), 4);
    let stats = client.stats("jobs").await.expect("stats");
    assert_eq!((stats.ready, stats.dead, stats.total), (5, 0, 5));
    let all = client.stats_all().await.expect("stats of all");
    assert_eq!(all.get("jobs").map(|s| s.ready), Some(5));
    let topics = client.topics().await.expect("topics");
    assert_eq!(topics.len(), 1);
    assert_eq!(topics[0].0, "jobs");

    let metrics = client.metrics().await.expect("metrics");
    assert!(metrics.contains("# TYPE"), "{metrics}");

    let raw = client
        .send(&Call::get("jobs", "j-1"))
        .await
        .expect("raw get")
        .expect("data");
    assert_eq!(
        raw["state"], 1,
        "the raw answer keeps the API's numeric state"
    );
    assert_eq!(raw["state_name"], "ready");
}

#[tokio::test]
async fn finish_batch_answers_each_task() {
    let server = start(Vec::new()).await;
    let client = Client::new(&server.url, None).expect("client");
    let tasks: Vec<NewTask> = (0..3)
        .map(|i| NewTask::new("acks", format!("a-{i}")))
        .collect();
    client.add_batch(&tasks).await.expect("batch");
    let popped = client
        .pop("acks", PopOptions::default().count(2).timeout_ms(1_000))
        .await
        .expect("pop");
    assert_eq!(popped.len(), 2);
    let mut acks: Vec<(&str, &str, Option<&str>)> = popped
        .iter()
        .map(|t| (t.topic.as_str(), t.id.as_str(), Some(t.receipt.as_str())))
        .collect();
    acks.push(("acks", "a-unknown", None));
    acks.push(("acks", popped[0].id.as_str(), Some("stale")));
    let finished = client.finish_batch(&acks).await.expect("finish batch");
    assert_eq!(finished.len(), 4);
    assert!(finished[..2].iter().all(Result::is_ok), "{finished:?}");
    assert_eq!(finished[2].as_ref().expect_err("unknown").code, 404);
    assert_eq!(
        finished[3].as_ref().expect_err("finished already").code,
        409
    );
    let stats = client.stats("acks").await.expect("stats");
    assert_eq!((stats.finished, stats.ready), (2, 1));
}

#[tokio::test]
async fn invalid_input_names_the_field() {
    let server = start(Vec::new()).await;
    let client = Client::new(&server.url, None).expect("client");
    let err = client
        .add(&NewTask::new("bad topic!", "x"))
        .await
        .expect_err("invalid topic");
    assert_eq!(err.kind(), ErrorKind::Invalid);
    assert!(err.api_message().unwrap_or("").contains("topic"), "{err}");
}

#[tokio::test]
async fn tokens_are_sent_and_checked() {
    let server = start(vec![TokenConfig::new("s3cret")]).await;
    let anonymous = Client::new(&server.url, None).expect("client");
    let err = anonymous.stats("t").await.expect_err("no token");
    assert_eq!(err.kind(), ErrorKind::Unauthorized);
    assert!(!err.is_retryable());
    let with_token = Client::new(&server.url, Some("s3cret".into())).expect("client");
    with_token.stats("t").await.expect("with the token");
    assert!(
        !format!("{with_token:?}").contains("s3cret"),
        "the token never shows in debug output"
    );
}

#[tokio::test]
async fn transport_failures_are_retryable_and_name_the_url() {
    // Bind and drop: nothing listens on this port any more.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let client = Client::new(&url, None).expect("client");
    let err = client.healthz().await.expect_err("nothing listens");
    assert_eq!(err.kind(), ErrorKind::Connect);
    assert!(err.is_retryable() && err.is_transport());
    let text = err.to_string();
    assert!(text.contains("cannot reach the server"), "{text}");
    assert!(text.contains(&format!("{url}/healthz")), "{text}");
}

#[tokio::test]
async fn timeouts_are_retryable() {
    // A listener that accepts but never answers.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let options = ClientOptions::default().request_timeout(std::time::Duration::from_millis(200));
    let client = Client::with_options(&url, None, options).expect("client");
    let err = client.stats("t").await.expect_err("no answer");
    assert_eq!(err.kind(), ErrorKind::Timeout);
    assert!(err.is_retryable() && err.is_timeout());
}

#[tokio::test]
async fn pop_after_acknowledges_the_held_task_and_takes_the_next() {
    let server = start(Vec::new()).await;
    let client = Client::new(&server.url, None).expect("client");
    for id in ["a", "b", "c"] {
        client.add(&NewTask::new("loop", id)).await.expect("add");
    }
    let now = PopOptions::default().timeout_ms(0);
    let a = client.pop("loop", now).await.expect("pop").remove(0);
    let finish_a = Ack::Finish {
        topic: "loop",
        id: &a.id,
        receipt: Some(&a.receipt),
    };
    let b = client
        .pop_after(finish_a, "loop", now)
        .await
        .expect("finish a, pop b");
    assert_eq!(b[0].id, "b");
    assert_eq!(
        client.get("loop", "a").await.expect("get").state,
        State::Finished
    );

    // A failed acknowledgement is the error, and nothing was popped: c stays READY.
    let stale = Ack::Finish {
        topic: "loop",
        id: "b",
        receipt: Some("stale"),
    };
    let err = client
        .pop_after(stale, "loop", now)
        .await
        .expect_err("stale");
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert_eq!(
        client.get("loop", "c").await.expect("get").state,
        State::Ready
    );

    let release = ReleaseOptions::default()
        .receipt(b[0].receipt.clone())
        .delay_ms(60_000);
    let release_b = Ack::Release {
        topic: "loop",
        id: "b",
        options: &release,
    };
    let c = client
        .pop_after(release_b, "loop", now)
        .await
        .expect("release b, pop c");
    assert_eq!(c[0].id, "c");
    let b = client.get("loop", "b").await.expect("get");
    assert_eq!((b.state, b.retries), (State::Delayed, 1));
}
