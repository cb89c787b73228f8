#include "engine/gpu/device_tracer.h"

#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/gpu/cuda_check.h"
#include "core/mutex.h"
#include "core/no_destructor.h"
#include "engine/gpu/gpu_stream.h"
#include "engine/gpu/launch_batch.h"
#include "engine/profiler_hooks.h"

namespace weft::gpu {

namespace {

using engine::DeviceActivity;

constexpr size_t kBufferBytes = size_t{8} << 20;
// The API records are there only to carry the external correlation ids of the calls.
constexpr CUpti_ActivityKind kKinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
    CUPTI_ACTIVITY_KIND_MEMCPY,
    CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_RUNTIME,
    CUPTI_ACTIVITY_KIND_DRIVER,
    CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
};
constexpr CUpti_ExternalCorrelationKind kOpKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
constexpr CUpti_ExternalCorrelationKind kLaunchKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1;

std::string CuptiError(const char* call, CUptiResult result) {
  const char* text = nullptr;
  if (cuptiGetResultString(result, &text) != CUPTI_SUCCESS || text == nullptr)
    text = "unknown CUPTI error";
  return std::string(call) + ": " + text;
}

// The external ids of one API call (0: none).
struct Correlated {
  uint64_t op = 0;
  uint64_t launch = 0;
};

// What the buffer callbacks delivered since the tracer started: device work (its op not yet
// resolved, its times CUPTI's), and the external ids of the API calls.
struct Records {
  std::vector<DeviceActivity> work;
  std::unordered_map<uint32_t, Correlated> external;
  size_t dropped = 0;
};

// Buffers are delivered on CUPTI's thread, or on the thread that flushes; records_mu orders them.
Mutex records_mu;
Records& Delivered() WEFT_REQUIRES(records_mu) {
  static NoDestructor<Records> records;  // guarded by records_mu
  return *records;
}

// Set by Start once CUPTI records, cleared by Stop before it disables it.
std::atomic<bool> recording{false};

// An attributed launch: the op of each kernel, in order, and CUPTI's id of the stream it was
// launched into (the kernels of a graph belong on that stream's track).
struct Launch {
  std::vector<uint64_t> ops;
  uint32_t stream = 0;
  bool stream_known = false;
};
using LaunchMap = std::unordered_map<uint64_t, Launch>;

// Attributed launches by id (unique in the process, so an id from an earlier trace is not found).
std::atomic<uint64_t> next_launch{1};
Mutex launches_mu;
LaunchMap& Launches() WEFT_REQUIRES(launches_mu) {
  static NoDestructor<LaunchMap> launches;  // guarded by launches_mu
  return *launches;
}

// Demangled, and cached by CUPTI's name pointer (shared by every record of a kernel). With
// records_mu held.
const std::string& KernelName(const char* mangled) WEFT_REQUIRES(records_mu) {
  static NoDestructor<std::unordered_map<const char*, std::pair<std::string, std::string>>> cache;
  auto& [raw, name] = (*cache)[mangled];
  if (raw != mangled) {
    raw = mangled;
    int status = 0;
    char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
    name = status == 0 && demangled != nullptr ? demangled : mangled;
    std::free(demangled);
  }
  return name;
}

DeviceActivity KernelActivity(const CUpti_ActivityKernel10& k) WEFT_REQUIRES(records_mu) {
  DeviceActivity a;
  a.kind = DeviceActivity::Kind::kKernel;
  a.name = k.name != nullptr ? KernelName(k.name) : "kernel";
  a.device = static_cast<int>(k.deviceId), a.stream = k.streamId, a.correlation = k.correlationId;
  a.start_ns = static_cast<int64_t>(k.start), a.end_ns = static_cast<int64_t>(k.end);
  a.detail = "grid [" + std::to_string(k.gridX) + ", " + std::to_string(k.gridY) + ", " +
             std::to_string(k.gridZ) + "] block [" + std::to_string(k.blockX) + ", " +
             std::to_string(k.blockY) + ", " + std::to_string(k.blockZ) + "]";
  if (k.graphId != 0)
    a.detail += " graph " + std::to_string(k.graphId);  // replayed from a CUDA graph
  return a;
}

const char* CopyName(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      return "memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      return "memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      return "memcpy DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
      return "memcpy HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
      return "memcpy PtoP";
    default:
      return "memcpy";
  }
}

// Copies and memsets have the same fields for what the trace shows.
template <typename Record>
DeviceActivity TransferActivity(const Record& r, DeviceActivity::Kind kind, const char* name) {
  DeviceActivity a;
  a.kind = kind;
  a.name = name;
  a.device = static_cast<int>(r.deviceId), a.stream = r.streamId, a.correlation = r.correlationId;
  a.start_ns = static_cast<int64_t>(r.start), a.end_ns = static_cast<int64_t>(r.end);
  a.bytes = r.bytes;
  return a;
}

