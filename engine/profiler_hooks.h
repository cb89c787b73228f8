// What the profiler (engine/internal/profiler.h, started by Engine::StartProfiling) takes from
// code outside the engine's core while it runs, and what it tells that code:
//   - memory samples from the storage pools (RecordMemory), taken at every allocation and free,
//     and by the samplers registered here at the start and the end of a trace;
//   - the profiled op whose function a thread is running (CurrentProfiledOp), with which a device
//     backend tags the work it defers (kernels batched into CUDA graphs) so that the trace can
//     draw an arrow from the op's span to each of its kernels;
//   - a device tracer (the CUDA build registers one, through CUPTI) that records every kernel,
//     copy and memset with its device, stream, start and end on the profiler's clock.
// At most one profiler runs in a process at a time. When none runs, each hook costs one relaxed
// load.
//
//   if (engine::ProfilerRunning()) engine::RecordMemory(device, "gpu:0", in_use, cached, now_ns);
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/device.h"
#include "engine/engine.h"

namespace weft::engine {

// True while a profiler runs in this process. Relaxed: a caller racing with Start or Stop may see
// either value; a sample it then records is kept or dropped, never misplaced.
bool ProfilerRunning();

// The profiler's clock, in nanoseconds: steady_clock (CLOCK_MONOTONIC) since its epoch. Device
// timestamps are converted to it, so host spans and kernels share one time line.
int64_t ProfilerClockNs();

// A sample of a memory pool's counters taken at `ns` (ProfilerClockNs, read while the pool's
// counters were consistent), kept while a profiler runs. `pool` names the pool ("cpu", "gpu:0",
// "pinned host"); it is copied.
void RecordMemory(Device device, const char* pool, size_t bytes_in_use, size_t bytes_cached,
                  int64_t ns);

// `sample` is called when a profiler starts and when it stops (after the traced work is done), so
// that every counter has a value at both ends even when nothing allocates. Registered at static
// initialization; called with no lock of the profiler held.
void AddProfilerSampler(void (*sample)());

// The id of the profiled op whose function runs on the calling thread; 0 when none does (no
// profiler runs, or the op started before it did).
uint64_t CurrentProfiledOp();

// One piece of device work, as the device tracer recorded it.
struct DeviceActivity {
  enum class Kind : uint8_t { kKernel, kMemcpy, kMemset };
  Kind kind = Kind::kKernel;
  std::string name;  // the kernel's (demangled), or "memcpy HtoD", "memset", ...
  int device = 0;
  uint32_t stream = 0;               // the tracer's id of the stream, unique on its device
  int64_t start_ns = 0, end_ns = 0;  // ProfilerClockNs
  uint64_t op = 0;                   // the profiled op that queued it; 0 when unknown
  uint64_t bytes = 0;                // copies and memsets
  uint32_t correlation = 0;          // the tracer's id of the call that queued it
  // Kernels: "grid [x, y, z] block [x, y, z]", then " graph <id>" when replayed from a CUDA graph.
  std::string detail;
};

// A stream of the engine's, with the name of the worker that owns it ("gpu:0 compute 1").
struct NamedStream {
  GpuStream* stream;
  std::string name;
};

// A device stream's track in the trace.
struct DeviceStreamName {
  int device;
  uint32_t stream;
  std::string name;
};

struct DeviceTrace {
  std::vector<DeviceActivity> activities;
  std::vector<DeviceStreamName> streams;  // the engine's streams that the tracer could identify
  std::string warning;                    // what was not recorded, and why; empty if nothing
};

// Records device work between Start and Stop. Start and Stop are called by the profiler only, one
// at a time; EnterOp and LeaveOp by any thread running a profiled op's function, in pairs.
class DeviceTracer {
 public:
  virtual ~DeviceTracer() = default;
  // Starts recording. Returns why it cannot (then Stop returns only that), or an empty string.
  virtual std::string Start() = 0;
  // Around a profiled op's function, on its thread: the device work it queues belongs to `op`.
  virtual void EnterOp(uint64_t op) = 0;
  virtual void LeaveOp() = 0;
  // Stops recording, after the engine waited for the device work queued so far, and returns what
  // was recorded since Start; `streams` are the engine's live streams, named after their workers.
  virtual DeviceTrace Stop(std::span<const NamedStream> streams) = 0;
};

// Called once, at static initialization, by a device backend. The tracer is never destroyed.
void RegisterDeviceTracer(DeviceTracer* tracer);

}  // namespace weft::engine
