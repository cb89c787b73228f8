#include "engine/internal/profiler.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string_view>

#include "core/error.h"
#include "core/file.h"

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
std::string Micros(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%lld.%03lld", static_cast<long long>(ns / 1000), static_cast<long long>(ns % 1000));
  return buf;
}

}  // namespace

Profiler::Profiler(std::string path) : path_(std::move(path)), origin_(std::chrono::steady_clock::now()) {}

int64_t Profiler::NowNs() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - origin_).count();
}

void Profiler::NameTrack(int track, std::string name) {
  std::lock_guard<std::mutex> lock(mu_);
  track_names_[track] = std::move(name);
}

void Profiler::RecordSpan(const char* name, int track, int64_t start_ns, int64_t end_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back(Event{name ? name : "op", track, start_ns, end_ns});
}

void Profiler::RecordAsyncSpan(const char* name, int64_t start_ns, int64_t end_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back(Event{name ? name : "op", -1, start_ns, end_ns});
}

std::string Profiler::ToJson() {
  std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream os;
  os << "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  os << R"({"name":"process_name","ph":"M","pid":1,"tid":0,"args":{"name":"weft engine"}})";
  os << ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":" << kAsyncTrack
     << ",\"args\":{\"name\":\"async completions\"}}";
  for (const auto& [track, name] : track_names_) {
    os << ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":" << track << ",\"args\":{\"name\":";
    AppendJsonString(os, name);
    os << "}}";
  }
  int64_t async_id = 0;
  for (const Event& e : events_) {
    os << ",\n{\"name\":";
    AppendJsonString(os, e.name);
    if (e.track >= 0) {
      os << ",\"cat\":\"op\",\"ph\":\"X\",\"pid\":1,\"tid\":" << e.track << ",\"ts\":" << Micros(e.start_ns)
         << ",\"dur\":" << Micros(e.end_ns - e.start_ns) << "}";
    } else {
      ++async_id;
      os << ",\"cat\":\"async\",\"ph\":\"b\",\"pid\":1,\"tid\":" << kAsyncTrack << ",\"id\":" << async_id
         << ",\"ts\":" << Micros(e.start_ns) << "},\n{\"name\":";
      AppendJsonString(os, e.name);
      os << ",\"cat\":\"async\",\"ph\":\"e\",\"pid\":1,\"tid\":" << kAsyncTrack << ",\"id\":" << async_id
         << ",\"ts\":" << Micros(e.end_ns) << "}";
    }
  }
  os << "\n]}\n";
  return os.str();
}

void Profiler::Write() {
  try {
    WriteFileAtomically(path_, ToJson());
  } catch (const Error& e) {
    WEFT_THROW("profiler: cannot write the trace to '" << path_ << "': " << e.what());
  }
}

void Profiler::WriteOrReport() {
  try {
    Write();
  } catch (const Error& e) {
    std::fprintf(stderr, "weft: %s\n", e.what());
  }
}

}  // namespace weft::engine