// With records_mu held.
void Collect(const CUpti_Activity* record, Records& r) WEFT_REQUIRES(records_mu) {
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      r.work.push_back(KernelActivity(*reinterpret_cast<const CUpti_ActivityKernel10*>(record)));
      return;
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto& m = *reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      r.work.push_back(TransferActivity(m, DeviceActivity::Kind::kMemcpy, CopyName(m.copyKind)));
      return;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET:
      r.work.push_back(TransferActivity(*reinterpret_cast<const CUpti_ActivityMemset4*>(record),
                                        DeviceActivity::Kind::kMemset, "memset"));
      return;
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
      const auto& e = *reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
      Correlated& c = r.external[e.correlationId];
      if (e.externalKind == kOpKind) c.op = e.externalId;
      if (e.externalKind == kLaunchKind) c.launch = e.externalId;
      return;
    }
    default:
      return;
  }
}

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI BufferCompleted(CUcontext context, uint32_t stream, uint8_t* buffer, size_t,
                              size_t valid_bytes) {
  {
    MutexLock lock(&records_mu);
    Records& r = Delivered();
    CUpti_Activity* record = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid_bytes, &record) == CUPTI_SUCCESS)
      Collect(record, r);
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(context, stream, &dropped) == CUPTI_SUCCESS)
      r.dropped += dropped;
  }
  std::free(buffer);
}

// CUPTI's host timestamps, and the GPU's converted to host time, on the profiler's clock.
uint64_t CUPTIAPI ProfilerClock() { return static_cast<uint64_t>(engine::ProfilerClockNs()); }

// Once per process, before any activity kind is enabled. Returns what failed.
std::string Setup() {
  const CUptiResult buffers = cuptiActivityRegisterCallbacks(&BufferRequested, &BufferCompleted);
  if (buffers != CUPTI_SUCCESS) return CuptiError("cuptiActivityRegisterCallbacks", buffers);
  // Without it, Start measures the offset between CUPTI's clock and the profiler's.
  (void)cuptiActivityRegisterTimestampCallback(&ProfilerClock);
  // A trace still running at exit is written by the engine's shutdown: registered now, after
  // CUPTI started, it runs before CUPTI's and the CUDA runtime's own teardown.
  std::atexit([] { engine::Engine::Get()->Shutdown(); });
  return "";
}

// The profiler's clock minus CUPTI's: 0 when CUPTI takes its timestamps from the profiler's clock.
int64_t ClockOffset() {
  uint64_t cupti = 0;
  const int64_t before = engine::ProfilerClockNs();
  if (cuptiGetTimestamp(&cupti) != CUPTI_SUCCESS) return 0;
  const int64_t after = engine::ProfilerClockNs();
  const int64_t t = static_cast<int64_t>(cupti);
  if (t >= before && t <= after) return 0;
  return before + (after - before) / 2 - t;
}

// Resolves each piece of work's op (file comment of device_tracer.h) and moves its times to the
// profiler's clock.
std::vector<DeviceActivity> Resolve(Records& r, const LaunchMap& launches, int64_t offset_ns) {
  std::unordered_map<uint32_t, std::vector<DeviceActivity*>> launched;  // by graph launch call
  for (DeviceActivity& a : r.work) {
    a.start_ns += offset_ns, a.end_ns += offset_ns;
    auto it = r.external.find(a.correlation);
    if (it == r.external.end()) continue;
    if (it->second.launch != 0 && a.kind == DeviceActivity::Kind::kKernel) {
      launched[a.correlation].push_back(&a);
    } else {
      a.op = it->second.op;
    }
  }
  for (auto& [correlation, kernels] : launched) {
    std::sort(kernels.begin(), kernels.end(), [](const DeviceActivity* x, const DeviceActivity* y) {
      return x->start_ns < y->start_ns;
    });
    auto it = launches.find(r.external[correlation].launch);
    if (it == launches.end()) continue;
    const Launch& launch = it->second;
    for (size_t i = 0; i < kernels.size(); ++i) {
      if (i < launch.ops.size()) kernels[i]->op = launch.ops[i];
      if (launch.stream_known) kernels[i]->stream = launch.stream;
    }
  }
  return std::move(r.work);
}

class CuptiTracer final : public engine::DeviceTracer {
 public:
  std::string Start() override;
  void EnterOp(uint64_t op) override;
  void LeaveOp() override;
  engine::DeviceTrace Stop(std::span<const engine::NamedStream> streams) override;

 private:
  // Enables every kind, or none; returns what failed.
  static std::string Enable();
  static void Disable();
  static std::vector<engine::DeviceStreamName> StreamNames(
      std::span<const engine::NamedStream> streams);

