#include "engine/internal/trace_writer.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "engine/internal/worker_pool.h"

namespace weft::engine {

namespace {

void AppendJsonString(std::ostringstream& os, std::string_view text) {
  os << '"';
  for (char c : text) {
    switch (c) {
      case '"':
        os << "\\\"";
        break;
      case '\\':
        os << "\\\\";
        break;
      case '\n':
        os << "\\n";
        break;
      case '\t':
        os << "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          os << buf;
        } else {
          os << c;
        }
    }
  }
  os << '"';
}

// Chrome trace timestamps are microseconds; keep nanosecond precision as a fraction.
std::string FormatMicros(int64_t ns) {
  ns = std::max<int64_t>(ns, 0);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%lld.%03lld", static_cast<long long>(ns / 1000),
                static_cast<long long>(ns % 1000));
  return buf;
}

// The events of the trace, comma separated; each starts with Next().
class EventList {
 public:
  std::ostringstream& Next() {
    os_ << (first_ ? "\n" : ",\n");
    first_ = false;
    return os_;
  }
  // The trace's time of `ns`. Times before the session's start (work queued before it) are shown
  // at its start.
  std::string Micros(int64_t ns) const { return FormatMicros(ns - origin_ns_); }
  std::string Duration(int64_t start_ns, int64_t end_ns) const {
    return FormatMicros(end_ns - start_ns);
  }
  explicit EventList(int64_t origin_ns) : origin_ns_(origin_ns) {}
  std::string str() const { return os_.str(); }

 private:
  const int64_t origin_ns_;
  std::ostringstream os_;
  bool first_ = true;
};

int PidOf(Device device) { return device.is_gpu() ? kFirstGpuPid + device.id : kHostPid; }

void WriteName(EventList& events, const char* kind, int pid, int64_t tid, std::string_view name) {
  std::ostringstream& os = events.Next();
  os << "{\"name\":\"" << kind << "\",\"ph\":\"M\",\"pid\":" << pid << ",\"tid\":" << tid
     << ",\"args\":{\"name\":";
  AppendJsonString(os, name);
  os << "}}";
}

// Host tracks: every named worker, and every other thread an op ran on (kAsync ops run on the
// thread that made them ready).
void WriteHostTracks(EventList& events, const TraceData& data) {
  WriteName(events, "process_name", kHostPid, 0, "weft host");
  WriteName(events, "thread_name", kHostPid, kAsyncTrack, "async completions");
  std::set<int> tracks;
  for (const TraceSpan& s : data.spans) {
    if (!s.async) tracks.insert(s.track);
  }
  for (const auto& [track, name] : data.track_names) {
    tracks.erase(track);
    WriteName(events, "thread_name", kHostPid, track, name);
  }
  for (int track : tracks) {
    const std::string name = track >= WorkerPool::kFirstOtherTrack
                                 ? "thread " + std::to_string(track - WorkerPool::kFirstOtherTrack)
                                 : "worker " + std::to_string(track);
    WriteName(events, "thread_name", kHostPid, track, name);
  }
}

// A process per GPU with device work or memory, and a track per stream with device work.
void WriteDeviceTracks(EventList& events, const TraceData& data) {
  std::set<int> devices;
  std::set<std::pair<int, uint32_t>> streams;
  for (const DeviceActivity& a : data.device.activities) {
    devices.insert(a.device);
    streams.insert({a.device, a.stream});
  }
  for (const MemorySample& m : data.memory) {
    if (m.device.is_gpu()) devices.insert(m.device.id);
  }
  for (int d : devices)
    WriteName(events, "process_name", kFirstGpuPid + d, 0, Device::Gpu(d).ToString());
  for (const DeviceStreamName& s : data.device.streams) {
    if (streams.erase({s.device, s.stream}))
      WriteName(events, "thread_name", kFirstGpuPid + s.device, s.stream, s.name);
  }
  for (const auto& [device, stream] : streams) {
    WriteName(events, "thread_name", kFirstGpuPid + device, stream,
              Device::Gpu(device).ToString() + " stream " + std::to_string(stream));
  }
}

void WriteSpans(EventList& events, const TraceData& data) {
  int64_t async_id = 0;
  for (const TraceSpan& s : data.spans) {
    std::ostringstream& os = events.Next();
    os << "{\"name\":";
    AppendJsonString(os, s.name);
    if (!s.async) {
      os << ",\"cat\":\"op\",\"ph\":\"X\",\"pid\":" << kHostPid << ",\"tid\":" << s.track
         << ",\"ts\":" << events.Micros(s.start_ns)
         << ",\"dur\":" << events.Duration(s.start_ns, s.end_ns) << ",\"args\":{\"op\":" << s.op
         << "}}";
      continue;
    }
    ++async_id;
    os << ",\"cat\":\"async\",\"ph\":\"b\",\"pid\":" << kHostPid << ",\"tid\":" << kAsyncTrack
       << ",\"id\":" << async_id << ",\"ts\":" << events.Micros(s.start_ns)
       << ",\"args\":{\"op\":" << s.op << "}}";
    std::ostringstream& end = events.Next();
    end << "{\"name\":";
    AppendJsonString(end, s.name);
    end << ",\"cat\":\"async\",\"ph\":\"e\",\"pid\":" << kHostPid << ",\"tid\":" << kAsyncTrack
        << ",\"id\":" << async_id << ",\"ts\":" << events.Micros(s.end_ns) << "}";
  }
}

