// The dependency engine: every piece of work in weft is an op pushed here with the variables it
// reads and the variables it writes. Push returns at once (a small CPU op, FnProperty::kCpuSmall,
// whose vars are free runs on the pushing thread first); the engine runs the op on a worker when
// every earlier op on those variables allows it:
//   - writes to a variable run in push order;
//   - reads between two writes may run concurrently;
//   - among ready ops, a higher priority runs first.
// An op that throws (or reports an error through OnComplete) stores its error on the variables
// it writes; ops that read or write those variables are skipped and carry the error on; the
// error comes out of WaitForVar on each affected variable and out of WaitForAll. The engine
// stays usable.
//
//   Engine& engine = *Engine::Get();            // WEFT_ENGINE=threaded (default) | naive
//   VarHandle a = engine.NewVariable(), b = engine.NewVariable();
//   engine.PushSync([&](RunContext) { x = 1; }, Device::Cpu(), {}, {a}, FnProperty::kNormal, 0,
//   "init"); engine.PushSync([&](RunContext) { y = x + 1; }, Device::Cpu(), {a}, {b});
//   engine.WaitForVar(b);                        // y == 2, or the op's exception is rethrown
//   engine.DeleteVariable([](RunContext) {}, Device::Cpu(), a);
//
// Profiling: StartProfiling(path) ... StopProfiling() writes a Chrome trace of the ops run between
// them (and, in a CUDA build, of their kernels, copies and memsets), or WEFT_PROFILE=<file> from
// the engine's start to its Shutdown.
//
// Environment: WEFT_ENGINE, WEFT_CPU_WORKERS, WEFT_CPU_PRIORITY_WORKERS, WEFT_PROFILE=<file>.
#pragma once

#include <exception>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/device.h"
#include "engine/function.h"

namespace weft::engine {

// A variable is a token for a piece of state (an array's memory, a random generator, ...),
// not the state itself. Created by NewVariable, owned by the engine until DeleteVariable.
class Var;
using VarHandle = Var*;

// Where a ready op is sent. The copy and GPU kinds are routed to a device's copy or compute
// workers by the GPU backend; a CPU-only build rejects them at push with a weft::Error.
enum class FnProperty : uint8_t {
  kNormal,          // compute on the op's device
  kCopyToGpu,       // host-to-device copy (GPU copy workers)
  kCopyFromGpu,     // device-to-host copy (GPU copy workers)
  kCpuPrioritized,  // CPU work that must not wait behind normal work (prioritized pool)
  kGpuPrioritized,  // GPU work on the prioritized stream
  kAsync,           // tiny, non-blocking: runs on whichever thread makes it ready
  // A small CPU op (about a microsecond of work, e.g. an elementwise op on a few thousand
  // elements): when every var grants it at push, it runs at once on the pushing thread, before
  // Push returns, instead of being handed to a worker (a hand-off costs more than such an op);
  // otherwise, and when pushed from inside a running op or on vars a device op has touched, it
  // is a kNormal op. Its errors are stored on its vars as for any op, never thrown by Push.
  kCpuSmall,
};

// A GPU worker's stream, and the only way an op queues work on it (engine/gpu/gpu_stream.h, in
// the CUDA build). Opaque to the engine core, which knows no CUDA.
class GpuStream;

// What a running op gets from its worker.
struct RunContext {
  Device device;
  GpuStream* stream =
      nullptr;  // the worker's stream for GPU ops (owned by the engine); null on CPU
  // The worker thread running the op: unique within the engine across all its pools (0, 1, ...),
  // so it can index per-worker resources; -1 when the op runs on a thread that is not a worker.
  int worker = -1;
};

// Handed to an async op, which calls it exactly once when its work is done, from any thread:
// on_complete() for success, on_complete(error) for failure. An async op that throws before
// calling it has failed with that exception and must not call it; it must not throw after.
//
// A GPU op whose device work ran on a stream of its own and was seen complete by the host (an
// event queried done) calls AfterDeviceWork() instead: the engine then records no completion on
// the worker's stream, and the op's consumers wait for no device work of it (a CPU consumer does
// not synchronize), unless an input carries device errors (engine/gpu/device_error.h), which
// only a recorded completion passes on. Its worker's stream must hold no work of the op that may
// still run.
class OnComplete {
 public:
  using Fn = void (*)(void* engine, void* op, std::exception_ptr error, bool device_work_done);
  OnComplete(Fn fn, void* engine, void* op) : fn_(fn), engine_(engine), op_(op) {}
  void operator()() const { fn_(engine_, op_, nullptr, false); }
  void operator()(std::exception_ptr error) const { fn_(engine_, op_, std::move(error), false); }
  void AfterDeviceWork() const { fn_(engine_, op_, nullptr, true); }

