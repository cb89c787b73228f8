// The engine on a GPU: ordering through events across compute streams, copy streams and CPU
// workers; the join of a library's own streams (JoinedLibraryWork); CUDA errors as weft::Error.
// Orders the tests depend on are forced (a gate on a stream, a latch between ops), never left to
// sleeps.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
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
    const int cpu_x = half(rng), cpu_y = half(rng), gpu_x = half(rng) + kVars / 2,
              gpu_y = half(rng) + kVars / 2;
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
    if (op.x == op.y && op.kind != Kind::kCopyToGpu && op.kind != Kind::kCopyFromGpu)
      op.y = op.x ^ 1;
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
        WEFT_CUDA_CHECK(
            cudaMemcpy(p, init.data(), kLength * sizeof(float), cudaMemcpyHostToDevice));
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
      engine.PushSync(
          [=](RunContext run) {
            ASSERT_EQ(Saxpy(*run.stream, kLength, a, x, y), CUBLAS_STATUS_SUCCESS);
          },
          Device::Gpu(0), {vars[op.x]}, {vars[op.y]});
      return;
    case Kind::kCopyToGpu:
    case Kind::kCopyFromGpu:
      engine.PushSync(
          [=](RunContext run) { run.stream->Copy(y, x, bytes); }, Device::Gpu(0), {vars[op.x]},
          {vars[op.y]},
          op.kind == Kind::kCopyToGpu ? FnProperty::kCopyToGpu : FnProperty::kCopyFromGpu);
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
      ASSERT_EQ(got[v], want[v]) << "seed " << seed << ", var " << v
                                 << (OnGpu(v) ? " (GPU)" : " (CPU)");
    }
  }
}

// ---- Joining a library's own streams (engine/gpu/stream_join.h) ----------------------------

// A library like cuDNN's RNN: it forks from the stream it is given onto a non-blocking stream of
// its own (`aux`), writes `pinned` into `out` there, behind a gate when `gate` is given (made
// inside the call, so that a capture holds it), and joins back to the given stream, or not.
struct AuxLibrary {
  cudaStream_t aux = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
  bool joins_back = true;

  void Write(cudaStream_t from, float* out, const float* pinned, size_t n,
             std::optional<testing::StreamGate>* gate) {
    WEFT_CUDA_CHECK(cudaEventRecord(fork, from));
    WEFT_CUDA_CHECK(cudaStreamWaitEvent(aux, fork, 0));
    if (gate != nullptr) gate->emplace(aux);
    WEFT_CUDA_CHECK(cudaMemcpyAsync(out, pinned, n * sizeof(float), cudaMemcpyHostToDevice, aux));
    if (!joins_back) return;
    WEFT_CUDA_CHECK(cudaEventRecord(join, aux));
    WEFT_CUDA_CHECK(cudaStreamWaitEvent(from, join, 0));
  }
};

// Buffers and streams for the runs below.
struct AuxRig {
  static constexpr size_t n = 1 << 16;
  AuxRig() {
    WEFT_CUDA_CHECK(cudaMallocHost(&pinned, n * sizeof(float)));
    for (size_t i = 0; i < n; ++i) pinned[i] = 1.0f + static_cast<float>(i);
    WEFT_CUDA_CHECK(cudaMalloc(&out[0], n * sizeof(float)));
    WEFT_CUDA_CHECK(cudaMalloc(&out[1], n * sizeof(float)));
    WEFT_CUDA_CHECK(cudaMalloc(&copy, n * sizeof(float)));
    WEFT_CUDA_CHECK(
        cudaStreamCreateWithFlags(&lib.aux, cudaStreamNonBlocking));  // as cuDNN makes its own
    WEFT_CUDA_CHECK(cudaEventCreateWithFlags(&lib.fork, cudaEventDisableTiming));
    WEFT_CUDA_CHECK(cudaEventCreateWithFlags(&lib.join, cudaEventDisableTiming));
  }
  ~AuxRig() {
    cudaDeviceSynchronize();
    cudaEventDestroy(lib.fork), cudaEventDestroy(lib.join), cudaStreamDestroy(lib.aux);
    cudaFree(out[0]), cudaFree(out[1]), cudaFree(copy), cudaFreeHost(pinned);
  }
  bool CopyReadBack() const {
    WEFT_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> got(n);
    WEFT_CUDA_CHECK(cudaMemcpy(got.data(), copy, n * sizeof(float), cudaMemcpyDeviceToHost));
    return std::equal(got.begin(), got.end(), pinned);
  }
  AuxLibrary lib;
  float *pinned = nullptr, *out[2] = {}, *copy = nullptr;
};

