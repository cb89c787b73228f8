#include "ops/cpu/internal/rnn_dnnl_weights.h"

#include <algorithm>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/mutex.h"
#include "core/no_destructor.h"
#include "ops/cpu/internal/cpu_util.h"

namespace weft::cpu::rnn_dnnl {

dnnl::memory Memory(const Md& md, const float* data) {
  return dnnl::memory(md, DnnlEngine(), const_cast<float*>(data));
}

// ---- primitives ----

LayerDescs DescsOf(const RnnCall& c, int layer) {
  const RnnDims& d = c.d;
  const auto f32 = dnnl::memory::data_type::f32;
  const int64_t in = d.LayerInput(layer),
                bias_gates = d.gates + (c.p.mode == RnnMode::kGru ? 1 : 0);
  return {Md({d.t, d.n, in}, f32, Tag::tnc),
          Md({1, d.dirs, d.n, d.h}, f32, Tag::ldnc),
          Md({1, d.dirs, in, d.gates, d.h}, f32, Tag::any),
          Md({1, d.dirs, d.h, d.gates, d.h}, f32, Tag::any),
          Md({1, d.dirs, bias_gates, d.h}, f32, Tag::ldgo),
          Md({d.t, d.n, d.dirs * d.h}, f32, Tag::tnc)};
}

namespace {

dnnl::rnn_direction DirectionOf(const RnnCall& c) {
  return c.d.dirs == 2 ? dnnl::rnn_direction::bidirectional_concat
                       : dnnl::rnn_direction::unidirectional_left2right;
}

dnnl::algorithm Activation(const RnnCall& c) {
  return c.p.mode == RnnMode::kRnnRelu ? dnnl::algorithm::eltwise_relu
                                       : dnnl::algorithm::eltwise_tanh;
}

std::string LayerKey(const RnnCall& c, int layer, Prop prop) {
  return PrimitiveKey("RNN", RnnModeName(c.p.mode), static_cast<int>(prop), c.d.t, c.d.n,
                      c.d.LayerInput(layer), c.d.h, c.d.dirs);
}

// The forward primitive descriptor of one layer, for inference or training.
template <typename Fwd>
typename Fwd::primitive_desc ForwardDesc(const RnnCall& c, int layer, bool train) {
  const LayerDescs m = DescsOf(c, layer);
  const auto prop = train ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
  if constexpr (std::is_same_v<Fwd, dnnl::lstm_forward>) {
    return {{prop, DirectionOf(c), m.src_layer, m.iter, m.iter, m.weights_layer, m.weights_iter,
             m.bias, m.dst_layer, m.iter, m.iter},
            ScratchpadAttr(),
            DnnlEngine()};
  } else if constexpr (std::is_same_v<Fwd, dnnl::lbr_gru_forward>) {
    return {{prop, DirectionOf(c), m.src_layer, m.iter, m.weights_layer, m.weights_iter, m.bias,
             m.dst_layer, m.iter},
            ScratchpadAttr(),
            DnnlEngine()};
  } else {
    return {{prop, Activation(c), DirectionOf(c), m.src_layer, m.iter, m.weights_layer,
             m.weights_iter, m.bias, m.dst_layer, m.iter},
            ScratchpadAttr(),
            DnnlEngine()};
  }
}

// The backward primitive descriptor of one layer; diff weights in the layout it picks.
template <typename Fwd, typename Bwd>
typename Bwd::primitive_desc BackwardDesc(const RnnCall& c, int layer) {
  const LayerDescs m = DescsOf(c, layer);
  const auto bwd = dnnl::prop_kind::backward;
  const auto hint = ForwardDesc<Fwd>(c, layer, true);
  if constexpr (std::is_same_v<Bwd, dnnl::lstm_backward>) {
    return {{bwd,         DirectionOf(c),  m.src_layer,     m.iter,
             m.iter,      m.weights_layer, m.weights_iter,  m.bias,
             m.dst_layer, m.iter,          m.iter,          m.src_layer,
             m.iter,      m.iter,          m.weights_layer, m.weights_iter,
             m.bias,      m.dst_layer,     m.iter,          m.iter},
            ScratchpadAttr(),
            DnnlEngine(),
            hint};
  } else if constexpr (std::is_same_v<Bwd, dnnl::lbr_gru_backward>) {
    return {{bwd, DirectionOf(c), m.src_layer, m.iter, m.weights_layer, m.weights_iter, m.bias,
             m.dst_layer, m.iter, m.src_layer, m.iter, m.weights_layer, m.weights_iter, m.bias,
             m.dst_layer, m.iter},
            ScratchpadAttr(),
            DnnlEngine(),
            hint};
  } else {
    return {{bwd, Activation(c), DirectionOf(c), m.src_layer, m.iter, m.weights_layer,
             m.weights_iter, m.bias, m.dst_layer, m.iter, m.src_layer, m.iter, m.weights_layer,
             m.weights_iter, m.bias, m.dst_layer, m.iter},
            ScratchpadAttr(),
            DnnlEngine(),
            hint};
  }
}

template <typename Fwd, typename Bwd>
DnnlPrimitive MakeLayerPrimitive(const RnnCall& c, int layer, Prop prop) {
  if (prop == Prop::kBackward) return MakePrimitive<Bwd>(BackwardDesc<Fwd, Bwd>(c, layer));
  return MakePrimitive<Fwd>(ForwardDesc<Fwd>(c, layer, prop == Prop::kTraining));
}

}  // namespace

DnnlPrimitive LayerPrimitive(const RnnCall& c, int layer, Prop prop) {
  return CachedPrimitive(LayerKey(c, layer, prop), [&] {
    switch (c.p.mode) {
      case RnnMode::kLstm:
        return MakeLayerPrimitive<dnnl::lstm_forward, dnnl::lstm_backward>(c, layer, prop);
      case RnnMode::kGru:
        return MakeLayerPrimitive<dnnl::lbr_gru_forward, dnnl::lbr_gru_backward>(c, layer, prop);
      default:
        return MakeLayerPrimitive<dnnl::vanilla_rnn_forward, dnnl::vanilla_rnn_backward>(c, layer,
                                                                                         prop);
    }
  });
}

Md WeightsMd(const DnnlPrimitive& p, bool iter) {
  return p.desc.query_md(dnnl::query::weights_md, iter ? 1 : 0);
}
Md DiffWeightsMd(const DnnlPrimitive& p, bool iter) {
  return p.desc.query_md(dnnl::query::diff_weights_md, iter ? 1 : 0);
}

// ---- weights: PyTorch's blocks <-> oneDNN's ----

namespace {

// PyTorch's gate for oneDNN's gate g (gru: oneDNN's u, r, o are PyTorch's z, r, n).
int CanonicalGate(RnnMode mode, int g) { return mode == RnnMode::kGru && g < 2 ? 1 - g : g; }

int64_t Cols(const RnnCall& c, int layer, bool iter) {
  return iter ? c.d.h : c.d.LayerInput(layer);
}

}  // namespace

Md Ldgoi(const RnnCall& c, int layer, bool iter) {
  return Md({1, c.d.dirs, Cols(c, layer, iter), c.d.gates, c.d.h}, dnnl::memory::data_type::f32,
            Tag::ldgoi);
}

// Copies gate blocks between PyTorch's vector `w` and oneDNN's plain `plain`, both directions of
// one layer: into `plain` when `to_plain`, else into `w`.
void CopyGates(const RnnCall& c, const RnnParamLayout& layout, int layer, bool iter, bool to_plain,
               float* w, float* plain) {
  const int64_t block = c.d.h * Cols(c, layer, iter);
  for (int dir = 0; dir < c.d.dirs; ++dir) {
    const RnnBlock& b = layout.Block(layer, dir);
    float* canonical = w + (iter ? b.weight_hh : b.weight_ih);
    for (int g = 0; g < c.d.gates; ++g) {
      float* mine = plain + (dir * c.d.gates + g) * block;
      float* theirs = canonical + CanonicalGate(c.p.mode, g) * block;
      std::memcpy(to_plain ? mine : theirs, to_plain ? theirs : mine, block * sizeof(float));
    }
  }
}

namespace {

// The bias (1, D, G (+1), H) of one layer from PyTorch's two: their sum per gate, but lbr_gru's n,
// whose b_in and b_hn stay apart (gates 2 and 3).
void ToBias(const RnnCall& c, const RnnParamLayout& layout, int layer, const float* w,
            float* bias) {
  const int64_t h = c.d.h;
  const bool gru = c.p.mode == RnnMode::kGru;
  const int gates = c.d.gates + (gru ? 1 : 0);
  for (int dir = 0; dir < c.d.dirs; ++dir) {
    const RnnBlock& b = layout.Block(layer, dir);
    float* to = bias + dir * gates * h;
    for (int g = 0; g < c.d.gates; ++g) {
      const int64_t from = CanonicalGate(c.p.mode, g) * h;
      for (int64_t j = 0; j < h; ++j)
        to[g * h + j] = w[b.bias_ih + from + j] + (gru && g == 2 ? 0 : w[b.bias_hh + from + j]);
    }
    if (gru) std::copy(w + b.bias_hh + 2 * h, w + b.bias_hh + 3 * h, to + 3 * h);
  }
}

}  // namespace

void FromBias(const RnnCall& c, const RnnParamLayout& layout, int layer, const float* dbias,
              float* dw) {
  const int64_t h = c.d.h;
  const bool gru = c.p.mode == RnnMode::kGru;
  const int gates = c.d.gates + (gru ? 1 : 0);
  for (int dir = 0; dir < c.d.dirs; ++dir) {
    const RnnBlock& b = layout.Block(layer, dir);
    const float* from = dbias + dir * gates * h;
    for (int g = 0; g < c.d.gates; ++g) {
      const int64_t to = CanonicalGate(c.p.mode, g) * h;
      std::copy(from + g * h, from + (g + 1) * h, dw + b.bias_ih + to);
      if (!(gru && g == 2)) std::copy(from + g * h, from + (g + 1) * h, dw + b.bias_hh + to);
    }
    if (gru) std::copy(from + 3 * h, from + 4 * h, dw + b.bias_hh + 2 * h);
  }
}

namespace {

// `plain` as the primitive wants it: itself when the layouts agree, else reordered into `chosen`.
dnnl::memory AsWanted(const Md& plain_md, float* plain, const Md& want, float* chosen) {
  dnnl::memory from = Memory(plain_md, plain);
  if (want == plain_md) return from;
  dnnl::memory to = Memory(want, chosen);
  Reorder(from, to);
  return to;
}

}  // namespace

LayerWeights ConvertWeights(const RnnCall& c, int layer, const DnnlPrimitive& prim, const float* w,
                            const WeightScratch& s) {
  const RnnParamLayout layout(c.p, c.d.i);
  float* params = const_cast<float*>(w);  // read only: CopyGates copies into `plain`
  CopyGates(c, layout, layer, false, true, params, s.plain_layer);
  CopyGates(c, layout, layer, true, true, params, s.plain_iter);
  ToBias(c, layout, layer, w, s.bias);
  return {AsWanted(Ldgoi(c, layer, false), s.plain_layer, WeightsMd(prim, false), s.chosen_layer),
          AsWanted(Ldgoi(c, layer, true), s.plain_iter, WeightsMd(prim, true), s.chosen_iter),
          Memory(DescsOf(c, layer).bias, s.bias)};
}

namespace {

// The bytes of each part of a WeightScratch for one layer's primitive.
std::vector<size_t> LayerWeightBytes(const RnnCall& c, int layer, const DnnlPrimitive& prim) {
  return {Ldgoi(c, layer, false).get_size(), Ldgoi(c, layer, true).get_size(),
          WeightsMd(prim, false).get_size(), WeightsMd(prim, true).get_size(),
          DescsOf(c, layer).bias.get_size()};
}

}  // namespace

std::vector<size_t> WeightScratchBytes(const RnnCall& c, const std::vector<DnnlPrimitive>& prims) {
  std::vector<size_t> bytes(5, 0);
  for (int l = 0; l < c.d.layers; ++l) {
    const std::vector<size_t> sizes = LayerWeightBytes(c, l, prims[l]);
    for (int k = 0; k < 5; ++k) bytes[k] = std::max(bytes[k], sizes[k]);
  }
  return bytes;
}

// ---- inference: the converted weights, kept while the parameters do not change ----

namespace {

// The weights kept per (primitive, parameter buffer), least recently used dropped first. mu_
// guards lru_; an entry is immutable once made and lives while a caller holds it.
class WeightCache {
 public:
  std::shared_ptr<const KeptWeights> Get(const RnnCall& c, int layer, const DnnlPrimitive& prim,
                                         const float* w) {
    const RnnParamLayout layout(c.p, c.d.i);
    const float* first = w + layout.Block(layer, 0).weight_ih;
    const float* last = w + layout.Block(layer, c.d.dirs - 1).bias_hh + c.d.Rows();
    const std::string key =
        LayerKey(c, layer, Prop::kInference) + std::to_string(reinterpret_cast<uintptr_t>(w));
    {
      MutexLock lock(&mu_);
      for (auto it = lru_.begin(); it != lru_.end(); ++it) {
        if (it->first != key) continue;
        const auto& kept = it->second->params;
        if (std::equal(first, last, kept.begin(), kept.end())) return it->second;
        lru_.erase(it);
        break;
      }
    }
    std::shared_ptr<const KeptWeights> made = Make(c, layer, prim, w, first, last);
    MutexLock lock(&mu_);
    lru_.emplace_front(key, made);
    if (lru_.size() > kCapacity) lru_.pop_back();
    return made;
  }

