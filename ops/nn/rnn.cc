// RNN and _backward_RNN: LSTM, GRU and plain recurrent networks. What they compute, their inputs
// and outputs, the parameter layout and the reserve are in ops/nn/rnn_params.h. Compute:
// ops/cpu/rnn.cc (oneDNN, and loops for float64 and sequence lengths); a GPU compute registers
// its own, with the size of its reserve (DeviceImpl::output_shapes).
#include <span>

#include "core/error.h"
#include "ops/nn/rnn_params.h"
#include "ops/op.h"

namespace weft {
namespace {

RnnParam ParseRnn(AttrReader& r) {
  RnnParam p{};
  p.mode = r.Choice<RnnMode>("mode",
                             {{"lstm", RnnMode::kLstm},
                              {"gru", RnnMode::kGru},
                              {"rnn_tanh", RnnMode::kRnnTanh},
                              {"rnn_relu", RnnMode::kRnnRelu}},
                             std::nullopt);
  p.state_size = r.Int("state_size", std::nullopt, 1);
  p.num_layers = r.Int("num_layers", 1, 1);
  p.bidirectional = r.Bool("bidirectional", false);
  p.p = r.Float("p", 0.0);
  if (!(p.p >= 0 && p.p < 1))
    WEFT_THROW("op 'RNN': attribute 'p': expected a probability in [0, 1), found " << p.p);
  p.state_outputs = r.Bool("state_outputs", false);
  p.use_sequence_length = r.Bool("use_sequence_length", false);
  return p;
}

// Checks a state input (L*D, N, H).
void CheckState(const RnnDims& d, const Shape& found, const char* what) {
  if (found == d.State()) return;
  WEFT_THROW("RNN: " << what << " must be " << d.State()
                     << " (num_layers * directions, batch, state_size) for data (" << d.t << ", "
                     << d.n << ", " << d.i << "), found " << found);
}

// Checks RNN's inputs `in` (as RnnSlots places them); returns the call's extents.
RnnDims CheckRnn(const RnnParam& p, std::span<const Shape> in) {
  const Shape& data = in[RnnSlots::kData];
  if (data.ndim() != 3 || data.Size() == 0) {
    WEFT_THROW("RNN: data must be (T, N, I), sequence-major, with no empty axis, found " << data);
  }
  const RnnDims d = RnnDimsOf(p, data);
  const RnnParamLayout layout(p, d.i);
  if (in[RnnSlots::kParams] != Shape{layout.size()}) {
    WEFT_THROW("RNN: parameters must be (" << layout.size() << ",), found " << in[RnnSlots::kParams]
                                           << ": " << layout.Describe());
  }
  const RnnSlots s = RnnSlotsOf(p);
  CheckState(d, in[RnnSlots::kState], "state");
  if (s.state_cell >= 0) CheckState(d, in[s.state_cell], "state_cell");
  if (s.lengths >= 0 && in[s.lengths] != Shape{d.n}) {
    WEFT_THROW("RNN: sequence_length must be (" << d.n << ",), one length per sequence, found "
                                                << in[s.lengths]);
  }
  return d;
}

// The device-neutral output shapes; the reserve's size is each device's (rnn_params.h).
std::vector<Shape> RnnShape(const Attrs& a, const std::vector<Shape>& in) {
  const RnnParam& p = a.Get<RnnParam>();
  const RnnDims d = CheckRnn(p, in);
  const RnnSlots s = RnnSlotsOf(p);
  std::vector<Shape> out(s.num_outputs, d.State());
  out[RnnSlots::kOut] = d.Output();
  out[s.reserve] = Shape{0};
  return out;
}

std::vector<Shape> RnnBackwardShape(const Attrs& a, const std::vector<Shape>& in) {
  const RnnParam& p = a.Get<RnnParam>();
  const RnnSlots s = RnnSlotsOf(p);
  const std::span<const Shape> forward(in.data() + s.BackwardInput(0), s.num_inputs);
  const RnnDims d = CheckRnn(p, forward);
  if (in[RnnSlots::kBackwardReserve].ndim() != 1) {
    WEFT_THROW("_backward_RNN: reserve must be the forward's (bytes,), found "
               << in[RnnSlots::kBackwardReserve]);
  }
  for (const int o : {RnnSlots::kBackwardOut, s.BackwardOutGrad(RnnSlots::kOut)}) {
    if (in[o] != d.Output())
      WEFT_THROW("_backward_RNN: out and its gradient must be " << d.Output() << ", found "
                                                                << in[o]);
  }
  for (const int o : {s.state_out, s.state_cell_out}) {
    if (o >= 0) CheckState(d, in[s.BackwardOutGrad(o)], "the gradient of a state output");
  }
  return std::vector<Shape>(forward.begin(), forward.begin() + s.BackwardNumOutputs());
}

// parameters (P,) from data and the attributes; the states (L*D, N, H) and the lengths (N,).
void RnnInputShapes(const Attrs& a, std::vector<std::optional<Shape>>& in) {
  const RnnParam& p = a.Get<RnnParam>();
  if (!in[RnnSlots::kData] || in[RnnSlots::kData]->ndim() != 3) return;
  const RnnDims d = RnnDimsOf(p, *in[RnnSlots::kData]);
  const RnnSlots s = RnnSlotsOf(p);
  if (!in[RnnSlots::kParams]) in[RnnSlots::kParams] = Shape{RnnParamLayout(p, d.i).size()};
  if (!in[RnnSlots::kState]) in[RnnSlots::kState] = d.State();
  if (s.state_cell >= 0 && !in[s.state_cell]) in[s.state_cell] = d.State();
  if (s.lengths >= 0 && !in[s.lengths]) in[s.lengths] = Shape{d.n};
}

// Checks the dtypes of RNN's inputs (as RnnSlots places them); returns data's.
DType CheckRnnTypes(const RnnParam& p, std::span<const DType> in) {
  const DType t = in[RnnSlots::kData];
  if (!IsFloatingPoint(t)) WEFT_THROW("RNN: data must be a floating-point array, found " << t);
  const RnnSlots s = RnnSlotsOf(p);
  const char* names[] = {"data", "parameters", "state", "state_cell"};
  for (int i = RnnSlots::kParams; i < s.num_inputs; ++i) {
    if (i == s.lengths) {
      const DType l = in[i];
      if (l != t && l != DType::kInt32 && l != DType::kInt64) {
        WEFT_THROW("RNN: sequence_length must be " << t << " (data's dtype), int32 or int64, found "
                                                   << l);
      }
    } else if (in[i] != t) {
      WEFT_THROW("RNN: " << names[i] << " must be " << t << " like data, found " << in[i]);
    }
  }
  return t;
}

std::vector<DType> RnnTypes(const Attrs& a, const std::vector<DType>& in) {
  const RnnParam& p = a.Get<RnnParam>();
  const RnnSlots s = RnnSlotsOf(p);
  std::vector<DType> out(s.num_outputs, CheckRnnTypes(p, in));
  out[s.reserve] = DType::kUInt8;
  return out;
}

std::vector<DType> RnnBackwardTypes(const Attrs& a, const std::vector<DType>& in) {
  const RnnParam& p = a.Get<RnnParam>();
  const RnnSlots s = RnnSlotsOf(p);
  const DType t =
      CheckRnnTypes(p, std::span<const DType>(in.data() + s.BackwardInput(0), s.num_inputs));
  if (in[RnnSlots::kBackwardReserve] != DType::kUInt8) {
    WEFT_THROW("_backward_RNN: reserve must be uint8, found " << in[RnnSlots::kBackwardReserve]);
  }
  return std::vector<DType>(s.BackwardNumOutputs(), t);
}

// The dropout draws of a training call: one number per element of every layer's input after the
// first (the previous layer's out, (T, N, D*H)); none outside training or without dropout.
uint64_t RnnDraws(const Attrs& a, std::span<const TensorView> in, bool train) {
  const RnnParam& p = a.Get<RnnParam>();
  if (!train || p.p == 0 || p.num_layers == 1) return 0;
  const RnnDims d = RnnDimsOf(p, in[RnnSlots::kData].shape());
  return static_cast<uint64_t>((d.layers - 1) * d.t * d.n * d.dirs * d.h);
}

void RnnGradient(const Attrs& a, GradBuilder& g) {
  const RnnSlots s = RnnSlotsOf(a.Get<RnnParam>());
  std::vector<GradEntry> in = {g.Output(s.reserve), g.Output(RnnSlots::kOut)};
  for (int o = 0; o < s.reserve; ++o) in.push_back(g.OutGrad(o));
  for (int i = 0; i < s.num_inputs; ++i) in.push_back(g.Input(i));
  const GradEntry d = g.Op("_backward_RNN", std::move(in), a.raw(), s.BackwardNumOutputs());
  for (int i = 0; i < s.BackwardNumOutputs(); ++i) g.SetInputGrad(i, g.NodeOutput(d, i));
}

const bool defined = [] {
  const CountFn inputs = [](const Attrs& a) { return RnnSlotsOf(a.Get<RnnParam>()).num_inputs; };
  const auto names = [](const Attrs& a) {
    const RnnSlots s = RnnSlotsOf(a.Get<RnnParam>());
    std::vector<std::string> n = {"data", "parameters", "state"};
    if (s.state_cell >= 0) n.push_back("state_cell");
    if (s.lengths >= 0) n.push_back("sequence_length");
    return n;
  };
  WEFT_REGISTER_OP(RNN)
      .Describe(
          "LSTM, GRU or plain RNN (mode) over sequence-major data (T, N, I), num_layers layers, "
          "optionally "
          "bidirectional, with one flat parameter vector in PyTorch's layout; outputs (T, N, D*H) "
          "and, with "
          "state_outputs, the final states")
      .Params(ParseRnn)
      .Inputs(std::function<std::vector<std::string>(const Attrs&)>(names))
      .VariadicInputs(inputs)
      .Outputs([](const Attrs& a) { return RnnSlotsOf(a.Get<RnnParam>()).num_outputs; })
      .VisibleOutputs([](const Attrs& a) { return RnnSlotsOf(a.Get<RnnParam>()).reserve; })
      .InferShape(RnnShape)
      .InferInputShapes(RnnInputShapes)
      .InferType(RnnTypes)
      .Random(RnnDraws)
      .HostInputs(
          [](const Attrs& a) {  // the lengths: cuDNN's data descriptors take them on the host
            const RnnSlots s = RnnSlotsOf(a.Get<RnnParam>());
            return s.lengths < 0 ? std::vector<int>{} : std::vector<int>{s.lengths};
          })
      .Gradient(RnnGradient);
  WEFT_REGISTER_OP(_backward_RNN)
      .Describe(
          "gradient of RNN: takes (reserve, out, the visible outputs' gradients, RNN's inputs)")
      .Params(ParseRnn)
      .VariadicInputs(
          [](const Attrs& a) { return RnnSlotsOf(a.Get<RnnParam>()).BackwardNumInputs(); })
      .Outputs([](const Attrs& a) { return RnnSlotsOf(a.Get<RnnParam>()).BackwardNumOutputs(); })
      .InferShape(RnnBackwardShape)
      .InferType(RnnBackwardTypes)
      .HostInputs([](const Attrs& a) {
        const RnnSlots s = RnnSlotsOf(a.Get<RnnParam>());
        return s.lengths < 0 ? std::vector<int>{} : std::vector<int>{s.BackwardInput(s.lengths)};
      })
      .MutateInputs({RnnSlots::kBackwardReserve});
  return true;
}();

}  // namespace
}  // namespace weft
