#include "engine/internal/profiler.h"

#include <chrono>
#include <cstdio>
#include <utility>

#include "core/error.h"
#include "core/file.h"
#include "core/mutex.h"
#include "core/no_destructor.h"
#include "engine/internal/worker_pool.h"

namespace weft::engine {

namespace {

// What the process has one of: the running session's owner and memory samples, and what was
// registered at static initialization. Never destroyed (pools free memory at exit).
struct ProcessProfile {
  // Set (under mu) while a session runs. Relaxed readers only decide whether to take the lock.
  std::atomic<bool> running{false};
  Mutex mu;
  const Profiler* owner WEFT_GUARDED_BY(mu) = nullptr;
  std::string owner_path WEFT_GUARDED_BY(mu);
  std::vector<MemorySample> memory WEFT_GUARDED_BY(mu);
  std::vector<void (*)()> samplers WEFT_GUARDED_BY(mu);
  DeviceTracer* tracer = nullptr;  // written at static initialization, read afterwards
};

ProcessProfile& Process() {
  static NoDestructor<ProcessProfile> process;  // the profiler may stop at exit
  return *process;
}

// Ids of profiled ops, unique in the process, so a session knows its own by the first it gave.
std::atomic<uint64_t> next_op{1};
thread_local uint64_t current_op = 0;

void RunSamplers() {
  std::vector<void (*)()> samplers;
  {
    ProcessProfile& p = Process();
    MutexLock lock(&p.mu);
    samplers = p.samplers;
  }
  for (auto* sample : samplers) sample();
}

}  // namespace

bool ProfilerRunning() { return Process().running.load(std::memory_order_relaxed); }

int64_t ProfilerClockNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void RecordMemory(Device device, const char* pool, size_t bytes_in_use, size_t bytes_cached,
                  int64_t ns) {
  ProcessProfile& p = Process();
  if (!p.running.load(std::memory_order_relaxed)) return;
  MutexLock lock(&p.mu);
  if (p.owner != nullptr)
    p.memory.push_back(MemorySample{device, pool, bytes_in_use, bytes_cached, ns});
}

void AddProfilerSampler(void (*sample)()) {
  ProcessProfile& p = Process();
  MutexLock lock(&p.mu);
  p.samplers.push_back(sample);
}

uint64_t CurrentProfiledOp() { return current_op; }

void RegisterDeviceTracer(DeviceTracer* tracer) {
  DeviceTracer*& slot = Process().tracer;
  WEFT_CHECK(slot == nullptr) << "a device tracer is registered twice";
  slot = tracer;
}

void ProfiledOpScope::Enter() {
  previous_ = current_op;
  current_op = op_;
  if (DeviceTracer* tracer = Process().tracer) tracer->EnterOp(op_);
}

void ProfiledOpScope::Leave() {
  if (DeviceTracer* tracer = Process().tracer) tracer->LeaveOp();
  current_op = previous_;
}

Profiler::~Profiler() {
  if (!running()) return;
  ProcessProfile& p = Process();
  if (tracing_device_) p.tracer->Stop({});
  MutexLock lock(&p.mu);
  p.running.store(false, std::memory_order_relaxed);
  p.owner = nullptr;
  p.memory.clear();
}

void Profiler::Start(const std::string& path) {
  MutexLock control(&control_mu_);
  ProcessProfile& p = Process();
  {
    MutexLock lock(&p.mu);
    WEFT_CHECK(p.owner == nullptr)
        << "profiler: Start('" << path << "') while it is already running (writing to '"
        << p.owner_path << "'); Stop it first";
    p.owner = this;
    p.owner_path = path;
    p.memory.clear();
    {
      MutexLock session(&mu_);
      path_ = path;
      origin_ns_ = ProfilerClockNs();
      first_op_ = next_op.load(std::memory_order_relaxed);
      spans_.clear();
    }
    running_.store(true, std::memory_order_relaxed);
    p.running.store(true, std::memory_order_relaxed);
  }
  device_warning_ = p.tracer ? p.tracer->Start() : "";
  tracing_device_ = p.tracer != nullptr && device_warning_.empty();
  if (!device_warning_.empty())
    std::fprintf(stderr, "weft: profiler: %s\n", device_warning_.c_str());
  RunSamplers();
}

TraceData Profiler::Collect(std::span<const NamedStream> streams, std::string* path) {
  CheckRunning();
  RunSamplers();
  TraceData data;
  if (tracing_device_) data.device = Process().tracer->Stop(streams);
  if (!device_warning_.empty()) data.device.warning = device_warning_;
  tracing_device_ = false;
  {
    ProcessProfile& p = Process();
    MutexLock lock(&p.mu);
    p.running.store(false, std::memory_order_relaxed);
    p.owner = nullptr;
    data.memory.swap(p.memory);
  }
  MutexLock session(&mu_);
  running_.store(false, std::memory_order_relaxed);
  data.origin_ns = origin_ns_;
  data.track_names = track_names_;
  data.spans.swap(spans_);
  *path = path_;
  return data;
}

void Profiler::Stop(std::span<const NamedStream> streams) {
  MutexLock control(&control_mu_);
  std::string path;
  const TraceData data = Collect(streams, &path);
  try {
    WriteFileAtomically(path, TraceJson(data));
  } catch (const Error& e) {
    WEFT_THROW("profiler: cannot write the trace to '" << path << "': " << e.what());
  }
}

void Profiler::StopOrReport(std::span<const NamedStream> streams) {
  try {
    Stop(streams);
  } catch (const Error& e) {
    std::fprintf(stderr, "weft: %s\n", e.what());
  }
}

void Profiler::NameTrack(int track, std::string name) {
  MutexLock lock(&mu_);
  track_names_[track] = std::move(name);
}

ProfileStamp Profiler::Begin() {
  if (!running()) return {};
  return ProfileStamp{next_op.fetch_add(1, std::memory_order_relaxed), ProfilerClockNs(),
                      WorkerPool::CurrentTrack()};
}

void Profiler::CheckRunning() const {
  WEFT_CHECK(running()) << "profiler: Stop without Start: no trace is being recorded";
}

void Profiler::Record(const char* name, const ProfileStamp& stamp, int64_t end_ns, bool async) {
  MutexLock lock(&mu_);
  if (!running() || stamp.op < first_op_) return;  // not this session's op
  spans_.push_back(
      TraceSpan{name ? name : "op", stamp.op, stamp.track, stamp.start_ns, end_ns, async});
}

void Profiler::RecordSpan(const char* name, const ProfileStamp& stamp, int64_t end_ns) {
  Record(name, stamp, end_ns, false);
}

void Profiler::RecordAsyncSpan(const char* name, const ProfileStamp& stamp, int64_t end_ns) {
  Record(name, stamp, end_ns, true);
}

}  // namespace weft::engine
