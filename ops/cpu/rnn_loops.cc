// The RNN's loops over the steps (ops/cpu/internal/rnn_cpu.h says when they run): every layer and
// direction, one step after another, as the formulas of ops/nn/rnn_params.h say, with the steps
// past a sequence's length masked. float32 multiplies through oneDNN's sgemm, float64 through the
// loops below. The backward runs the forward again to get every step's gates and states.
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "ops/cpu/internal/cpu_util.h"
#include "ops/cpu/internal/rnn_cpu.h"
#include "ops/math/unary.h"

namespace weft::cpu {
namespace {

// ---- matrix products, row-major: c (m, n) = op(a) (m, k) * op(b) (k, n) + beta * c ----

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

// The gates' sigmoid: the sigmoid op's own math (ops/math/unary.h).
template <typename T>
T Sigmoid(T x) {
  return fn::Sigmoid::Fwd(x, T(0));
}

// ---- what the forward keeps of every step, for the backward ----

// Per (layer, direction), (T, N, width) each: the gates after their nonlinearity (lstm i, f, g, o;
// gru r, z, n), gru's U_n h + a_n, lstm's cell state, and the hidden state after every step (the
// state carried unchanged through masked steps). Per layer after the first: its input (the
// previous layer's out through dropout) and the dropout mask.
struct Saved {
  int64_t gates, hn, cell, hidden;
};

class LoopsLayout {
 public:
  explicit LoopsLayout(const RnnCall& c) : c_(c) {
    const RnnDims& d = c.d;
    const int64_t step = d.t * d.n;
    for (int l = 0; l < d.layers; ++l) {
      input_.push_back(l == 0 ? -1 : Take(c.OutputSize()));
      mask_.push_back(l == 0 ? -1 : Take(c.OutputSize()));
      for (int dir = 0; dir < d.dirs; ++dir) {
        Saved s;
        s.gates =
            Take(c.p.mode == RnnMode::kLstm || c.p.mode == RnnMode::kGru ? step * d.Rows() : 0);
        s.hn = Take(c.p.mode == RnnMode::kGru ? step * d.h : 0);
        s.cell = Take(c.p.mode == RnnMode::kLstm ? step * d.h : 0);
        s.hidden = Take(step * d.h);
        saved_.push_back(s);
      }
    }
  }
  int64_t size() const { return size_; }
  const Saved& At(int layer, int dir) const { return saved_[layer * c_.d.dirs + dir]; }
  int64_t Input(int layer) const { return input_[layer]; }  // -1 for layer 0 (the data)
  int64_t Mask(int layer) const { return mask_[layer]; }

 private:
  int64_t Take(int64_t n) {
    const int64_t at = size_;
    size_ += n;
    return at;
  }
  const RnnCall& c_;
  int64_t size_ = 0;
  std::vector<Saved> saved_;
  std::vector<int64_t> input_, mask_;
};

// One layer and direction of one call, in dtype T: where its weights, input, states and saved
// steps are.
template <typename T>
struct Direction {
  const RnnCall& c;
  int layer, dir;
  RnnBlock block;  // where the weights are in the parameter vector (and its gradient)
  const T* w_ih;   // (G*H, I_l), then w_hh (G*H, H), b_ih (G*H), b_hh (G*H)
  const T* w_hh;
  const T* b_ih;
  const T* b_hh;
  const T* x;  // (T, N, I_l)
  int64_t in;  // I_l
  const T* h0;
  const T* c0;  // lstm; else null
  T* gates;     // saved, (T, N, G*H)
  T* hn;        // gru
  T* cell;      // lstm
  T* hidden;    // (T, N, H)

