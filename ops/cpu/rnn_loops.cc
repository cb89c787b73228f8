// The RNN's loops over the steps (ops/cpu/internal/rnn_cpu.h says when they run): every layer and
// direction, one step after another, as the formulas of ops/nn/rnn_params.h say, with the steps
// past a sequence's length masked. float32 multiplies through oneDNN's sgemm, float64 through the
// loops below. The backward runs the forward again to get every step's gates and states.
#include "ops/cpu/internal/rnn_loops.h"

#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "ops/cpu/internal/cpu_util.h"
#include "ops/cpu/internal/rnn_cpu.h"
#include "ops/math/unary.h"

namespace weft::cpu {
namespace rnn_loops {

void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  ConfigureOpenMPForThisThread();
  const dnnl_status_t status =
      dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
  WEFT_CHECK(status == dnnl_success) << "RNN: oneDNN's sgemm failed (status " << status << ")";
}

void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  ParallelFor(m, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p) {
          sum += (ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
        }
        c[i * ldc + j] = beta == 0 ? sum : beta * c[i * ldc + j] + sum;
      }
    }
  });
}

namespace {

// The gates' sigmoid: the sigmoid op's own math (ops/math/unary.h).
template <typename T>
T Sigmoid(T x) {
  return fn::Sigmoid::Fwd(x, T(0));
}

// ---- forward ----

// What one sequence's cell writes at one step, (H) each: h', and c' (lstm) and U_n h + a_n (gru),
// null in the other modes.
template <typename T>
struct CellOut {
  T *h, *c, *hn;
};

// One sequence's cell at one step: `g` holds W x + b_ih on entry, the gates after their
// nonlinearity on return; gh = U h + b_hh.
template <typename T>
void CellForward(RnnMode mode, int64_t h, T* g, const T* gh, const T* h_prev, const T* c_prev,
                 const CellOut<T>& out) {
  const auto [h_out, c_out, hn_out] = out;
  for (int64_t j = 0; j < h; ++j) {
    switch (mode) {
      case RnnMode::kLstm: {
        const T i = Sigmoid(g[j] + gh[j]), f = Sigmoid(g[h + j] + gh[h + j]);
        const T gg = std::tanh(g[2 * h + j] + gh[2 * h + j]),
                o = Sigmoid(g[3 * h + j] + gh[3 * h + j]);
        g[j] = i, g[h + j] = f, g[2 * h + j] = gg, g[3 * h + j] = o;
        c_out[j] = f * c_prev[j] + i * gg;
        h_out[j] = o * std::tanh(c_out[j]);
        break;
      }
      case RnnMode::kGru: {
        const T r = Sigmoid(g[j] + gh[j]), z = Sigmoid(g[h + j] + gh[h + j]);
        const T n = std::tanh(g[2 * h + j] + r * gh[2 * h + j]);
        g[j] = r, g[h + j] = z, g[2 * h + j] = n;
        hn_out[j] = gh[2 * h + j];
        h_out[j] = (1 - z) * n + z * h_prev[j];
        break;
      }
      case RnnMode::kRnnTanh:
        h_out[j] = std::tanh(g[j] + gh[j]);
        break;
      case RnnMode::kRnnRelu:
        h_out[j] = std::max(T(0), g[j] + gh[j]);
        break;
    }
  }
}

// Runs one direction of one layer: fills its saved steps and its half of y (T, N, D*H), zero at
// masked steps. `gh`: scratch (N, G*H).
template <typename T>
void ForwardDirection(const Direction<T>& v, T* y, T* gh) {
  const RnnDims& d = v.c.d;
  const int64_t rows = d.Rows(), nh = d.n * d.h;
  T* pre = v.gates ? v.gates : v.hidden;  // W x + b_ih of every step; plain RNNs compute h in place
  Gemm(false, true, d.t * d.n, rows, v.in, v.x, v.in, v.w_ih, v.in, T(0), pre, rows);
  for (int64_t r = 0; r < d.t * d.n; ++r)
    for (int64_t j = 0; j < rows; ++j) pre[r * rows + j] += v.b_ih[j];
  for (int64_t s = 0; s < d.t; ++s) {
    const int64_t t = v.Step(s);
    const T *hp = v.PrevHidden(s), *cp = v.PrevCell(s);
    for (int64_t n = 0; n < d.n; ++n) std::copy(v.b_hh, v.b_hh + rows, gh + n * rows);
    Gemm(false, true, d.n, rows, d.h, hp, d.h, v.w_hh, d.h, T(1), gh, rows);
    for (int64_t n = 0; n < d.n; ++n) {
      const int64_t at = t * nh + n * d.h;
      T* h_out = v.hidden + at;
      T* c_out = Direction<T>::At(v.cell, at);
      T* y_out = y + (t * d.n + n) * d.dirs * d.h + v.dir * d.h;
      if (t >= v.c.Length(n)) {  // masked: carry the state, output zero
        std::copy(hp + n * d.h, hp + (n + 1) * d.h, h_out);
        if (c_out) std::copy(cp + n * d.h, cp + (n + 1) * d.h, c_out);
        std::fill(y_out, y_out + d.h, T(0));
        continue;
      }
      CellForward(v.c.p.mode, d.h, pre + (t * d.n + n) * rows, gh + n * rows, hp + n * d.h,
                  cp ? cp + n * d.h : nullptr,
                  CellOut<T>{h_out, c_out, Direction<T>::At(v.hn, at)});
      std::copy(h_out, h_out + d.h, y_out);
    }
  }
}

}  // namespace

