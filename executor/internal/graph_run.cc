#include "executor/internal/graph_run.h"

#include <algorithm>
#include <future>

#include "core/error.h"

namespace weft {

GraphRun::GraphRun(const BoundGraph& plan)
    : plan_(plan),
      fence_(engine::Engine::Get()->NewVariable()),
      capture_enabled_(StepCapture::Enabled() && plan.device().type == DeviceType::kGpu) {
  for (Phase phase : {Phase::kForward, Phase::kBackward}) {
    for (uint32_t s : plan.segments(phase)) {
      if (reads_.size() <= s) reads_.resize(s + 1);
      reads_[s] = plan.segment(s).reads;
      reads_[s].push_back(fence_);
    }
  }
}

GraphRun::~GraphRun() {
  std::promise<void> done;
  std::future<void> pushed_ops_finished = done.get_future();
  try {
    engine::Engine::Get()->DeleteVariable([&done](engine::RunContext) { done.set_value(); },
                                          Device::Cpu(), fence_);
  } catch (const Error&) {
    return;  // the engine has shut down: nothing runs any more
  }
  pushed_ops_finished.wait();
}

// Whether stable segment s already holds what it would compute now: it was pushed before with
// the same versions of its version_key reads and the same mode. Records them otherwise.
bool GraphRun::StableUpToDate(uint32_t s, bool is_train) {
  const BoundGraph::Segment& seg = plan_.segment(s);
  SmallVector<uint64_t, 4> key;
  for (uint32_t r : seg.version_key)
    key.push_back(engine::LastWritePushed(seg.argument_reads[r].var));
  key.push_back(is_train ? 2 : 1);  // never 0: an empty record is a segment not yet pushed
  if (stable_pushed_.size() <= s) stable_pushed_.resize(s + 1);
  SmallVector<uint64_t, 4>& last = stable_pushed_[s];
  if (last.size() == key.size() && std::equal(key.begin(), key.end(), last.begin())) return true;
  last = key;
  return false;
}

void GraphRun::Push(Phase phase, bool is_train) {
  if (phase == Phase::kForward && !is_train && capture_enabled_ &&
      inference_forwards_++ >= StepCapture::kWarmupSteps) {
    if (inference_capture_ == nullptr)
      inference_capture_ = std::make_unique<StepCapture>(plan_, fence_, /*training=*/false);
    const size_t stable = PushSegments(phase, is_train, /*only_stable=*/true);
    stats_.engine_ops_pushed = stable + inference_capture_->Push();
    return;
  }
  stats_.engine_ops_pushed = PushSegments(phase, is_train, /*only_stable=*/false);
}

size_t GraphRun::PushSegments(Phase phase, bool is_train, bool only_stable) {
  const std::vector<uint32_t>& segments = plan_.segments(phase);
  size_t pushed = 0;
  for (uint32_t s : segments) {
    const BoundGraph::Segment& seg = plan_.segment(s);
    if ((only_stable && !seg.stable) || (seg.stable && StableUpToDate(s, is_train))) continue;
    ++pushed;
    SegmentCall call{&plan_, s, is_train, {}, {}};
    if (seg.random[is_train]) call.random = ReserveRandom(plan_.device(), seg.draws[is_train]);
    for (const BoundGraph::Segment::ArgumentRead& r : seg.argument_reads)
      call.versions.push_back(engine::LastWritePushed(r.var));
    engine::Engine::Get()->PushSync(
        [call](engine::RunContext run) {
          call.plan->RunSegment(call.segment, call.is_train, call.random, run,
                                call.versions.span());
        },
        plan_.device(), reads_[s], seg.writes, engine::FnProperty::kNormal, 0, seg.name);
  }
  return pushed;
}

void GraphRun::PushStep() {
  SetHeadGrads({});
  if (capture_enabled_ && capture_ == nullptr && steps_ >= StepCapture::kWarmupSteps) {
    capture_ = std::make_unique<StepCapture>(plan_, fence_);
  }
  ++steps_;
  if (capture_ == nullptr) {
    const size_t forward = PushSegments(Phase::kForward, /*is_train=*/true, false);
    stats_.engine_ops_pushed = forward + PushSegments(Phase::kBackward, /*is_train=*/true, false);
    return;
  }
  stats_.engine_ops_pushed = capture_->Push();
}

RunStats GraphRun::stats() const {
  RunStats s = stats_;
  if (capture_ != nullptr) s.capture = capture_->stats();
  if (inference_capture_ != nullptr) s.inference_capture = inference_capture_->stats();
  return s;
}

// Ones by default: filled once and kept (head gradients are external to the memory plan, so
// nothing overwrites them) until the caller passes its own; the plan's own arrays, passed back
// after the caller wrote into them, are not copied onto themselves.
void GraphRun::SetHeadGrads(const std::vector<NDArray>& given) {
  const std::vector<NDArray>& heads = plan_.head_grads();
  for (size_t i = 0; i < heads.size(); ++i) {
    if (!given.empty()) {
      if (!given[i].SameMemoryAs(heads[i])) given[i].CopyTo(heads[i]);
    } else if (!head_grads_are_ones_) {
      heads[i].Fill(1.0);
    }
  }
  head_grads_are_ones_ = given.empty();
}

}  // namespace weft