  int64_t Step(int64_t s) const {
    return dir == 0 ? s : c.d.t - 1 - s;
  }  // the s-th step this direction runs
  // The state before the s-th step: h0 (c0) at the first, else the one after the previous.
  const T* PrevHidden(int64_t s) const {
    return s == 0 ? h0 : hidden + Step(s - 1) * c.d.n * c.d.h;
  }
  const T* PrevCell(int64_t s) const {
    if (cell == nullptr) return nullptr;
    return s == 0 ? c0 : cell + Step(s - 1) * c.d.n * c.d.h;
  }
  // `base` + the offset of the (N, H) rows of step t, or null when the part is absent.
  static T* At(T* base, int64_t offset) { return base ? base + offset : nullptr; }
};

// What every layer reads: data (T, N, I), the parameters (P), the initial states (L*D, N, H), c0
// for lstm only (else null).
template <typename T>
struct LayersInput {
  const T *data, *w, *h0, *c0;
};

// What the forward over every layer writes: the last layer's y to `out` (T, N, D*H), the final
// states to hy, cy (L*D, N, H) when not null; `saved`: LoopsLayout(c).size() elements. Scratch:
// y (T, N, D*H) of the layers before the last, gh (N, G*H).
template <typename T>
struct LayersOutput {
  T *out, *hy, *cy, *saved;
  T *y_scratch, *gh;
};

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

// ---- backward ----

// What the backward of one sequence's cell at one step reads, (H) or (G*H) each, null where the
// mode has no such part: the gates after their nonlinearity (lstm, gru), gru's U_n h + a_n, lstm's
// cell state after and before the step, and the hidden state before and after it.
template <typename T>
struct CellSaved {
  const T *g, *hn, *c_t, *c_prev, *h_prev, *h_t;
};

// Its gradients. dh: the gradient of h' (in), of h (out: the part that does not go through U); dc
// likewise (lstm). dgx (through W) and dgh (through U): out, the gradients of the gates before
// their nonlinearity.
template <typename T>
struct CellGrads {
  T *dh, *dc, *dgx, *dgh;
};

template <typename T>
void CellBackward(RnnMode mode, int64_t h, const CellSaved<T>& saved, const CellGrads<T>& grads) {
  const auto [g, hn, c_t, c_prev, h_prev, h_t] = saved;
  const auto [dh, dc, dgx, dgh] = grads;
  for (int64_t j = 0; j < h; ++j) {
    switch (mode) {
      case RnnMode::kLstm: {
        const T i = g[j], f = g[h + j], gg = g[2 * h + j], o = g[3 * h + j], tc = std::tanh(c_t[j]);
        const T dct = dc[j] + dh[j] * o * (1 - tc * tc);
        dgx[j] = dct * gg * i * (1 - i);
        dgx[h + j] = dct * c_prev[j] * f * (1 - f);
        dgx[2 * h + j] = dct * i * (1 - gg * gg);
        dgx[3 * h + j] = dh[j] * tc * o * (1 - o);
        for (int k = 0; k < 4; ++k) dgh[k * h + j] = dgx[k * h + j];
        dc[j] = dct * f;
        dh[j] = 0;
        break;
      }
      case RnnMode::kGru: {
        const T r = g[j], z = g[h + j], n = g[2 * h + j];
        const T dn = dh[j] * (1 - z) * (1 - n * n);
        dgx[j] = dgh[j] = dn * hn[j] * r * (1 - r);
        dgx[h + j] = dgh[h + j] = dh[j] * (h_prev[j] - n) * z * (1 - z);
        dgx[2 * h + j] = dn;
        dgh[2 * h + j] = dn * r;
        dh[j] = dh[j] * z;
        break;
      }
      case RnnMode::kRnnTanh:
        dgx[j] = dgh[j] = dh[j] * (1 - h_t[j] * h_t[j]);
        dh[j] = 0;
        break;
      case RnnMode::kRnnRelu:
        dgx[j] = dgh[j] = h_t[j] > 0 ? dh[j] : T(0);
        dh[j] = 0;
        break;
    }
  }
}

// The gradients one direction's backward reads and writes. dy: the gradient of the layer's y
// (T, N, D*H). dh, dc (N, H): the gradients of the final states on entry, of h0 and c0 on return
// (dc: lstm, else null). dx (T, N, I_l): the input's gradient, added to when `add_dx`. dw: the
// parameters' gradient (P), added to; null to skip. dgx (T, N, G*H), dgh (N, G*H), dh_prev (N, H):
// scratch.
template <typename T>
struct DirectionGrads {
  const T* dy;
  T *dh, *dc, *dx;
  bool add_dx;
  T* dw;
  T *dgx, *dgh, *dh_prev;
};

// Gradients of one direction's weights and input.
template <typename T>
void BackwardDirection(const Direction<T>& v, const DirectionGrads<T>& grads) {
  const auto [dy, dh, dc, dx, add_dx, dw, dgx, dgh, dh_prev] = grads;
  const RnnDims& d = v.c.d;
  const int64_t rows = d.Rows(), nh = d.n * d.h;
  for (int64_t s = d.t - 1; s >= 0; --s) {
    const int64_t t = v.Step(s);
    const T *hp = v.PrevHidden(s), *cp = v.PrevCell(s);
    for (int64_t n = 0; n < d.n; ++n) {
      T* gx = dgx + (t * d.n + n) * rows;
      if (t >= v.c.Length(n)) {  // masked: the state's gradient passes through unchanged
        std::fill(gx, gx + rows, T(0));
        std::fill(dgh + n * rows, dgh + (n + 1) * rows, T(0));
        continue;
      }
      const int64_t at = t * nh + n * d.h;
      T* dhn = dh + n * d.h;
      const T* dyn = dy + (t * d.n + n) * d.dirs * d.h + v.dir * d.h;
      for (int64_t j = 0; j < d.h; ++j) dhn[j] += dyn[j];
      const CellSaved<T> saved{Direction<T>::At(v.gates, (t * d.n + n) * rows),
                               Direction<T>::At(v.hn, at),
                               Direction<T>::At(v.cell, at),
                               cp ? cp + n * d.h : nullptr,
                               hp + n * d.h,
                               v.hidden + at};
      CellBackward(v.c.p.mode, d.h, saved,
                   CellGrads<T>{dhn, dc ? dc + n * d.h : nullptr, gx, dgh + n * rows});
    }
    std::copy(dh, dh + nh, dh_prev);
    Gemm(false, false, d.n, d.h, rows, dgh, rows, v.w_hh, d.h, T(1), dh_prev, d.h);
    std::copy(dh_prev, dh_prev + nh, dh);
    if (dw == nullptr) continue;
    const RnnBlock& b = v.block;
    Gemm(true, false, rows, d.h, d.n, dgh, rows, hp, d.h, T(1), dw + b.weight_hh, d.h);
    for (int64_t n = 0; n < d.n; ++n)
      for (int64_t j = 0; j < rows; ++j) dw[b.bias_hh + j] += dgh[n * rows + j];
  }
  Gemm(false, false, d.t * d.n, v.in, rows, dgx, rows, v.w_ih, v.in, add_dx ? T(1) : T(0), dx,
       v.in);
  if (dw == nullptr) return;
  const RnnBlock& b = v.block;
  Gemm(true, false, rows, v.in, d.t * d.n, dgx, rows, v.x, v.in, T(1), dw + b.weight_ih, v.in);
  for (int64_t r = 0; r < d.t * d.n; ++r)
    for (int64_t j = 0; j < rows; ++j) dw[b.bias_ih + j] += dgx[r * rows + j];
}

// ---- entry points ----

// The gradient of one direction's final state (N, H): the state output's gradient, or zero.
template <typename T>
void InitialStateGrad(const RnnCall& c, std::span<const TensorView> in, int output, int layer,
                      int dir, T* to) {
  const int64_t nh = c.d.n * c.d.h;
  if (output < 0) {
    std::fill(to, to + nh, T(0));
    return;
  }
  const T* from = in[c.s.BackwardOutGrad(output)].data<T>() + c.StateBlock(layer, dir);
  std::copy(from, from + nh, to);
}

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

// Scratch of the backward, in the order of StagedOutputs' extras.
enum BackwardScratch { kSaved, kOutAgain, kY, kGh, kDgx, kDgh, kDhPrev, kDyA, kDyB };

template <typename T>
void BackwardLoops(const OpContext& ctx, const RnnCall& c, std::span<const TensorView> in,
                   std::span<const OpReq> req, std::span<const TensorView> out, RandomKey key) {
  const RnnDims& d = c.d;
  const LoopsLayout layout(c);
  const size_t e = sizeof(T), y = c.OutputSize() * e, nh = d.n * d.h * e, rows = d.n * d.Rows() * e;
  StagedOutputs staged(ctx, req, out, false,
                       {layout.size() * e, y, y, rows, d.t * rows, rows, nh, y, y});
  auto scratch = [&](BackwardScratch k) { return static_cast<T*>(staged.Extra(k)); };
  const std::span<const TensorView> fwd = in.subspan(c.s.BackwardInput(0), c.s.num_inputs);
  const LayersInput<T> layers_in{fwd[RnnSlots::kData].data<T>(), fwd[RnnSlots::kParams].data<T>(),
                                 fwd[RnnSlots::kState].data<T>(),
                                 c.s.state_cell >= 0 ? fwd[c.s.state_cell].data<T>() : nullptr};
  ForwardLayers<T>(
      c, layers_in, true, key,
      {scratch(kOutAgain), nullptr, nullptr, scratch(kSaved), scratch(kY), scratch(kGh)});
  T* dw = staged.Needed(RnnSlots::kParams) ? staged.Target(RnnSlots::kParams).data<T>() : nullptr;
  if (dw) std::fill(dw, dw + staged.Target(RnnSlots::kParams).size(), T(0));
  T* dh0 = staged.Target(RnnSlots::kState).data<T>();
  T* dc0 = c.s.state_cell >= 0 ? staged.Target(c.s.state_cell).data<T>() : nullptr;
  const T* dy = in[c.s.BackwardOutGrad(RnnSlots::kOut)].data<T>();
  for (int l = d.layers - 1; l >= 0; --l) {
    T* dx = l == 0 ? staged.Target(RnnSlots::kData).data<T>()
                   : scratch((d.layers - 1 - l) % 2 ? kDyB : kDyA);
    for (int dir = 0; dir < d.dirs; ++dir) {
      const Direction<T> v = DirectionOf(c, layout, l, dir, layers_in, scratch(kSaved));
      T* dh = dh0 + c.StateBlock(l, dir);
      T* dc = dc0 ? dc0 + c.StateBlock(l, dir) : nullptr;
      InitialStateGrad(c, in, c.s.state_out, l, dir, dh);
      if (dc) InitialStateGrad(c, in, c.s.state_cell_out, l, dir, dc);
      BackwardDirection(v, DirectionGrads<T>{dy, dh, dc, dx, dir > 0, dw, scratch(kDgx),
                                             scratch(kDgh), scratch(kDhPrev)});
    }
    if (l == 0) break;
    if (c.p.p > 0) {  // dropout's gradient: through the same mask
      const T* mask = scratch(kSaved) + layout.Mask(l);
      for (int64_t k = 0; k < c.OutputSize(); ++k) dx[k] *= mask[k];
    }
    dy = dx;
  }
  staged.Finish();
}

}  // namespace

void RnnForwardLoops(const OpContext& ctx, const RnnCall& c, std::span<const TensorView> in,
                     std::span<const OpReq> req, std::span<const TensorView> out,
                     RandomKey dropout) {
  WEFT_FLOAT_SWITCH(in[RnnSlots::kData].dtype(), T, "RNN",
                    { ForwardLoops<T>(ctx, c, in, req, out, ctx.is_train, dropout); });
}

void RnnBackwardLoops(const OpContext& ctx, const RnnCall& c, std::span<const TensorView> in,
                      std::span<const OpReq> req, std::span<const TensorView> out,
                      RandomKey dropout) {
  WEFT_FLOAT_SWITCH(in[c.s.BackwardInput(RnnSlots::kData)].dtype(), T, "_backward_RNN",
                    { BackwardLoops<T>(ctx, c, in, req, out, dropout); });
}

}  // namespace weft::cpu