const char* Category(DeviceActivity::Kind kind) {
  switch (kind) {
    case DeviceActivity::Kind::kKernel:
      return "kernel";
    case DeviceActivity::Kind::kMemcpy:
      return "memcpy";
    case DeviceActivity::Kind::kMemset:
      return "memset";
  }
  return "device";
}

void WriteDeviceActivity(EventList& events, const DeviceActivity& a) {
  std::ostringstream& os = events.Next();
  os << "{\"name\":";
  AppendJsonString(os, a.name);
  os << ",\"cat\":\"" << Category(a.kind) << "\",\"ph\":\"X\",\"pid\":" << kFirstGpuPid + a.device
     << ",\"tid\":" << a.stream << ",\"ts\":" << events.Micros(a.start_ns)
     << ",\"dur\":" << events.Duration(a.start_ns, a.end_ns) << ",\"args\":{\"op\":" << a.op
     << ",\"correlation\":" << a.correlation;
  if (a.kind != DeviceActivity::Kind::kKernel) os << ",\"bytes\":" << a.bytes;
  if (!a.detail.empty()) {
    os << ",\"launch\":";
    AppendJsonString(os, a.detail);
  }
  os << "}}";
}

// Device work, and for each piece whose op has a span, the arrow from the span's middle to the
// work's start.
void WriteDeviceWork(EventList& events, const TraceData& data) {
  std::unordered_map<uint64_t, const TraceSpan*> span_of;
  for (const TraceSpan& s : data.spans) {
    if (!s.async) span_of[s.op] = &s;
  }
  int64_t flow_id = 0;
  for (const DeviceActivity& a : data.device.activities) {
    if (a.end_ns < data.origin_ns) continue;  // done before the session started
    WriteDeviceActivity(events, a);
    auto it = a.op == 0 ? span_of.end() : span_of.find(a.op);
    if (it == span_of.end()) continue;
    const TraceSpan& s = *it->second;
    ++flow_id;
    events.Next() << "{\"name\":\"launch\",\"cat\":\"launch\",\"ph\":\"s\",\"id\":" << flow_id
                  << ",\"pid\":" << kHostPid << ",\"tid\":" << s.track
                  << ",\"ts\":" << events.Micros(s.start_ns + (s.end_ns - s.start_ns) / 2) << "}";
    events.Next() << "{\"name\":\"launch\",\"cat\":\"launch\",\"ph\":\"f\",\"bp\":\"e\",\"id\":"
                  << flow_id << ",\"pid\":" << kFirstGpuPid + a.device << ",\"tid\":" << a.stream
                  << ",\"ts\":" << events.Micros(a.start_ns) << "}";
  }
}

void WriteCounters(EventList& events, const TraceData& data) {
  std::vector<const MemorySample*> samples;
  for (const MemorySample& m : data.memory) samples.push_back(&m);
  std::stable_sort(samples.begin(), samples.end(),
                   [](const MemorySample* a, const MemorySample* b) { return a->ns < b->ns; });
  for (const MemorySample* m : samples) {
    std::ostringstream& os = events.Next();
    os << "{\"name\":";
    AppendJsonString(os, "memory " + m->pool);
    os << ",\"cat\":\"memory\",\"ph\":\"C\",\"pid\":" << PidOf(m->device)
       << ",\"ts\":" << events.Micros(m->ns) << ",\"args\":{\"in use\":" << m->in_use
       << ",\"cached\":" << m->cached << "}}";
  }
}

}  // namespace

std::string TraceJson(const TraceData& data) {
  EventList events(data.origin_ns);
  WriteHostTracks(events, data);
  WriteDeviceTracks(events, data);
  WriteSpans(events, data);
  WriteDeviceWork(events, data);
  WriteCounters(events, data);
  std::ostringstream os;
  os << "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"clock\":\"steady_clock, microseconds since "
        "the profiler "
        "started\"";
  if (!data.device.warning.empty()) {
    os << ",\"device_trace\":";
    AppendJsonString(os, data.device.warning);
  }
  os << "},\"traceEvents\":[" << events.str() << "\n]}\n";
  return os.str();
}

}  // namespace weft::engine
