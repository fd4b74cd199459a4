#!/usr/bin/env python3
"""Turns the raw outputs of one `scripts/bench` run into target/bench/summary.json.

One entry per target of docs/design.md §6 (and the issue-15 extras `scripts/bench` measures):
the figure, its unit, what it is compared with (a ceiling or a peer measured in the same run,
or nothing for an absolute target), the ratio, the target and whether it is met. A target the
run did not measure, or measured under other conditions than the target's (1M tasks where
the target says 10M), is listed with `met: null` and a note, never silently dropped.

Standard library only. Usage: bench_summary.py OUT_DIR --mode M --started T ... (see
scripts/bench).
"""

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys

SCHEMA = 1


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def load_json(path):
    text = read(path)
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def machine(raw):
    model = None
    for line in (read("/proc/cpuinfo") or "").splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mem_kib = None
    for line in (read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])

    def load(name):
        text = read(os.path.join(raw, name))
        return [float(x) for x in text.split()] if text else None

    return {
        "nproc": os.cpu_count(),
        "model_name": model,
        "memory_gib": round(mem_kib / 1024 / 1024, 1) if mem_kib else None,
        "kernel": platform.release(),
        "load_average_before": load("load-before"),
        "load_average_after_build": load("load-after-build"),
        "load_average_after": load("load-after"),
        "busiest_processes_before": read(os.path.join(raw, "machine-before.txt")),
        "busiest_processes_after": read(os.path.join(raw, "machine-after.txt")),
    }


def criterion(home):
    """Every criterion benchmark of this run: full id -> ns per iteration and elements."""
    found = {}
    for root, _dirs, files in os.walk(home):
        if os.path.basename(root) != "new" or "benchmark.json" not in files:
            continue
        bench = load_json(os.path.join(root, "benchmark.json"))
        est = load_json(os.path.join(root, "estimates.json"))
        if not bench or not est:
            continue
        elements = (bench.get("throughput") or {}).get("Elements") or 1
        found[bench["full_id"]] = {
            "median_ns_per_iteration": est["median"]["point_estimate"],
            "mean_ns_per_iteration": est["mean"]["point_estimate"],
            "elements_per_iteration": elements,
            "median_ns_per_element": est["median"]["point_estimate"] / elements,
        }
    return found


# A label, a figure and its unit, and an optional note in parentheses (the restarts' CPU time).
LIB_LINE = re.compile(r"^(.*\S)\s+(-?[\d.]+) (tasks/s|B/task|s)(?:\s+\(.*\))?\s*$")


def embedded_lib(text):
    """The lines of `cargo bench -p delayq --bench embedded`: label -> (value, unit)."""
    lines = {}
    for line in (text or "").splitlines():
        m = LIB_LINE.match(line)
        if m:
            lines[m[1].strip()] = (float(m[2]), m[3])
    return lines


def wrk_rate(text):
    m = re.search(r"^Requests/sec:\s+([\d.]+)", text or "", re.M)
    return float(m[1]) if m else None


def counter(metrics, name):
    """An unlabelled counter of a /metrics page, or None."""
    m = re.search(rf"^{name} (\d+)", metrics or "", re.M)
    return int(m[1]) if m else None


def lateness_p99_ms(metrics):
    """The server's own firing-lateness histogram: the smallest bucket bound holding 99 %."""
    buckets = []
    for m in re.finditer(r'^delayq_fire_lateness_seconds_bucket\{le="([^"]+)"\} (\d+)', metrics or "", re.M):
        le = float("inf") if m[1] == "+Inf" else float(m[1]) * 1000
        buckets.append((le, int(m[2])))
    if not buckets or buckets[-1][1] == 0:
        return None, 0
    total = buckets[-1][1]
    for le, n in buckets:
        if n >= 0.99 * total:
            return le, total
    return None, total


def result(report, bench):
    if not report:
        return None
    return next((r for r in report.get("results", []) if r["bench"] == bench), None)


