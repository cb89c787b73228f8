// The engine on a GPU: ordering through events across compute streams, copy streams and CPU
// workers; the join of a library's auxiliary streams; CUDA errors as weft::Error. Orders the
// tests depend on are forced (a gate on a stream, a latch between ops), never left to sleeps.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "core/env.h"
#include "core/gpu/cuda_check.h"
#include "engine/engine.h"
#include "engine/gpu/gpu_stream.h"
#include "engine/gpu/stream_join.h"
#include "tests/engine_test_util.h"
#include "tests/gpu_stream_gate.h"
#include "tests/weft_test_util.h"

namespace weft {
namespace {

using engine::FnProperty;
using engine::GpuStream;
using engine::RunContext;
using engine::VarHandle;

// y = alpha * x + y with cuBLAS on the op's stream (a test-only handle per thread and stream; ops
// use ops/gpu's handles).
cublasStatus_t Saxpy(GpuStream& stream, int n, float alpha, const float* x, float* y) {
  return stream.Library([&](cudaStream_t s) {
    thread_local std::map<cudaStream_t, cublasHandle_t> handles;
    cublasHandle_t& h = handles[s];
    if (h == nullptr) {
      EXPECT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
      cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST);
    }
    cublasSetStream(h, s);
    return cublasSaxpy(h, n, &alpha, x, 1, y, 1);
  });
}

// ---- Random programs: CPU ops, GPU ops on several streams, copies both ways -----------------

constexpr int kVars = 16;
constexpr int kLength = 1 << 18;  // floats per var: big enough that kernels and copies take time

enum class Kind { kCpuAxpy, kGpuAxpy, kCopyToGpu, kCopyFromGpu };

struct Op {
  Kind kind;
  int x, y;  // y = a * x + y, or y = x for copies
  float a;
};

// Vars 0..7 live on the CPU, 8..15 on the GPU.
bool OnGpu(int v) { return v >= kVars / 2; }

std::vector<Op> MakeProgram(uint64_t seed, int length) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> half(0, kVars / 2 - 1), kind(0, 3), sign(0, 1);
  std::vector<Op> ops;
  for (int i = 0; i < length; ++i) {
    Op op{static_cast<Kind>(kind(rng)), 0, 0, sign(rng) ? 1.f : -1.f};
    const int cpu_x = half(rng), cpu_y = half(rng), gpu_x = half(rng) + kVars / 2, gpu_y = half(rng) + kVars / 2;
    switch (op.kind) {
      case Kind::kCpuAxpy:
        op.x = cpu_x, op.y = cpu_y;
        break;
      case Kind::kGpuAxpy:
        op.x = gpu_x, op.y = gpu_y;
        break;
      case Kind::kCopyToGpu:
        op.x = cpu_x, op.y = gpu_y;
        break;
      case Kind::kCopyFromGpu:
        op.x = gpu_x, op.y = cpu_y;
        break;
    }
    if (op.x == op.y && op.kind != Kind::kCopyToGpu && op.kind != Kind::kCopyFromGpu) op.y = op.x ^ 1;
    ops.push_back(op);
  }
  return ops;
}

struct Buffers {
  std::vector<float*> data;  // host (pageable) or device memory per var
  Buffers() {
    for (int v = 0; v < kVars; ++v) {
      std::vector<float> init(kLength);
      for (int i = 0; i < kLength; ++i) init[i] = static_cast<float>((v * 7 + i) % 5);
      float* p = nullptr;
      if (OnGpu(v)) {
        WEFT_CUDA_CHECK(cudaMalloc(&p, kLength * sizeof(float)));
        WEFT_CUDA_CHECK(cudaMemcpy(p, init.data(), kLength * sizeof(float), cudaMemcpyHostToDevice));
      } else {
        p = new float[kLength];
        std::copy(init.begin(), init.end(), p);
      }
      data.push_back(p);
    }
  }
  ~Buffers() {
    for (int v = 0; v < kVars; ++v) OnGpu(v) ? (void)cudaFree(data[v]) : delete[] data[v];
  }
  std::vector<float> Read(int v) const {
    std::vector<float> out(kLength);
    WEFT_CUDA_CHECK(cudaMemcpy(out.data(), data[v], kLength * sizeof(float), cudaMemcpyDefault));
    return out;
  }
};

