#!/usr/bin/env python3
"""The PyTorch side of bench/onnx_bench: exports torchvision's resnet18 and mobilenet_v2 and an
nn.TransformerEncoder (tests/onnx/export_models.py's: 2 layers, width 256, 4 heads, 128 positions,
a key padding mask) as ONNX into DIR (random weights, seeded; eval mode; a symbolic batch axis),
then times their inference in PyTorch (torch.no_grad) at each batch size on THREADS threads.

Usage: torch_onnx_peer.py DIR THREADS REPS BATCHES [MODELS] (BATCHES and MODELS comma-separated;
MODELS: those to export and time, default all). Prints one JSON
object: {"available": bool, "version": str, "threads": int, "models": {name: {"file": path,
"inputs": [[name, dtype, [dims after the batch axis]]], "first_ms": float, "ms": {batch: float}}}};
first_ms: the first call at batch 1 on a fresh model. Every input is ones (a mask: no padding).
"""
import json
import os
import sys
import time

from peer_common import hello, import_torch, median_ms

SEQ, WIDTH, HEADS = 128, 256, 4  # the encoder's


def models(torch):
    """(name, opset, make a fresh model, [(input name, dtype, dims after the batch axis)])."""
    import torchvision
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                    "onnx"))
    from export_models import Encoder  # noqa: E402 (tests/ is not a package)

    def vision(name, seed):
        torch.manual_seed(seed)
        return getattr(torchvision.models, name)().eval()

    def encoder():
        torch.manual_seed(5)
        return Encoder(WIDTH, HEADS).eval()

    image = [("data", "float32", [3, 224, 224])]
    return [("resnet18", 17, lambda: vision("resnet18", 3), image),
            ("mobilenet_v2", 13, lambda: vision("mobilenet_v2", 4), image),
            ("encoder", 17, encoder, [("x", "float32", [SEQ, WIDTH]), ("mask", "bool", [SEQ])])]


def ones(torch, inputs, batch):
    """The inputs at `batch`, all ones (a mask of ones would pad everything: zeros)."""
    return tuple(torch.ones(batch, *dims) if dtype == "float32" else
                 torch.zeros(batch, *dims, dtype=torch.bool) for _, dtype, dims in inputs)


def main():
    folder, threads, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    batches = [int(b) for b in sys.argv[4].split(",")]
    chosen = sys.argv[5].split(",") if len(sys.argv) > 5 else None
    torch = import_torch(threads=threads)
    if torch is None:
        return
    out = dict(hello(torch), models={})
    for name, opset, make, inputs in models(torch):
        if chosen is not None and name not in chosen:
            continue
        model = make()
        path = os.path.join(folder, name + ".onnx")
        axes = {n: {0: "batch"} for n, _, _ in inputs}
        axes["out"] = {0: "batch"}
        torch.onnx.export(model, ones(torch, inputs, 1), path, opset_version=opset,
                          input_names=[n for n, _, _ in inputs], output_names=["out"],
                          dynamic_axes=axes)
        fresh = make()
        with torch.no_grad():
            start = time.perf_counter()
            fresh(*ones(torch, inputs, 1))
            first = (time.perf_counter() - start) * 1e3
            times = {}
            for b in batches:
                xb = ones(torch, inputs, b)
                times[str(b)] = median_ms(lambda: model(*xb), reps)
        out["models"][name] = {"file": path, "inputs": inputs, "first_ms": first, "ms": times}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
