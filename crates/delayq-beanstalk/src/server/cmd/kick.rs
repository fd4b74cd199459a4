//! `kick` and `kick-job`.

use delayq::{Queue, State};

use crate::proto::Reply;
use crate::server::session::{Session, internal, is_gone};

impl Session {
    /// `kick <bound>`; the kicked jobs' `kicks` of `stats-job` are counted by looking at the
    /// candidates (the first page of buried, else delayed, jobs) before and after.
    pub(crate) async fn kick(&mut self, bound: u32) -> Reply {
        let queue = self.server.queue.clone();
        let candidates = match kick_candidates(&queue, &self.used).await {
            Ok(c) => c,
            Err(e) => return internal("kick", &e),
        };
        let n = match queue.kick(&self.used, u64::from(bound)).await {
            Ok(n) => n,
            Err(e) => return internal("kick", &e),
        };
        let jobs = &self.server.jobs;
        let mut counted = 0;
        for task_id in candidates {
            if counted == n {
                break;
            }
            if let Ok(info) = queue.get(&self.used, &task_id).await
                && info.state == State::Ready
                && let Ok(id) = jobs.job_id(&queue, &self.used, &task_id).await
            {
                jobs.count_kick(id);
                counted += 1;
            }
        }
        Reply::KickedCount(n as u32)
    }

    /// `kick-job <id>`: a buried or delayed job becomes ready.
    pub(crate) async fn kick_job(&mut self, id: u64) -> Reply {
        let queue = self.server.queue.clone();
        match self.server.jobs.find(&queue, id).await {
            Ok(Some((r, info))) if matches!(info.state, State::Dead | State::Delayed) => {
                match queue.kick_job(&r.topic, &r.task_id).await {
                    Ok(()) => {
                        self.server.jobs.count_kick(id);
                        Reply::Kicked
                    }
                    Err(e) if is_gone(&e) => Reply::NotFound,
                    Err(e) => internal("kick-job", &e),
                }
            }
            Ok(_) => Reply::NotFound,
            Err(e) => internal("kick-job", &e),
        }
    }
}

/// The ids a `kick` may move: the buried tasks of `topic`, or if it has none its delayed
/// ones (one page).
async fn kick_candidates(queue: &Queue, topic: &str) -> delayq::Result<Vec<String>> {
    let page_size = queue.context().limits.max_page_size;
    for state in [State::Dead, State::Delayed] {
        let page = queue.list(topic, Some(state), 1, page_size).await?;
        if !page.items.is_empty() {
            return Ok(page.items.into_iter().map(|t| t.id).collect());
        }
    }
    Ok(Vec::new())
}
