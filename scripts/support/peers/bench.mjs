// One Node client that measures delayq (over HTTP with undici, in Redis or PostgreSQL mode),
// BullMQ (in process, straight to Redis) and pg-boss (in process, straight to PostgreSQL) the
// same way, so that scripts/bench can put them side by side (docs/design.md §6: a peer
// measured in the same run with the same client). scripts/bench copies this file beside the
// node_modules it installs from package.json / package-lock.json (under the target dir),
// because ES modules resolve their imports next to the file.
//
//   node bench.mjs add      --system delayq|bullmq|pgboss STORE [--server URL] --duration MS
//   node bench.mjs batch    --system delayq|bullmq|pgboss STORE [--server URL] --jobs N
//   node bench.mjs lateness --system delayq|bullmq|pgboss STORE [--server URL --consumer-server URL]
//                           --rate N --duration MS
//   node bench.mjs pop      --system delayq|pgboss STORE [--server URL] --jobs N --consumers N
//                           --duration MS
//
// STORE is `--redis URL` (BullMQ; delayq in Redis mode) or `--postgres URL` (pg-boss; delayq
// in PostgreSQL mode): the store the system keeps its jobs in, which the batch figure measures.
//
// add: one delayed job per call (100-byte body, due in 1 h), --clients calls in flight, for
//   --duration after a --warmup. delayq: POST /add through an undici keep-alive pool of
//   --clients connections; BullMQ: queue.add(name, data, {delay}); pg-boss:
//   boss.send(name, data, {startAfter}).
// batch: --jobs delayed jobs in batches of --batch, one batch in flight (delayq POST /add
//   {"tasks": [...]}, BullMQ queue.addBulk, pg-boss boss.insert), and the store's size before
//   and after (Redis: `INFO memory` used_memory; PostgreSQL: pg_total_relation_size, table +
//   indexes + TOAST, of delayq's `tasks` or of pg-boss's job table and its partitions), so
//   jobs/s and bytes per delayed job come from one run on a fresh store.
// lateness: a producer adds --rate jobs per second for --duration, each --ahead ms before its
//   due time (in batches every 5 ms, as `delayq bench lateness` does), while a consumer process
//   of its own (forked from this one) takes them with --consumers in parallel: delayq on the
//   --consumer-server instance, each consumer a loop of long-polling POST /pop that carries
//   the finish of the task it held; BullMQ a Worker of concurrency --consumers; pg-boss
//   --consumers boss.work loops (batchSize 1) polling every 0.5 s, the smallest interval
//   pg-boss 10 allows (it has no wake-up for a job that becomes due). Lateness = the time the
//   consumer has the job − its due time (delayq: due_ms; BullMQ: job.timestamp +
//   job.opts.delay; pg-boss: the due time the producer put in the job's data, which is also
//   its startAfter), on the machine's one clock.
// pop: --jobs jobs ready now are added first (in batches of --batch, not measured), then
//   --consumers loops take and finish them until none is left or --duration has passed:
//   delayq a POST /pop that carries the finish of the task before (one call per task), pg-boss
//   boss.fetch + boss.complete (two calls per job, as its API has no other way). jobs/s =
//   jobs finished / the time it took.
//
// The BullMQ job's data is a 98-character string, 100 bytes once BullMQ stores it as JSON;
// pg-boss's is {"b": "x…"}, 100 bytes of JSON text (jsonb in the table); delayq's body is 100
// bytes of text. Prints one JSON object on stdout.

import { fork } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { Queue, Worker } from 'bullmq';
import IORedis from 'ioredis';
import pg from 'pg';
import PgBoss from 'pg-boss';
import { Pool } from 'undici';

const HOUR_MS = 3_600_000;
const BODY = 'x'.repeat(100);
const DATA = 'x'.repeat(98);
// {"b":"…"} is 8 characters around the 92: 100 bytes of JSON, as BODY and DATA.
const PG_DATA = { b: 'x'.repeat(92) };
// pg-boss 10's smallest polling interval (its POLICY.MIN_POLLING_INTERVAL_MS).
const PGBOSS_POLL_S = 0.5;
// The connections of a pg-boss instance: delayq's default pool size (docs/postgres.md).
const PG_POOL = 16;
const NAME = 'bench';
const PRODUCER_TICK_MS = 5;
const PRODUCER_IN_FLIGHT = 16;
const POP_TIMEOUT_MS = 500;

