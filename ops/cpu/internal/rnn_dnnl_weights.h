// The oneDNN RNN's primitives and weights (ops/cpu/rnn_dnnl.cc runs them): one primitive per
// layer and propagation, cached (dnnl_util.h's CachedPrimitive); PyTorch's parameter blocks copied
// gate by gate into oneDNN's plain ldgoi and reordered into the layout the primitive chose, and
// the weight gradients back; and, for inference, the converted weights kept while the parameters
// do not change. rnn_dnnl.cc's file comment says what oneDNN wants and why.
//
//   const DnnlPrimitive prim = LayerPrimitive(c, l, Prop::kTraining);
//   const LayerWeights w = ConvertWeights(c, l, prim, params, scratch);
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ops/cpu/internal/dnnl_util.h"
#include "ops/cpu/internal/rnn_cpu.h"

namespace weft::cpu::rnn_dnnl {

using Md = dnnl::memory::desc;
using Tag = dnnl::memory::format_tag;

enum class Prop : uint8_t { kInference, kTraining, kBackward };

// The memory descriptors of one layer: data (T, N, C) tnc, states (1, D, N, H) ldnc, weights in
// the layout the primitive picks, bias (1, D, G (+1 for lbr_gru), H).
struct LayerDescs {
  Md src_layer, iter, weights_layer, weights_iter, bias, dst_layer;
};

LayerDescs DescsOf(const RnnCall& c, int layer);

// The cached primitive of one layer.
DnnlPrimitive LayerPrimitive(const RnnCall& c, int layer, Prop prop);
Md WeightsMd(const DnnlPrimitive& p, bool iter);
Md DiffWeightsMd(const DnnlPrimitive& p, bool iter);

// `data` as memory of descriptor `md` (read only where the primitive only reads it).
dnnl::memory Memory(const Md& md, const float* data);

// oneDNN's plain layout of a layer's weight_ih (iter: weight_hh), which PyTorch's rows are per
// gate.
Md Ldgoi(const RnnCall& c, int layer, bool iter);
// Copies gate blocks between PyTorch's vector `w` and oneDNN's plain `plain`, both directions of
// one layer: into `plain` when `to_plain`, else into `w`.
void CopyGates(const RnnCall& c, const RnnParamLayout& layout, int layer, bool iter, bool to_plain,
               float* w, float* plain);
// The gradients of both PyTorch biases from oneDNN's: a summed bias's gradient is each part's.
void FromBias(const RnnCall& c, const RnnParamLayout& layout, int layer, const float* dbias,
              float* dw);

// A layer's weights as a primitive takes them.
struct LayerWeights {
  dnnl::memory layer, iter, bias;
};

// Where a layer's weights are converted: plain (ldgoi) staging, the primitive's layout, the bias.
struct WeightScratch {
  float *plain_layer, *plain_iter, *chosen_layer, *chosen_iter, *bias;
};

// Layer `layer`'s weights from the parameter vector `w`, converted in `s` as `prim` wants them.
LayerWeights ConvertWeights(const RnnCall& c, int layer, const DnnlPrimitive& prim, const float* w,
                            const WeightScratch& s);
// The bytes of each part of a WeightScratch, the largest over the layers' primitives.
std::vector<size_t> WeightScratchBytes(const RnnCall& c, const std::vector<DnnlPrimitive>& prims);

// One layer's converted weights and the parameters (its blocks of the vector) they came from.
struct KeptWeights {
  std::vector<float> params, plain_layer, plain_iter, chosen_layer, chosen_iter, bias;
  LayerWeights weights;
};

// Layer `layer`'s converted weights for an inference primitive: kept per (primitive, parameter
// buffer) while the parameters equal the copy kept with them, least recently used dropped first.
// Thread-safe; an entry is immutable and lives while a caller holds it.
std::shared_ptr<const KeptWeights> KeptWeightsFor(const RnnCall& c, int layer,
                                                  const DnnlPrimitive& prim, const float* w);

}  // namespace weft::cpu::rnn_dnnl