// How the op runs the library: straight on its stream, or through JoinedLibraryWork.
enum class Join { kNone, kJoined };

// One run: the library's write into `out` (gated when `gated`), then its consumer, a device copy
// on a compute stream ordered after the write's op by the engine's events. Returns whether the
// copy read what the library wrote.
//   Gated and unjoined, the gate opens only after the copy is complete (WaitForVar on its output):
//   nothing that wait needs is behind the gate, so the copy must read the zeros from before.
//   Gated and joined, the gate opens once the copy has been queued (a latch the consumer opens;
//   queuing never blocks): the copy must read the written values.
//   Ungated (the fallback's run: it waits for the whole device), the values must be right.
bool AuxWriteReadsBack(engine::Engine& engine, AuxRig& rig, float* out,
                       gpu::JoinedLibraryWork* joined, bool gated) {
  VarHandle out_var = engine.NewVariable(), copy_var = engine.NewVariable();
  WEFT_CUDA_CHECK(cudaMemset(out, 0, AuxRig::n * sizeof(float)));
  WEFT_CUDA_CHECK(cudaMemset(rig.copy, 0, AuxRig::n * sizeof(float)));
  WEFT_CUDA_CHECK(cudaDeviceSynchronize());
  std::optional<testing::StreamGate> gate;
  engine.PushSync(
      [&, out](RunContext run) {
        auto write = [&](GpuStream& s) {
          s.Library([&](cudaStream_t raw) {
            rig.lib.Write(raw, out, rig.pinned, AuxRig::n, gated ? &gate : nullptr);
          });
        };
        if (joined != nullptr) {
          joined->Run(*run.stream, 0, write);
        } else {
          write(*run.stream);
        }
      },
      Device::Gpu(0), {}, {out_var}, FnProperty::kNormal, 0, "aux_stream_write");
  testing::Latch copy_queued;
  engine.PushSync(
      [&, out](RunContext run) {
        run.stream->Copy(rig.copy, out, AuxRig::n * sizeof(float), cudaMemcpyDeviceToDevice);
        copy_queued.Open();
      },
      Device::Gpu(0), {out_var}, {copy_var});
  if (gated && joined != nullptr) {
    EXPECT_TRUE(copy_queued.WaitFor(std::chrono::minutes(1))) << "the consumer never ran";
  } else {
    engine.WaitForVar(copy_var);
  }
  if (gate) gate->Open();
  engine.WaitForAll();
  const bool right = rig.CopyReadBack();
  engine.DeleteVariable([](RunContext) {}, Device::Cpu(), out_var);
  engine.DeleteVariable([](RunContext) {}, Device::Cpu(), copy_var);
  return right;
}

TEST(GpuEngine, JoinedLibraryWorkOrdersALibrarysForkedWorkBeforeConsumers) {
  testing::Watchdog watchdog(std::chrono::seconds(240),
                             "joined library work (a gated stream deadlocked)");
  auto engine = engine::CreateEngine(engine::EngineKind::kThreaded, engine::EngineOptions{});
  AuxRig rig;
  const int runs = 10;
  // The hazard: a library that does not join its fork back, called straight on the op's stream.
  rig.lib.joins_back = false;
  int without = 0;
  for (int r = 0; r < runs; ++r)
    without += AuxWriteReadsBack(*engine, rig, rig.out[r % 2], nullptr, true);
  // A library that forks and joins back, as cuDNN does, through the join: one graph per call,
  // launched on the op's stream; the output alternates between two buffers, so the executable is
  // updated in place rather than instantiated again.
  rig.lib.joins_back = true;
  gpu::JoinedLibraryWork joined;
  const gpu::JoinCounts before = gpu::Joins();
  int with = 0;
  for (int r = 0; r < runs; ++r)
    with += AuxWriteReadsBack(*engine, rig, rig.out[r % 2], &joined, true);
  const gpu::JoinCounts after = gpu::Joins();
  std::printf(
      "forked writes read back correctly: %d/%d unjoined, %d/%d through the join (%lld graphs, "
      "%lld "
      "instantiated)\n",
      without, runs, with, runs, static_cast<long long>(after.runs - before.runs),
      static_cast<long long>(after.instantiations - before.instantiations));
  EXPECT_EQ(without, 0) << "unjoined, every consumer runs before the gated write";
  EXPECT_EQ(with, runs);
  EXPECT_EQ(after.runs - before.runs, runs);
  EXPECT_EQ(after.instantiations - before.instantiations, 1)
      << "the executable was not updated in place";
  EXPECT_EQ(after.unjoined, before.unjoined);
  engine->Shutdown();
}