  // Start and Stop only (the profiler calls them one at a time).
  bool enabled_ = false;
  int64_t offset_ns_ = 0;
};

// Whether each EnterOp of the calling thread pushed an id, for its LeaveOp (the tracer may have
// started or stopped in between).
thread_local std::vector<bool> op_pushed;

std::string CuptiTracer::Start() {
  enabled_ = false;
  if (GpuCount() == 0) return "";  // no GPU: no device work to trace
  static const std::string setup_error = Setup();
  if (!setup_error.empty()) return "GPU activity is not recorded: " + setup_error;
  {
    MutexLock lock(&records_mu);
    Delivered() = Records{};
  }
  {
    MutexLock lock(&launches_mu);
    Launches().clear();
  }
  if (const std::string error = Enable(); !error.empty())
    return "GPU activity is not recorded: " + error;
  offset_ns_ = ClockOffset();
  enabled_ = true;
  recording.store(true, std::memory_order_relaxed);
  LaunchBatch::ForgetChains();  // chains instantiated before CUPTI traced are rebuilt under it
  return "";
}

std::string CuptiTracer::Enable() {
  for (size_t i = 0; i < std::size(kKinds); ++i) {
    const CUptiResult result = cuptiActivityEnable(kKinds[i]);
    if (result == CUPTI_SUCCESS) continue;
    for (size_t j = 0; j < i; ++j) cuptiActivityDisable(kKinds[j]);
    return CuptiError("cuptiActivityEnable", result);
  }
  return "";
}

// The engine waited for its device work: a forced flush delivers every record, complete.
void CuptiTracer::Disable() {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  for (CUpti_ActivityKind kind : kKinds) cuptiActivityDisable(kind);
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

void CuptiTracer::EnterOp(uint64_t op) {
  op_pushed.push_back(recording.load(std::memory_order_relaxed) &&
                      cuptiActivityPushExternalCorrelationId(kOpKind, op) == CUPTI_SUCCESS);
}

void CuptiTracer::LeaveOp() {
  if (op_pushed.empty()) return;
  if (op_pushed.back()) cuptiActivityPopExternalCorrelationId(kOpKind, nullptr);
  op_pushed.pop_back();
}

std::vector<engine::DeviceStreamName> CuptiTracer::StreamNames(
    std::span<const engine::NamedStream> streams) {
  std::vector<engine::DeviceStreamName> names;
  for (const engine::NamedStream& s : streams) {
    uint32_t id = 0;
    if (cuptiGetStreamIdEx(nullptr, s.stream->handle(), 0, &id) == CUPTI_SUCCESS) {
      names.push_back({s.stream->device(), id, s.name});
    }
  }
  return names;
}

engine::DeviceTrace CuptiTracer::Stop(std::span<const engine::NamedStream> streams) {
  engine::DeviceTrace trace;
  if (!enabled_) return trace;
  enabled_ = false;
  trace.streams = StreamNames(streams);
  recording.store(false, std::memory_order_relaxed);
  Disable();
  LaunchBatch::ForgetChains();  // no chain instantiated while CUPTI traced outlives the trace
  Records records;
  {
    MutexLock lock(&records_mu);
    records = std::exchange(Delivered(), Records{});
  }
  LaunchMap launches;
  {
    MutexLock lock(&launches_mu);
    launches.swap(Launches());
  }
  trace.activities = Resolve(records, launches, offset_ns_);
  if (records.dropped > 0) {
    trace.warning = "CUPTI dropped " + std::to_string(records.dropped) +
                    " activity records (its buffers were full)";
  }
  return trace;
}

[[maybe_unused]] const bool registered = [] {
  engine::RegisterDeviceTracer(new CuptiTracer);  // never destroyed: the profiler may stop at exit
  return true;
}();

}  // namespace

bool TracingDevice() { return recording.load(std::memory_order_relaxed); }

LaunchAttribution::LaunchAttribution(std::span<const uint64_t> ops, cudaStream_t stream) {
  if (ops.empty() || !recording.load(std::memory_order_relaxed)) return;
  const uint64_t id = next_launch.fetch_add(1, std::memory_order_relaxed);
  Launch launch{{ops.begin(), ops.end()}};
  launch.stream_known = cuptiGetStreamIdEx(nullptr, stream, 0, &launch.stream) == CUPTI_SUCCESS;
  {
    MutexLock lock(&launches_mu);
    Launches()[id] = std::move(launch);
  }
  active_ = cuptiActivityPushExternalCorrelationId(kLaunchKind, id) == CUPTI_SUCCESS;
}

LaunchAttribution::~LaunchAttribution() {
  if (active_) cuptiActivityPopExternalCorrelationId(kLaunchKind, nullptr);
}

}  // namespace weft::gpu
