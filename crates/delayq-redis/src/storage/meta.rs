//! The deployment-wide values that are not tasks: the beanstalk job id counter (one `INCR`
//! key, first value 1) and the settings store (one hash per namespace, key → value), shared
//! by every instance. Each is one command (or one short script) on one key, so each lives in a
//! slot of its own in a cluster; writes wait for replicas like task writes when asked. A
//! settings write also publishes `m <instance> <namespace>` on the events channel, so the
//! other instances' readers (push targets, schedules) read again at once instead of polling.

use delayq::{Error, Result};

use super::InstanceState;
use crate::error::maybe_applied;
use crate::scripts::SCRIPTS;

impl InstanceState {
    /// The next number of the deployment's job id counter.
    pub(super) async fn next_job_id(&self) -> Result<u64> {
        self.check_open()?;
        let what = "taking a job id";
        let key = self.keys.job_ids();
        let mut incr = redis::cmd("INCR");
        incr.arg(&key);
        let mark = self.redis.mark();
        let id: u64 = self
            .redis
            .io(what, incr.query_async(&mut self.redis.conn()))
            .await?;
        self.redis
            .replicated(what, [key.as_str()], mark)
            .await
            .map_err(maybe_applied)?;
        Ok(id)
    }

    /// Stores `value` under (`namespace`, `key`).
    pub(super) async fn put_meta(&self, namespace: &str, key: &str, value: Vec<u8>) -> Result<()> {
        self.check_open()?;
        check_name("namespace", namespace)?;
        let what = format!("storing setting {key:?} of {namespace:?}");
        let hash = self.keys.meta(namespace);
        let mut put = SCRIPTS.meta.prepare_invoke();
        put.key(&hash)
            .arg("put")
            .arg(key)
            .arg(value)
            .arg(&self.channel)
            .arg(&self.instance)
            .arg(namespace);
        let mark = self.redis.mark();
        self.redis
            .io(&what, put.invoke_async::<u64>(&mut self.redis.conn()))
            .await?;
        self.ctx.settings.notify(namespace);
        self.redis
            .replicated(&what, [hash.as_str()], mark)
            .await
            .map_err(maybe_applied)?;
        Ok(())
    }

    /// Every (key, value) of `namespace`, in key order.
    pub(super) async fn list_meta(&self, namespace: &str) -> Result<Vec<(String, Vec<u8>)>> {
        self.check_open()?;
        check_name("namespace", namespace)?;
        let what = format!("reading the settings of {namespace:?}");
        let mut hgetall = redis::cmd("HGETALL");
        hgetall.arg(self.keys.meta(namespace));
        let all: std::collections::HashMap<String, Vec<u8>> = self
            .redis
            .io(&what, hgetall.query_async(&mut self.redis.conn()))
            .await?;
        let mut all: Vec<(String, Vec<u8>)> = all.into_iter().collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(all)
    }

    /// Removes (`namespace`, `key`); whether it was there.
    pub(super) async fn delete_meta(&self, namespace: &str, key: &str) -> Result<bool> {
        self.check_open()?;
        check_name("namespace", namespace)?;
        let what = format!("removing setting {key:?} of {namespace:?}");
        let hash = self.keys.meta(namespace);
        let mut del = SCRIPTS.meta.prepare_invoke();
        del.key(&hash)
            .arg("del")
            .arg(key)
            .arg("")
            .arg(&self.channel)
            .arg(&self.instance)
            .arg(namespace);
        let mark = self.redis.mark();
        let removed: u64 = self
            .redis
            .io(&what, del.invoke_async(&mut self.redis.conn()))
            .await?;
        if removed > 0 {
            self.ctx.settings.notify(namespace);
            self.redis
                .replicated(&what, [hash.as_str()], mark)
                .await
                .map_err(maybe_applied)?;
        }
        Ok(removed > 0)
    }
}

/// An empty namespace would name the prefix's own keys: refused.
fn check_name(field: &str, value: &str) -> Result<()> {
    if value.is_empty() {
        return Err(Error::invalid(field, "must not be empty"));
    }
    Ok(())
}