TEST(GpuEngine, JoinedLibraryWorkFallsBackWhenTheLibraryLeavesAForkUnjoined) {
  auto engine = engine::CreateEngine(engine::EngineKind::kThreaded, engine::EngineOptions{});
  AuxRig rig;
  rig.lib.joins_back = false;
  gpu::JoinedLibraryWork joined;
  const gpu::JoinCounts before = gpu::Joins();
  ::testing::internal::CaptureStderr();
  const bool first = AuxWriteReadsBack(*engine, rig, rig.out[0], &joined, false);
  const bool second = AuxWriteReadsBack(*engine, rig, rig.out[1], &joined, false);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(first && second)
      << "the fallback's synchronization did not cover the library's stream";
  EXPECT_EQ(gpu::Joins().unjoined - before.unjoined, 2);
  EXPECT_EQ(gpu::Joins().runs, before.runs) << "an unjoined capture was launched";
  const std::string warning = "left work on a stream of its own without joining it back";
  const size_t at = err.find(warning);
  // One warning per process: only if no earlier test took the fallback.
  if (before.unjoined == 0) {
    EXPECT_NE(at, std::string::npos) << err;
  }
  if (at != std::string::npos) {
    EXPECT_EQ(err.find(warning, at + 1), std::string::npos) << "warned twice: " << err;
  }
  engine->Shutdown();
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

// An async GPU op completed AfterDeviceWork (its device work ran elsewhere and is done: NCCL's
// collectives) leaves nothing on its worker's stream for its consumers to wait for. Its stream is
// gated right before it completes, standing for the work later ops queue there: a completion
// recorded on the stream (plain done()) would be recorded behind the gate, and both consumers,
// a CPU op and WaitForVar, would wait for the gate. Here they must finish with the gate closed.
TEST(GpuEngine, AnOpCompletedAfterItsDeviceWorkLeavesNothingOnItsStreamToWaitFor) {
  auto engine = engine::CreateEngine(engine::EngineKind::kThreaded, engine::EngineOptions{});
  VarHandle v = engine->NewVariable(), seen = engine->NewVariable();
  std::optional<testing::StreamGate> gate;
  engine->PushAsync(
      [&](RunContext run, engine::OnComplete done) {
        gate.emplace(*run.stream);
        done.AfterDeviceWork();
      },
      Device::Gpu(0), {}, {v}, FnProperty::kNormal, 0, "device_work_done");
  int read = 0;
  engine->PushSync([&](RunContext) { read = 1; }, Device::Cpu(), {v}, {seen});
  testing::Latch waited;
  std::thread waiter([&] {
    engine->WaitForVar(v);
    engine->WaitForVar(seen);
    waited.Open();
  });
  const bool returned = waited.WaitFor(std::chrono::minutes(1));
  EXPECT_TRUE(returned) << "the consumers waited for the op's stream";
  gate->Open();  // lets a wrong run end too
  waiter.join();
  EXPECT_EQ(read, 1);
  engine->WaitForAll();
  engine->Shutdown();
}

TEST(GpuEngine, AnAbsentGpuIsRejectedAtPush) {
  auto engine = engine::CreateEngine(engine::EngineKind::kThreaded, engine::EngineOptions{});
  VarHandle v = engine->NewVariable();
  testing::ExpectErrorContains(
      [&] { engine->PushSync([](RunContext) {}, Device::Gpu(15), {}, {v}); },
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
  if (GetEnvInt("WEFT_GPU_COMPUTE_WORKERS", 2, 1, 64) < 2)
    GTEST_SKIP() << "one compute worker per GPU";
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
          EXPECT_TRUE(started[1 - i].WaitFor(std::chrono::minutes(1)))
              << "the other compute op never ran alongside";
        },
        Device::Gpu(0), {}, {i == 0 ? a : b});
  }
  std::vector<VarHandle> vars;
  for (int i = 0; i < 16; ++i) vars.push_back(engine->NewVariable());
  for (VarHandle v : vars) {
    for (FnProperty prop : {FnProperty::kCopyToGpu, FnProperty::kCopyFromGpu}) {
      engine->PushSync([&, prop](RunContext run) { note(prop, run.stream); }, Device::Gpu(0), {},
                       {v}, prop);
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
