// The profiler's device side, on the CPU, through a fake device tracer registered the way the CUDA
// build registers CUPTI's (engine/profiler_hooks.h): each op the tracer saw (EnterOp around its
// function) gets its device work on a track per stream, named after the worker that owns the
// stream (or "gpu:0 stream <id>" for a stream no worker owns), with an arrow ("s" in the op's span,
// "f" binding to the work) from the op to each piece; a tracer that cannot start is reported in the
// trace and host spans are still written.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/profiler_hooks.h"
#include "tests/weft_test_util.h"

namespace weft {
namespace {

using engine::DeviceActivity;
using nlohmann::json;
using testing::TempPath;

constexpr uint32_t kWorkerStream = 7, kLibraryStream = 9;

// Records, for each op it is told about, a kernel on kWorkerStream and a memcpy on kLibraryStream,
// inside the op's function call.
class FakeTracer final : public engine::DeviceTracer {
 public:
  std::string warning;  // what Start returns

  std::string Start() override {
    std::lock_guard<std::mutex> lock(mu_);
    work_.clear();
    return warning;
  }
  void EnterOp(uint64_t op) override {
    std::lock_guard<std::mutex> lock(mu_);
    open_[op] = engine::ProfilerClockNs();
    stack_.push_back(op);
  }
  void LeaveOp() override {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t op = stack_.back();
    stack_.pop_back();
    const int64_t start = open_[op], end = engine::ProfilerClockNs();
    DeviceActivity kernel{
        DeviceActivity::Kind::kKernel,     "fake_kernel", 0, kWorkerStream, start, end, op, 0, 1,
        "grid [1, 1, 1] block [256, 1, 1]"};
    DeviceActivity copy{
        DeviceActivity::Kind::kMemcpy, "memcpy HtoD", 0, kLibraryStream, start, end, op, 64, 2, ""};
    work_.push_back(kernel), work_.push_back(copy);
  }
  engine::DeviceTrace Stop(std::span<const engine::NamedStream>) override {
    std::lock_guard<std::mutex> lock(mu_);
    return engine::DeviceTrace{std::move(work_), {{0, kWorkerStream, "gpu:0 compute 0"}}, ""};
  }

 private:
  std::mutex mu_;
  std::map<uint64_t, int64_t> open_;
  std::vector<uint64_t> stack_;  // one thread's at a time: the test runs one worker
  std::vector<DeviceActivity> work_;
};

FakeTracer& Tracer() {
  static FakeTracer* tracer = [] {
    auto* t = new FakeTracer;
    engine::RegisterDeviceTracer(t);
    return t;
  }();
  return *tracer;
}

json TraceOf(const std::string& name, const std::vector<const char*>& ops) {
  Tracer();
  engine::EngineOptions options;
  options.cpu_workers = 1;
  auto e = engine::CreateEngine(engine::EngineKind::kThreaded, options);
  engine::VarHandle v = e->NewVariable();
  const std::string path = TempPath(name);
  e->StartProfiling(path);
  for (const char* op : ops)
    e->PushSync([](engine::RunContext) {}, Device::Cpu(), {}, {v}, engine::FnProperty::kNormal, 0,
                op);
  e->StopProfiling();
  std::ifstream in(path);
  EXPECT_TRUE(in) << "no trace at " << path;
  return json::parse(in);
}

TEST(EngineDeviceTrace, DeviceWorkIsOnNamedStreamTracksWithArrowsFromItsOps) {
  Tracer().warning = "";
  const json trace = TraceOf("device.json", {"first", "second"});
  std::map<std::pair<int, int>, std::string> tracks;
  std::map<std::string, std::string> process;
  std::map<int64_t, json> starts, ends;
  std::vector<json> spans;
  for (const json& e : trace.at("traceEvents")) {
    const std::string ph = e.at("ph");
    if (ph == "M" && e.at("name") == "thread_name")
      tracks[{e.at("pid"), e.at("tid")}] = e.at("args").at("name");
    if (ph == "M" && e.at("name") == "process_name")
      process[std::to_string(e.at("pid").get<int>())] = e.at("args").at("name");
    if (ph == "X") spans.push_back(e);
    if (ph == "s") starts[e.at("id")] = e;
    if (ph == "f") ends[e.at("id")] = e;
  }
  EXPECT_EQ(process["10"], "gpu:0");
  EXPECT_EQ((tracks[{10, kWorkerStream}]), "gpu:0 compute 0");
  EXPECT_EQ((tracks[{10, kLibraryStream}]), "gpu:0 stream 9");
  ASSERT_EQ(starts.size(), 4u) << "one arrow per piece of work: two ops, two pieces each";
  for (const auto& [id, s] : starts) {
    ASSERT_TRUE(ends.count(id)) << "arrow " << id << " has no end";
    const json& f = ends[id];
    EXPECT_EQ(f.at("bp"), "e");
    const json* op = nullptr;
    const json* work = nullptr;
    for (const json& x : spans) {
      const double ts = x.at("ts"), end = ts + x.at("dur").get<double>();
      if (x.at("pid") == s.at("pid") && x.at("tid") == s.at("tid") && ts <= s.at("ts") &&
          s.at("ts") <= end)
        op = &x;
      if (x.at("pid") == f.at("pid") && x.at("tid") == f.at("tid") && ts == f.at("ts")) work = &x;
    }
    ASSERT_NE(op, nullptr) << "arrow " << id << " starts in no span";
    ASSERT_NE(work, nullptr) << "arrow " << id << " ends at no device work";
    EXPECT_TRUE(op->at("name") == "first" || op->at("name") == "second") << op->dump();
    EXPECT_EQ(work->at("args").at("op"), op->at("args").at("op"))
        << "the arrow joins an op to work of another";
    EXPECT_EQ(work->at("pid"), 10);
  }
}

TEST(EngineDeviceTrace, ATracerThatCannotStartIsReportedAndHostSpansAreStillWritten) {
  Tracer().warning = "GPU activity is not recorded: a fake reason";
  ::testing::internal::CaptureStderr();
  const json trace = TraceOf("no_device.json", {"only"});
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("a fake reason"), std::string::npos);
  EXPECT_EQ(trace.at("otherData").at("device_trace"),
            "GPU activity is not recorded: a fake reason");
  int spans = 0, device = 0;
  for (const json& e : trace.at("traceEvents")) {
    spans += e.at("ph") == "X" && e.at("name") == "only";
    device += e.at("ph") == "X" && e.at("pid") != 1;
  }
  EXPECT_EQ(spans, 1);
  EXPECT_EQ(device, 0);
  Tracer().warning = "";
}

}  // namespace
}  // namespace weft