void PushOp(engine::Engine& engine, const Op& op, Buffers& b, const std::vector<VarHandle>& vars) {
  float* x = b.data[op.x];
  float* y = b.data[op.y];
  const float a = op.a;
  const size_t bytes = kLength * sizeof(float);
  switch (op.kind) {
    case Kind::kCpuAxpy:
      engine.PushSync(
          [=](RunContext) {
            for (int i = 0; i < kLength; ++i) y[i] = a * x[i] + y[i];
          },
          Device::Cpu(), {vars[op.x]}, {vars[op.y]});
      return;
    case Kind::kGpuAxpy:
      engine.PushSync([=](RunContext run) { ASSERT_EQ(Saxpy(*run.stream, kLength, a, x, y), CUBLAS_STATUS_SUCCESS); },
                      Device::Gpu(0), {vars[op.x]}, {vars[op.y]});
      return;
    case Kind::kCopyToGpu:
    case Kind::kCopyFromGpu:
      engine.PushSync([=](RunContext run) { run.stream->Copy(y, x, bytes); }, Device::Gpu(0), {vars[op.x]},
                      {vars[op.y]}, op.kind == Kind::kCopyToGpu ? FnProperty::kCopyToGpu : FnProperty::kCopyFromGpu);
      return;
  }
}

std::vector<std::vector<float>> RunProgram(engine::EngineKind kind, const std::vector<Op>& ops) {
  engine::EngineOptions options;
  options.cpu_workers = 2;
  auto engine = engine::CreateEngine(kind, options);
  Buffers buffers;
  std::vector<VarHandle> vars;
  for (int v = 0; v < kVars; ++v) vars.push_back(engine->NewVariable());
  for (const Op& op : ops) PushOp(*engine, op, buffers, vars);
  engine->WaitForAll();
  std::vector<std::vector<float>> out;
  for (int v = 0; v < kVars; ++v) out.push_back(buffers.Read(v));
  engine->Shutdown();
  return out;
}

TEST(GpuEngine, RandomProgramsMatchTheNaiveEngine) {
  testing::Watchdog watchdog(std::chrono::seconds(240), "GPU random programs");
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    const std::vector<Op> ops = MakeProgram(seed, 400);
    const auto want = RunProgram(engine::EngineKind::kNaive, ops);
    const auto got = RunProgram(engine::EngineKind::kThreaded, ops);
    for (int v = 0; v < kVars; ++v) {
      ASSERT_EQ(got[v], want[v]) << "seed " << seed << ", var " << v << (OnGpu(v) ? " (GPU)" : " (CPU)");
    }
  }
}

// ---- Joining a library's auxiliary stream ----------------------------------------------------

// Like cuDNN's RNN backward data: the op's result is written on a stream the op does not own
// (`aux`, a blocking stream like a library's own), where it waits behind a gate the test holds.
void PushAuxStreamWrite(engine::Engine& engine, VarHandle var, float* out, const float* pinned_values, size_t n,
                        cudaStream_t aux, bool join) {
  engine.PushSync(
      [=](RunContext run) {
        WEFT_CUDA_CHECK(cudaMemcpyAsync(out, pinned_values, n * sizeof(float), cudaMemcpyHostToDevice, aux));
        if (join) gpu::JoinLibraryStreams(*run.stream);
      },
      Device::Gpu(0), {}, {var}, FnProperty::kNormal, 0, "aux_stream_write");
}

