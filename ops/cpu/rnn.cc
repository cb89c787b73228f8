// CPU compute of RNN and _backward_RNN (ops/nn/rnn_params.h says what they compute): checks the
// lengths and the reserve, and runs oneDNN's primitives (float32 without lengths) or the loops
// (float64, or lengths); see ops/cpu/internal/rnn_cpu.h. Also the size of the CPU's reserve.
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "ops/cpu/internal/cpu_util.h"
#include "ops/cpu/internal/rnn_cpu.h"
#include "ops/op.h"

namespace weft::cpu {

namespace {

// Each length, checked: an integer in [1, T] once a fractional part is dropped.
template <typename L>
std::vector<int64_t> ReadLengths(const L* values, const RnnDims& d) {
  std::vector<int64_t> lengths(d.n);
  for (int64_t n = 0; n < d.n; ++n) {
    const double v = static_cast<double>(values[n]);
    if (!(v >= 1 && v < static_cast<double>(d.t) + 1)) {
      WEFT_THROW("RNN: sequence_length[" << n << "] is " << v << ", expected a length in [1, "
                                         << d.t << "] (data's T)");
    }
    lengths[n] = static_cast<int64_t>(v);
  }
  return lengths;
}

}  // namespace

RnnCall RnnCallOf(const Attrs& attrs, std::span<const TensorView> in) {
  const RnnParam& p = attrs.Get<RnnParam>();
  RnnCall c{p, RnnDimsOf(p, in[RnnSlots::kData].shape()), RnnSlotsOf(p), {}};
  if (c.s.lengths < 0) return c;
  const TensorView& l = in[c.s.lengths];
  WEFT_DTYPE_SWITCH(l.dtype(), L, "RNN sequence_length",
                    { c.lengths = ReadLengths(l.data<L>(), c.d); });
  return c;
}

namespace {

// The oneDNN path computes the call, or the loops.
bool UsesDnnl(const RnnCall& c, DType dtype) {
  WEFT_CHECK(dtype == DType::kFloat32 || dtype == DType::kFloat64)
      << "RNN on the CPU: expected float32 or float64, found " << dtype;
  return dtype == DType::kFloat32 && !c.p.use_sequence_length;
}

// The reserve's size on the CPU: the header, and the oneDNN path's buffers where it would run.
void CpuReserveShape(const Attrs& a, const std::vector<Shape>& in, std::vector<Shape>& out) {
  const RnnParam& p = a.Get<RnnParam>();
  const RnnDims d = RnnDimsOf(p, in[RnnSlots::kData]);
  const size_t body = p.use_sequence_length ? 0 : DnnlReserveBytes(p, d);
  out[RnnSlotsOf(p).reserve] = Shape{static_cast<int64_t>(kRnnReserveHeaderBytes + body)};
}

RnnReserveHeader* HeaderOf(const TensorView& reserve) {
  WEFT_CHECK(reserve.bytes() >= kRnnReserveHeaderBytes)
      << "RNN: the reserve holds " << reserve.bytes() << " bytes, expected at least "
      << kRnnReserveHeaderBytes << " (were its shapes inferred without the device?)";
  return static_cast<RnnReserveHeader*>(reserve.raw());
}

// in: (data, parameters, state[, state_cell][, sequence_length]); out: the visible outputs, then
// the reserve.
void RnnForward(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                std::span<const OpReq> req, std::span<const TensorView> out) {
  const RnnCall c = RnnCallOf(a, in);
  const int reserve = c.s.reserve;
  const bool keep = ctx.is_train && req[reserve] != OpReq::kNull;
  RnnReserveHeader* header = req[reserve] == OpReq::kNull ? nullptr : HeaderOf(out[reserve]);
  if (header) *header = {kRnnReserveMagic, 0, ctx.random};
  const auto visible_req = req.first(reserve);
  const auto visible = out.first(reserve);
  if (UsesDnnl(c, in[RnnSlots::kData].dtype())) {
    const size_t need = kRnnReserveHeaderBytes + (keep ? DnnlReserveBytes(c.p, c.d) : 0);
    if (keep) {
      WEFT_CHECK(out[reserve].bytes() >= need)
          << "RNN: the reserve holds " << out[reserve].bytes() << " bytes, expected " << need;
    }
    char* body = keep ? static_cast<char*>(out[reserve].raw()) + kRnnReserveHeaderBytes : nullptr;
    RnnForwardDnnl(ctx, c, in, visible_req, visible, body, ctx.random);
  } else {
    RnnForwardLoops(ctx, c, in, visible_req, visible, ctx.random);
  }
  if (header && keep) header->trained = 1;
}

// in: _backward_RNN's inputs (rnn_params.h); out: the gradients of data, parameters, the states.
void RnnBackward(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                 std::span<const OpReq> req, std::span<const TensorView> out) {
  const RnnSlots s = RnnSlotsOf(a.Get<RnnParam>());
  const RnnCall c = RnnCallOf(a, in.subspan(s.BackwardInput(0), s.num_inputs));
  const TensorView& reserve = in[RnnSlots::kBackwardReserve];
  const RnnReserveHeader header = *HeaderOf(reserve);
  if (header.magic != kRnnReserveMagic || header.trained != 1) {
    WEFT_THROW(
        "_backward_RNN: the reserve was not written by a training forward (RNN with is_train = "
        "true, whose "
        "reserve output is requested) before this backward");
  }
  if (UsesDnnl(c, in[s.BackwardInput(RnnSlots::kData)].dtype())) {
    RnnBackwardDnnl(ctx, c, in, req, out,
                    static_cast<char*>(reserve.raw()) + kRnnReserveHeaderBytes);
  } else {
    RnnBackwardLoops(ctx, c, in, req, out, header.dropout);
  }
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu,
                           {
                               {"RNN", {.compute = RnnForward, .output_shapes = CpuReserveShape}},
                               {"_backward_RNN", {.compute = RnnBackward}},
                           });

}  // namespace
}  // namespace weft::cpu
