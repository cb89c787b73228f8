// The engine's profiler: each op's start and end, on the track of the worker that ran it, written
// as Chrome trace event JSON (Perfetto and chrome://tracing open it) when the engine shuts down.
//
// An op's span on its worker's track covers the call of its function. An async op that completes
// after its function returns also gets an async span (start to completion) of its own, so spans
// on a worker track never partially overlap.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace weft::engine {

class Profiler {
 public:
  static constexpr int kAsyncTrack = 99999;  // where async spans (start to completion) go

  explicit Profiler(std::string path);

  int64_t NowNs() const;
  void NameTrack(int track, std::string name);
  // A span on a worker track ("X" event). Thread-safe.
  void RecordSpan(const char* name, int track, int64_t start_ns, int64_t end_ns);
  // A span from an async op's start to its completion ("b"/"e" events). Thread-safe.
  void RecordAsyncSpan(const char* name, int64_t start_ns, int64_t end_ns);
  // Writes the trace to a temporary file and renames it over the path. Throws weft::Error when
  // the file cannot be written.
  void Write();
  // Write(), saying on stderr why it failed instead of throwing (for Shutdown, which may run at
  // exit).
  void WriteOrReport();

  const std::string& path() const { return path_; }

 private:
  struct Event {
    std::string name;
    int track;  // -1 for async spans
    int64_t start_ns;
    int64_t end_ns;
  };
  std::string ToJson();

  const std::string path_;
  const std::chrono::steady_clock::time_point origin_;
  std::mutex mu_;
  std::vector<Event> events_;               // guarded by mu_
  std::map<int, std::string> track_names_;  // guarded by mu_
};

}  // namespace weft::engine
