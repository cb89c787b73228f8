// What the RNN's loops share between the forward (ops/cpu/rnn_loops.cc) and the backward
// (rnn_loops_backward.cc): the products, the layout of what the forward keeps of every step, one
// layer and direction's view of it, and the forward over every layer, which the backward runs
// again to get every step's gates and states. float and double (explicit instantiations in
// rnn_loops.cc).
//
//   const LoopsLayout layout(c);
//   ForwardLayers<T>(c, LayersInput<T>{data, w, h0, c0}, train, key, LayersOutput<T>{...});
#pragma once

#include <cstdint>
#include <vector>

#include "ops/cpu/internal/rnn_cpu.h"

namespace weft::cpu::rnn_loops {

// Matrix products, row-major: c (m, n) = op(a) (m, k) * op(b) (k, n) + beta * c; float32 through
// oneDNN's sgemm, float64 through plain loops.
void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

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

// Layer l, direction `dir` of the call, its saved steps in `saved` (LoopsLayout(c).size()).
template <typename T>
Direction<T> DirectionOf(const RnnCall& c, const LoopsLayout& layout, int l, int dir,
                         const LayersInput<T>& in, T* saved);

// Every layer, in training (dropout between layers) or not.
template <typename T>
void ForwardLayers(const RnnCall& c, const LayersInput<T>& in, bool train, RandomKey key,
                   const LayersOutput<T>& o);

}  // namespace weft::cpu::rnn_loops
