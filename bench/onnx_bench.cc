// Models trained elsewhere on the CPU (issue 40): torchvision's resnet18 and mobilenet_v2 and an
// nn.TransformerEncoder (2 layers, width 256, 128 positions, a padding mask) exported by PyTorch
// 1.13 as ONNX (bench/torch_onnx_peer.py, random weights), run by weft (ImportOnnx, a bound
// executor), by ONNX Runtime 1.30 (npm's onnxruntime-node: tools/ort/bench.js) and by
// PyTorch itself on the same machine in the same run, THREADS threads each: the first inference
// (import or session creation, bind, first run) and the median inference at each batch size.
//
// --device=gpu (issue 42; a --config=cuda build, in the GPU bundle): the same on GPU 0, with
// PyTorch 2.11 there exporting the models, timed eager and through torch.compile, and ONNX
// Runtime's Python package with its CUDA provider where it has one; every time ends with the
// device synchronized, inputs already on it. float32 strict on both sides (PyTorch's
// cudnn.allow_tf32 off); --tf32=1 lets both round through TF32 (WEFT_GPU_TF32=1, PyTorch's
// default).
//
//   bazel build --config=opt //bench:onnx_bench && bazel-bin/bench/onnx_bench [--threads=2]
//       [--reps=5] [--big_batch=32] [--models=encoder,resnet18,mobilenet_v2] [--device=cpu]
//       [--tf32=0]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/peer.h"
#include "core/error.h"
#include "engine/engine.h"
#include "executor/executor.h"
#include "weft/onnx.h"

