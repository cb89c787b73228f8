// The profiler on a GPU (weft::Profiler, engine/gpu/device_tracer.h): each profiled op's kernels
// and copies appear on the track of its worker's stream, with an arrow from the op's span, inside
// the span's time range and before the host saw them done (GPU and host clocks aligned) — for a
// kernel replayed from a launch batch's chain graph as for one launched at once; a kernel held
// behind a gate on its stream starts after the host opened the gate; and the GPU pool's memory is
// a counter track. No timing is asserted beyond that order.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/env.h"
#include "engine/engine.h"
#include "engine/gpu/gpu_stream.h"
#include "tests/engine_test_util.h"
#include "tests/gpu_op_test_util.h"
#include "tests/gpu_stream_gate.h"
#include "tests/weft_test_util.h"
#include "weft/weft.h"

namespace weft {
namespace {

using nlohmann::json;
using testing::AddKernel;
using testing::TempPath;

const Device kGpu = Device::Gpu(0);
constexpr int kHostPid = 1, kGpu0Pid = 10;  // engine/internal/trace_writer.h

struct Event {
  std::string name, cat;
  int pid = 0, tid = 0;
  double ts = 0, dur = 0;
  json args;
  double end() const { return ts + dur; }
};

// A trace, indexed: spans ("X"), track names, and the arrows between spans.
class Trace {
 public:
  explicit Trace(const std::string& path) {
    std::ifstream in(path);
    EXPECT_TRUE(in) << "no trace written to " << path;
    const json trace = json::parse(in);
    device_trace_ = trace.at("otherData").value("device_trace", "");
    for (const json& e : trace.at("traceEvents")) Add(e);
  }

  // Why CUPTI recorded nothing (another tool holds it, e.g. compute-sanitizer); empty if it did.
  std::string DeviceTraceMissing() const {
    return device_trace_.find("not recorded") != std::string::npos ? device_trace_ : "";
  }

  // The one span named `name` on the host.
  const Event& HostSpan(const std::string& name) const {
    const Event* found = nullptr;
    for (const Event& e : spans_) {
      if (e.pid != kHostPid || e.name != name) continue;
      EXPECT_EQ(found, nullptr) << "two spans named " << name;
      found = &e;
    }
    EXPECT_NE(found, nullptr) << "no span named " << name;
    static const Event none;
    return found ? *found : none;
  }

  // The device work the arrows that start inside `span` end at.
  std::vector<const Event*> WorkOf(const Event& span) const {
    std::vector<const Event*> work;
    for (const auto& [id, start] : flow_starts_) {
      if (start.pid != span.pid || start.tid != span.tid || start.ts < span.ts ||
          start.ts > span.end())
        continue;
      auto end = flow_ends_.find(id);
      EXPECT_NE(end, flow_ends_.end())
          << "arrow " << id << " from " << span.name << " ends nowhere";
      if (end == flow_ends_.end()) continue;
      const Event* target = SpanAt(end->second);
      EXPECT_NE(target, nullptr) << "arrow " << id << " from " << span.name << " ends at no span";
      if (target != nullptr) work.push_back(target);
    }
    return work;
  }

  std::string Track(int pid, int tid) const {
    auto it = tracks_.find({pid, tid});
    return it == tracks_.end() ? "<unnamed>" : it->second;
  }

  // The largest "in use" of counter `name`.
  double PeakInUse(const std::string& name, int pid) const {
    double peak = -1;
    for (const Event& c : counters_) {
      if (c.name == name && c.pid == pid) peak = std::max(peak, c.args.at("in use").get<double>());
    }
    return peak;
  }

 private:
  void Add(const json& e) {
    const std::string ph = e.at("ph");
    Event ev{e.value("name", ""),
             e.value("cat", ""),
             e.value("pid", 0),
             e.value("tid", 0),
             e.value("ts", 0.0),
             e.value("dur", 0.0),
             e.value("args", json::object())};
    if (ph == "M" && ev.name == "thread_name") tracks_[{ev.pid, ev.tid}] = ev.args.at("name");
    if (ph == "X") spans_.push_back(ev);
    if (ph == "C") counters_.push_back(ev);
    if (ph == "s") flow_starts_[e.at("id")] = ev;
    if (ph == "f") {
      EXPECT_EQ(e.value("bp", ""), "e") << "a flow end must bind to the span it points at";
      flow_ends_[e.at("id")] = ev;
    }
  }
  // The span an arrow's end binds to: the one that starts at its time on its track.
  const Event* SpanAt(const Event& flow_end) const {
    for (const Event& e : spans_) {
      if (e.pid == flow_end.pid && e.tid == flow_end.tid && e.ts == flow_end.ts) return &e;
    }
    return nullptr;
  }

