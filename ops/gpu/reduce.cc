// GPU compute of the reductions of ops/tensor/reduce.cc (sum, mean, max over `axis`, keepdims) and
// of their backward ops, on float32, float64 and bfloat16 (accumulated in float), with the CPU's
// semantics: the sum of an empty axis is 0 and its mean NaN, max is NaN where a value is, and
// max's gradient goes to the first maximum in row-major order of the reduced axes. Kernels in
// kernels/reduce.cuh. Each output is reduced by one group of threads, or, where the outputs are
// too few to fill the GPU (a whole-array sum), by slices of its range combined in a fixed order:
// deterministically either way.
#include "ops/gpu/internal/reduce.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ops/gpu/internal/axes.h"
#include "ops/gpu/internal/gpu_call.h"
#include "ops/gpu/internal/launch.h"
#include "ops/op.h"
#include "ops/tensor/reduce_impls.h"
#include "ops/tensor/tensor_params.h"

namespace weft::gpu {
namespace {

// The input x as outer positions x reduced positions x inner positions (kernels/reduce.cuh):
// `outer` and `reduced` walk x's kept and reduced axes (array 0: x's strides); `inner` is the
// product of the kept axes after the last reduced one (contiguous in x and in the output).
struct Layout {
  GpuAxes outer, reduced;
  int64_t inner = 1, n_out = 1, n_reduced = 1;
};

Layout MakeLayout(const Shape& in, const std::vector<bool>& reduced) {
  const auto strides = RowMajorStrides(in);
  int last_reduced = -1;
  for (int a = 0; a < in.ndim(); ++a) last_reduced = reduced[a] && in[a] != 1 ? a : last_reduced;
  Layout l;
  std::vector<WalkAxis> outer, red;
  for (int a = 0; a < in.ndim(); ++a) {
    const WalkAxis axis{in[a], {strides[a], 0, 0}};
    if (reduced[a]) {
      red.push_back(axis), l.n_reduced *= in[a];
    } else {
      l.n_out *= in[a];
      if (a > last_reduced) {
        l.inner *= in[a];
      } else {
        outer.push_back(axis);
      }
    }
  }
  l.outer = MergeAxes(outer);
  l.reduced = MergeAxes(red);
  return l;
}

// kernels/reduce.cuh's ReduceSlices, field for field.
struct ReduceSlices {
  int64_t count, chunk;
  void* partials;
};

// A launch of `units` blocks (a block per output or per tile of outputs) under this leaves most of
// the GPU idle when each has many positions to reduce; such forward reductions cut their reduced
// range into slices of at least `min_slice` positions (8 a thread: 2048 for a block on one output,
// 256 for a column tile's 8 rows of threads, 64 for a packed tile's, whose threads read a pack a
// row), up to kMaxSlices, for about kTargetBlocks blocks in all. (GPT-2's bias gradients, 8192
// rows of 768 to 3072 columns, were 116 us each in 4 slices.)
constexpr int64_t kFewUnits = 128, kTargetBlocks = 512, kMaxSlices = 256;
constexpr int64_t kMinSlicePerOutput = 2048, kMinSliceColumns = 256, kMinSlicePacked = 64;

// The cut for `units` blocks over n_reduced positions each; count 1 (no cut) where `whole`.
ReduceSlices SlicesFor(bool whole, int64_t units, int64_t n_reduced, int64_t min_slice) {
  if (whole || units >= kFewUnits || n_reduced < 2 * min_slice) return {1, n_reduced, nullptr};
  const int64_t wanted =
      std::min({(kTargetBlocks + units - 1) / units, n_reduced / min_slice, kMaxSlices});
  const int64_t chunk = (n_reduced + wanted - 1) / wanted;
  return {(n_reduced + chunk - 1) / chunk, chunk, nullptr};
}

// The kernel a reduction runs (kernels/reduce.cuh) and its cut.
struct ReducePlan {
  enum Kernel { kPacked, kColumns, kPerGroup } kernel;
  int64_t units;  // blocks per slice
  int group;      // kPerGroup: threads per output
  ReduceSlices slices;
};

// SumColumnsPacked where a sum or mean (not a gradient) has one reduced axis, every kept axis after
// it, and rows of whole 16-byte packs from an aligned x (bias gradients, per-block partial sums);
// else ReduceColumns where 32 neighbouring outputs share their reads and are too few to give each
// a thread; else groups of 1, 32 or 256 threads per output as the reduced extent grows. Sliced
// (SlicesFor) where that alone would leave the GPU idle (a gradient never is). `aligned`: x
// starts on 16 bytes.
ReducePlan PlanReduce(ReduceKind kind, bool grad, const Layout& l, DType dtype, bool aligned) {
  const int64_t pack = 16 / static_cast<int64_t>(DTypeSize(dtype));
  if (kind != ReduceKind::kMax && !grad && aligned && l.inner == l.n_out && l.reduced.ndim == 1 &&
      l.n_reduced >= 16 && l.inner % pack == 0 && l.reduced.stride[0][0] % pack == 0) {
    const int64_t tiles = (l.inner + 32 * pack - 1) / (32 * pack);
    return {ReducePlan::kPacked, tiles, 1, SlicesFor(false, tiles, l.n_reduced, kMinSlicePacked)};
  }
  if (l.inner >= 32 && l.n_reduced >= 16 && l.n_out < (1 << 16)) {
    const int64_t tiles = l.n_out / std::max<int64_t>(l.inner, 1) * ((l.inner + 31) / 32);
    return {ReducePlan::kColumns, tiles, 1, SlicesFor(grad, tiles, l.n_reduced, kMinSliceColumns)};
  }
  const ReduceSlices slices = SlicesFor(grad, l.n_out, l.n_reduced, kMinSlicePerOutput);
  // Threads per output, from the positions a block takes for one output (a cut's chunk is at least
  // kMinSlicePerOutput, so a sliced per-output launch always has a block per output).
  const int group = l.inner >= 32 ? 1 : slices.chunk >= 1024 ? 256 : slices.chunk >= 32 ? 32 : 1;
  return {ReducePlan::kPerGroup, (l.n_out + kGpuBlock / group - 1) / (kGpuBlock / group), group,
          slices};
}

// Partial accumulators: {value, position} at most, 16 bytes.
size_t PartialBytes(const Layout& l, const ReduceSlices& slices) {
  return slices.count > 1 ? static_cast<size_t>(l.n_out * slices.count * 16) : 0;
}

// Runs PlanReduce's kernel, the partials of a cut in `scratch` (PartialBytes of them) or, when
// that is null, in the call's workspace. grad: max's gradient (x, dy), else the forward (x).
void LaunchReduce(const OpContext& ctx, ReduceKind kind, bool grad, const std::string& t,
                  const Layout& l, const TensorView& x, const TensorView* dy, OpReq req,
                  const TensorView& out, void* scratch = nullptr) {
  const bool aligned = reinterpret_cast<uintptr_t>(x.raw()) % 16 == 0;
  ReducePlan plan = PlanReduce(kind, grad, l, x.dtype(), aligned);
  ReduceSlices& slices = plan.slices;
  if (slices.count > 1) {
    slices.partials =
        scratch != nullptr ? scratch : GpuCall(ctx).Workspace({PartialBytes(l, slices)})[0];
  }
  const void* xp = x.raw();
  const void* dyp = dy == nullptr ? nullptr : dy->raw();
  void* outp = out.raw();
  GpuAxes outer = l.outer, reduced = l.reduced;
  int64_t inner = l.inner, n_out = l.n_out, n_reduced = l.n_reduced;
  double scale = kind == ReduceKind::kMean ? 1.0 / static_cast<double>(l.n_reduced) : 1.0;
  int req_code = ReqCode(req);
  const std::string acc = kind == ReduceKind::kMax ? "weft::MaxAcc" : "weft::SumAcc",
                    g = grad ? "true" : "false";
  const int64_t blocks = plan.units * slices.count;
  if (plan.kernel == ReducePlan::kPacked) {
    int64_t stride = l.reduced.stride[0][0];
    void* args[] = {&xp, &outp, &n_out, &n_reduced, &stride, &slices, &scale, &req_code};
    LaunchArgs(ctx, "reduce.cuh", Instance("weft::SumColumnsPacked", {t}), blocks, true, args);
  } else {
    void* args[] = {&xp,    &dyp,       &outp,   &outer, &reduced, &inner,
                    &n_out, &n_reduced, &slices, &scale, &req_code};
    const std::string kernel =
        plan.kernel == ReducePlan::kColumns
            ? Instance("weft::ReduceColumns", {acc, t, g})
            : Instance("weft::ReducePerGroup", {acc, t, std::to_string(plan.group), g});
    LaunchArgs(ctx, "reduce.cuh", kernel, blocks, true, args);
  }
  if (slices.count > 1) {
    Launch(ctx, "reduce.cuh", Instance("weft::ReduceSlicesFinish", {acc, t}), l.n_out, slices, outp,
           n_out, scale, req_code);
  }
}

// x as rows x cols summed over its rows.
Layout RowsLayout(const Shape& x) { return MakeLayout(x, {true, false}); }

}  // namespace

size_t SumRowsScratchBytes(const Shape& x, DType dtype) {
  const Layout l = RowsLayout(x);
  return PartialBytes(l, PlanReduce(ReduceKind::kSum, false, l, dtype, /*aligned=*/true).slices);
}

void SumRowsGpu(const OpContext& ctx, const TensorView& x, OpReq req, const TensorView& out,
                void* scratch) {
  if (req == OpReq::kNull) return;
  const std::string t = KernelType("sum", kElementwiseTypes, {&x, 1}, {&out, 1});
  const Layout l = RowsLayout(x.shape());
  if (l.n_out > 0) LaunchReduce(ctx, ReduceKind::kSum, false, t, l, x, nullptr, req, out, scratch);
}

namespace {

// in: (data); out: data reduced over the axes.
void ReduceCompute(const std::string& op, ReduceKind kind, const OpContext& ctx, const Attrs& a,
                   std::span<const TensorView> in, std::span<const OpReq> req,
                   std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  const std::string t = KernelType(op, kElementwiseTypes, in, out);
  const Layout l = MakeLayout(in[0].shape(), ReducedAxes(op, a.Get<ReduceParam>(), in[0].shape()));
  if (l.n_out > 0) LaunchReduce(ctx, kind, false, t, l, in[0], nullptr, req[0], out[0]);
}

// dx = scale * dy broadcast: a walk over dx's axes (array 0) with dy's strides (array 1: the
// output's row-major strides along kept axes, 0 along reduced ones).
void SumBackward(const OpContext& ctx, const std::string& t, double scale,
                 const std::vector<bool>& reduced, const TensorView& dy, OpReq req,
                 const TensorView& dx) {
  const Shape& shape = dx.shape();
  const auto strides = RowMajorStrides(shape);
  std::vector<WalkAxis> axes(shape.ndim());
  int64_t dy_stride = 1;
  for (int a = shape.ndim() - 1; a >= 0; --a) {
    axes[a] = {shape[a], {strides[a], reduced[a] ? 0 : dy_stride, 0}};
    dy_stride *= reduced[a] ? 1 : shape[a];
  }
  const int64_t n = dx.size();
  Launch(ctx, "reduce.cuh", Instance("weft::ReduceSumBackward", {t}), n, dy.raw(), dx.raw(),
         MergeAxes(axes), n, scale, ReqCode(req));
}

// in: (out_grad, data); out: d data, data's shape.
void ReduceBackwardCompute(const std::string& op, ReduceKind kind, const OpContext& ctx,
                           const Attrs& a, std::span<const TensorView> in,
                           std::span<const OpReq> req, std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  const std::string backward = "_backward_" + op;
  const std::string t = KernelType(backward, kElementwiseTypes, in, out);
  const std::vector<bool> reduced = ReducedAxes(backward, a.Get<ReduceParam>(), in[1].shape());
  const Layout l = MakeLayout(in[1].shape(), reduced);
  if (kind == ReduceKind::kMax) {
    if (l.n_out > 0) LaunchReduce(ctx, kind, true, t, l, in[1], &in[0], req[0], out[0]);
    return;
  }
  const double scale = kind == ReduceKind::kMean ? 1.0 / static_cast<double>(l.n_reduced) : 1.0;
  SumBackward(ctx, t, scale, reduced, in[0], req[0], out[0]);
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kGpu, ReduceImpls(ReduceCompute, ReduceBackwardCompute));

}  // namespace
}  // namespace weft::gpu
