// The RNN on oneDNN's RNN primitives (ops/cpu/internal/rnn_cpu.h says when): one primitive per
// layer, with both directions in it (bidirectional_concat), as oneDNN wants every layer of one
// primitive to take inputs as wide as its outputs. lstm runs lstm_forward/backward, gru lbr_gru
// (the reset gate after the recurrent product, PyTorch's GRU), rnn_tanh and rnn_relu vanilla_rnn.
//
// Weights: oneDNN wants per layer (1, D, I_l, G, H) with gates u, r, o for the GRU (PyTorch's
// z, r, n with the first two swapped) and one bias per gate (PyTorch's two summed; lbr_gru keeps
// n's two apart: z, r, b_in, b_hn). The canonical blocks are copied gate by gate into oneDNN's
// plain ldgoi (which PyTorch's (G*H, I) rows already are) and reordered into the layout the
// primitive chose. A forward that keeps nothing for a backward (inference) keeps the reordered
// weights instead, per parameter buffer and shape, with a copy of the parameters they came from:
// the next such call on equal parameters reuses them. (Training changes the parameters every
// step, so a training forward reorders every time.) The backward's weight gradients come back the
// same way, in reverse; oneDNN computes them with the data gradients in one primitive (no way to
// leave them out), so with d_parameters not requested they are computed into scratch and dropped.
//
// The reserve's body: per layer its workspace, then the activations the backward reads (the
// input of every layer after the first, its dropout mask, every layer's output but the last, and
// every layer's final states), laid out by DnnlLayout.
#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

#include "core/error.h"
#include "ops/cpu/internal/cpu_util.h"
#include "ops/cpu/internal/dnnl_util.h"
#include "ops/cpu/internal/rnn_cpu.h"
#include "ops/cpu/internal/rnn_dnnl_weights.h"

namespace weft::cpu {
namespace {

using rnn_dnnl::ConvertWeights;
using rnn_dnnl::CopyGates;
using rnn_dnnl::DescsOf;
using rnn_dnnl::DiffWeightsMd;
using rnn_dnnl::FromBias;
using rnn_dnnl::KeptWeights;
using rnn_dnnl::KeptWeightsFor;
using rnn_dnnl::LayerDescs;
using rnn_dnnl::LayerPrimitive;
using rnn_dnnl::LayerWeights;
using rnn_dnnl::Ldgoi;
using rnn_dnnl::Md;
using rnn_dnnl::Memory;
using rnn_dnnl::Prop;
using rnn_dnnl::WeightScratch;
using rnn_dnnl::WeightScratchBytes;
using rnn_dnnl::WeightsMd;

// ---- the reserve's body (or, without a backward, scratch of the same layout) ----

size_t Aligned(size_t bytes) { return (bytes + 63) / 64 * 64; }

// Byte offsets of every buffer; workspaces only `with_workspace`. A layer's input after dropout
// is its own buffer with dropout, else the previous layer's output itself.
struct DnnlLayout {
  std::vector<size_t> workspace, input, mask, output, hy, cy;  // per layer
  size_t size = 0;