function parseArgs(argv) {
  const [figure, ...rest] = argv;
  const opts = {
    figure,
    system: null,
    redis: null,
    postgres: null,
    server: null,
    consumerServer: null,
    clients: 50,
    duration: 5_000,
    warmup: 1_000,
    jobs: 100_000,
    batch: 1_000,
    rate: 2_000,
    ahead: 1_000,
    consumers: 50,
    grace: 5_000,
    queue: 'bench',
  };
  const numeric = new Set(['clients', 'duration', 'warmup', 'jobs', 'batch', 'rate', 'ahead', 'consumers', 'grace']);
  for (let i = 0; i < rest.length; i += 2) {
    const key = rest[i].replace(/^--/, '').replace(/-([a-z])/g, (_, c) => c.toUpperCase());
    const value = rest[i + 1];
    if (!(key in opts) || key === 'figure' || value === undefined) {
      fail(`unknown or incomplete argument ${rest[i]}`);
    }
    if (numeric.has(key)) {
      const n = Number(value);
      if (!Number.isSafeInteger(n) || n < 0) fail(`--${rest[i].slice(2)} must be a whole number >= 0, got ${value}`);
      opts[key] = n;
    } else {
      opts[key] = value;
    }
  }
  if (!['add', 'batch', 'lateness', 'pop', 'consume'].includes(figure)) fail(`unknown figure ${figure}`);
  if (!['delayq', 'bullmq', 'pgboss'].includes(opts.system)) fail('--system must be delayq, bullmq or pgboss');
  if (opts.system === 'bullmq' && !opts.redis) fail('--redis URL is needed for bullmq (its redis-server)');
  if (opts.system === 'pgboss' && !opts.postgres) fail('--postgres URL is needed for pgboss (its database)');
  if (opts.system === 'delayq' && !opts.server) fail('--server URL is needed for delayq');
  if (opts.system === 'delayq' && !opts.redis === !opts.postgres) {
    fail('delayq needs one of --redis URL or --postgres URL (the store its server uses)');
  }
  if (figure === 'pop' && opts.system === 'bullmq') fail('the pop figure is measured for delayq and pgboss');
  if (opts.clients < 1 || opts.consumers < 1 || opts.batch < 1 || opts.rate < 1) {
    fail('--clients, --consumers, --batch and --rate must be at least 1');
  }
  return opts;
}

function fail(message) {
  process.stderr.write(`bench.mjs: ${message}\n`);
  process.exit(2);
}

/** The versions this run used, read from the node_modules beside this file. */
function versions() {
  const v = { node: process.version };
  for (const name of ['bullmq', 'ioredis', 'pg-boss', 'pg', 'undici']) {
    try {
      v[name] = JSON.parse(readFileSync(new URL(`./node_modules/${name}/package.json`, import.meta.url))).version;
    } catch {
      v[name] = null;
    }
  }
  return v;
}

/** Milliseconds since the epoch with sub-millisecond resolution (the machine's one clock). */
const nowMs = () => performance.timeOrigin + performance.now();

function redisOptions(url) {
  const u = new URL(url);
  // A Worker's blocking connection needs maxRetriesPerRequest null (BullMQ says so).
  return { host: u.hostname, port: Number(u.port || 6379), maxRetriesPerRequest: null };
}

/** A started pg-boss instance on --postgres, with the bench's queue created. */
async function pgBoss(o) {
  const boss = new PgBoss({ connectionString: o.postgres, max: PG_POOL });
  boss.on('error', (err) => process.stderr.write(`bench.mjs: pg-boss: ${err.message || err}\n`));
  await boss.start();
  await boss.createQueue(o.queue);
  return boss;
}

/** What the batch figure weighs: the store's bytes now, and what they are. */
async function storeMeter(o) {
  if (o.postgres) {
    const client = new pg.Client({ connectionString: o.postgres });
    await client.connect();
    // pg-boss 10 keeps jobs in a table partitioned by queue: its partitions hold the rows.
    const [sql, what] = o.system === 'delayq'
      ? ["SELECT pg_total_relation_size('delayq.tasks') AS b", 'pg_total_relation_size(delayq.tasks)']
      : ["SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) AS b FROM pg_class c WHERE c.oid = 'pgboss.job'::regclass " +
         "OR c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'pgboss.job'::regclass)",
         'pg_total_relation_size of pgboss.job and its partitions'];
    return {
      what: `${what} (table + indexes + TOAST)`,
      bytes: async () => Number((await client.query(sql)).rows[0].b),
      close: () => client.end(),
    };
  }
  const redis = new IORedis(redisOptions(o.redis));
  return {
    what: 'Redis INFO memory used_memory',
    bytes: async () => {
      const m = /^used_memory:(\d+)/m.exec(await redis.info('memory'));
      if (!m) throw new Error('INFO memory has no used_memory');
      return Number(m[1]);
    },
    close: () => redis.disconnect(),
  };
}