 private:
  static std::shared_ptr<const KeptWeights> Make(const RnnCall& c, int layer,
                                                 const DnnlPrimitive& prim, const float* w,
                                                 const float* first, const float* last) {
    auto kept = std::make_shared<KeptWeights>();
    kept->params.assign(first, last);
    const std::vector<size_t> bytes = LayerWeightBytes(c, layer, prim);
    std::vector<float>* parts[] = {&kept->plain_layer, &kept->plain_iter, &kept->chosen_layer,
                                   &kept->chosen_iter, &kept->bias};
    for (int k = 0; k < 5; ++k) parts[k]->resize(bytes[k] / sizeof(float) + 1);
    kept->weights =
        ConvertWeights(c, layer, prim, w,
                       {kept->plain_layer.data(), kept->plain_iter.data(),
                        kept->chosen_layer.data(), kept->chosen_iter.data(), kept->bias.data()});
    return kept;
  }

  static constexpr size_t kCapacity = 16;
  Mutex mu_;
  // Most recently used first.
  std::list<std::pair<std::string, std::shared_ptr<const KeptWeights>>> lru_ WEFT_GUARDED_BY(mu_);
};

}  // namespace

std::shared_ptr<const KeptWeights> KeptWeightsFor(const RnnCall& c, int layer,
                                                  const DnnlPrimitive& prim, const float* w) {
  static NoDestructor<WeightCache> cache;  // used by ops that run during the engine's shutdown
  return cache->Get(c, layer, prim, w);
}

}  // namespace weft::cpu::rnn_dnnl
