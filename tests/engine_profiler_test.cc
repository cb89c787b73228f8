// The profiler's trace (WEFT_PROFILE / EngineOptions::profile_path) is valid Chrome trace JSON:
// every op appears once, on a named worker track, and spans on one track nest or are disjoint.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "tests/engine_test_util.h"

namespace weft {
namespace {

using engine::RunContext;
using nlohmann::json;

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
    engine->PushSync([](RunContext) {}, Device::Cpu(), {vars[i % 8]}, {vars[(i + 1) % 8]}, engine::FnProperty::kNormal,
                     0, "step \"quoted\"");
  }
  testing::Completer completer(std::chrono::milliseconds(2));
  engine->PushAsync([&](RunContext, engine::OnComplete done) { completer.Hand(done); }, Device::Cpu(), {}, {vars[0]},
                    engine::FnProperty::kNormal, 0, "async_op");
  engine->PushSync([](RunContext) {}, Device::Cpu(), {}, {vars[1]}, engine::FnProperty::kCpuPrioritized, 0,
                   "prioritized");
  engine->WaitForAll();
  engine->Shutdown();
  std::ifstream in(path);
  EXPECT_TRUE(in) << "no trace written to " << path;
  return json::parse(in);  // throws, failing the test, if the file is not valid JSON
}

void ExpectSpansNest(const std::vector<Span>& spans_in, int tid) {
  std::vector<Span> spans = spans_in;
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.start != b.start ? a.start < b.start : a.end > b.end; });
  std::vector<Span> open;
  for (const Span& s : spans) {
    ASSERT_GE(s.end, s.start);
    while (!open.empty() && open.back().end <= s.start) open.pop_back();
    if (!open.empty()) {
      ASSERT_LE(s.end, open.back().end) << "span [" << s.start << ", " << s.end << "] on track " << tid << " overlaps ["
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
    if (ph == "M" && e.at("name") == "thread_name") track_names[e.at("tid")] = e.at("args").at("name");
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

TEST(EngineProfiler, NaiveTraceIsValidAndSpansNest) { CheckTrace(RunAndTrace(engine::EngineKind::kNaive, "naive")); }

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

}  // namespace
}  // namespace weft