def judge(op, value, figure):
    if figure is None:
        return None
    return figure >= value if op == ">=" else figure <= value


def entry(what, figure, unit, target_op, target_value, target_unit, *, against=None,
          ratio=None, ratio_unit=None, source, met=None, judged=True, notes=(), detail=None):
    """One target. For a ratio target the ratio is judged, otherwise the figure. `ratio_unit`
    ("x" or "%") says how the ratio reads when it is not the target's own unit."""
    target = None
    if target_op is not None:
        target = {"op": target_op, "value": target_value, "unit": target_unit}
        if met is None and judged:
            met = judge(target_op, target_value, ratio if target_unit.startswith("%") or target_unit == "x" else figure)
    return {
        "what": what,
        "figure": figure,
        "unit": unit,
        "against": against,
        "ratio": ratio,
        "ratio_unit": ratio_unit,
        "target": target,
        "met": met if judged else None,
        "source": source,
        "notes": list(notes),
        "detail": detail,
    }


# The flow limits scripts/bench runs `delayq bench pop` with (--max-active, --rate-limit).
FLOW_MAX_ACTIVE = 1000
FLOW_RATE = 2000


PEER_SOURCE = "scripts/support/peers/bench.mjs (one Node client for both)"


class PeerRun:
    """One delayq mode against one peer system, both measured by scripts/support/peers/bench.mjs
    in this run, each figure on a store of its own: raw/peer-{delayq,SYSTEM}-{INFIX}FIGURE.json."""

    def __init__(self, J, system, package, infix, mode, store):
        self.J, self.system, self.infix, self.mode, self.store = J, system, infix, mode, store
        files = [J(f"peer-{s}-{infix}{n}.json") for s in (system, "delayq") for n in ("add", "batch")]
        versions = next((r["versions"] for r in files if r), {}) or {}
        self.peer = f"{package} {versions.get(package.lower()) or '?'}"
        self.out = []

    def got(self, system, name):
        return self.J(f"peer-{system}-{self.infix}{name}.json")

    def pair(self, name):
        return self.got("delayq", name), self.got(self.system, name)

    def notes(self, d, b):
        return [f"{label} not measured in this run (step failed?)"
                for label, r in (("delayq", d), (self.peer, b)) if not r]

    def compare(self, what, name, key, unit, op, value, target_unit, *, against_what, judge_ratio, note=None):
        """A figure of both; ratio = delayq / peer."""
        d, b = self.pair(name)
        fd = d.get(key) if d else None
        fb = b.get(key) if b else None
        notes = self.notes(d, b)
        for label, r in (("delayq", d), (self.peer, b)):
            if r and r.get("errors"):
                notes.append(f"{label}: {r['errors']} errors; first: {r.get('first_error')}")
            if r and r.get("finished") is not None and r["finished"] < r["jobs"]:
                notes.append(f"{label} finished {r['finished']} of {r['jobs']} jobs")
        if note:
            notes.append(note)
        ratio = round(fd / fb, 2) if fd is not None and fb else None
        measured = fd is not None and fb is not None
        t = entry(f"{self.mode} vs {self.peer.split()[0]}: {what}", fd, unit, op, value, target_unit,
                  against={"what": against_what.format(peer=self.peer, store=self.store), "value": fb}
                  if fb is not None else None,
                  ratio=ratio, ratio_unit="x", source=PEER_SOURCE + (f": {d['measured']}" if d else ""),
                  judged=measured if judge_ratio else fd is not None, notes=notes,
                  detail={"delayq": d, self.system: b})
        self.out.append(t)
        return t

    def adds(self, single, batch):
        """The two add rates, ≥ 1.0× the peer's `single` call and its `batch` call."""
        self.compare("one delayed job per call, 50 in flight, 100-byte body", "add", "jobs_per_s", "jobs/s",
                     ">=", 1.0, "x", against_what=f"{{peer}} {single} in process, same client, {{store}}",
                     judge_ratio=True)
        self.compare(f"delayed jobs in batches of 1 000 (POST /add tasks vs {batch})", "batch", "jobs_per_s",
                     "jobs/s", ">=", 1.0, "x", against_what=f"{{peer}} {batch}, same client, {{store}}",
                     judge_ratio=True)

    def lateness(self, rate, consumer, *, better=None):
        """p50 and p99 against DESIGN §6 (≤ 2 ms, ≤ 5 ms); with `better`, also the peer's p99
        over delayq's against that many times."""
        d, b = self.pair(f"lateness-{rate}")
        notes = self.notes(d, b)
        for label, r in (("delayq", d), (self.peer, b)):
            if not r:
                continue
            if r["received"] < r["jobs"]:
                notes.append(f"{label} received {r['received']} of {r['jobs']} jobs")
            errors = r.get("errors", 0) + r.get("producer_errors", 0) + r.get("producer_refused", 0)
            if errors:
                notes.append(f"{label}: {errors} errors; first: "
                             f"{r.get('first_error') or r.get('producer_first_error')}")
            if r.get("early"):
                notes.append(f"{label}: {r['early']} received before their due time")
        # Percentiles of what arrived say nothing about what did not: missing jobs fail.
        whole = bool(d) and d["received"] == d["jobs"] and not d.get("early")
        rate_words = f"{rate:,}".replace(",", " ")
        q_of = lambda r, q: (r or {}).get("lateness_ms", {}).get(q)
        for q, target in (("p50", 2), ("p99", 5)):
            fd, fb = q_of(d, q), q_of(b, q)
            self.out.append(entry(
                f"lateness {q}, {rate_words} jobs/s due, 50 consumers, {self.mode} (consumers on another "
                f"instance) vs {self.peer.split()[0]}", fd, "ms", "<=", target, "ms",
                against={"what": f"{self.peer} {consumer}, same producer client", "value": fb}
                if fb is not None else None,
                ratio=round(fd / fb, 2) if fd is not None and fb else None, ratio_unit="x",
                source=PEER_SOURCE + (f": {d['measured']}" if d else ""),
                met=(fd <= target and whole) if fd is not None else None, judged=fd is not None,
                notes=notes, detail={"delayq": d, self.system: b}))
        if better:
            fd, fb = q_of(d, "p99"), q_of(b, "p99")
            ratio = round(fb / fd, 1) if fd and fb is not None else None
            self.out.append(entry(
                f"lateness p99 {self.peer.split()[0]} / delayq ({self.mode}), {rate_words} jobs/s due, "
                "50 consumers (how many times later the peer is)", fd, "ms", ">=", better, "× lower p99 than the peer",
                against={"what": f"{self.peer} {consumer}", "value": fb} if fb is not None else None,
                ratio=ratio, ratio_unit="x", source=PEER_SOURCE + (f": {d['measured']}" if d else ""),
                met=(ratio >= better and whole) if ratio is not None else None, judged=ratio is not None,
                notes=notes + ([f"{self.peer}'s p99 is of the jobs it received in time, a bound from below"]
                               if b and b["received"] < b["jobs"] else []),
                detail={"delayq": d, self.system: b}))


