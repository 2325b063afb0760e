#!/usr/bin/python3
"""bench/scale/storm.py: the write storm of docs/scale.md simulated, the
node agents' movers scheduled as src/node/node_agent.c schedules them,
the bandwidths simulated (a fluid model). Not a timed test.

A checkpoint of --ranks ranks x --gib GiB, --ppn ranks a node, staging on:
every node writes its ranks' images locally (--local GB/s), the verdict
lets the program run on, then each node agent copies its images to the
global tier, first in first out, --copies at a time (`stage_copies`, the
agent's mover threads), each copy limited to --stream GB/s and by the
node's local read bandwidth shared by its copies at once, and all the
copies sharing the file system's --fs GB/s fairly (max-min). --slow
nodes read their local copies at --slow-local GB/s (stragglers).

It prints the time blocked, the time until every image is in the global
tier (level `global`), when the nodes finished (percentiles) and how
many copies were under way at once; the last line one JSON object.

usage: bench/scale/storm.py [--ranks N] [--gib G] [--ppn P] [--fs GB/s]
       [--local GB/s] [--stream GB/s] [--copies C] [--slow N]
       [--slow-local GB/s] [--coord-s S]"""
import argparse
import json

import numpy as np


def fair_rates(caps, total):
    """Max-min fair shares of total among streams capped at caps"""
    if caps.sum() <= total:
        return caps.copy()
    order = np.sort(caps)
    n = len(order)
    # the water level: the largest share that fits once the smaller caps are met
    before = np.concatenate(([0.0], np.cumsum(order)[:-1]))
    level = (total - before) / (n - np.arange(n))
    k = np.argmax(level <= order)   # the first stream the level does not reach
    return np.minimum(caps, level[k])


def simulate(a):
    gb = a.gib * 2**30 / 1e9                       # one image, GB
    nodes = -(-a.ranks // a.ppn)
    images = np.full(nodes, a.ppn)
    images[-1] = a.ranks - a.ppn * (nodes - 1)
    local_read = np.full(nodes, a.local)
    local_read[:a.slow] = a.slow_local
    blocked = a.coord_s + a.ppn * gb / a.local     # all nodes write at once
    queued = images.copy()                         # images not started yet
    left = []                                      # per stream: [node, GB left]
    t, done_at = 0.0, np.zeros(nodes)
    remaining = images.copy()
    peak = 0
    while True:
        # each node's movers take the next images from its queue
        active = np.zeros(nodes, int)
        for s in left:
            active[s[0]] += 1
        for n in np.nonzero((active < a.copies) & (queued > 0))[0]:
            take = min(a.copies - active[n], queued[n])
            queued[n] -= take
            active[n] += take
            left.extend([n, gb] for _ in range(take))
        if not left:
            break
        peak = max(peak, len(left))
        node = np.array([s[0] for s in left])
        rest = np.array([s[1] for s in left])
        caps = np.minimum(a.stream, local_read[node] / active[node])
        rates = fair_rates(caps, a.fs)
        dt = np.min(rest / rates)
        t += dt
        rest -= rates * dt
        finished = rest <= 1e-9 * gb
        for n in node[finished]:
            remaining[n] -= 1
            if remaining[n] == 0:
                done_at[n] = t
        left = [[int(n), float(r)] for n, r, f in zip(node, rest, finished) if not f]
    return {
        "ranks": a.ranks, "nodes": int(nodes), "tb": round(a.ranks * gb / 1e3, 1),
        "fs_gb_s": a.fs, "copies": a.copies, "slow_nodes": a.slow,
        "blocked_s": round(blocked, 1),
        "global_s": round(blocked + t, 1),
        "copy_s": round(t, 1),
        "node_done_s_p50_p99_max": [round(blocked + float(np.percentile(done_at, q)), 1)
                                    for q in (50, 99, 100)],
        "streams_at_once": peak,
        "fs_busy": round(a.ranks * gb / a.fs / t, 3),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=100000)
    ap.add_argument("--gib", type=float, default=2.0)
    ap.add_argument("--ppn", type=int, default=64)
    ap.add_argument("--fs", type=float, default=1000.0)
    ap.add_argument("--local", type=float, default=3.0)
    ap.add_argument("--stream", type=float, default=1.5)
    ap.add_argument("--copies", type=int, default=1)
    ap.add_argument("--slow", type=int, default=0)
    ap.add_argument("--slow-local", type=float, default=0.3)
    ap.add_argument("--coord-s", type=float, default=1.5)
    print(json.dumps(simulate(ap.parse_args())))


if __name__ == "__main__":
    main()
