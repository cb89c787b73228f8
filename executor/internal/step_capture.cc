#include "executor/internal/step_capture.h"

#include <algorithm>
#include <atomic>
#include <iostream>
#include <string>
#include <utility>

#include "core/env.h"
#include "core/error.h"
#include "engine/device_backend.h"
#include "storage/random.h"
#include "storage/workspace.h"

namespace weft {

// Consecutive segments pushed as one engine op (or one barrier segment: `barrier` set).
struct StepCapture::Group {
  std::vector<uint32_t> segments;  // in push order
  const char* barrier = nullptr;   // the one segment's Segment::capture_barrier
  // The engine op's name, for profiles: "graph(first..last)" by the segments' first ops (a
  // replay's kernels are the group's, not its first op's); a barrier keeps its segment's name.
  std::string name;
  std::vector<engine::VarHandle> reads, writes;
  bool training = true;          // the segments run in training (else inference)
  std::vector<uint32_t> random;  // the segments (positions in `segments`) that draw then
  // The worker's (see the file comment):
  std::unique_ptr<engine::RecordedWork> work;  // the graph, once recorded
  std::unique_ptr<Workspace> workspace;        // what its ops' workspace requests got
  std::vector<RandomKey> recorded_keys;        // the random segments' ranges it was recorded with
  bool failed = false;                         // recording failed: the segments run as they are
  // Graphs recorded for another seed, kept (with their workspaces) until no replay can be pending.
  std::vector<std::pair<std::unique_ptr<engine::RecordedWork>, std::unique_ptr<Workspace>>> retired;
  std::atomic<bool> replaying{false};  // for stats()
};

namespace {

using Group = StepCapture::Group;

void SortUnique(std::vector<engine::VarHandle>& vars) {
  std::sort(vars.begin(), vars.end());
  vars.erase(std::unique(vars.begin(), vars.end()), vars.end());
}

// The union of the segments' vars; a var written is not listed as read.
void CollectVars(const BoundGraph& plan, Group& g, engine::VarHandle fence) {
  for (uint32_t s : g.segments) {
    const BoundGraph::Segment& seg = plan.segment(s);
    g.reads.insert(g.reads.end(), seg.reads.begin(), seg.reads.end());
    g.writes.insert(g.writes.end(), seg.writes.begin(), seg.writes.end());
  }
  SortUnique(g.writes);
  SortUnique(g.reads);
  std::vector<engine::VarHandle> only_read;
  std::set_difference(g.reads.begin(), g.reads.end(), g.writes.begin(), g.writes.end(),
                      std::back_inserter(only_read));
  g.reads = std::move(only_read);
  g.reads.push_back(fence);
}

// Runs the group's segments on `run` (in training or not, as the group); random segment k gets
// keys[k] (with `shifts` + k as its shift when recording).
void RunSegments(const BoundGraph& plan, const Group& g, const std::vector<RandomKey>& keys,
                 const uint64_t* shifts, const engine::RunContext& run) {
  size_t k = 0;
  for (size_t i = 0; i < g.segments.size(); ++i) {
    RandomKey key;
    if (k < g.random.size() && g.random[k] == i) {
      key = keys[k];
      if (shifts != nullptr) key.shift = shifts + k;
      ++k;
    }
    plan.RunSegment(g.segments[i], g.training, key, run);
  }
}

bool SameSeeds(const std::vector<RandomKey>& a, const std::vector<RandomKey>& b) {
  for (size_t k = 0; k < a.size(); ++k) {
    if (a[k].seed != b[k].seed) return false;
  }
  return true;
}

void Record(const BoundGraph& plan, Group& g, const std::vector<RandomKey>& keys,
            const engine::RunContext& run) {
  if (g.work != nullptr) g.retired.emplace_back(std::move(g.work), std::move(g.workspace));
  g.workspace = Workspace::ForRecording(plan.device());
  engine::DeviceBackend* backend = engine::GetDeviceBackend(plan.device().type);
  WEFT_CHECK(backend != nullptr) << "a captured step on a device with no backend";
  g.work = backend->Record(run, g.random.size(),
                           [&](const engine::RunContext& recording, const uint64_t* shifts) {
                             Workspace::Scope scope(*g.workspace);
                             RunSegments(plan, g, keys, shifts, recording);
                           });
  g.recorded_keys = keys;
}

// The group's op: replays its graph (recording it first when there is none for these seeds), or
// runs its segments when it is a barrier or its recording failed.
void RunGroup(const BoundGraph& plan, Group& g, const std::vector<RandomKey>& keys,
              const engine::RunContext& run) {
  if (g.barrier == nullptr && !g.failed &&
      (g.work == nullptr || !SameSeeds(keys, g.recorded_keys))) {
    try {
      Record(plan, g, keys, run);
    } catch (const Error& e) {
      g.failed = true;
      g.work.reset();
      g.workspace.reset();
      std::cerr << "weft: warning: " << (g.training ? "a training step" : "an inference forward")
                << "'s segments from '" << plan.segment(g.segments.front()).name
                << "' run without a CUDA graph: " << e.what() << "\n";
    }
  }
  if (g.barrier != nullptr || g.failed) {
    g.replaying = false;
    RunSegments(plan, g, keys, nullptr, run);
    return;
  }
  for (size_t k = 0; k < keys.size(); ++k)
    g.work->SetValue(k, keys[k].offset - g.recorded_keys[k].offset);
  g.work->Replay(run);
  g.replaying = true;
}

}  // namespace

bool StepCapture::Enabled() { return GetEnvBool("WEFT_CUDA_GRAPH", true); }

StepCapture::StepCapture(const BoundGraph& plan, engine::VarHandle fence, bool training)
    : plan_(plan), fence_(fence), training_(training) {
  for (Phase phase : {Phase::kForward, Phase::kBackward}) {
    if (!training && phase == Phase::kBackward) break;
    for (uint32_t s : plan.segments(phase)) {
      const BoundGraph::Segment& seg = plan.segment(s);
      if (!training && seg.stable) continue;
      if (seg.capture_barrier != nullptr || groups_.empty() || groups_.back()->barrier != nullptr) {
        groups_.push_back(std::make_unique<Group>());
        groups_.back()->barrier = seg.capture_barrier;
        groups_.back()->training = training;
      }
      Group& g = *groups_.back();
      if (seg.random[training]) g.random.push_back(static_cast<uint32_t>(g.segments.size()));
      g.segments.push_back(s);
    }
  }
  for (auto& g : groups_) {
    CollectVars(plan, *g, fence);
    const char* first = plan.segment(g->segments.front()).name;
    const char* last = plan.segment(g->segments.back()).name;
    g->name = g->barrier != nullptr ? first
                                    : std::string("graph(") + (first ? first : "?") + ".." +
                                          (last ? last : "?") + ")";
  }
}

StepCapture::~StepCapture() = default;

size_t StepCapture::Push() {
  engine::Engine* engine = engine::Engine::Get();
  for (const auto& group : groups_) {
    Group* g = group.get();
    std::vector<RandomKey> keys;
    for (uint32_t k : g->random)
      keys.push_back(ReserveRandom(plan_.device(), plan_.segment(g->segments[k]).draws[training_]));
    engine->PushSync(
        [plan = &plan_, g, keys](engine::RunContext run) { RunGroup(*plan, *g, keys, run); },
        plan_.device(), g->reads, g->writes, engine::FnProperty::kNormal, 0, g->name.c_str());
  }
  return groups_.size();
}

CaptureStats StepCapture::stats() const {
  CaptureStats s;
  for (const auto& g : groups_) {
    if (g->barrier != nullptr) {
      ++s.barriers;
    } else {
      ++s.groups;
      s.recorded += g->replaying ? 1 : 0;
    }
  }
  return s;
}

}  // namespace weft
