// The profiler's trace (WEFT_PROFILE / EngineOptions::profile_path, or StartProfiling and
// StopProfiling) is valid Chrome trace JSON: every op appears once, on a named worker track, and
// spans on one track nest or are disjoint; only ops started between Start and Stop are traced;
// misuse (Start twice, Stop without Start, Stop inside an op) is a weft::Error, and a trace that
// cannot be written leaves no file behind.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"
#include "tests/engine_test_util.h"
#include "tests/weft_test_util.h"

namespace weft {
namespace {

using engine::RunContext;
using nlohmann::json;
using testing::ExpectErrorContains;
using testing::TempPath;

struct Span {
  double start, end;
};

json RunAndTrace(engine::EngineKind kind, const std::string& name) {
  std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name + ".json";
  engine::EngineOptions options;
  options.cpu_workers = 2;
  options.profile_path = path;
  auto engine = engine::CreateEngine(kind, options);
  std::vector<engine::VarHandle> vars;
  for (int i = 0; i < 8; ++i) vars.push_back(engine->NewVariable());
  for (int i = 0; i < 400; ++i) {
    engine->PushSync([](RunContext) {}, Device::Cpu(), {vars[i % 8]}, {vars[(i + 1) % 8]},
                     engine::FnProperty::kNormal, 0, "step \"quoted\"");
  }
  testing::Completer completer(std::chrono::milliseconds(2));
  engine->PushAsync([&](RunContext, engine::OnComplete done) { completer.Hand(done); },
                    Device::Cpu(), {}, {vars[0]}, engine::FnProperty::kNormal, 0, "async_op");
  engine->PushSync([](RunContext) {}, Device::Cpu(), {}, {vars[1]},
                   engine::FnProperty::kCpuPrioritized, 0, "prioritized");
  engine->WaitForAll();
  engine->Shutdown();
  std::ifstream in(path);
  EXPECT_TRUE(in) << "no trace written to " << path;
  return json::parse(in);  // throws, failing the test, if the file is not valid JSON
}

void ExpectSpansNest(const std::vector<Span>& spans_in, int tid) {
  std::vector<Span> spans = spans_in;
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.start != b.start ? a.start < b.start : a.end > b.end;
  });
  std::vector<Span> open;
  for (const Span& s : spans) {
    ASSERT_GE(s.end, s.start);
    while (!open.empty() && open.back().end <= s.start) open.pop_back();
    if (!open.empty()) {
      ASSERT_LE(s.end, open.back().end)
          << "span [" << s.start << ", " << s.end << "] on track " << tid << " overlaps ["
          << open.back().start << ", " << open.back().end << "] without nesting";
    }
    open.push_back(s);
  }
}

void CheckTrace(const json& trace) {
  ASSERT_TRUE(trace.contains("traceEvents"));
  std::map<int, std::vector<Span>> tracks;
  std::map<int, std::string> track_names;
  std::map<std::string, int> counts;
  for (const json& e : trace["traceEvents"]) {
    const std::string ph = e.at("ph");
    if (ph == "M" && e.at("name") == "thread_name")
      track_names[e.at("tid")] = e.at("args").at("name");
    if (ph != "X") continue;
    double ts = e.at("ts"), dur = e.at("dur");
    tracks[e.at("tid")].push_back({ts, ts + dur});
    ++counts[e.at("name")];
  }
  EXPECT_EQ(counts["step \"quoted\""], 400);
  EXPECT_EQ(counts["async_op"], 1);
  EXPECT_EQ(counts["prioritized"], 1);
  for (const auto& [tid, spans] : tracks) ExpectSpansNest(spans, tid);
}

TEST(EngineProfiler, ThreadedTraceIsValidAndSpansNest) {
  json trace = RunAndTrace(engine::EngineKind::kThreaded, "threaded");
  CheckTrace(trace);
  // Ops ran on named worker tracks; the async op also has a begin/end pair.
  std::map<int, std::string> names;
  int async_events = 0;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") names[e["tid"]] = e["args"]["name"];
    async_events += e["ph"] == "b" || e["ph"] == "e";
  }
  EXPECT_EQ(async_events, 2);
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e["name"] == "step \"quoted\"") {
      ASSERT_TRUE(names.count(e["tid"])) << "op on an unnamed track " << e["tid"];
      EXPECT_EQ(names[e["tid"]].rfind("cpu worker", 0), 0u) << names[e["tid"]];
    }
    if (e["ph"] == "X" && e["name"] == "prioritized") {
      EXPECT_EQ(names[e["tid"]].rfind("cpu priority worker", 0), 0u) << names[e["tid"]];
    }
  }
}

TEST(EngineProfiler, NaiveTraceIsValidAndSpansNest) {
  CheckTrace(RunAndTrace(engine::EngineKind::kNaive, "naive"));
}

TEST(EngineProfiler, UnwritablePathIsReportedNotFatal) {
  engine::EngineOptions options;
  options.profile_path = "/nonexistent-dir/trace.json";
  auto engine = engine::CreateEngine(engine::EngineKind::kThreaded, options);
  engine->PushSync([](RunContext) {}, Device::Cpu(), {}, {engine->NewVariable()});
  ::testing::internal::CaptureStderr();
  engine->Shutdown();
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("cannot write the trace"), std::string::npos) << err;
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// Names of the spans ("X" events) in `trace`, with how many times each appears.
std::map<std::string, int> SpanCounts(const json& trace) {
  std::map<std::string, int> counts;
  for (const json& e : trace.at("traceEvents")) {
    if (e.at("ph") == "X") ++counts[e.at("name")];
  }
  return counts;
}

