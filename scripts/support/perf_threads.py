#!/usr/bin/env python3
"""Reads `perf script -F comm,ip,sym` output (stdin) with call graphs and prints where the
samples go: per thread, and which code leads into futex wait/wake (`syscall`), the cost of
handing work between threads. Standard library only; used by scripts/profile-http."""

import collections
import sys

samples, cur = [], None
for line in sys.stdin:
    if not line[:1].isspace():
        if cur:
            samples.append(cur)
        cur = (line.strip(), [])
    elif line.strip() and cur:
        cur[1].append(line.strip().split(" ", 1)[-1])
if cur:
    samples.append(cur)
n = len(samples) or 1
print(f"{len(samples)} samples")
threads = collections.Counter(comm for comm, _ in samples)
for comm, count in threads.most_common():
    print(f"{100 * count / n:5.1f}%  thread {comm}")
print("futex wait/wake (`syscall`), by the first frames of ours above it:")
callers = collections.Counter()
for comm, stack in samples:
    at = next((i for i, frame in enumerate(stack) if frame.startswith("syscall")), None)
    if at is None:
        continue
    ours = [f for f in stack[at + 1:at + 30] if "delayq" in f or "tokio::" in f or "std::" in f][:3]
    callers[(comm, " <- ".join(f[:90] for f in ours))] += 1
for (comm, chain), count in callers.most_common(8):
    print(f"{100 * count / n:5.1f}%  {comm}: {chain}")