// One run: the auxiliary write (held at a gate), then its consumer, a device-to-device copy on a
// compute stream ordered after the write's op by the engine's events. Returns whether the copy
// read what the auxiliary stream wrote.
//   Without the join the copy does not wait for the auxiliary stream, and the gate opens only
//   after the copy is complete (WaitForVar on its output): it must read the zeros from before the
//   write. Nothing that wait needs is behind the gate: the copy's stream waits only for the op's
//   own stream, nothing runs on the legacy stream, and no other host function is queued.
//   With the join every blocking stream waits for the gated write (the join's event is on the
//   legacy stream), so the gate opens once the copy has been queued (a host latch the consumer
//   opens; queuing never blocks the host) and before anything waits for the device: the copy must
//   read the written values.
bool AuxWriteReadsBack(engine::Engine& engine, cudaStream_t aux, float* out, float* copy, const float* pinned, size_t n,
                       bool join) {
  VarHandle out_var = engine.NewVariable(), copy_var = engine.NewVariable();
  WEFT_CUDA_CHECK(cudaMemset(out, 0, n * sizeof(float)));
  WEFT_CUDA_CHECK(cudaDeviceSynchronize());
  testing::StreamGate gate(aux);
  PushAuxStreamWrite(engine, out_var, out, pinned, n, aux, join);
  testing::Latch copy_queued;
  engine.PushSync(
      [=, &copy_queued](RunContext run) {
        run.stream->Copy(copy, out, n * sizeof(float), cudaMemcpyDeviceToDevice);
        copy_queued.Open();
      },
      Device::Gpu(0), {out_var}, {copy_var});
  if (join) {
    EXPECT_TRUE(copy_queued.WaitFor(std::chrono::minutes(1))) << "the consumer never ran";
  } else {
    engine.WaitForVar(copy_var);
  }
  gate.Open();
  engine.WaitForAll();
  WEFT_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> got(n);
  WEFT_CUDA_CHECK(cudaMemcpy(got.data(), copy, n * sizeof(float), cudaMemcpyDeviceToHost));
  engine.DeleteVariable([](RunContext) {}, Device::Cpu(), out_var);
  engine.DeleteVariable([](RunContext) {}, Device::Cpu(), copy_var);
  return std::equal(got.begin(), got.end(), pinned);
}

// Returns how many of `runs` read back the values written on the auxiliary stream.
int CorrectRuns(bool join, int runs) {
  auto engine = engine::CreateEngine(engine::EngineKind::kThreaded, engine::EngineOptions{});
  constexpr size_t n = 1 << 16;
  float *pinned = nullptr, *out = nullptr, *copy = nullptr;
  WEFT_CUDA_CHECK(cudaMallocHost(&pinned, n * sizeof(float)));
  for (size_t i = 0; i < n; ++i) pinned[i] = 1.0f + static_cast<float>(i);
  WEFT_CUDA_CHECK(cudaMalloc(&out, n * sizeof(float)));
  WEFT_CUDA_CHECK(cudaMalloc(&copy, n * sizeof(float)));
  cudaStream_t aux = nullptr;
  WEFT_CUDA_CHECK(cudaStreamCreate(&aux));
  int correct = 0;
  for (int r = 0; r < runs; ++r) correct += AuxWriteReadsBack(*engine, aux, out, copy, pinned, n, join);
  engine->Shutdown();
  cudaStreamDestroy(aux);
  cudaFree(out), cudaFree(copy), cudaFreeHost(pinned);
  return correct;
}

TEST(GpuEngine, JoiningAuxiliaryStreamsOrdersTheirWorkBeforeConsumers) {
  testing::Watchdog watchdog(std::chrono::seconds(240), "aux-stream join (a gated stream deadlocked)");
  const int runs = 10;
  const int without = CorrectRuns(/*join=*/false, runs);
  const int with = CorrectRuns(/*join=*/true, runs);
  std::printf("aux-stream writes read back correctly: %d/%d without the join, %d/%d with it\n", without, runs, with,
              runs);
  EXPECT_EQ(without, 0) << "without the join every consumer runs before the gated write";
  EXPECT_EQ(with, runs);
}

// ---- Errors ----------------------------------------------------------------------------------