  std::string device_trace_;
  std::vector<Event> spans_, counters_;
  std::map<std::pair<int, int>, std::string> tracks_;
  std::map<int64_t, Event> flow_starts_, flow_ends_;
};

// The stream track a host worker's device work belongs on: "gpu:0 compute worker 1" queues on
// "gpu:0 compute 1", "gpu:0 copy-to worker 0" on "gpu:0 copy h2d"
// (engine/internal/device_workers.h).
std::string StreamTrackOf(const std::string& worker) {
  const std::string compute = "gpu:0 compute worker ";
  if (worker.rfind(compute, 0) == 0) return "gpu:0 compute " + worker.substr(compute.size());
  if (worker.rfind("gpu:0 copy-to worker", 0) == 0) return "gpu:0 copy h2d";
  if (worker.rfind("gpu:0 copy-from worker", 0) == 0) return "gpu:0 copy d2h";
  return "<no stream for " + worker + ">";
}

// A CPU op named `name`, run and waited for: its span starts after everything the host saw done.
void HostMarker(const char* name) {
  engine::Engine& engine = *engine::Engine::Get();
  engine::VarHandle v = engine.NewVariable();
  engine.PushSync([](engine::RunContext) {}, Device::Cpu(), {}, {v}, engine::FnProperty::kNormal, 0,
                  name);
  engine.WaitForVar(v);
  engine.DeleteVariable([](engine::RunContext) {}, Device::Cpu(), v);
}

// `op`'s device work: at least one piece, every piece of category `cat` on its worker's stream's
// track, starting within the op's span or after it and done before `after` began.
std::vector<const Event*> CheckWork(const Trace& t, const std::string& op, const std::string& cat,
                                    const Event& after) {
  const Event& span = t.HostSpan(op);
  const std::vector<const Event*> work = t.WorkOf(span);
  EXPECT_FALSE(work.empty()) << "no arrow from " << op << " to its device work";
  for (const Event* w : work) {
    EXPECT_EQ(w->cat, cat) << op << " -> " << w->name;
    EXPECT_EQ(w->pid, kGpu0Pid) << op << " -> " << w->name;
    EXPECT_EQ(t.Track(w->pid, w->tid), StreamTrackOf(t.Track(span.pid, span.tid)))
        << op << " -> " << w->name;
    EXPECT_GE(w->ts, span.ts) << op << " -> " << w->name << " started before its op did";
    EXPECT_LE(w->end(), after.ts) << op << " -> " << w->name << " ended after the host saw it done";
  }
  return work;
}

TEST(GpuProfiler, KernelsAndCopiesAreOnTheirStreamsWithArrowsFromTheirOps) {
  NDArray small(Shape{1024}, kGpu), large(Shape{int64_t{1} << 22}, kGpu);
  small.Fill(0), large.Fill(0);
  op::relu(small).WaitToRead();  // the launch batch's chains exist before the profiler starts
  const std::string path = TempPath("gpu_trace.json");
  Profiler::Start(path);
  small.Fill(-1.0);                // host to device, on the copy worker's stream
  NDArray a = op::relu(small);     // 256 threads: batched, replayed from a chain graph
  NDArray b = op::sigmoid(large);  // 1M threads: launched at once
  a.WaitToRead(), b.WaitToRead();
  HostMarker("after");
  Profiler::Stop();

  const Trace t(path);
  if (!t.DeviceTraceMissing().empty())
    GTEST_SKIP() << "CUPTI cannot trace here: " << t.DeviceTraceMissing();
  const Event& after = t.HostSpan("after");
  const bool batched = GetEnvBool("WEFT_GPU_LAUNCH_BATCH", true);
  for (const Event* k : CheckWork(t, "relu", "kernel", after)) {
    EXPECT_NE(k->name.find("UnaryForward"), std::string::npos) << k->name;
    EXPECT_EQ(k->args.at("launch").get<std::string>().find("graph") != std::string::npos, batched)
        << "relu's kernel " << (batched ? "was not" : "was")
        << " replayed from a graph: " << k->args.dump();
  }
  for (const Event* k : CheckWork(t, "sigmoid", "kernel", after)) {
    EXPECT_NE(k->name.find("UnaryForward"), std::string::npos) << k->name;
    EXPECT_EQ(k->args.at("launch").get<std::string>().find("graph"), std::string::npos)
        << k->args.dump();
  }
  for (const Event* c : CheckWork(t, "Fill", "memcpy", after)) EXPECT_EQ(c->name, "memcpy HtoD");
  EXPECT_GE(t.PeakInUse("memory gpu:0", kGpu0Pid), 4.0 * (1 << 22) * 2) << "large and b are in use";
}

// The clocks are aligned even when the GPU runs a kernel long after its op: the kernel waits
// behind a gate on its stream until a later CPU op opens it, and starts after that op did.
TEST(GpuProfiler, AKernelHeldBehindAGateStartsAfterTheHostOpensIt) {
  testing::DeviceBuffer y_buffer(16 * sizeof(float)), one_buffer(16 * sizeof(float));
  const std::vector<float> zeros(16, 0.f), ones(16, 1.f);
  y_buffer.Upload(zeros.data(), 16 * sizeof(float)),
      one_buffer.Upload(ones.data(), 16 * sizeof(float));
  void *y = y_buffer.get(), *one = one_buffer.get();
  long long n = 16;
  int write = 1;
  engine::Engine& engine = *engine::Engine::Get();
  engine::VarHandle warm = engine.NewVariable(), gated = engine.NewVariable(),
                    opened = engine.NewVariable();
  std::unique_ptr<testing::StreamGate> gate;
  testing::Latch queued;
  const std::string path = TempPath("gpu_gate_trace.json");
  Profiler::Start(path);
  // The kernel launched once, ungated, while CUPTI records: loading it (and asking the driver for
  // its parameters) may wait for the device, so it must not happen while a stream is held.
  testing::DeviceBuffer scratch(16 * sizeof(float));
  void* s = scratch.get();
  engine.PushSync(
      [&](engine::RunContext run) {
        void* args[] = {&s, &one, &s, &n, &write};
        run.stream->Launch(AddKernel(), dim3(1), dim3(256), args);
      },
      kGpu, {}, {warm}, engine::FnProperty::kNormal, 0, "warm-up");
  engine.WaitForVar(warm);
  engine.PushSync(
      [&](engine::RunContext run) {
        gate = std::make_unique<testing::StreamGate>(*run.stream);
        void* args[] = {&y, &one, &y, &n, &write};
        run.stream->Launch(AddKernel(), dim3(1), dim3(256), args);  // behind the gate
        queued.Open();
      },
      kGpu, {}, {gated}, engine::FnProperty::kNormal, 0, "gated");
  ASSERT_TRUE(queued.WaitFor(std::chrono::seconds(60)));
  engine.PushSync([&](engine::RunContext) { gate->Open(); }, Device::Cpu(), {}, {opened},
                  engine::FnProperty::kNormal, 0, "open gate");
  engine.WaitForVar(opened);
  engine.WaitForVar(gated);
  HostMarker("after");
  Profiler::Stop();
  std::vector<float> result(16);
  y_buffer.Download(result.data(), 16 * sizeof(float));
  EXPECT_EQ(result, ones);

  const Trace t(path);
  if (!t.DeviceTraceMissing().empty())
    GTEST_SKIP() << "CUPTI cannot trace here: " << t.DeviceTraceMissing();
  const Event& open = t.HostSpan("open gate");
  const std::vector<const Event*> work = CheckWork(t, "gated", "kernel", t.HostSpan("after"));
  ASSERT_EQ(work.size(), 1u);
  EXPECT_GE(work[0]->ts, open.ts)
      << "the kernel started before the host opened its gate: the clocks disagree";
}

}  // namespace
}  // namespace weft