template <typename T>
Direction<T> DirectionOf(const RnnCall& c, const LoopsLayout& layout, int l, int dir,
                         const LayersInput<T>& in, T* saved) {
  const RnnParamLayout params(c.p, c.d.i);
  const T *w = in.w, *c0 = in.c0;
  const RnnBlock& b = params.Block(l, dir);
  const Saved& s = layout.At(l, dir);
  return {c,
          l,
          dir,
          b,
          w + b.weight_ih,
          w + b.weight_hh,
          w + b.bias_ih,
          w + b.bias_hh,
          l == 0 ? in.data : saved + layout.Input(l),
          b.input,
          in.h0 + c.StateBlock(l, dir),
          c0 ? c0 + c.StateBlock(l, dir) : nullptr,
          c.p.mode == RnnMode::kLstm || c.p.mode == RnnMode::kGru ? saved + s.gates : nullptr,
          c.p.mode == RnnMode::kGru ? saved + s.hn : nullptr,
          c.p.mode == RnnMode::kLstm ? saved + s.cell : nullptr,
          saved + s.hidden};
}

// Every layer, in training (dropout between layers) or not.
template <typename T>
void ForwardLayers(const RnnCall& c, const LayersInput<T>& in, bool train, RandomKey key,
                   const LayersOutput<T>& o) {
  const LoopsLayout layout(c);
  const RnnDims& d = c.d;
  const bool drop = train && c.p.p > 0;
  for (int l = 0; l < d.layers; ++l) {
    T* y = l == d.layers - 1 ? o.out : o.y_scratch;
    for (int dir = 0; dir < d.dirs; ++dir) {
      const Direction<T> v = DirectionOf(c, layout, l, dir, in, o.saved);
      ForwardDirection(v, y, o.gh);
      const T* last = v.hidden + v.Step(d.t - 1) * d.n * d.h;  // masked steps carried it there
      if (o.hy) std::copy(last, last + d.n * d.h, o.hy + c.StateBlock(l, dir));
      if (o.cy && v.cell) {
        const T* last_cell = v.cell + (last - v.hidden);
        std::copy(last_cell, last_cell + d.n * d.h, o.cy + c.StateBlock(l, dir));
      }
    }
    if (l == d.layers - 1) break;
    T* next = o.saved + layout.Input(l + 1);
    if (drop) {
      RnnDropout(key, l * c.OutputSize(), c.OutputSize(), c.p.p, y, next,
                 o.saved + layout.Mask(l + 1));
    } else {
      std::copy(y, y + c.OutputSize(), next);
    }
  }
}

template Direction<float> DirectionOf(const RnnCall&, const LoopsLayout&, int, int,
                                      const LayersInput<float>&, float*);
template Direction<double> DirectionOf(const RnnCall&, const LoopsLayout&, int, int,
                                       const LayersInput<double>&, double*);
template void ForwardLayers(const RnnCall&, const LayersInput<float>&, bool, RandomKey,
                            const LayersOutput<float>&);
template void ForwardLayers(const RnnCall&, const LayersInput<double>&, bool, RandomKey,
                            const LayersOutput<double>&);

namespace {

template <typename T>
void ForwardLoops(const OpContext& ctx, const RnnCall& c, std::span<const TensorView> in,
                  std::span<const OpReq> req, std::span<const TensorView> out, bool train,
                  RandomKey key) {
  const RnnDims& d = c.d;
  const LoopsLayout layout(c);
  StagedOutputs staged(
      ctx, req, out, false,
      {layout.size() * sizeof(T), c.OutputSize() * sizeof(T), d.n * d.Rows() * sizeof(T)});
  const int sc = c.s.state_cell;
  T* hy = c.s.state_out >= 0 ? staged.Target(c.s.state_out).data<T>() : nullptr;
  T* cy = c.s.state_cell_out >= 0 ? staged.Target(c.s.state_cell_out).data<T>() : nullptr;
  const LayersInput<T> layers_in{in[RnnSlots::kData].data<T>(), in[RnnSlots::kParams].data<T>(),
                                 in[RnnSlots::kState].data<T>(),
                                 sc >= 0 ? in[sc].data<T>() : nullptr};
  ForwardLayers<T>(
      c, layers_in, train, key,
      {staged.Target(RnnSlots::kOut).data<T>(), hy, cy, static_cast<T*>(staged.Extra(0)),
       static_cast<T*>(staged.Extra(1)), static_cast<T*>(staged.Extra(2))});
  staged.Finish();
}

}  // namespace
}  // namespace rnn_loops

void RnnForwardLoops(const OpContext& ctx, const RnnCall& c, std::span<const TensorView> in,
                     std::span<const OpReq> req, std::span<const TensorView> out,
                     RandomKey dropout) {
  WEFT_FLOAT_SWITCH(in[RnnSlots::kData].dtype(), T, "RNN",
                    { rnn_loops::ForwardLoops<T>(ctx, c, in, req, out, ctx.is_train, dropout); });
}

}  // namespace weft::cpu