TEST(GpuEngine, CudaErrorsInOpsComeOutOfWaitForVar) {
  auto engine = engine::CreateEngine(engine::EngineKind::kThreaded, engine::EngineOptions{});
  VarHandle v = engine->NewVariable();
  engine->PushSync(
      [](RunContext run) {
        // A copy from a null device pointer of a non-zero size is an invalid argument.
        run.stream->Copy(reinterpret_cast<void*>(16), nullptr, 1024, cudaMemcpyDeviceToDevice);
      },
      Device::Gpu(0), {}, {v}, FnProperty::kNormal, 0, "bad_copy");
  testing::ExpectErrorContains([&] { engine->WaitForVar(v); }, {"CUDA error", "cudaMemcpyAsync"});
  // The engine stays usable.
  int ran = 0;
  engine->PushSync([&](RunContext run) { ran = run.stream != nullptr; }, Device::Gpu(0), {}, {v});
  engine->WaitForVar(v);
  EXPECT_EQ(ran, 1);
  engine->Shutdown();
}

TEST(GpuEngine, AnAbsentGpuIsRejectedAtPush) {
  auto engine = engine::CreateEngine(engine::EngineKind::kThreaded, engine::EngineOptions{});
  VarHandle v = engine->NewVariable();
  testing::ExpectErrorContains([&] { engine->PushSync([](RunContext) {}, Device::Gpu(15), {}, {v}); },
                               {"expected a GPU id in [0,", "gpu:15"});
  testing::ExpectErrorContains(
      [&] { engine->PushSync([](RunContext) {}, Device::Cpu(), {}, {v}, FnProperty::kCopyToGpu); },
      {"expected a GPU device"});
  engine->Shutdown();
}

// Two independent compute ops that each wait (on the host) until the other has started can only
// both finish on two compute workers at once: so on two streams. Copies in each direction run on
// their copy worker's stream, never on a compute stream.
TEST(GpuEngine, GpuOpsRunOnSeveralStreamsAndCopyWorkersHaveTheirOwn) {
  if (GetEnvInt("WEFT_GPU_COMPUTE_WORKERS", 2, 1, 64) < 2) GTEST_SKIP() << "one compute worker per GPU";
  auto engine = engine::CreateEngine(engine::EngineKind::kThreaded, engine::EngineOptions{});
  std::mutex mu;
  std::map<FnProperty, std::set<GpuStream*>> streams;  // guarded by mu
  auto note = [&](FnProperty prop, GpuStream* s) {
    std::lock_guard<std::mutex> lock(mu);
    streams[prop].insert(s);
  };
  testing::Latch started[2];
  VarHandle a = engine->NewVariable(), b = engine->NewVariable();
  for (int i = 0; i < 2; ++i) {
    engine->PushSync(
        [&, i](RunContext run) {
          note(FnProperty::kNormal, run.stream);
          started[i].Open();
          EXPECT_TRUE(started[1 - i].WaitFor(std::chrono::minutes(1))) << "the other compute op never ran alongside";
        },
        Device::Gpu(0), {}, {i == 0 ? a : b});
  }
  std::vector<VarHandle> vars;
  for (int i = 0; i < 16; ++i) vars.push_back(engine->NewVariable());
  for (VarHandle v : vars) {
    for (FnProperty prop : {FnProperty::kCopyToGpu, FnProperty::kCopyFromGpu}) {
      engine->PushSync([&, prop](RunContext run) { note(prop, run.stream); }, Device::Gpu(0), {}, {v}, prop);
    }
  }
  engine->WaitForAll();
  EXPECT_EQ(streams[FnProperty::kNormal].size(), 2u) << "the two compute ops ran on two streams";
  EXPECT_EQ(streams[FnProperty::kCopyToGpu].size(), 1u);
  EXPECT_EQ(streams[FnProperty::kCopyFromGpu].size(), 1u);
  EXPECT_NE(streams[FnProperty::kCopyToGpu], streams[FnProperty::kCopyFromGpu]);
  for (FnProperty copy : {FnProperty::kCopyToGpu, FnProperty::kCopyFromGpu}) {
    for (GpuStream* s : streams[copy]) EXPECT_EQ(streams[FnProperty::kNormal].count(s), 0u);
  }
  engine->Shutdown();
}

}  // namespace
}  // namespace weft
