// The RNN loops' backward (rnn_loops.cc has the forward and says when the loops run): every layer
// and direction in reverse, from the gates and states the forward keeps (it runs again first),
// with the steps past a sequence's length passing the state's gradient through.
#include <algorithm>
#include <cmath>
#include <span>

#include "ops/cpu/internal/cpu_util.h"
#include "ops/cpu/internal/rnn_cpu.h"
#include "ops/cpu/internal/rnn_loops.h"

namespace weft::cpu {
namespace rnn_loops {
namespace {

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
}  // namespace rnn_loops

void RnnBackwardLoops(const OpContext& ctx, const RnnCall& c, std::span<const TensorView> in,
                      std::span<const OpReq> req, std::span<const TensorView> out,
                      RandomKey dropout) {
  WEFT_FLOAT_SWITCH(in[c.s.BackwardInput(RnnSlots::kData)].dtype(), T, "_backward_RNN",
                    { rnn_loops::BackwardLoops<T>(ctx, c, in, req, out, dropout); });
}

}  // namespace weft::cpu