  DnnlLayout(const RnnCall& c, bool with_workspace) {
    const RnnDims& d = c.d;
    const size_t y = Aligned(c.OutputSize() * sizeof(float)),
                 state = Aligned(d.dirs * d.n * d.h * sizeof(float));
    const bool drop = c.p.p > 0;
    for (int l = 0; l < d.layers; ++l) {
      workspace.push_back(with_workspace
                              ? Take(Aligned(WorkspaceBytes(LayerPrimitive(c, l, Prop::kTraining))))
                              : 0);
      output.push_back(l + 1 < d.layers ? Take(y) : 0);
      input.push_back(l == 0 ? 0 : drop ? Take(y) : output[l - 1]);
      mask.push_back(l > 0 && drop ? Take(y) : 0);
      hy.push_back(Take(state));
      cy.push_back(c.p.mode == RnnMode::kLstm ? Take(state) : 0);
    }
  }
  size_t Take(size_t bytes) {
    const size_t at = size;
    size += bytes;
    return at;
  }
};

float* At(void* base, size_t offset) {
  return reinterpret_cast<float*>(static_cast<char*>(base) + offset);
}

// ---- forward ----

// What one layer's primitive reads and writes (null: absent).
struct LayerTensors {
  const float *src, *h0, *c0;
  float *dst, *hy, *cy;
};

DnnlArgs ForwardArgs(const RnnCall& c, int layer, const LayerWeights& w, const LayerTensors& t) {
  const LayerDescs m = DescsOf(c, layer);
  DnnlArgs args = {{DNNL_ARG_SRC_LAYER, Memory(m.src_layer, t.src)},
                   {DNNL_ARG_SRC_ITER, Memory(m.iter, t.h0)},
                   {DNNL_ARG_WEIGHTS_LAYER, w.layer},
                   {DNNL_ARG_WEIGHTS_ITER, w.iter},
                   {DNNL_ARG_BIAS, w.bias},
                   {DNNL_ARG_DST_LAYER, Memory(m.dst_layer, t.dst)},
                   {DNNL_ARG_DST_ITER, Memory(m.iter, t.hy)}};
  if (c.p.mode == RnnMode::kLstm) {
    args.emplace(DNNL_ARG_SRC_ITER_C, Memory(m.iter, t.c0));
    args.emplace(DNNL_ARG_DST_ITER_C, Memory(m.iter, t.cy));
  }
  return args;
}

// Scratch of the forward, in the order of StagedOutputs' extras.
enum ForwardScratch { kBody, kPad, kPlainLayer, kPlainIter, kChosenLayer, kChosenIter, kBias };

// Layer l's tensors: its input (data, or the previous layer's output through dropout), its output
// (`out` for the last layer), its initial and final states.
LayerTensors ForwardTensors(const RnnCall& c, int l, const DnnlLayout& layout, void* body,
                            bool drop, std::span<const TensorView> in, float* out) {
  const float* c0 =
      c.s.state_cell >= 0 ? in[c.s.state_cell].data<float>() + c.StateBlock(l, 0) : nullptr;
  const float* src = l == 0 ? in[RnnSlots::kData].data<float>()
                            : At(body, drop ? layout.input[l] : layout.output[l - 1]);
  return {src,
          in[RnnSlots::kState].data<float>() + c.StateBlock(l, 0),
          c0,
          l + 1 == c.d.layers ? out : At(body, layout.output[l]),
          At(body, layout.hy[l]),
          c0 ? At(body, layout.cy[l]) : nullptr};
}

// Copies every layer's final states from the body into the state outputs that are requested.
void CopyFinalStates(const RnnCall& c, const DnnlLayout& layout, void* body,
                     const StagedOutputs& staged) {
  const int64_t block = c.d.dirs * c.d.n * c.d.h;
  for (const auto& [output, offsets] :
       {std::pair{c.s.state_out, &layout.hy}, std::pair{c.s.state_cell_out, &layout.cy}}) {
    if (output < 0 || !staged.Needed(output)) continue;
    for (int l = 0; l < c.d.layers; ++l) {
      const float* from = At(body, (*offsets)[l]);
      std::copy(from, from + block, staged.Target(output).data<float>() + c.StateBlock(l, 0));
    }
  }
}

// ---- backward ----

// Scratch of the backward, in the order of StagedOutputs' extras.
enum BackwardScratch {
  kBwdPad,
  kBwdPlainLayer,
  kBwdPlainIter,
  kBwdChosenLayer,
  kBwdChosenIter,
  kBwdBias,  // as WeightScratch
  kDiffLayer,
  kDiffIter,
  kDiffBias,
  kDiffPlainLayer,
  kDiffPlainIter,
  kDyA,
  kDyB,
  kZeros,
  kNumBackwardScratch
};

// The bytes of every backward scratch, the largest over the layers' primitives.
std::vector<size_t> BackwardScratchBytes(const RnnCall& c,
                                         const std::vector<DnnlPrimitive>& prims) {
  std::vector<size_t> bytes(kNumBackwardScratch, 0);
  const std::vector<size_t> w = WeightScratchBytes(c, prims);
  std::copy(w.begin(), w.end(), bytes.begin() + kBwdPlainLayer);
  for (int l = 0; l < c.d.layers; ++l) {
    const size_t sizes[] = {ScratchpadBytes(prims[l]), DiffWeightsMd(prims[l], false).get_size(),
                            DiffWeightsMd(prims[l], true).get_size(), Ldgoi(c, l, false).get_size(),
                            Ldgoi(c, l, true).get_size()};
    const BackwardScratch at[] = {kBwdPad, kDiffLayer, kDiffIter, kDiffPlainLayer, kDiffPlainIter};
    for (int k = 0; k < 5; ++k) bytes[at[k]] = std::max(bytes[at[k]], sizes[k]);
  }
  bytes[kDiffBias] = bytes[kBwdBias];
  bytes[kDyA] = bytes[kDyB] = c.OutputSize() * sizeof(float);
  bytes[kZeros] = c.d.dirs * c.d.n * c.d.h * sizeof(float);
  return bytes;
}

// What one layer's backward reads and writes, beyond the forward's tensors (null: absent).
struct LayerGrads {
  const float *dy, *dhy, *dcy;
  float *dx, *dh0, *dc0;
};

DnnlArgs BackwardArgs(const RnnCall& c, int layer, const DnnlPrimitive& prim, const LayerWeights& w,
                      const LayerTensors& t, const LayerGrads& g, void* workspace,
                      const StagedOutputs& staged) {
  const LayerDescs m = DescsOf(c, layer);
  auto scratch = [&](BackwardScratch k) { return static_cast<float*>(staged.Extra(k)); };
  DnnlArgs args = ForwardArgs(c, layer, w, t);
  args.emplace(DNNL_ARG_WORKSPACE,
               Memory(prim.desc.workspace_desc(), static_cast<float*>(workspace)));
  args.emplace(DNNL_ARG_DIFF_SRC_LAYER, Memory(m.src_layer, g.dx));
  args.emplace(DNNL_ARG_DIFF_SRC_ITER, Memory(m.iter, g.dh0));
  args.emplace(DNNL_ARG_DIFF_WEIGHTS_LAYER,
               Memory(DiffWeightsMd(prim, false), scratch(kDiffLayer)));
  args.emplace(DNNL_ARG_DIFF_WEIGHTS_ITER, Memory(DiffWeightsMd(prim, true), scratch(kDiffIter)));
  args.emplace(DNNL_ARG_DIFF_BIAS, Memory(m.bias, scratch(kDiffBias)));
  args.emplace(DNNL_ARG_DIFF_DST_LAYER, Memory(m.dst_layer, g.dy));
  args.emplace(DNNL_ARG_DIFF_DST_ITER, Memory(m.iter, g.dhy ? g.dhy : scratch(kZeros)));
  if (c.p.mode == RnnMode::kLstm) {
    args.emplace(DNNL_ARG_DIFF_SRC_ITER_C, Memory(m.iter, g.dc0));
    args.emplace(DNNL_ARG_DIFF_DST_ITER_C, Memory(m.iter, g.dcy ? g.dcy : scratch(kZeros)));
  }
  return args;
}

// oneDNN's weight gradients of one layer into PyTorch's places in dw (P,).
void WeightGradsToCanonical(const RnnCall& c, int layer, const DnnlPrimitive& prim,
                            const StagedOutputs& staged, float* dw) {
  const RnnParamLayout layout(c.p, c.d.i);
  auto scratch = [&](BackwardScratch k) { return static_cast<float*>(staged.Extra(k)); };
  for (const bool iter : {false, true}) {
    float* plain = scratch(iter ? kDiffPlainIter : kDiffPlainLayer);
    Reorder(Memory(DiffWeightsMd(prim, iter), scratch(iter ? kDiffIter : kDiffLayer)),
            Memory(Ldgoi(c, layer, iter), plain));
    CopyGates(c, layout, layer, iter, false, dw, plain);
  }
  FromBias(c, layout, layer, scratch(kDiffBias), dw);
}

// The gradient of layer l's final states (from the state outputs' gradients), or null for zero.
const float* StateGrad(const RnnCall& c, std::span<const TensorView> in, int output, int layer) {
  return output < 0 ? nullptr
                    : in[c.s.BackwardOutGrad(output)].data<float>() + c.StateBlock(layer, 0);
}

// What every layer's backward shares: the call, the reserve and its layout, _backward_RNN's
// inputs, the backward scratch's bytes (BackwardScratchBytes) and the staged outputs.
struct BackwardCall {
  const RnnCall& c;
  const DnnlLayout& layout;
  void* reserve;
  std::span<const TensorView> in;
  const std::vector<size_t>& bytes;
  const StagedOutputs& staged;
};

// Layer l's backward: from dy, the gradient of its output, to dx, that of its input, the
// gradients of its initial states and (when requested) of its weights.
void BackwardLayer(const BackwardCall& b, int l, const DnnlPrimitive& prim, const float* dy,
                   float* dx) {
  const RnnCall& c = b.c;
  const DnnlLayout& layout = b.layout;
  void* reserve = b.reserve;
  const std::span<const TensorView> in = b.in;
  const StagedOutputs& staged = b.staged;
  auto scratch = [&](BackwardScratch k) { return static_cast<float*>(staged.Extra(k)); };
  const std::span<const TensorView> fwd = in.subspan(c.s.BackwardInput(0), c.s.num_inputs);
  float* y = const_cast<float*>(in[RnnSlots::kBackwardOut].data<float>());  // read only
  const LayerTensors t = ForwardTensors(c, l, layout, reserve, c.p.p > 0, fwd, y);
  float* dc0 = c.s.state_cell >= 0
                   ? staged.Target(c.s.state_cell).data<float>() + c.StateBlock(l, 0)
                   : nullptr;
  const LayerGrads g{dy,
                     StateGrad(c, in, c.s.state_out, l),
                     StateGrad(c, in, c.s.state_cell_out, l),
                     dx,
                     staged.Target(RnnSlots::kState).data<float>() + c.StateBlock(l, 0),
                     dc0};
  const LayerWeights w =
      ConvertWeights(c, l, prim, fwd[RnnSlots::kParams].data<float>(),
                     {scratch(kBwdPlainLayer), scratch(kBwdPlainIter), scratch(kBwdChosenLayer),
                      scratch(kBwdChosenIter), scratch(kBwdBias)});
  for (const BackwardScratch k : {kDiffLayer, kDiffIter, kDiffBias})
    std::fill_n(scratch(k), b.bytes[k] / sizeof(float), 0.0f);
  ExecutePrimitive(prim,
                   BackwardArgs(c, l, prim, w, t, g, At(reserve, layout.workspace[l]), staged),
                   staged.Extra(kBwdPad));
  if (staged.Needed(RnnSlots::kParams)) {
    WeightGradsToCanonical(c, l, prim, staged, staged.Target(RnnSlots::kParams).data<float>());
  }
}

}  // namespace

void RnnForwardDnnl(const OpContext& ctx, const RnnCall& c, std::span<const TensorView> in,
                    std::span<const OpReq> req, std::span<const TensorView> out, void* reserve,
                    RandomKey dropout) {
  const bool train = reserve != nullptr, drop = ctx.is_train && c.p.p > 0;
  std::vector<DnnlPrimitive> prims;
  size_t pad = 0;
  for (int l = 0; l < c.d.layers; ++l) {
    prims.push_back(LayerPrimitive(c, l, train ? Prop::kTraining : Prop::kInference));
    pad = std::max(pad, ScratchpadBytes(prims.back()));
  }
  const DnnlLayout layout(c, train);
  const std::vector<size_t> w = train ? WeightScratchBytes(c, prims) : std::vector<size_t>(5, 0);
  StagedOutputs staged(ctx, req, out, false,
                       {train ? 0 : layout.size, pad, w[0], w[1], w[2], w[3], w[4]});
  void* body = train ? reserve : staged.Extra(kBody);
  auto scratch = [&](ForwardScratch k) { return static_cast<float*>(staged.Extra(k)); };
  const WeightScratch convert{scratch(kPlainLayer), scratch(kPlainIter), scratch(kChosenLayer),
                              scratch(kChosenIter), scratch(kBias)};
  const float* params = in[RnnSlots::kParams].data<float>();
  for (int l = 0; l < c.d.layers; ++l) {
    const LayerTensors t =
        ForwardTensors(c, l, layout, body, drop, in, staged.Target(RnnSlots::kOut).data<float>());
    // Training converts the weights into scratch; inference keeps them (while the parameters hold).
    const std::shared_ptr<const KeptWeights> kept =
        train ? nullptr : KeptWeightsFor(c, l, prims[l], params);
    DnnlArgs args = ForwardArgs(
        c, l, kept ? kept->weights : ConvertWeights(c, l, prims[l], params, convert), t);
    if (train)
      args.emplace(DNNL_ARG_WORKSPACE,
                   Memory(prims[l].desc.workspace_desc(), At(body, layout.workspace[l])));
    ExecutePrimitive(prims[l], std::move(args), staged.Extra(kPad));
    if (drop && l + 1 < c.d.layers) {
      RnnDropout(dropout, l * c.OutputSize(), c.OutputSize(), c.p.p, t.dst,
                 At(body, layout.input[l + 1]), At(body, layout.mask[l + 1]));
    }
  }
  CopyFinalStates(c, layout, body, staged);
  staged.Finish();
}

void RnnBackwardDnnl(const OpContext& ctx, const RnnCall& c, std::span<const TensorView> in,
                     std::span<const OpReq> req, std::span<const TensorView> out, void* reserve) {
  std::vector<DnnlPrimitive> prims;
  for (int l = 0; l < c.d.layers; ++l) prims.push_back(LayerPrimitive(c, l, Prop::kBackward));
  const std::vector<size_t> bytes = BackwardScratchBytes(c, prims);
  StagedOutputs staged(ctx, req, out, false, bytes);
  float* zeros = static_cast<float*>(staged.Extra(kZeros));
  std::fill_n(zeros, bytes[kZeros] / sizeof(float), 0.0f);
  const DnnlLayout layout(c, true);
  const float* dy = in[c.s.BackwardOutGrad(RnnSlots::kOut)].data<float>();
  for (int l = c.d.layers - 1; l >= 0; --l) {
    float* dx = l == 0 ? staged.Target(RnnSlots::kData).data<float>()
                       : static_cast<float*>(staged.Extra((c.d.layers - 1 - l) % 2 ? kDyB : kDyA));
    BackwardLayer({c, layout, reserve, in, bytes, staged}, l, prims[l], dy, dx);
    if (l == 0) break;
    if (c.p.p > 0) {  // dropout's gradient: through the forward's mask
      const float* mask = At(reserve, layout.mask[l]);
      for (int64_t k = 0; k < c.OutputSize(); ++k) dx[k] *= mask[k];
    }
    dy = dx;
  }
  staged.Finish();
}

size_t DnnlReserveBytes(const RnnParam& p, const RnnDims& d) {
  RnnCall c{p, d, RnnSlotsOf(p), {}};
  return DnnlLayout(c, true).size;
}

}  // namespace weft::cpu