namespace {

using weft::NDArray;
using weft::Shape;

double Ms(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

struct Times {
  double first_ms = 0;
  std::map<int, double> ms;  // by batch
};

// The model bound on `device` for a batch of `batch`: each input of `inputs` ([name, dtype, dims
// after the batch axis]) filled with ones (a bool mask with false: no padding).
std::unique_ptr<weft::Executor> BindFor(const weft::OnnxModel& m, const nlohmann::json& inputs,
                                        int batch, weft::Device device) {
  weft::Executor::ArrayMap args;
  for (const auto& [name, a] : m.params)
    args[name] = device.type == weft::DeviceType::kCpu ? a : a.Copy(device);
  for (const nlohmann::json& in : inputs) {
    Shape shape{batch};
    for (int64_t d : in[2].get<std::vector<int64_t>>()) shape.PushBack(d);
    const bool mask = in[1] == "bool";
    NDArray x(shape, device, mask ? weft::DType::kBool : weft::DType::kFloat32);
    if (mask) {
      const std::vector<uint8_t> zeros(shape.Size(), 0);
      x.SyncCopyFromHost(zeros.data(), zeros.size());
    } else {
      x.Fill(1);
    }
    args[in[0].get<std::string>()] = x;
  }
  return weft::Executor::Bind(m.symbol, device, args);
}

void RunOnce(weft::Executor& exec) {
  exec.Forward(/*is_train=*/false);
  exec.outputs()[0].WaitToRead();
}

Times WeftTimes(const std::string& file, const nlohmann::json& inputs,
                const std::vector<int>& batches, int reps, weft::Device device) {
  Times t;
  const auto start = std::chrono::steady_clock::now();
  const weft::OnnxModel m = weft::ImportOnnx(file);
  RunOnce(*BindFor(m, inputs, 1, device));
  t.first_ms = Ms(start);
  for (int b : batches) {
    const std::unique_ptr<weft::Executor> exec = BindFor(m, inputs, b, device);
    t.ms[b] = bench::MedianMs(reps, [&] { RunOnce(*exec); });
  }
  return t;
}

// ONNX Runtime's times (tools/ort/bench.js), or null with why in `error`.
nlohmann::json OrtTimes(const std::string& file, const nlohmann::json& inputs, int threads,
                        int reps, const std::string& batches, std::string* error) {
  std::string why;
  const std::string script = bench::FindPeerScript("tools/ort/bench.js", &why);
  if (script.empty()) {
    *error = why;
    return nullptr;
  }
  const std::string command = "node " + script + " " + file + " " + std::to_string(threads) + " " +
                              std::to_string(reps) + " " + batches + " '" + inputs.dump() + "'";
  std::string text;
  if (bench::RunCommand(command, &text) != 0) {
    *error = "ONNX Runtime did not run (tools/setup.sh installs it): " + command;
    return nullptr;
  }
  return nlohmann::json::parse(text);
}

std::string Cell(double v) {
  char s[32];
  std::snprintf(s, sizeof(s), "%.2f", v);
  return s;
}

// The CPU table: weft against ONNX Runtime (node) and PyTorch, per model.
void CpuTable(const nlohmann::json& torch, const std::vector<int>& batches,
              const std::string& batch_list, int threads, int reps) {
  std::printf("ONNX models on the CPU, %d thread(s), medians of %d; PyTorch %s exports them\n",
              threads, reps, torch["version"].get<std::string>().c_str());
  std::printf("%-14s %-12s %10s %10s %10s %9s %9s\n", "model", "row", "weft ms", "ORT ms",
              "torch ms", "weft/ORT", "weft/torch");
  for (const auto& [name, info] : torch["models"].items()) {
    const std::string file = info["file"].get<std::string>();
    const Times w = WeftTimes(file, info["inputs"], batches, reps, weft::Device::Cpu());
    std::string error;
    const nlohmann::json ort = OrtTimes(file, info["inputs"], threads, reps, batch_list, &error);
    if (ort.is_null()) std::printf("%s: %s\n", name.c_str(), error.c_str());
    const auto row = [&](const std::string& label, double weft_ms, double ort_ms, double torch_ms) {
      std::printf("%-14s %-12s %10.2f %10s %10.2f %9s %9.2f\n", name.c_str(), label.c_str(),
                  weft_ms, ort.is_null() ? "n/a" : Cell(ort_ms).c_str(), torch_ms,
                  ort.is_null() ? "n/a" : Cell(weft_ms / ort_ms).c_str(), weft_ms / torch_ms);
    };
    row("first", w.first_ms, ort.is_null() ? 0 : ort["first_ms"].get<double>(),
        info["first_ms"].get<double>());
    for (int b : batches) {
      const std::string key = std::to_string(b);
      row("batch " + key, w.ms.at(b), ort.is_null() ? 0 : ort["ms"][key].get<double>(),
          info["ms"][key].get<double>());
    }
  }
}

// A peer's time at `batch` under `key` ("ms", "compile_ms", "ort_ms"), or 0 when it has none.
double PeerMs(const nlohmann::json& info, const char* key, int batch) {
  const std::string b = std::to_string(batch);
  return info.contains(key) && info[key].contains(b) ? info[key][b].get<double>() : 0;
}

// The GPU table: weft against PyTorch eager, torch.compile and ONNX Runtime's CUDA provider (all
// from the peer), and weft over the best of them.
void GpuTable(const nlohmann::json& torch, const std::vector<int>& batches, int reps, bool tf32) {
  std::printf("ONNX models on GPU 0, float32%s, medians of %d; PyTorch %s exports them\n",
              tf32 ? " through TF32" : " strict", reps,
              torch["version"].get<std::string>().c_str());
  std::printf("%-14s %-10s %10s %10s %10s %10s %10s\n", "model", "row", "weft ms", "torch ms",
              "compile ms", "ORT ms", "weft/best");
  const auto cell = [](double v) { return v > 0 ? Cell(v) : std::string("n/a"); };
  for (const auto& [name, info] : torch["models"].items()) {
    for (const char* why : {"compile_error", "ort_error"})
      if (info.contains(why))
        std::printf("%s %s: %s\n", name.c_str(), why, info[why].get<std::string>().c_str());
    Times w;
    try {
      w = WeftTimes(info["file"].get<std::string>(), info["inputs"], batches, reps,
                    weft::Device::Gpu(0));
    } catch (const weft::Error& e) {  // a model weft cannot import or run: the next one still runs
      std::printf("%s: weft: %s\n", name.c_str(), e.what());
      continue;
    }
    std::printf("%-14s %-10s %10.2f %10.2f\n", name.c_str(), "first", w.first_ms,
                info["first_ms"].get<double>());
    for (int b : batches) {
      const double peers[] = {PeerMs(info, "ms", b), PeerMs(info, "compile_ms", b),
                              PeerMs(info, "ort_ms", b)};
      double best = 0;
      for (double p : peers)
        if (p > 0 && (best == 0 || p < best)) best = p;
      std::printf("%-14s %-10s %10.2f %10s %10s %10s %10.2f\n", name.c_str(),
                  ("batch " + std::to_string(b)).c_str(), w.ms.at(b), cell(peers[0]).c_str(),
                  cell(peers[1]).c_str(), cell(peers[2]).c_str(), w.ms.at(b) / best);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = bench::IntFlag(argc, argv, "threads", 2);
  const int reps = bench::IntFlag(argc, argv, "reps", 5);
  const int big = bench::IntFlag(argc, argv, "big_batch", 32);
  const std::string models =
      bench::StringFlag(argc, argv, "models", "encoder,resnet18,mobilenet_v2");
  const bool gpu = bench::StringFlag(argc, argv, "device", "cpu") == "gpu";
  const bool tf32 = bench::IntFlag(argc, argv, "tf32", 0) != 0;
  if (tf32) setenv("WEFT_GPU_TF32", "1", 1);
  setenv("WEFT_CPU_WORKERS", "1", 0);  // one worker whose ops use `threads` threads, like the peers
  setenv("WEFT_CPU_OP_THREADS", std::to_string(threads).c_str(), 1);
  bench::ChdirToWorkspace();
  const std::string dir = (std::filesystem::temp_directory_path() / "weft_onnx_bench").string();
  std::filesystem::create_directories(dir);
  const std::vector<int> batches = {1, big};
  const std::string batch_list = "1," + std::to_string(big);
  const nlohmann::json torch = bench::RunPeer(
      "bench/torch_onnx_peer.py", dir + " " + std::to_string(threads) + " " + std::to_string(reps) +
                                      " " + batch_list + " " + models + (gpu ? " cuda " : " cpu ") +
                                      (tf32 ? "1" : "0"));
  if (!torch.value("available", false)) {
    std::printf("PyTorch (which exports the models) not available: %s\n",
                torch.value("error", std::string("?")).c_str());
    return 1;
  }
  if (gpu) {
    GpuTable(torch, batches, reps, tf32);
  } else {
    CpuTable(torch, batches, batch_list, threads, reps);
  }
  weft::engine::Engine::Get()->Shutdown();
  return 0;
}
