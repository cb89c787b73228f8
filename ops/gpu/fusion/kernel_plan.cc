#include "ops/gpu/fusion/kernel_plan.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "core/error.h"
#include "core/shape.h"
#include "ops/gpu/internal/axes.h"

namespace weft::gpu {
namespace {

// Steps whose outputs are stored, or read by such steps (FusedGroup::LiveSteps), and the inputs
// they read.
void MarkLive(const FusedGroup& g, KernelPlan& plan) {
  const std::vector<bool> needed = g.LiveValues(plan.out_req);
  plan.live = g.LiveSteps(plan.out_req);
  plan.loaded.assign(needed.begin(), needed.begin() + g.num_inputs);
}

// The walk of broadcast input `input` over the output shape of `step`.
BroadcastWalk WalkOf(const FusedGroup& g, const FusedGroup::Step& step, uint32_t input) {
  const Shape& frame = g.shapes[step.first_output];
  const std::array<int64_t, Shape::kMaxDims> strides = BroadcastStrides(g.shapes[input], frame);
  std::vector<WalkAxis> axes(frame.ndim());
  for (int d = 0; d < frame.ndim(); ++d) axes[d] = WalkAxis{frame[d], {strides[d], 0, 0}};
  const GpuAxes merged = MergeAxes(axes);
  BroadcastWalk walk;
  walk.input = input;
  walk.ndim = merged.ndim;
  for (int d = 0; d < merged.ndim; ++d)
    walk.dim[d] = merged.dim[d], walk.stride[d] = merged.stride[0][d];
  return walk;
}

void AddWalks(const FusedGroup& g, KernelPlan& plan) {
  plan.walk_of.resize(g.steps.size());
  for (size_t s = 0; s < g.steps.size(); ++s) {
    const FusedGroup::Step& step = g.steps[s];
    plan.walk_of[s].assign(step.args.size(), -1);
    if (!plan.live[s]) continue;
    for (size_t a = 0; a < step.args.size(); ++a) {
      const uint32_t v = step.args[a];
      if (v >= g.num_inputs || !ReadsAsData(step.op->pointwise.kind, a)) continue;
      if (plan.input_kinds[v] != FusedGroup::InputKind::kBroadcast) continue;
      const BroadcastWalk walk = WalkOf(g, step, v);
      auto it = std::find(plan.walks.begin(), plan.walks.end(), walk);
      plan.walk_of[s][a] = static_cast<int>(it - plan.walks.begin());
      if (it == plan.walks.end()) plan.walks.push_back(walk);
    }
  }
}

void Add(KernelPlan& plan, ArgField::Kind kind, uint32_t index, int axis, std::string name,
         uint32_t size) {
  plan.bytes = (plan.bytes + size - 1) / size * size;
  plan.fields.push_back(ArgField{kind, index, axis, plan.bytes, size, std::move(name)});
  plan.bytes += size;
}

void LayOutFields(const FusedGroup& g, KernelPlan& plan) {
  using K = ArgField::Kind;
  for (uint32_t i = 0; i < g.num_inputs; ++i) {
    if (plan.loaded[i]) Add(plan, K::kInput, i, 0, "in" + std::to_string(i), 8);
  }
  for (uint32_t k = 0; k < g.outputs.size(); ++k) {
    if (plan.out_req[k] != OpReq::kNull) Add(plan, K::kOutput, k, 0, "out" + std::to_string(k), 8);
  }
  for (uint32_t s = 0; s < g.steps.size(); ++s) {
    const int scalars = plan.live[s] ? ScalarsTaken(g.steps[s]) : 0;
    for (int k = 0; k < scalars; ++k) Add(plan, K::kScalar, s, k, ScalarField(s, k), 8);
  }
  const uint32_t isize = plan.index64 ? 8 : 4;
  Add(plan, K::kCount, 0, 0, "n", isize);
  for (uint32_t w = 0; w < plan.walks.size(); ++w) {
    const std::string prefix = "w" + std::to_string(w);
    for (int d = 0; d < plan.walks[w].ndim; ++d) {
      if (plan.walks[w].ReadsDim(d))
        Add(plan, K::kDim, w, d, prefix + "d" + std::to_string(d), isize);
      if (plan.walks[w].ReadsStride(d))
        Add(plan, K::kStride, w, d, prefix + "s" + std::to_string(d), isize);
    }
  }
  plan.bytes = (plan.bytes + 7) / 8 * 8;  // the struct's alignment: its pointers'
}

template <typename T>
void Put(char* bytes, const ArgField& f, T value) {
  std::memcpy(bytes + f.offset, &value, sizeof(value));
}

// A field of the index type: int (32-bit indexing) or long long.
void PutIndex(char* bytes, const ArgField& f, int64_t value) {
  if (f.size == 8) return Put(bytes, f, value);
  Put(bytes, f, static_cast<int32_t>(value));
}

}  // namespace

bool BroadcastWalk::operator==(const BroadcastWalk& o) const {
  return input == o.input && ndim == o.ndim && std::equal(dim, dim + ndim, o.dim) &&
         std::equal(stride, stride + ndim, o.stride);
}

// The offset is summed from the innermost axis out to the outermost one the input moves along;
// every axis in that range divides the index (and takes a remainder where the input moves along
// it), except the outermost axis of the walk, which only multiplies.
bool BroadcastWalk::ReadsDim(int d) const { return d >= 1 && d >= OutermostMoving(); }

int BroadcastWalk::OutermostMoving() const {
  for (int d = 0; d < ndim; ++d) {
    if (stride[d] != 0) return d;
  }
  return ndim;
}

bool BroadcastWalk::ReadsStride(int d) const { return stride[d] != 0 && stride[d] != 1; }

KernelPlan PlanKernel(const FusedGroup& group, std::span<const OpReq> req, bool index64) {
  WEFT_CHECK_EQ(req.size(), group.outputs.size()) << group.label << ": output requests";
  KernelPlan plan;
  for (OpReq r : req) plan.out_req.push_back(AsWrite(r));
  plan.index64 = index64;
  plan.input_kinds = group.InputKinds();
  MarkLive(group, plan);
  AddWalks(group, plan);
  LayOutFields(group, plan);
  return plan;
}

int ScalarsTaken(const FusedGroup::Step& step) {
  const PointwiseKind kind = step.op->pointwise.kind;
  if (kind != PointwiseKind::kUnary && kind != PointwiseKind::kUnaryBackward) return 0;
  return step.op->pointwise.Scalars(step.attrs).count;
}

std::string ScalarField(uint32_t step, int k) {
  return (k == 0 ? "s" : "t") + std::to_string(step);
}

bool StoresNothing(const KernelPlan& plan) {
  return std::all_of(plan.out_req.begin(), plan.out_req.end(),
                     [](OpReq r) { return r == OpReq::kNull; });
}

std::vector<uint64_t> FillArgs(const KernelPlan& plan, const FusedGroup& group,
                               std::span<const TensorView> inputs,
                               std::span<const TensorView> outputs) {
  std::vector<uint64_t> words(plan.bytes / 8, 0);
  char* bytes = reinterpret_cast<char*>(words.data());
  for (const ArgField& f : plan.fields) {
    switch (f.kind) {
      case ArgField::Kind::kInput:
        Put(bytes, f, inputs[f.index].raw());
        break;
      case ArgField::Kind::kOutput:
        Put(bytes, f, outputs[f.index].raw());
        break;
      case ArgField::Kind::kScalar: {
        const FusedGroup::Step& step = group.steps[f.index];
        Put(bytes, f, step.op->pointwise.Scalars(step.attrs).values[f.axis]);
        break;
      }
      case ArgField::Kind::kCount:
        PutIndex(bytes, f, group.size);
        break;
      case ArgField::Kind::kDim:
        PutIndex(bytes, f, plan.walks[f.index].dim[f.axis]);
        break;
      case ArgField::Kind::kStride:
        PutIndex(bytes, f, plan.walks[f.index].stride[f.axis]);
        break;
    }
  }
  return words;
}

}  // namespace weft::gpu
