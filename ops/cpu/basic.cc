// Small utility ops: zeros_like and ones_like (arrays of the input's shape filled with 0 or 1; the
// gradient pass uses zeros_like for outputs that receive no gradient), _copy, and stop_gradient.
#include "ops/internal/cpu_util.h"
#include "ops/op.h"

namespace weft::cpu {
namespace {

template <int kValue>
void FillCompute(const OpContext&, const Attrs&, std::span<const TensorView>, std::span<const OpReq> req,
                 std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull || (req[0] == OpReq::kAddTo && kValue == 0)) return;
  WEFT_DTYPE_SWITCH(out[0].dtype(), T, "fill", {
    T* y = out[0].data<T>();
    ParallelFor(out[0].size(), 1 << 14, [&](int64_t b, int64_t e) {
      StoreRange(y, req[0], b, e, [](int64_t) { return static_cast<T>(kValue); });
    });
  });
}

std::vector<Shape> SameShape(const Attrs&, const std::vector<Shape>& in) { return {in[0]}; }

const bool registered = [] {
  WEFT_REGISTER_OP(zeros_like)
      .Describe("zeros of the input's shape and dtype (the input is read for its shape only)")
      .Inputs({"data"})
      .InferShape(SameShape)
      .Compute(DeviceType::kCpu, FillCompute<0>)
      .Gradient([](const Attrs&, GradBuilder& g) {});
  WEFT_REGISTER_OP(ones_like)
      .Describe("ones of the input's shape and dtype (the input is read for its shape only)")
      .Inputs({"data"})
      .InferShape(SameShape)
      .Compute(DeviceType::kCpu, FillCompute<1>)
      .Gradient([](const Attrs&, GradBuilder& g) {});
  return true;
}();

}  // namespace
}  // namespace weft::cpu

namespace weft::cpu {
namespace {

void CopyCompute(const OpContext&, const Attrs&, std::span<const TensorView> in, std::span<const OpReq> req,
                 std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  WEFT_DTYPE_SWITCH(out[0].dtype(), T, "_copy", {
    const T* x = in[0].data<T>();
    T* y = out[0].data<T>();
    if (req[0] != OpReq::kAddTo && x == y) return;  // in place
    ParallelFor(out[0].size(), 1 << 14, [&](int64_t b, int64_t e) {
      StoreRange(y, req[0], b, e, [x](int64_t i) { return x[i]; });
    });
  });
}

const bool copy_registered = [] {
  WEFT_REGISTER_OP(_copy)
      .Describe("the input, copied (the gradient pass uses it where one entry must fill two outputs)")
      .Inputs({"data"})
      .InferShape([](const Attrs&, const std::vector<Shape>& in) { return std::vector<Shape>{in[0]}; })
      .Inplace({{0, 0}})
      .Pointwise(PointwiseKind::kUnary, "weft::fn::Identity")
      .Compute(DeviceType::kCpu, CopyCompute)
      .Gradient([](const Attrs&, GradBuilder& g) { g.SetInputGrad(0, g.OutGrad(0)); });
  WEFT_REGISTER_OP(stop_gradient)
      .Describe("the input, through which no gradient flows (to output predictions beside a loss)")
      .Inputs({"data"})
      .InferShape([](const Attrs&, const std::vector<Shape>& in) { return std::vector<Shape>{in[0]}; })
      .Inplace({{0, 0}})
      .Compute(DeviceType::kCpu, CopyCompute)
      .Gradient([](const Attrs&, GradBuilder&) {});
  return true;
}();

}  // namespace
}  // namespace weft::cpu
