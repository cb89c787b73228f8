#!/usr/bin/env python3
"""Sums a weft trace (weft::Profiler's or WEFT_PROFILE's Chrome trace JSON) into tables: the GPU's
time by kernel name and by the op that queued the kernel, and the host's time by op name, each the
largest first, with counts and each row's share. What a trace is too large to read by eye for:
where a training step's GPU time goes.

  tools/trace_summary.py step.json            # the 25 largest rows of each table
  tools/trace_summary.py step.json --top=60
"""
import argparse
import collections
import json
import sys


def table(title, totals, counts, top):
    whole = sum(totals.values())
    print(f"{title}: {whole / 1e3:.3f} ms in {sum(counts.values())} spans")
    print(f"{'ms':>10} {'share':>6} {'count':>7}  name")
    for name, us in sorted(totals.items(), key=lambda kv: -kv[1])[:top]:
        share = 100.0 * us / whole if whole else 0.0
        print(f"{us / 1e3:10.3f} {share:5.1f}% {counts[name]:7d}  {name[:110]}")
    print()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    with open(args.trace) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    op_names = {}  # op id -> the op's name, from the host spans
    host, host_n = collections.Counter(), collections.Counter()
    device = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "memcpy", "memset")]
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "op":
            op_names[e["args"]["op"]] = e["name"]
            host[e["name"]] += e["dur"]
            host_n[e["name"]] += 1
    by_kernel, kernel_n = collections.Counter(), collections.Counter()
    by_op, op_n = collections.Counter(), collections.Counter()
    for e in device:
        name = e["name"] if e["cat"] == "kernel" else f"[{e['cat']}]"
        by_kernel[name] += e["dur"]
        kernel_n[name] += 1
        op = op_names.get(e["args"].get("op"), "(no op: a graph replay or the runtime)")
        by_op[op] += e["dur"]
        op_n[op] += 1
    if device:
        first = min(e["ts"] for e in device)
        last = max(e["ts"] + e["dur"] for e in device)
        print(f"GPU span from first to last device activity: {(last - first) / 1e3:.3f} ms\n")
    table("GPU time by kernel", by_kernel, kernel_n, args.top)
    table("GPU time by op", by_op, op_n, args.top)
    table("host time by op", host, host_n, args.top)


if __name__ == "__main__":
    sys.exit(main())
