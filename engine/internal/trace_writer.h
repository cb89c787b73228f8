// A profiler session's records, and their Chrome trace event JSON (the format Perfetto and
// chrome://tracing open; timestamps in microseconds since the session started, to the
// nanosecond):
//   - process 1, "weft host": one track (thread) per worker, with each op's span ("X", cat "op",
//     args.op its id); async completions ("b"/"e") on a track of their own; counters
//     "memory cpu" and "memory pinned host" ("C", args "in use" and "cached", bytes);
//   - process 10 + N, "gpu:N": one track per stream, named after its worker ("gpu:0 compute 1",
//     "gpu:0 copy h2d"), with each kernel, memcpy and memset ("X", cat "kernel", "memcpy",
//     "memset"); the counter "memory gpu:N";
//   - an arrow from an op's span to each piece of device work it queued: a flow start ("s", cat
//     "launch") inside the span and a flow end ("f", bp "e") at the work's start, with one id.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/device.h"
#include "engine/profiler_hooks.h"

namespace weft::engine {

struct TraceSpan {
  std::string name;
  uint64_t op;
  int track;  // a worker's (unused for async spans)
  int64_t start_ns, end_ns;
  bool async;  // from an async op's start to its completion
};

struct MemorySample {
  Device device;
  std::string pool;
  size_t in_use, cached;
  int64_t ns;
};

struct TraceData {
  int64_t origin_ns = 0;  // the session's start: time 0 of the trace
  std::map<int, std::string> track_names;
  std::vector<TraceSpan> spans;
  std::vector<MemorySample> memory;
  DeviceTrace device;
};

inline constexpr int kHostPid = 1;
inline constexpr int kFirstGpuPid = 10;
inline constexpr int kAsyncTrack = 99999;  // where async spans go

std::string TraceJson(const TraceData& data);

}  // namespace weft::engine
