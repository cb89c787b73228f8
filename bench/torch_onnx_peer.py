#!/usr/bin/env python3
"""The PyTorch side of bench/onnx_bench: exports torchvision's resnet18 and mobilenet_v2 (random
weights, seeded; eval mode; a symbolic batch axis) as ONNX into DIR, then times their inference in
PyTorch (torch.no_grad) at each batch size on THREADS threads.

Usage: torch_onnx_peer.py DIR THREADS REPS BATCHES (BATCHES comma-separated). Prints one JSON
object: {"available": bool, "version": str, "threads": int, "models": {name: {"file": path,
"first_ms": float, "ms": {batch: float}}}}; first_ms: the first call at batch 1 on a fresh model.
"""
import json
import os
import sys
import time

from peer_common import hello, import_torch, median_ms

MODELS = [("resnet18", 17, 3), ("mobilenet_v2", 13, 4)]  # name, opset, seed


def main():
    folder, threads, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    batches = [int(b) for b in sys.argv[4].split(",")]
    torch = import_torch(threads=threads)
    if torch is None:
        return
    import torchvision
    out = dict(hello(torch), models={})
    for name, opset, seed in MODELS:
        torch.manual_seed(seed)
        model = getattr(torchvision.models, name)().eval()
        path = os.path.join(folder, name + ".onnx")
        torch.onnx.export(model, torch.randn(1, 3, 224, 224), path, opset_version=opset,
                          input_names=["data"], output_names=["out"],
                          dynamic_axes={"data": {0: "batch"}, "out": {0: "batch"}})
        fresh = getattr(torchvision.models, name)().eval()
        x = torch.randn(1, 3, 224, 224)
        with torch.no_grad():
            start = time.perf_counter()
            fresh(x)
            first = (time.perf_counter() - start) * 1e3
            times = {}
            for b in batches:
                xb = torch.randn(b, 3, 224, 224)
                times[str(b)] = median_ms(lambda: model(xb), reps)
        out["models"][name] = {"file": path, "first_ms": first, "ms": times}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
