//! The library's OpenTelemetry side (feature `opentelemetry`, docs/tracing.md): a task added
//! without a trace context of its own continues the caller's current span; a callback runs
//! with its task's context as the current one, so the spans it starts join the producer's
//! trace; a task without a context leaves the callback's current context empty.

use std::sync::Arc;
use std::time::Duration;

use delayq::{NewTask, Queue, State, TraceContext, WorkerOptions};
use tokio::sync::Mutex;

const PRODUCER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const EXPLICIT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

async fn wait_finished(q: &Queue, id: &str) {
    for _ in 0..500 {
        if q.get("t", id)
            .await
            .is_ok_and(|t| t.state == State::Finished)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{id} was not finished");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_current_span_goes_in_and_the_tasks_context_comes_out_in_callbacks() {
    let q = Queue::memory();
    let producer = TraceContext::parse(PRODUCER, Some("k=v")).unwrap();
    let explicit = TraceContext::parse(EXPLICIT, None).unwrap();
    {
        // The producer's span is current while it adds: the untraced task takes it, the
        // task with a context of its own keeps that.
        let _span = delayq::otel::context_of(&producer).attach();
        q.add(NewTask::new("t", "inherits")).await.unwrap();
        q.add(NewTask::new("t", "own").trace(explicit.clone()))
            .await
            .unwrap();
    }
    q.add(NewTask::new("t", "none")).await.unwrap();
    assert_eq!(
        q.get("t", "inherits").await.unwrap().trace,
        Some(producer.clone())
    );
    assert_eq!(
        q.get("t", "own").await.unwrap().trace,
        Some(explicit.clone())
    );
    assert_eq!(q.get("t", "none").await.unwrap().trace, None);

    // Each callback sees its own task's context as the current one.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    let workers = q
        .on_expire("t", WorkerOptions::default(), move |d| {
            let s = Arc::clone(&s);
            async move {
                s.lock().await.push((d.id.clone(), delayq::otel::current()));
                Ok::<(), String>(())
            }
        })
        .unwrap();
    for id in ["inherits", "own", "none"] {
        wait_finished(&q, id).await;
    }
    workers.shutdown().await;
    let mut seen = seen.lock().await.clone();
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        seen,
        vec![
            ("inherits".to_owned(), Some(producer)),
            ("none".to_owned(), None),
            ("own".to_owned(), Some(explicit)),
        ]
    );
}