/** p50/p99/max of a list of milliseconds, rounded to 0.01 ms. */
function percentiles(values) {
  if (values.length === 0) return { p50: null, p99: null, max: null };
  const sorted = Float64Array.from(values).sort();
  const at = (q) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
  const r = (x) => Math.round(x * 100) / 100;
  return { p50: r(at(0.5)), p99: r(at(0.99)), max: r(sorted[sorted.length - 1]) };
}

/** The delayq side: HTTP through an undici keep-alive pool. */
function delayqClient(server, connections) {
  const pool = new Pool(server, { connections, pipelining: 1, keepAliveTimeout: 60_000 });
  async function post(path, body) {
    const res = await pool.request({
      path,
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    const json = await res.body.json();
    if (res.statusCode !== 200 || json.code !== 0) {
      throw new Error(`${path}: HTTP ${res.statusCode}: ${json.message}`);
    }
    return json.data;
  }
  return { post, close: () => pool.close() };
}

function task(id, extra) {
  return { topic: NAME, id, body: BODY, ...extra };
}

/** `clients` loops of `op(n)` for warmup + duration; counts only what ends in the window. */
async function closedLoop(clients, warmupMs, durationMs, op) {
  let next = 0;
  let done = 0;
  let errors = 0;
  let firstError = null;
  const latencies = [];
  const start = nowMs();
  const from = start + warmupMs;
  const until = from + durationMs;
  async function loop() {
    while (nowMs() < until) {
      const t0 = nowMs();
      try {
        await op(next++);
        const t1 = nowMs();
        if (t1 >= from && t1 < until) {
          done++;
          latencies.push(t1 - t0);
        }
      } catch (err) {
        errors++;
        firstError ??= String(err.message || err);
        // A refused call must not spin: the figure would then count errors, not jobs.
        await sleep(10);
      }
    }
  }
  await Promise.all(Array.from({ length: clients }, loop));
  return {
    jobs: done,
    seconds: durationMs / 1000,
    jobs_per_s: Math.round(done / (durationMs / 1000)),
    latency_ms: percentiles(latencies),
    errors,
    first_error: firstError,
  };
}

async function figureAdd(o) {
  const measured = `${o.clients} in flight, 1 delayed job (100-byte body, due in 1 h) a call, ` +
    `${o.duration / 1000} s after ${o.warmup / 1000} s warm-up`;
  if (o.system === 'delayq') {
    const c = delayqClient(o.server, o.clients);
    const r = await closedLoop(o.clients, o.warmup, o.duration,
      (n) => c.post('/add', task(`a${n}`, { delay_ms: HOUR_MS })));
    await c.close();
    return { ...r, measured: `HTTP POST /add (undici pool of ${o.clients} keep-alive connections), ${measured}` };
  }
  if (o.system === 'pgboss') {
    const boss = await pgBoss(o);
    const r = await closedLoop(o.clients, o.warmup, o.duration,
      () => boss.send(o.queue, PG_DATA, { startAfter: HOUR_MS / 1000 }));
    await boss.stop({ graceful: false });
    return { ...r, measured: `boss.send(name, data, {startAfter}) in process (pool of ${PG_POOL}), ${measured}` };
  }
  const queue = new Queue(o.queue, { connection: redisOptions(o.redis) });
  await queue.waitUntilReady();
  const r = await closedLoop(o.clients, o.warmup, o.duration,
    () => queue.add(NAME, DATA, { delay: HOUR_MS }));
  await queue.close();
  return { ...r, measured: `queue.add(name, data, {delay}) in process, ${measured}` };
}

/** Adds jobs in batches, each due `delayMs` from now (delayq's ids `${prefix}N`):
 * {addBatch(first, count), close, how}. */
async function batchAdder(o, delayMs, prefix) {
  if (o.system === 'delayq') {
    const c = delayqClient(o.server, 1);
    return {
      addBatch: async (first, count) => {
        const tasks = Array.from({ length: count }, (_, k) => task(`${prefix}${first + k}`, { delay_ms: delayMs }));
        const items = await c.post('/add', { tasks });
        const refused = items.filter((item) => item.code !== 0);
        if (refused.length) throw new Error(`${refused.length} tasks refused; first: ${refused[0].message}`);
      },
      close: () => c.close(),
      how: 'HTTP POST /add {"tasks": [...]}',
    };
  }
  if (o.system === 'pgboss') {
    const boss = await pgBoss(o);
    const startAfter = delayMs > 0 ? String(delayMs / 1000) : undefined;
    return {
      addBatch: (_first, count) =>
        boss.insert(Array.from({ length: count }, () => ({ name: o.queue, data: PG_DATA, startAfter }))),
      close: () => boss.stop({ graceful: false }),
      how: 'boss.insert([...])',
    };
  }
  const queue = new Queue(o.queue, { connection: redisOptions(o.redis) });
  await queue.waitUntilReady();
  return {
    addBatch: (_first, count) =>
      queue.addBulk(Array.from({ length: count }, () => ({ name: NAME, data: DATA, opts: { delay: delayMs } }))),
    close: () => queue.close(),
    how: 'queue.addBulk',
  };
}

async function figureBatch(o) {
  const meter = await storeMeter(o);
  const { addBatch, close, how } = await batchAdder(o, HOUR_MS, 'b');
  // One job first, so that the scripts both sides load into Redis, or the first pages of the
  // tables, are not counted as jobs.
  await addBatch(o.jobs, 1);
  await sleep(200);
  const before = await meter.bytes();
  const t0 = nowMs();
  for (let first = 0; first < o.jobs; first += o.batch) {
    await addBatch(first, Math.min(o.batch, o.jobs - first));
  }
  const seconds = (nowMs() - t0) / 1000;
  await sleep(200);
  const after = await meter.bytes();
  await close();
  await meter.close();
  const perJob = (after - before) / o.jobs;
  return {
    jobs: o.jobs,
    seconds: Math.round(seconds * 1000) / 1000,
    jobs_per_s: Math.round(o.jobs / seconds),
    bytes_before: before,
    bytes_after: after,
    bytes_per_job: Math.round(perJob * 10) / 10,
    bytes_per_job_beyond_body: Math.round((perJob - 100) * 10) / 10,
    measured: `${o.jobs} delayed jobs (100-byte body, due in 1 h) in batches of ${o.batch}, one batch in flight, ` +
      `${how}; ${meter.what} before and after (one job added first)`,
  };
}

async function figurePop(o) {
  const { addBatch, close, how } = await batchAdder(o, 0, 'p');
  for (let first = 0; first < o.jobs; first += o.batch) {
    await addBatch(first, Math.min(o.batch, o.jobs - first));
  }
  await close();
  let done = 0;
  let errors = 0;
  let firstError = null;
  const failed = async (err) => {
    errors++;
    firstError ??= String(err.message || err);
    await sleep(10);
  };
  // A loop stops when the store has none left for it (an empty pop or fetch: the jobs were all
  // ready before the clock started), or at the deadline, so that a slow system costs a bound.
  let loop;
  let deadline;
  let stop;
  if (o.system === 'delayq') {
    const c = delayqClient(o.server, o.consumers);
    loop = async () => {
      let held = null;
      while (nowMs() < deadline) {
        const req = { topic: NAME, timeout_ms: 0 };
        if (held) req.finish = { topic: NAME, id: held.id, receipt: held.receipt };
        try {
          const t = await c.post('/pop', req);
          if (held) done++;
          held = t;
          if (!t) return;
        } catch (err) {
          held = null;
          await failed(err);
        }
      }
      if (held) {
        await c.post('/finish', { topic: NAME, id: held.id, receipt: held.receipt });
        done++;
      }
    };
    stop = () => c.close();
  } else {
    const boss = await pgBoss(o);
    loop = async () => {
      while (nowMs() < deadline) {
        try {
          const [job] = await boss.fetch(o.queue);
          if (!job) return;
          await boss.complete(o.queue, job.id);
          done++;
        } catch (err) {
          await failed(err);
        }
      }
    };
    stop = () => boss.stop({ graceful: false });
  }
  const t0 = nowMs();
  deadline = t0 + o.duration;
  await Promise.all(Array.from({ length: o.consumers }, loop));
  const seconds = (nowMs() - t0) / 1000;
  await stop();
  return {
    jobs: o.jobs,
    finished: done,
    seconds: Math.round(seconds * 1000) / 1000,
    jobs_per_s: Math.round(done / seconds),
    consumers: o.consumers,
    errors,
    first_error: firstError,
    measured: `${o.jobs} jobs ready before the clock starts (added by ${how}, not measured), ${o.consumers} loops ` +
      (o.system === 'delayq'
        ? 'of POST /pop carrying the finish of the task before (one call per task)'
        : `of boss.fetch + boss.complete (two calls per job; pool of ${PG_POOL})`) +
      ` until none is left or ${o.duration / 1000} s have passed`,
  };
}

/** The consumer process of the lateness figure: reports what it received to its parent. */
async function consume(o, total, deadline) {
  const lateness = [];
  let early = 0;
  let errors = 0;
  let firstError = null;
  const seen = (late) => {
    lateness.push(late);
    if (late < 0) early++;
  };
  let stop;
  if (o.system === 'delayq') {
    const c = delayqClient(o.consumerServer || o.server, o.consumers);
    const loops = Array.from({ length: o.consumers }, async () => {
      let held = null;
      while (lateness.length < total && nowMs() < deadline) {
        const req = { topic: NAME, timeout_ms: POP_TIMEOUT_MS };
        if (held) req.finish = { topic: NAME, id: held.id, receipt: held.receipt };
        try {
          const t = await c.post('/pop', req);
          held = null;
          if (t) {
            seen(nowMs() - t.due_ms);
            held = t;
          }
        } catch (err) {
          errors++;
          firstError ??= String(err.message || err);
          held = null;
          await sleep(10);
        }
      }
      if (held) await c.post('/finish', { topic: NAME, id: held.id, receipt: held.receipt }).catch(() => {});
    });
    process.send({ ready: true });
    await Promise.all(loops);
    stop = () => c.close();
  } else if (o.system === 'pgboss') {
    let finished;
    const all = new Promise((resolve) => { finished = resolve; });
    const boss = await pgBoss(o);
    boss.on('error', (err) => { errors++; firstError ??= String(err.message || err); });
    for (let i = 0; i < o.consumers; i++) {
      await boss.work(o.queue, { pollingIntervalSeconds: PGBOSS_POLL_S, batchSize: 1 }, async ([job]) => {
        seen(nowMs() - job.data.d);
        if (lateness.length >= total) finished();
      });
    }
    process.send({ ready: true });
    await Promise.race([all, sleep(Math.max(0, deadline - nowMs()))]);
    stop = () => boss.stop({ graceful: false, wait: false });
  } else {
    let finished;
    const all = new Promise((resolve) => { finished = resolve; });
    const worker = new Worker(o.queue, async (job) => {
      seen(nowMs() - (job.timestamp + (job.opts.delay ?? job.delay ?? 0)));
      if (lateness.length >= total) finished();
    }, { connection: redisOptions(o.redis), concurrency: o.consumers, autorun: false });
    worker.on('error', (err) => { errors++; firstError ??= String(err.message || err); });
    await worker.waitUntilReady();
    worker.run();
    process.send({ ready: true });
    await Promise.race([all, sleep(Math.max(0, deadline - nowMs()))]);
    stop = () => worker.close(true);
  }
  const received = lateness.length;
  await stop();
  return { received, early, errors, first_error: firstError, lateness_ms: percentiles(lateness) };
}

async function figureLateness(o) {
  const total = Math.round((o.rate * o.duration) / 1000);
  const child = fork(process.argv[1], ['consume', ...process.argv.slice(3)], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
  const message = (what) => new Promise((resolve, reject) => {
    child.once('message', resolve);
    child.once('exit', (code) => reject(new Error(`the consumer process exited (${code}) before ${what}`)));
  });
  // The consumers are long-polling before the first job is due.
  const firstDue = Math.ceil(nowMs()) + o.ahead + 1_000;
  const lastDue = firstDue + Math.floor(((total - 1) * 1000) / o.rate);
  const deadline = lastDue + o.grace;
  child.send({ total, deadline });
  await message('it was ready');
  const result = message('it reported');
  result.catch(() => {}); // awaited below; this only keeps an early exit from being unhandled

  let addBatch;
  let close;
  if (o.system === 'delayq') {
    const c = delayqClient(o.server, PRODUCER_IN_FLIGHT);
    addBatch = async (dues, first) => {
      const tasks = dues.map((due, k) => task(`l${first + k}`, { run_at_ms: due }));
      const items = await c.post('/add', { tasks });
      return items.filter((item) => item.code !== 0).length;
    };
    close = () => c.close();
  } else if (o.system === 'pgboss') {
    const boss = await pgBoss(o);
    addBatch = async (dues) => {
      // An ISO time ending in Z is the job's startAfter as it is (pg-boss reads it so).
      await boss.insert(dues.map((due) => ({
        name: o.queue, data: { d: due, ...PG_DATA }, startAfter: new Date(due).toISOString(),
      })));
      return 0;
    };
    close = () => boss.stop({ graceful: false });
  } else {
    const queue = new Queue(o.queue, { connection: redisOptions(o.redis) });
    await queue.waitUntilReady();
    addBatch = async (dues) => {
      const now = Date.now();
      await queue.addBulk(dues.map((due) => ({ name: NAME, data: DATA, opts: { delay: Math.max(0, due - now) } })));
      return 0;
    };
    close = () => queue.close();
  }
  let next = 0;
  let inFlight = 0;
  let refused = 0;
  let lateAdds = 0;
  let errors = 0;
  let firstError = null;
  const sends = [];
  while (next < total) {
    await sleep(PRODUCER_TICK_MS);
    const addUntil = nowMs() + o.ahead;
    const dues = [];
    const first = next;
    while (next < total && firstDue + Math.floor((next * 1000) / o.rate) <= addUntil && dues.length < 10_000) {
      dues.push(firstDue + Math.floor((next * 1000) / o.rate));
      next++;
    }
    if (dues.length === 0) continue;
    while (inFlight >= PRODUCER_IN_FLIGHT) await sleep(1);
    inFlight++;
    sends.push(addBatch(dues, first).then((n) => {
      refused += n;
      if (nowMs() > dues[0]) lateAdds += dues.length;
    }, (err) => {
      errors += dues.length;
      firstError ??= String(err.message || err);
    }).finally(() => { inFlight--; }));
  }
  await Promise.all(sends);
  await close();
  const seen = await result;
  // The consumer may have exited already, once its report was sent.
  if (child.connected) child.disconnect();
  return {
    rate: o.rate,
    jobs: total,
    consumers: o.consumers,
    ...seen,
    producer_refused: refused,
    producer_errors: errors,
    producer_first_error: firstError,
    late_adds: lateAdds,
    measured: `${total} jobs due at ${o.rate}/s over ${o.duration / 1000} s, each added ${o.ahead} ms ahead ` +
      `(batches every ${PRODUCER_TICK_MS} ms), ${o.consumers} consumers in a process of their own, ` +
      (o.system === 'delayq'
        ? `each a loop of POST /pop (long-poll ${POP_TIMEOUT_MS} ms) carrying the previous task's finish` +
          (o.consumerServer && o.consumerServer !== o.server ? ', on another delayq instance than the producer' : '')
        : o.system === 'pgboss'
          ? `${o.consumers} boss.work loops (batchSize 1, pollingIntervalSeconds ${PGBOSS_POLL_S}, pg-boss's smallest)`
          : 'a BullMQ Worker (concurrency ' + o.consumers + ')') +
      `; waited up to ${o.grace / 1000} s after the last due`,
  };
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  if (o.figure === 'consume') {
    // Bounded by the producer: when it is gone (killed by scripts/bench's timeout), so is this.
    process.once('disconnect', () => process.exit(1));
    const { total, deadline } = await new Promise((resolve) => process.once('message', resolve));
    const report = await consume(o, total, deadline);
    await new Promise((resolve) => process.send(report, resolve));
    return;
  }
  const run = { add: figureAdd, batch: figureBatch, lateness: figureLateness, pop: figurePop }[o.figure];
  const r = await run(o);
  process.stdout.write(JSON.stringify({ figure: o.figure, system: o.system, ...r, versions: versions() }) + '\n');
}

main().then(() => process.exit(0), (err) => {
  process.stderr.write(`bench.mjs: ${err.stack || err}\n`);
  process.exit(1);
});
