// The engine's profiler. Between Start and Stop it records each op's span on the track of the
// worker that ran it, and, through the hooks of engine/profiler_hooks.h, the device's kernels,
// copies and memsets on one track per stream with an arrow from each op's span to its device
// work, and the memory pools' counters over time. Stop writes it all as one Chrome trace
// (engine/internal/trace_writer.h), which Perfetto and chrome://tracing open.
//
// An op's span on its worker's track covers the call of its function. An async op that completes
// after its function returns also gets an async span (start to completion) of its own, so spans
// on a worker track never partially overlap. Only ops that start while a session runs are traced.
//
// Each engine owns one Profiler; at most one runs in the process at a time, since the memory
// hooks and the device tracer are the process's.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/mutex.h"
#include "engine/internal/trace_writer.h"
#include "engine/profiler_hooks.h"

namespace weft::engine {

// When and where a profiled op started. op == 0: the op is not profiled.
struct ProfileStamp {
  uint64_t op = 0;
  int64_t start_ns = 0;
  int track = -1;
};

class Profiler {
 public:
  Profiler() = default;
  ~Profiler();  // a session still running ends without writing its trace
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Starts a session whose trace Stop writes to `path`. Throws weft::Error when a profiler already
  // runs in this process (this one, or another engine's).
  void Start(const std::string& path);
  // Ends the session and writes its trace to the path Start was given, through a temporary file
  // renamed into place: a failure leaves no half-written file. The caller has waited for the work
  // it wants traced, device work included; `streams` are its engine's live GPU streams. Throws
  // weft::Error when no session runs, or when the file cannot be written (the session ends
  // either way).
  void Stop(std::span<const NamedStream> streams);
  // Stop, saying on stderr why it failed instead of throwing (for Shutdown, which may run at exit).
  void StopOrReport(std::span<const NamedStream> streams);
  // Relaxed: an op that starts while Start or Stop runs may or may not be traced.
  bool running() const { return running_.load(std::memory_order_relaxed); }
  // Throws the weft::Error of a Stop without Start unless a session runs.
  void CheckRunning() const;

  // Names a worker track; names outlive sessions.
  void NameTrack(int track, std::string name);
  // The stamp of an op starting now on the calling thread's track; op == 0 unless a session runs.
  ProfileStamp Begin();
  // A span on the op's track from its stamp to `end_ns` ("X" event). Kept only if the op started
  // in the session still running. Thread-safe.
  void RecordSpan(const char* name, const ProfileStamp& stamp, int64_t end_ns);
  // A span from an async op's start to its completion ("b"/"e" events). Thread-safe.
  void RecordAsyncSpan(const char* name, const ProfileStamp& stamp, int64_t end_ns);

 private:
  void Record(const char* name, const ProfileStamp& stamp, int64_t end_ns, bool async);
  // Ends the session: what it recorded, and the path to write it to.
  TraceData Collect(std::span<const NamedStream> streams, std::string* path)
      WEFT_REQUIRES(control_mu_);

  Mutex control_mu_;  // serializes Start and Stop
  std::atomic<bool> running_{false};
  bool tracing_device_ WEFT_GUARDED_BY(control_mu_) = false;  // the device tracer started
  std::string device_warning_ WEFT_GUARDED_BY(control_mu_);   // why it did not

  Mutex mu_;
  std::string path_ WEFT_GUARDED_BY(mu_);
  int64_t origin_ns_ WEFT_GUARDED_BY(mu_) = 0;
  uint64_t first_op_ WEFT_GUARDED_BY(mu_) = 0;  // ops with smaller ids started before this session
  std::vector<TraceSpan> spans_ WEFT_GUARDED_BY(mu_);
  std::map<int, std::string> track_names_ WEFT_GUARDED_BY(mu_);
};

// Marks the calling thread as running profiled op `op` for the scope's life (nothing for op 0):
// CurrentProfiledOp() returns it, and the device tracer attributes the device work queued
// meanwhile to it. Scopes nest (an async op may complete, and run inline ops, inside another's).
class ProfiledOpScope {
 public:
  explicit ProfiledOpScope(uint64_t op) : op_(op) {
    if (op_ != 0) Enter();
  }
  ~ProfiledOpScope() {
    if (op_ != 0) Leave();
  }
  ProfiledOpScope(const ProfiledOpScope&) = delete;
  ProfiledOpScope& operator=(const ProfiledOpScope&) = delete;

 private:
  void Enter();
  void Leave();
  const uint64_t op_;
  uint64_t previous_ = 0;
};

}  // namespace weft::engine
