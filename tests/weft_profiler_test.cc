// weft::Profiler on the CPU, as a program uses it: the trace of the steps between Start and Stop
// parses as JSON and holds each op's span on a named worker track, and the CPU pool's memory
// counters, sampled when the profiler starts, at every allocation and free, and when it stops;
// misuse is a clear weft::Error.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/weft_test_util.h"
#include "weft/weft.h"

namespace weft {
namespace {

using nlohmann::json;
using testing::ExpectErrorContains;
using testing::TempPath;

json ReadTrace(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << "no trace written to " << path;
  return json::parse(in);  // throws, failing the test, if the file is not valid JSON
}

// thread_name of each host track.
std::map<int, std::string> HostTracks(const json& trace) {
  std::map<int, std::string> names;
  for (const json& e : trace.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name" && e.at("pid") == 1)
      names[e.at("tid")] = e.at("args").at("name");
  }
  return names;
}

struct Counter {
  double ts;
  double in_use, cached;
};

std::vector<Counter> Counters(const json& trace, const std::string& name) {
  std::vector<Counter> samples;
  for (const json& e : trace.at("traceEvents")) {
    if (e.at("ph") != "C" || e.at("name") != name) continue;
    EXPECT_EQ(e.at("pid"), 1) << "a host pool's counter outside the host process";
    samples.push_back({e.at("ts"), e.at("args").at("in use"), e.at("args").at("cached")});
  }
  return samples;
}

TEST(WeftProfiler, TraceHoldsOpSpansOnWorkerTracksAndMemoryCounters) {
  NDArray x(Shape{64, 64});
  x.FillUniform(-1, 1);
  NDArray untraced = op::tanh(x);
  untraced.WaitToRead();
  const std::string path = TempPath("weft_trace.json");
  EXPECT_FALSE(Profiler::Running());
  Profiler::Start(path);
  EXPECT_TRUE(Profiler::Running());
  NDArray y = op::relu(x);     // 16 KiB, allocated while the profiler runs
  NDArray z = op::sigmoid(y);  // 16 KiB more
  Profiler::Stop();            // waits for relu and sigmoid; y and z are still alive
  EXPECT_FALSE(Profiler::Running());

  const json trace = ReadTrace(path);
  const std::map<int, std::string> tracks = HostTracks(trace);
  std::map<std::string, int> spans;
  for (const json& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    ++spans[e.at("name")];
    ASSERT_TRUE(tracks.count(e.at("tid"))) << e.dump() << " is on an unnamed track";
    EXPECT_EQ(tracks.at(e.at("tid")).rfind("cpu worker", 0), 0u)
        << e.dump() << " on " << tracks.at(e.at("tid"));
  }
  EXPECT_EQ(spans["relu"], 1);
  EXPECT_EQ(spans["sigmoid"], 1);
  EXPECT_EQ(spans.count("tanh"), 0u) << "an op from before Start is in the trace";

  const std::vector<Counter> cpu = Counters(trace, "memory cpu");
  ASSERT_GE(cpu.size(), 4u) << "expected samples at start, at each allocation and at stop";
  EXPECT_TRUE(std::is_sorted(cpu.begin(), cpu.end(),
                             [](const Counter& a, const Counter& b) { return a.ts < b.ts; }));
  EXPECT_GE(cpu.back().in_use, cpu.front().in_use + 2 * 64 * 64 * sizeof(float))
      << "y and z are in use at Stop";
  EXPECT_GE(cpu.front().in_use, 64 * 64 * sizeof(float))
      << "x was in use when the profiler started";
  EXPECT_TRUE(std::all_of(cpu.begin(), cpu.end(), [](const Counter& c) { return c.cached >= 0; }));
}

TEST(WeftProfiler, MisuseIsAClearError) {
  ExpectErrorContains([] { Profiler::Stop(); }, {"Stop without Start"});
  const std::string path = TempPath("misuse.json");
  Profiler::Start(path);
  ExpectErrorContains([&] { Profiler::Start(TempPath("again.json")); }, {"already running", path});
  Profiler::Stop();
  ExpectErrorContains([] { Profiler::Stop(); }, {"Stop without Start"});
  ExpectErrorContains(
      [] {
        Profiler::Start(TempPath("no-such-dir/trace.json"));
        Profiler::Stop();
      },
      {"cannot write the trace", "no-such-dir/trace.json"});
  EXPECT_FALSE(Profiler::Running());
}

}  // namespace
}  // namespace weft