def peers(J):
    """delayq in Redis mode against BullMQ (ratio = delayq / BullMQ), and delayq's Redis bytes
    per task beyond the body with the number of tasks it was measured at."""
    run = PeerRun(J, "bullmq", "BullMQ", "", "Redis mode", "own redis-server")
    run.adds("queue.add", "queue.addBulk")
    run.compare("Redis used_memory per delayed job, 100-byte body", "batch", "bytes_per_job", "B/job",
                "<=", 1.0, "x", against_what="{peer}, {store}", judge_ratio=True)
    d, b = run.pair("batch")
    beyond = (d["bytes_per_job_beyond_body"], d["jobs"], b["bytes_per_job_beyond_body"] if b else None,
              run.peer) if d else None
    for rate in (2000, 10000):
        run.lateness(rate, "Worker (concurrency 50, own process)")
    return run.out, beyond


def pg_peers(J):
    """delayq in PostgreSQL mode against pg-boss, issue 28 item 5: ≥ 1.0× pg-boss on every rate,
    ≥ 10× better lateness p99, and DESIGN §6's p99 ≤ 5 ms; bytes on disk per job beside them."""
    run = PeerRun(J, "pgboss", "pg-boss", "pg-", "PostgreSQL mode", "own PostgreSQL server")
    run.adds("boss.send", "boss.insert")
    run.compare("bytes on disk per delayed job (table + indexes, pg_total_relation_size), 100-byte body",
                "batch", "bytes_per_job", "B/job", None, None, None,
                against_what="{peer}'s job table and partitions, {store}", judge_ratio=False,
                note="no target (issue 28 sets none); below 1 = smaller than pg-boss")
    run.compare("pop + finish, 50 loops, jobs ready (POST /pop carrying the finish vs fetch + complete)",
                "pop", "jobs_per_s", "jobs/s", ">=", 1.0, "x",
                against_what="{peer} boss.fetch + boss.complete, same client, {store}", judge_ratio=True)
    for rate in (2000, 10000):
        run.lateness(rate, "50 boss.work loops polling every 0.5 s (its smallest interval, own process)",
                     better=10)
    return run.out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--mode", required=True)
    ap.add_argument("--started", required=True)
    ap.add_argument("--build-seconds", type=int)
    ap.add_argument("--run-seconds", type=int)
    ap.add_argument("--commit")
    ap.add_argument("--dirty", type=int, default=0)
    args = ap.parse_args()
    out = args.out
    raw = os.path.join(out, "raw")
    J = lambda name: load_json(os.path.join(raw, name))

    crit = criterion(os.path.join(out, "criterion"))
    lib = embedded_lib(read(os.path.join(raw, "embedded-lib")))
    targets = []

    # Timing wheel (criterion, thread CPU time).
    def wheel(what, ident, target, note=()):
        c = crit.get(ident)
        figure = round(c["median_ns_per_element"], 2) if c else None
        targets.append(entry(what, figure, "ns/op", "<=", target, "ns/op",
                             source=f"criterion {ident} (median, thread CPU time)",
                             notes=note if c else ["not measured in this run"]))

    wheel("timing wheel: add", "wheel_cpu/insert/warm", 20)
    wheel("timing wheel: add+fire, dense", "wheel_cpu/insert_fire/dense/warm", 40)
    wheel("timing wheel: add+fire, sparse (4096 timers over 60 s)",
          "wheel_cpu/insert_fire/sparse/warm", 40)
    wheel("timing wheel: cancel", "wheel_cpu/remove/warm", 30)
    c = crit.get("wheel_1m_add_fire_all_cpu/new")
    others = {k.rsplit("/", 1)[1]: round(v["median_ns_per_iteration"] / 1e6, 1)
              for k, v in crit.items() if k.startswith("wheel_1m_add_fire_all_cpu/")}
    targets.append(entry(
        "1M tasks added then all fired, in process (new wheel each run)",
        round(c["median_ns_per_iteration"] / 1e6, 1) if c else None, "ms", "<=", 100, "ms",
        source="criterion wheel_1m_add_fire_all_cpu/new (median, thread CPU time)",
        detail={"ms by variant": others} if others else None,
        notes=[] if c else ["not measured in this run"]))

    # HTTP: the embedded server's ceiling and what is compared with it.
    ceiling = J("ceiling.json")
    ceil = result(ceiling, "ceiling")
    wrk = [w for w in (wrk_rate(read(os.path.join(raw, n))) for n in ("wrk-healthz.txt", "wrk-healthz-2.txt")) if w]
    if ceil and wrk:
        w = statistics.mean(wrk)
        targets.append(entry(
            "delayq bench's client vs wrk -t1 -c50 on GET /healthz (same server, same run)",
            round(ceil["figure"]), "req/s", None, None, None,
            against={"what": "wrk -t1 -c50, mean of the runs before and after", "value": round(w)},
            ratio=round(100 * ceil["figure"] / w, 1), source="delayq bench ceiling; wrk",
            met=abs(ceil["figure"] / w - 1) <= 0.10,
            detail={"wrk_runs_req_per_s": [round(x) for x in wrk]}))
        targets[-1]["target"] = {"op": "within", "value": 10, "unit": "% of wrk"}
    else:
        targets.append(entry("delayq bench's client vs wrk -t1 -c50 on GET /healthz", None, "req/s",
                             None, None, None, source="delayq bench ceiling; wrk",
                             notes=["wrk not installed or a run failed"]))

    def http_line(what, name, bench, op, value, unit, *, storage, judged=True, notes=()):
        r = result(J(name), bench)
        if not r:
            targets.append(entry(what, None, "tasks/s", op, value, unit, source=f"delayq bench ({name})",
                                 judged=False, notes=["not measured in this run (step failed?)"]))
            return
        ratio = r["ratios"][0] if r["ratios"] else None
        extra = list(notes) + [n for n in r.get("notes", []) if "tasks finished" not in n]
        if r.get("errors"):
            extra.append(f"{r['errors']} errors; first: {r.get('first_error')}")
        targets.append(entry(
            what, round(r["figure"]), r["unit"], op, value, unit,
            against={"what": f"{ratio['against']} (GET /healthz of the same {storage} server, same clients)",
                     "value": round(ratio["tasks_per_s"])} if ratio else None,
            ratio=round(ratio["percent"], 1) if ratio else None,
            source=f"delayq bench ({r['measured']})", judged=judged, notes=extra,
            detail={"latency_ms": r.get("latency_ms"), "ceiling_req_per_s": (r.get("ceiling") or {}).get("requests_per_s")}))

    http_line("HTTP /add, 50 clients, 1 task a request, embedded (fsync interval)",
              "add-embedded.json", "add", ">=", 90, "% of the ceiling", storage="embedded")
    http_line("HTTP /add, 50 clients, 1 task a request, Redis (own redis-server, AOF everysec)",
              "add-redis.json", "add", ">=", 60, "% of the ceiling", storage="Redis")
    http_line("HTTP /add, 50 clients, 1 task a request, embedded, fsync always",
              "add-embedded-always.json", "add", None, None, None, storage="embedded (fsync always)")
    http_line("HTTP /add, 50 clients, 1 task a request, --storage memory",
              "add-memory.json", "add", None, None, None, storage="memory")
    def versus(what, name, base_name, value, unit, against_what, notes=lambda: []):
        """A run's /add rate as a share of another run's in the same scripts/bench run."""
        r, base = result(J(name), "add"), result(J(base_name), "add")
        if r and base and base["figure"]:
            targets.append(entry(
                what, round(r["figure"]), r["unit"], ">=", value, unit,
                against={"what": against_what, "value": round(base["figure"])},
                ratio=round(100 * r["figure"] / base["figure"], 1),
                source=f"delayq bench ({r['measured']}; against: {base['measured']})",
                notes=notes()))
        else:
            targets.append(entry(what, None, "tasks/s", ">=", value, unit,
                                 source=f"delayq bench ({name}, {base_name})", judged=False,
                                 notes=["not measured in this run (step failed?)"]))

    # Issue 27: what durability costs, the embedded add against --storage memory's.
    versus("HTTP /add, 50 clients, 1 task a request, embedded (fsync interval) vs --storage memory",
           "add-embedded.json", "add-memory.json", 90, "% of --storage memory",
           "the same adds to --storage memory, same run")
    # The cost of delayq's own spans: the same traced adds with export off and on.
    versus("HTTP /add, 50 clients, every task traced, span export on (OTLP/HTTP to a local sink) "
           "vs off, --storage memory",
           "add-traced-on.json", "add-traced-off.json", 95, "% of export off",
           "the same adds with export off, same run",
           notes=lambda: ["spans exported {}, dropped {}".format(*[
               counter(read(os.path.join(raw, "metrics-traced-on.txt")), name)
               for name in ("delayq_spans_exported_total", "delayq_spans_dropped_total")])])
    http_line("HTTP pop + finish, 32 workers, count 1, embedded",
              "pop-embedded.json", "pop", ">=", 80, "% of half the ceiling", storage="embedded")
    http_line("HTTP pop count=N + one batched finish, 32 workers, embedded (issue 15)",
              "pop-embedded.json", "pop (batch)", ">=", 100, "% of the ceiling", storage="embedded")
    http_line("HTTP ack and take the next (one request a task), 32 workers, embedded",
              "pop-embedded.json", "pop (ack and next)", ">=", 80, "% of the ceiling", storage="embedded")
    http_line("HTTP pop + finish, 32 workers, count 1, Redis",
              "pop-redis.json", "pop", ">=", 80, "% of half the ceiling", storage="Redis")
    http_line("HTTP pop count=N + one batched finish, 32 workers, Redis",
              "pop-redis.json", "pop (batch)", ">=", 100, "% of the ceiling", storage="Redis")
    http_line("HTTP ack and take the next (one request a task), 32 workers, Redis",
              "pop-redis.json", "pop (ack and next)", ">=", 80, "% of the ceiling", storage="Redis")

    # Flow limits (issue 26): pop + finish on a topic with max_active against the same run
    # without; the rate a rate-limited topic reached against the most its limit allows.
    for storage, file in (("embedded", "pop-embedded.json"), ("Redis", "pop-redis.json")):
        cost = result(J(file), f"pop (max_active {FLOW_MAX_ACTIVE}), share")
        what = (f"HTTP pop + finish with max_active {FLOW_MAX_ACTIVE} vs without, 32 workers, "
                f"{storage} (issue 26)")
        targets.append(entry(
            what, round(cost["figure"], 1) if cost else None, "% of pop without limits", ">=", 90,
            "% of pop without limits", ratio=round(cost["figure"], 1) if cost else None,
            source=f"delayq bench ({file})", judged=cost is not None,
            notes=[] if cost else ["not measured in this run (step failed?)"]))
        rate = result(J(file), f"pop (rate_per_s {FLOW_RATE}), share")
        what = (f"HTTP pop + finish on a topic with rate_per_s {FLOW_RATE}, 32 workers, {storage}: "
                "the rate reached of the most the limit allows (over 100 % = exceeded)")
        targets.append(entry(
            what, round(rate["figure"], 1) if rate else None, "% of the limit's most", "<=", 100,
            "% of the limit's most", ratio=round(rate["figure"], 1) if rate else None,
            source=f"delayq bench ({file})", judged=rate is not None,
            notes=[] if rate else ["not measured in this run (step failed?)"]))

    # Lateness: the server's firing histogram, and end to end through a pop.
    for storage, target in (("embedded", 2), ("redis", 5)):
        p99, count = lateness_p99_ms(read(os.path.join(raw, f"metrics-{storage}.txt")))
        measured = p99 is not None
        targets.append(entry(
            f"fire lateness p99, 10 000 tasks/s due, {storage} (server's histogram)",
            p99 if measured and p99 != float("inf") else None, "ms (bucket bound)", "<=", target, "ms",
            source="delayq_fire_lateness_seconds from /metrics after delayq bench lateness",
            judged=measured, met=(p99 <= target) if measured else None,
            notes=[f"{count} tasks fired; the figure is the smallest histogram bucket holding 99 %"]
            if measured else ["not measured in this run"]))
        r = result(J(f"lateness-{storage}.json"), "lateness")
        targets.append(entry(
            f"lateness end to end through a pop, p99, 10 000 tasks/s, {storage}",
            round(r["figure"], 2) if r else None, "ms", "<=", 5, "ms",
            source=f"delayq bench lateness ({r['measured']})" if r else "delayq bench lateness",
            judged=bool(r), notes=[] if r else ["not measured in this run"],
            detail={"latency_ms": r.get("latency_ms")} if r else None))

    # Redis across instances: added through one, popped (ack and take the next) through another;
    # on one redis-server, then on a Cluster of three masters (issue 25: the same there).
    for file, mode in (("redis", "Redis"), ("cluster", "Redis Cluster (3 masters, 4 partitions a topic)")):
        for rate in (2000, 10000):
            r = result(J(f"lateness-{file}-across-{rate}.json"), "lateness")
            for pct, target in (("p50", 2), ("p99", 5)):
                figure = (r.get("latency_ms") or {}).get(pct) if r else None
                targets.append(entry(
                    f"lateness end to end, {pct}, {rate:,} tasks/s due, {mode}, consumers on another instance"
                    .replace(f"{rate:,}", f"{rate:,}".replace(",", " ")),
                    round(figure, 2) if figure is not None else None, "ms", "<=", target, "ms",
                    source=f"delayq bench lateness ({r['measured']})" if r else "delayq bench lateness",
                    judged=figure is not None,
                    notes=[n for n in r.get("notes", []) if n.startswith("received")] if r else ["not measured in this run"],
                    detail={"latency_ms": r.get("latency_ms")} if r else None))

    # Push.
    push = J("push-embedded.json")
    for unit_prefix, what, op, value, unit in (
            ("deliveries", "push delivery to a local receiver: rate", ">=", 10000, "deliveries/s"),
            ("ms", "push delivery to a local receiver: lateness p99", "<=", 5, "ms")):
        r = next((x for x in (push or {}).get("results", [])
                  if x["bench"] == "push" and x["unit"].startswith(unit_prefix)), None)
        targets.append(entry(what, round(r["figure"], 2) if r else None, r["unit"] if r else unit,
                             op, value, unit, source="delayq bench push" + (f" ({r['measured']})" if r else ""),
                             judged=bool(r), notes=r["notes"] if r else ["not measured in this run"]))

    # beanstalk against beanstalkd, same client, alternated.
    def phases(kind):
        got = {}
        for name in sorted(os.listdir(raw)):
            if name.startswith(f"beanstalk-{kind}-") and name.endswith(".json"):
                rep = J(name)
                for p in (rep or {}).get("phases", []):
                    got.setdefault(p["name"], []).append(p["jobs_per_sec"])
        return got

    mine, peer = phases("delayq"), phases("beanstalkd")
    for phase in ("put", "reserve+delete"):
        m = statistics.median(mine[phase]) if phase in mine else None
        p = statistics.median(peer[phase]) if phase in peer else None
        ratio = round(m / p, 2) if m and p else None
        targets.append(entry(
            f"beanstalk {phase}, 50 connections, 100-byte jobs, binlog -f 10",
            round(m) if m else None, "jobs/s", ">=", 1.0, "x",
            against={"what": "beanstalkd 1.12 -b -f 10, same client, same run (median of rounds)",
                     "value": round(p)} if p else None,
            ratio=ratio, source="delayq bench beanstalk", judged=ratio is not None,
            detail={"delayq_rounds": mine.get(phase), "beanstalkd_rounds": peer.get(phase)},
            notes=[] if ratio is not None else ["beanstalkd not installed or a run failed"]))

    # The library and the data directory (cargo bench -p delayq --bench embedded).
    def lib_line(prefix):
        return next(((k, v) for k, v in lib.items() if k.startswith(prefix)), (None, None))

    k, v = lib_line("add, batches of 1000, 4 producers, fsync interval")
    targets.append(entry("library add, embedded, batched, fsync interval", v[0] if v else None, "tasks/s",
                         ">=", 1_000_000, "tasks/s", source=f"cargo bench -p delayq --bench embedded: {k}",
                         judged=bool(v), notes=[] if v else ["not measured in this run"]))
    k, v = lib_line("restart with")
    restarts = {k2: v2[0] for k2, v2 in lib.items() if k2.startswith("restart with")}
    pending = re.search(r"restart with (\d+)", k or "")
    pending = int(pending[1]) if pending else None
    worst = max(restarts.values()) if restarts else None
    at_target = pending == 10_000_000
    targets.append(entry(
        "restart with 10M pending tasks (embedded), to serving", worst, "s", "<=", 5, "s",
        source="cargo bench -p delayq --bench embedded (the slower of log and snapshots)",
        judged=bool(restarts) and at_target, detail=restarts or None,
        notes=([] if at_target else [f"measured with {pending} pending, not 10M: not judged"]) if restarts
        else ["not measured in this run"]))
    k, v = lib_line("memory per delayed task")
    targets.append(entry(
        "memory per delayed task in process, 100-byte body not counted, at 10M",
        v[0] if v else None, "B/task", "<=", 150, "B/task",
        source="cargo bench -p delayq --bench embedded (growth of the process's RSS, mimalloc)",
        judged=bool(v) and at_target,
        notes=([] if at_target else [f"measured at {pending} tasks, not 10M: not judged"]) if v
        else ["not measured in this run"]))
    peer_targets, redis_beyond = peers(J)
    redis_mem = re.search(r"memory_beyond_body_b=([\d.]+) tasks=(\d+)", read(os.path.join(raw, "redis-memory.txt")) or "")
    at_1m = bool(redis_mem) and int(redis_mem[2]) >= 1_000_000
    peer = redis_beyond[2] if redis_beyond else None
    peer_name = redis_beyond[3] if redis_beyond else None
    targets.append(entry(
        "Redis memory per delayed task beyond the body", float(redis_mem[1]) if redis_mem else None, "B/task",
        "<=", 200, "B/task", source="cargo run --release -p delayq-redis --example redis_memory (used_memory)",
        against={"what": f"{peer_name} beyond its 100-byte data, BullMQ comparison of the same run", "value": peer}
        if peer is not None else None,
        ratio=round(float(redis_mem[1]) / peer, 2) if (peer and redis_mem) else None, ratio_unit="x",
        judged=at_1m, notes=([] if at_1m else [f"measured at {redis_mem[2]} tasks, not 1M: not judged"])
        if redis_mem else ["not measured in this run"]))
    targets.append(entry("idle server, 1M tasks due in an hour", None, "% CPU", None, None, None,
                         source="-", judged=False, notes=["not measured by scripts/bench"]))
    targets[-1]["target"] = {"op": "~", "value": 0, "unit": "% CPU; ≤ 5 Redis commands/s"}
    targets.append(entry("dashboard with 1 000 topics, 1M tasks", None, "s", None, None, None,
                         source="-", judged=False, notes=["not measured by scripts/bench"]))
    targets[-1]["target"] = {"op": "<=", "value": 1, "unit": "s first view; ≤ 50 ms find by id"}

    targets.extend(peer_targets)
    targets.extend(pg_peers(J))

    extra = {
        "criterion": crit,
        "embedded_library": {k: {"value": v[0], "unit": v[1]} for k, v in lib.items()},
    }
    steps = []
    for line in (read(os.path.join(raw, "steps")) or "").splitlines():
        name, status, secs = line.split()
        steps.append({"step": name, "status": status, "seconds": int(secs)})

    try:
        rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout.strip()
    except OSError:
        rustc = None
    summary = {
        "schema": SCHEMA,
        "mode": args.mode,
        "date": args.started,
        "git_commit": args.commit,
        "git_uncommitted_changes": args.dirty,
        "rustc": rustc,
        "machine": machine(raw),
        "build_seconds": args.build_seconds,
        "run_seconds": args.run_seconds,
        "steps": steps,
        "targets": targets,
        "met": sum(1 for t in targets if t["met"] is True),
        "not_met": sum(1 for t in targets if t["met"] is False),
        "not_judged": sum(1 for t in targets if t["met"] is None),
        "other_figures": extra,
    }
    path = os.path.join(out, "summary.json")
    with open(path, "w") as f:
        json.dump(summary, f, indent=2, ensure_ascii=False)
        f.write("\n")
    print(path)


if __name__ == "__main__":
    sys.exit(main())
