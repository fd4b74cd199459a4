//! `peek`, `peek-ready`, `peek-delayed` and `peek-buried`.

use delayq::State;

use crate::proto::Reply;
use crate::server::session::{Session, internal};

impl Session {
    /// `peek <id>`.
    pub(crate) async fn peek(&self, id: u64) -> Reply {
        match self.server.jobs.find(&self.server.queue, id).await {
            Ok(Some((_, info))) => Reply::Found(id, info.body),
            Ok(None) => Reply::NotFound,
            Err(e) => internal("peek", &e),
        }
    }

    /// `peek-ready`, `peek-delayed` and `peek-buried` (`state` `Dead`) in the used tube.
    pub(crate) async fn peek_state(&self, state: State) -> Reply {
        let queue = &self.server.queue;
        match queue.peek(&self.used, state).await {
            Ok(Some(info)) => match self.server.jobs.job_id(queue, &info.topic, &info.id).await {
                Ok(id) => Reply::Found(id, info.body),
                Err(e) => internal("peek", &e),
            },
            Ok(None) => Reply::NotFound,
            Err(e) => internal("peek", &e),
        }
    }
}
