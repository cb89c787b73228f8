// The run-time kernel library: CUDA C++ kept as files in ops/gpu/kernels (embedded into the
// binary at build time), or source text generated at run time (the fusion pass), compiled by
// NVRTC for the architecture of the GPU it runs on, loaded with the runtime's library API and
// launched on a stream (through the stream object, engine/gpu/gpu_stream.h). Compiled once per
// (source, kernel, options, device) in the process and, when WEFT_RTC_CACHE names a folder, kept
// there across processes. Only cudart and NVRTC are used (no driver API).
//
//   KernelRequest r{"unary.cuh", "", "weft::UnaryForward<weft::Relu, float, 4>"};
//   Kernel k = KernelLibrary::Global().Get(r, /*device=*/0);   // throws weft::Error with the log
//   void* args[] = {&x, &y, &n, &s0, &s1, &req};
//   k.Launch(dim3(blocks), dim3(256), args, *ctx.run.stream);
//
//   std::string error;                                         // fusion: a status, not a throw
//   std::optional<Kernel> f = KernelLibrary::Global().TryGet({"fused_3", text, "fused_3"}, 0,
//   &error);
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/mutex.h"
#include "engine/gpu/gpu_stream.h"

namespace weft::gpu::rtc {

// What to compile. Every embedded file of ops/gpu/kernels can be #included by name ("common.cuh").
struct KernelRequest {
  std::string source_name;  // an embedded file; with `source` set, only a label for messages
  std::string source;       // the text to compile; empty: the embedded file `source_name`
  // A name expression: a __global__ function, or an instance of a template one
  // ("weft::Fill<float, 4>"), qualified as the source declares it.
  std::string kernel;
  std::vector<std::string> options;  // extra NVRTC options ("-DWIDTH=4"), after weft's own
};

// A loaded kernel: a handle, cheap to copy, valid while its library lives (the global one: the
// whole process). Launch on a stream of the device it was loaded for, with that device current.
class Kernel {
 public:
  explicit Kernel(cudaKernel_t handle) : handle_(handle) {}
  // `args` points at each argument, in order, as cudaLaunchKernel expects (a `void* args[]` array
  // converts). Batched per stream (engine/gpu/launch_batch.h); does not synchronize.
  void Launch(dim3 grid, dim3 block, std::span<void* const> args, engine::GpuStream& stream,
              size_t shared_bytes = 0) const;
  cudaKernel_t handle() const { return handle_; }

 private:
  cudaKernel_t handle_;
};

class KernelLibrary {
 public:
  struct Stats {
    int64_t compiles = 0;      // NVRTC runs (successful or not)
    int64_t memory_hits = 0;   // requests answered from the process cache
    int64_t disk_hits = 0;     // CUBINs read back from the disk cache
    int64_t disk_writes = 0;   // CUBINs written to the disk cache
    int64_t disk_rejects = 0;  // cache files ignored as unreadable, truncated or corrupt
  };

  // `disk_cache_dir`: where CUBINs are kept across processes; empty for none. Created if absent.
  explicit KernelLibrary(std::string disk_cache_dir);
  ~KernelLibrary();  // unloads every library it loaded: destroy before the CUDA runtime unloads
  KernelLibrary(const KernelLibrary&) = delete;
  KernelLibrary& operator=(const KernelLibrary&) = delete;

  // The process's library, disk cache from WEFT_RTC_CACHE. Never destroyed: its kernels stay
  // valid until exit, and no CUDA call runs from a static destructor.
  static KernelLibrary& Global();

  // The kernel, compiled for `device`'s architecture and loaded there. Throws weft::Error naming
  // the kernel and holding NVRTC's log when it does not compile (a failure is remembered: asking
  // again throws again without recompiling).
  Kernel Get(const KernelRequest& request, int device);
  // The same, but a compile error is returned in *error (CUDA errors still throw).
  std::optional<Kernel> TryGet(const KernelRequest& request, int device, std::string* error);

  Stats stats() const;

 private:
  struct Entry;
  std::shared_ptr<Entry> FindOrAdd(const KernelRequest& request);
  // Fills entry.kernels[device], or entry.by_arch[arch].error; with entry.mu held.
  void Build(const KernelRequest& request, int device, Entry& entry);

  const std::string disk_cache_dir_;
  mutable Mutex mu_;
  // An Entry's own mutex guards its contents, so that one kernel compiling does not hold up
  // requests for others.
  std::unordered_map<std::string, std::shared_ptr<Entry>> entries_ WEFT_GUARDED_BY(mu_);
  Stats stats_ WEFT_GUARDED_BY(mu_);
};

// The text of an embedded file of ops/gpu/kernels; throws weft::Error for an unknown name.
std::string_view EmbeddedSource(std::string_view file);
std::vector<std::string> EmbeddedSourceNames();

}  // namespace weft::gpu::rtc
