#!/usr/bin/env python3
"""The PyTorch side of bench/onnx_bench: exports torchvision's resnet18 and mobilenet_v2 and an
nn.TransformerEncoder (tests/onnx/export_models.py's: 2 layers, width 256, 4 heads, 128 positions,
a key padding mask) as ONNX into DIR (random weights, seeded; eval mode; a symbolic batch axis),
then times their inference in PyTorch (torch.no_grad) at each batch size on THREADS threads.

Usage: torch_onnx_peer.py DIR THREADS REPS BATCHES [MODELS [DEVICE [TF32]]] (BATCHES and MODELS
comma-separated; MODELS: those to export and time, default all; DEVICE: cpu, the default, or cuda;
TF32: on cuda, 1 lets cuDNN's convolutions round through TF32 as PyTorch does by default, 0 (the
default) keeps float32 strict, as weft's GPU does without WEFT_GPU_TF32=1).
Prints one JSON object: {"available": bool, "version": str, "threads": int, "models": {name:
{"file": path, "inputs": [[name, dtype, [dims after the batch axis]]], "first_ms": float,
"ms": {batch: float}}}}; first_ms: the first call at batch 1 on a fresh model. Every input is ones
(a mask: no padding).

On cuda (bench/onnx_bench --device=gpu) each model also has "compile_ms" ({batch: float}, or
"compile_error"): torch.compile's; and "ort_ms" (or "ort_error"): ONNX Runtime's Python package
with its CUDA provider, inputs and output bound on the GPU. Every time there ends with the device
synchronized.
"""
import inspect
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


def ones(torch, inputs, batch, device="cpu"):
    """The inputs at `batch`, all ones (a mask of ones would pad everything: zeros)."""
    return tuple(torch.ones(batch, *dims, device=device) if dtype == "float32" else
                 torch.zeros(batch, *dims, dtype=torch.bool, device=device)
                 for _, dtype, dims in inputs)


def export(torch, model, inputs, path, opset):
    """Writes `model` as ONNX with a symbolic batch axis: TorchScript's exporter, as PyTorch 1.13
    has it (newer PyTorch keeps it behind dynamo=False)."""
    axes = {n: {0: "batch"} for n, _, _ in inputs}
    axes["out"] = {0: "batch"}
    extra = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    torch.onnx.export(model, ones(torch, inputs, 1), path, opset_version=opset,
                      input_names=[n for n, _, _ in inputs], output_names=["out"],
                      dynamic_axes=axes, **extra)


def timed(torch, device, fn):
    """fn, then (on a GPU) waiting for the device."""
    def call():
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
    return call


def ort_cuda_ms(path, inputs, batches, reps):
    """ONNX Runtime's CUDA provider's median per batch (inputs and output bound on the GPU)."""
    import numpy
    import onnxruntime as ort
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        raise RuntimeError(f"onnxruntime {ort.__version__} has no CUDA provider: "
                           f"{ort.get_available_providers()}")
    session = ort.InferenceSession(path, providers=["CUDAExecutionProvider"])
    times = {}
    for b in batches:
        binding = session.io_binding()
        for name, dtype, dims in inputs:
            host = (numpy.ones((b, *dims), numpy.float32) if dtype == "float32" else
                    numpy.zeros((b, *dims), numpy.bool_))
            binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(host, "cuda", 0))
        binding.bind_output("out", "cuda")
        times[str(b)] = median_ms(lambda: session.run_with_iobinding(binding), reps)
    return times


def time_model(torch, device, model, make, inputs, batches, reps):
    """The first call on a fresh model, and the median at each batch: {"first_ms", "ms"}; on cuda
    also torch.compile's ("compile_ms", or "compile_error")."""
    fresh = make().to(device)
    model = model.to(device)
    out = {}
    with torch.no_grad():
        start = time.perf_counter()
        timed(torch, device, lambda: fresh(*ones(torch, inputs, 1, device)))()
        out["first_ms"] = (time.perf_counter() - start) * 1e3
        out["ms"] = {}
        for b in batches:
            xb = ones(torch, inputs, b, device)
            out["ms"][str(b)] = median_ms(timed(torch, device, lambda: model(*xb)), reps)
        if device == "cuda":
            try:
                compiled = torch.compile(model)
                out["compile_ms"] = {}
                for b in batches:
                    xb = ones(torch, inputs, b, device)
                    compiled(*xb)  # compiles for this batch
                    out["compile_ms"][str(b)] = median_ms(
                        timed(torch, device, lambda: compiled(*xb)), reps)
            except Exception as e:  # noqa: BLE001 (no compiler toolchain there, say)
                out.pop("compile_ms", None)
                out["compile_error"] = str(e)[:300]
    return out


def main():
    folder, threads, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    batches = [int(b) for b in sys.argv[4].split(",")]
    chosen = sys.argv[5].split(",") if len(sys.argv) > 5 else None
    device = sys.argv[6] if len(sys.argv) > 6 else "cpu"
    tf32 = len(sys.argv) > 7 and sys.argv[7] == "1"
    torch = import_torch(threads=threads, need_cuda=device == "cuda")
    if torch is None:
        return
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    out = dict(hello(torch), models={})
    for name, opset, make, inputs in models(torch):
        if chosen is not None and name not in chosen:
            continue
        model = make()
        path = os.path.join(folder, name + ".onnx")
        export(torch, model, inputs, path, opset)
        result = {"file": path, "inputs": inputs}
        result.update(time_model(torch, device, model, make, inputs, batches, reps))
        if device == "cuda":
            try:
                result["ort_ms"] = ort_cuda_ms(path, inputs, batches, reps)
            except Exception as e:  # noqa: BLE001 (no onnxruntime, or no CUDA provider in it)
                result["ort_error"] = str(e)[:300]
        out["models"][name] = result
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
