#!/usr/bin/env python3
"""The PyTorch side of bench/dist_bench's all-reduce table: torch.distributed's CPU all-reduce
(the gloo backend, what PyTorch's DistributedDataParallel uses on CPUs; PyTorch's wheels have no
MPI backend) between 2 processes of this host, timed as dist_bench times weft's op.

  torch_dist_peer.py REPS CALLS_1KB,CALLS_4KB,...
prints one JSON object: {"available": bool, "version": str, "backend": "gloo", "us": {"1024": ...,
"4096": ..., ...}}, microseconds per all_reduce of float32 zeros for 1 KB, 4 KB, 16 KB, ... (one
size per number given): per size, that many calls in a row after a barrier (dist_bench passes its
own counts), the median of REPS rounds after one to warm up. Each all_reduce waits for its
result, as weft's row waits for each op. dist_bench runs this after its own table, not in turns
with it: the machine's speed may differ between the two.

The processes may use every core of the machine (dist_bench's rank that starts this script is
bound to one core; the peer's own threads need more than one to be fair to it).
"""
import json
import os
import queue
import socket
import sys
import time

from peer_common import import_torch, unavailable


def rank_main(rank, port, reps, calls_per_size, results):
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    us = {}
    for k, calls in enumerate(calls_per_size):
        nbytes = 1024 << (2 * k)
        t = torch.zeros(nbytes // 4)
        times = []
        for r in range(reps + 1):  # round 0 warms up
            dist.barrier()
            start = time.perf_counter()
            for _ in range(calls):
                dist.all_reduce(t)
            if r > 0:
                times.append((time.perf_counter() - start) / calls * 1e6)
        times.sort()
        us[str(nbytes)] = times[len(times) // 2]
    dist.destroy_process_group()
    if rank == 0:
        results.put(us)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    reps, calls_per_size = int(sys.argv[1]), [int(c) for c in sys.argv[2].split(",")]
    torch = import_torch(modules=("torch.distributed", "torch.multiprocessing"))
    if torch is None:
        return
    dist, mp = torch.distributed, torch.multiprocessing
    if not dist.is_available() or not dist.is_gloo_available():
        unavailable("this PyTorch has no gloo backend")
        return
    try:
        os.sched_setaffinity(0, range(os.cpu_count()))
    except OSError:
        pass  # keep the cores given
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=rank_main, args=(r, port, reps, calls_per_size, results)) for r in range(2)]
    for p in procs:
        p.start()
    us = None
    while us is None:  # until rank 0 answers, or a rank has failed (then its partner would wait forever)
        try:
            us = results.get(timeout=1)
        except queue.Empty:
            failed = [p for p in procs if p.exitcode not in (None, 0)]
            if failed or all(p.exitcode is not None for p in procs):
                try:
                    us = results.get_nowait()  # rank 0 answered just before both ended
                    break
                except queue.Empty:
                    pass
                for p in procs:
                    p.kill()
                codes = [p.exitcode for p in procs]
                unavailable(f"a gloo process failed (exit codes {codes})")
                return
    for p in procs:
        p.join(timeout=60)
        if p.exitcode is None:
            p.kill()  # done measuring; hung in its shutdown
    print(json.dumps({"available": True, "version": torch.__version__, "backend": "gloo", "us": us}))


if __name__ == "__main__":
    main()