 private:
  Fn fn_;
  void* engine_;
  void* op_;
};

// Move-only, with small closures stored inline (engine/function.h).
using SyncFn = Function<void(RunContext)>;
using AsyncFn = Function<void(RunContext, OnComplete)>;

// A read-only list of variables, built from a braced list, a vector or a span. A parameter type
// only, like std::string_view: it does not own the list, and the engine copies what it needs at
// push. Do not keep one built from a braced list beyond the call.
class VarList {
 public:
  VarList() = default;
#if defined(__GNUC__) && !defined(__clang__)  // GCC's warning; clang has no such group
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"
#endif
  VarList(std::initializer_list<VarHandle> vars) : data_(vars.begin()), size_(vars.size()) {}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
  VarList(const std::vector<VarHandle>& vars) : data_(vars.data()), size_(vars.size()) {}
  template <size_t N>
  VarList(const VarHandle (&vars)[N]) : data_(vars), size_(N) {}
  VarList(std::span<const VarHandle> vars) : data_(vars.data()), size_(vars.size()) {}
  const VarHandle* begin() const { return data_; }
  const VarHandle* end() const { return data_ + size_; }
  size_t size() const { return size_; }

 private:
  const VarHandle* data_ = nullptr;
  size_t size_ = 0;
};

struct EngineOptions {
  int cpu_workers = 1;           // WEFT_CPU_WORKERS (default: the cores)
  int cpu_priority_workers = 1;  // WEFT_CPU_PRIORITY_WORKERS (default 1)
  std::string
      profile_path;  // WEFT_PROFILE: profile from the start; the trace is written at Shutdown
  static EngineOptions FromEnv();
};

enum class EngineKind { kNaive, kThreaded };

class Engine {
 public:
  virtual ~Engine() = default;

  // The process-wide engine, created on first use from the environment, shut down at exit and
  // never destroyed.
  static Engine* Get();

  virtual VarHandle NewVariable() = 0;

  // `name` (optional) labels the op in the profile and must outlive the op. A var listed in both
  // `reads` and `writes` is a write; duplicates are ignored.
  void PushAsync(AsyncFn fn, Device device, VarList reads, VarList writes,
                 FnProperty prop = FnProperty::kNormal, int priority = 0,
                 const char* name = nullptr);
  void PushSync(SyncFn fn, Device device, VarList reads, VarList writes,
                FnProperty prop = FnProperty::kNormal, int priority = 0,
                const char* name = nullptr);

  // Runs `deleter` after every op already pushed on `var`, then frees the var for reuse by a
  // later NewVariable. The deleter runs even if the var holds an error. On the CPU it runs as a
  // kCpuSmall op (at once, on the calling thread, when nothing is pending on the var): keep it
  // short, as a memory pool's free is. Nothing may be pushed on
  // `var` afterwards: a push on it, a second delete or a wait is a weft::Error (until a later
  // NewVariable returns the same handle).
  virtual void DeleteVariable(SyncFn deleter, Device device, VarHandle var) = 0;

  // Blocks until every op pushed so far that writes `var` is done (reads still running are not
  // waited for), then rethrows the error `var` holds, if any, once.
  virtual void WaitForVar(VarHandle var) = 0;
  // Blocks until the engine is idle: every op pushed so far is done, and so is every op pushed
  // meanwhile (by other threads, or by ops) up to a moment when nothing is pending. Then rethrows
  // the first error no WaitForVar has reported since the last WaitForAll, and clears every error
  // the engine holds. (So an op must never wait for a WaitForAll to return.)
  virtual void WaitForAll() = 0;

  // Drains all work, joins the workers and writes the profile. Idempotent; Get()'s engine runs
  // it at exit. Pushing afterwards throws weft::Error.
  virtual void Shutdown() = 0;

  // Starts tracing (engine/internal/profiler.h): every op that starts from now on gets a span on
  // the track of the worker that runs it; with a GPU backend, every kernel, memcpy and memset gets
  // one on its stream's track, with an arrow from its op's span; the memory pools' bytes in use and
  // cached are counters. Throws weft::Error when a profiler already runs in this process.
  virtual void StartProfiling(const std::string& path) = 0;
  // Waits for the work pushed so far (device work included; errors are not rethrown here, they
  // stay for WaitForVar and WaitForAll), then writes the trace to the path StartProfiling was
  // given: a Chrome trace that Perfetto and chrome://tracing open, written through a temporary
  // file renamed into place. Throws weft::Error when no profiler runs on this engine, inside an op
  // (it would wait for itself), or when the file cannot be written (nothing is left at the path;
  // profiling has stopped anyway).
  virtual void StopProfiling() = 0;
  virtual bool profiling() const = 0;

  virtual EngineKind kind() const = 0;

 protected:
  struct PushArgs {
    Device device;
    VarList reads;
    VarList writes;
    FnProperty prop;
    int priority;
    const char* name;
  };
  // Exactly one of `sync`, `async` is set.
  virtual void Push(SyncFn sync, AsyncFn async, const PushArgs& args) = 0;
};

// The version of `var`'s content: the stamp of the last op pushed that writes it, from one
// process-wide sequence (0: none yet). Equal nonzero stamps mean the same write, so the same
// content, even across vars and arrays that reuse one buffer; an op pushed after the stamp was
// read sees exactly that write (pushed before, so run before). This lets a reader keep what it
// derived from the content (a convolution's reordered weight) until the stamp changes. Pushes
// racing on one var from several threads order themselves as they land.
uint64_t LastWritePushed(VarHandle var);

std::unique_ptr<Engine> CreateEngine(EngineKind kind, const EngineOptions& options);
// Reads WEFT_ENGINE: "threaded" (default) or "naive".
EngineKind EngineKindFromEnv();

}  // namespace weft::engine
