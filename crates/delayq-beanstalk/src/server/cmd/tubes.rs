//! `use`, `watch`, `ignore`, `list-tubes` and `list-tubes-watched` (`list-tube-used` is one
//! line of [`Session::apply`]).

use crate::proto::Reply;
use crate::proto::stats::tube_list;
use crate::server::session::{Session, has_jobs, internal};
use crate::server::tubes::Tube;

impl Session {
    /// `use <tube>`.
    pub(crate) async fn use_tube(&mut self, tube: String) -> Reply {
        if tube != self.used {
            self.server.tubes.with(&tube, |t| t.using += 1);
            let old = std::mem::replace(&mut self.used, tube);
            self.server.tubes.with(&old, |t| t.using -= 1);
            self.free_if_unused(&old).await;
        }
        Reply::Using(self.used.clone().into_bytes())
    }

    /// `watch <tube>`.
    pub(crate) fn watch_tube(&mut self, tube: String) -> Reply {
        if !self.watch.contains(&tube) {
            self.server.tubes.with(&tube, |t| t.watching += 1);
            self.watch.push(tube);
        }
        Reply::Watching(self.watch.len())
    }

    /// `ignore <tube>`: the last watched tube stays.
    pub(crate) async fn ignore(&mut self, tube: String) -> Reply {
        match self.watch.iter().position(|t| *t == tube) {
            Some(_) if self.watch.len() < 2 => Reply::NotIgnored,
            Some(i) => {
                // beanstalkd's watch set moves its last tube into the hole.
                self.watch.swap_remove(i);
                self.server.tubes.with(&tube, |t| t.watching -= 1);
                self.free_if_unused(&tube).await;
                Reply::Watching(self.watch.len())
            }
            None => Reply::Watching(self.watch.len()),
        }
    }

    /// `list-tubes`.
    pub(crate) async fn list_tubes(&self) -> Reply {
        match self.tubes().await {
            Ok(tubes) => Reply::Ok(tube_list(tubes.iter().map(|t| t.name.as_bytes()))),
            Err(e) => internal("list-tubes", &e),
        }
    }

    /// `list-tubes-watched`.
    pub(crate) fn list_tubes_watched(&self) -> Reply {
        Reply::Ok(tube_list(self.watch.iter().map(|t| t.as_bytes())))
    }

    /// The tubes in beanstalkd's list order (see `server/tubes.rs`).
    pub(crate) async fn tubes(&self) -> delayq::Result<Vec<Tube>> {
        let topics = self.server.queue.topics().await?;
        let with_jobs: Vec<String> = topics
            .into_iter()
            .filter(|(_, s)| has_jobs(s))
            .map(|(name, _)| name)
            .collect();
        Ok(self.server.tubes.reconcile(&with_jobs))
    }
}