json ReadTrace(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << "no trace written to " << path;
  return json::parse(in);
}

class EngineProfilerControl : public ::testing::TestWithParam<engine::EngineKind> {
 protected:
  std::unique_ptr<engine::Engine> Create() {
    engine::EngineOptions options;
    options.cpu_workers = 2;
    return engine::CreateEngine(GetParam(), options);
  }
  void Push(engine::Engine& e, engine::VarHandle v, const char* name) {
    e.PushSync([](RunContext) {}, Device::Cpu(), {}, {v}, engine::FnProperty::kNormal, 0, name);
  }
};

TEST_P(EngineProfilerControl, TracesOnlyTheOpsBetweenStartAndStop) {
  auto e = Create();
  engine::VarHandle v = e->NewVariable();
  Push(*e, v, "before");
  e->WaitForAll();
  const std::string path = TempPath("between.json");
  EXPECT_FALSE(e->profiling());
  e->StartProfiling(path);
  EXPECT_TRUE(e->profiling());
  for (int i = 0; i < 10; ++i) Push(*e, v, "between");
  e->StopProfiling();  // waits for the ops pushed so far
  EXPECT_FALSE(e->profiling());
  Push(*e, v, "after");
  e->WaitForAll();
  const std::map<std::string, int> counts = SpanCounts(ReadTrace(path));
  EXPECT_EQ(counts.count("before"), 0u);
  EXPECT_EQ(counts.count("after"), 0u);
  EXPECT_EQ(counts.count("between") ? counts.at("between") : 0, 10);
  // A second session on the same engine writes a trace of its own.
  const std::string again = TempPath("again.json");
  e->StartProfiling(again);
  Push(*e, v, "second");
  e->StopProfiling();
  const std::map<std::string, int> second = SpanCounts(ReadTrace(again));
  EXPECT_EQ(second.count("between"), 0u);
  EXPECT_EQ(second.count("second"), 1u);
}

TEST_P(EngineProfilerControl, StartTwiceAndStopWithoutStartAreErrors) {
  auto e = Create();
  ExpectErrorContains([&] { e->StopProfiling(); }, {"Stop without Start"});
  e->StartProfiling(TempPath("first.json"));
  ExpectErrorContains([&] { e->StartProfiling(TempPath("second.json")); }, {"first.json"});
  // One profiler per process: another engine cannot start one meanwhile.
  auto other = Create();
  ExpectErrorContains([&] { other->StartProfiling(TempPath("other.json")); }, {"already running"});
  ExpectErrorContains([&] { other->StopProfiling(); }, {"Stop without Start"});
  e->StopProfiling();
  EXPECT_TRUE(Exists(TempPath("first.json")));
  EXPECT_FALSE(Exists(TempPath("second.json")));
  other->StartProfiling(TempPath("other.json"));  // free again
  other->StopProfiling();
  ExpectErrorContains([&] { other->StopProfiling(); }, {"Stop without Start"});
}

// The trace's path is a directory: the temporary file is written, the rename fails, and neither
// a half file nor the temporary one is left; the profiler has stopped and can start again.
TEST_P(EngineProfilerControl, AFailedWriteLeavesNoFileAndStops) {
  auto e = Create();
  const std::string dir =
      TempPath(GetParam() == engine::EngineKind::kNaive ? "naive_dir" : "threaded_dir");
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  e->StartProfiling(dir);
  Push(*e, e->NewVariable(), "op");
  ExpectErrorContains([&] { e->StopProfiling(); }, {"cannot write the trace to '" + dir + "'"});
  EXPECT_FALSE(Exists(dir + ".tmp"));
  struct stat st;
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_FALSE(e->profiling());
  const std::string path =
      TempPath(GetParam() == engine::EngineKind::kNaive ? "naive_ok.json" : "threaded_ok.json");
  e->StartProfiling(path);
  e->StopProfiling();
  EXPECT_TRUE(ReadTrace(path).contains("traceEvents"));
}

INSTANTIATE_TEST_SUITE_P(Engines, EngineProfilerControl,
                         ::testing::Values(engine::EngineKind::kNaive,
                                           engine::EngineKind::kThreaded),
                         [](const auto& info) {
                           return info.param == engine::EngineKind::kNaive ? "Naive" : "Threaded";
                         });

TEST(EngineProfiler, StopInsideAnOpIsAnError) {
  engine::EngineOptions options;
  auto e = engine::CreateEngine(engine::EngineKind::kThreaded, options);
  e->StartProfiling(TempPath("inside.json"));
  engine::VarHandle v = e->NewVariable();
  std::string error;
  e->PushSync(
      [&](RunContext) {
        try {
          e->StopProfiling();
        } catch (const Error& err) {
          error = err.what();
        }
      },
      Device::Cpu(), {}, {v});
  e->WaitForVar(v);
  EXPECT_NE(error.find("inside an engine op"), std::string::npos) << error;
  EXPECT_TRUE(e->profiling());
  e->StopProfiling();
}

}  // namespace
}  // namespace weft
