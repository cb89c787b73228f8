// What the CPU computes of RNN and _backward_RNN share (ops/nn/rnn_params.h says what they
// compute). ops/cpu/rnn.cc checks a call and picks one of two ways to compute it:
//   - oneDNN's RNN primitives (lstm, lbr_gru, vanilla_rnn), one per layer, for float32 without
//     sequence lengths: ops/cpu/rnn_dnnl.cc. A training forward leaves each layer's workspace and
//     the activations between layers in the reserve, for the backward.
//   - loops over the steps, with matrix products through oneDNN's sgemm (float32) or plain loops
//     (float64): ops/cpu/rnn_loops.cc. They mask the steps past each sequence's length (the state
//     is carried through them unchanged and the output is zero), which is what the lengths mean.
//     Their backward runs the forward again (into workspace) instead of keeping it in the reserve.
//
// The CPU's reserve (the hidden last output) starts with a RnnReserveHeader; after it, the
// oneDNN path's buffers (DnnlReserveBytes), none for the loops.
//
//   const RnnCall c = RnnCallOf(attrs, forward_inputs);   // checks the lengths
//   RnnForwardDnnl(ctx, c, forward_inputs, req, outputs, reserve_body);
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/philox.h"
#include "core/tensor_view.h"
#include "ops/nn/rnn_params.h"
#include "ops/op.h"
#include "storage/random.h"

namespace weft::cpu {

// One call: its attributes, extents, slots and, with use_sequence_length, every sequence's length.
struct RnnCall {
  RnnParam p;
  RnnDims d;
  RnnSlots s;
  std::vector<int64_t> lengths;  // empty: every sequence has all T steps

  int64_t Length(int64_t n) const { return lengths.empty() ? d.t : lengths[n]; }
  // Element offset of the (N, H) block of layer l, direction d in a state (L*D, N, H).
  int64_t StateBlock(int layer, int dir) const { return (layer * d.dirs + dir) * d.n * d.h; }
  int64_t OutputSize() const {
    return d.t * d.n * d.dirs * d.h;
  }  // of out, and of each layer's input after the first
};

// `forward_inputs`: RNN's inputs, as RnnSlots places them. Reads and checks the lengths: each must
// be in [1, T] (a fractional part is dropped), else a weft::Error naming the sequence.
RnnCall RnnCallOf(const Attrs& attrs, std::span<const TensorView> forward_inputs);

// The start of the CPU's reserve. A training forward sets `trained` and the random range its
// dropout drew from; the backward checks it.
struct RnnReserveHeader {
  uint64_t magic;
  uint64_t trained;  // 1: written by a training forward
  RandomKey dropout;
};
inline constexpr size_t kRnnReserveHeaderBytes =
    64;  // the header, padded so the body stays 64-byte aligned
inline constexpr uint64_t kRnnReserveMagic = 0x31764e4e52746677;  // "wftRNNv1"

// Dropout on layer inputs: element k of the range that starts at element `first` of the call's
// draws is kept (scaled by 1/(1-p)) when its uniform number is >= p, as Dropout's are.
template <typename T>
void RnnDropout(RandomKey key, int64_t first, int64_t count, double p, const T* in, T* out,
                T* mask) {
  PhiloxStream stream(RandomKey{key.seed, key.offset + static_cast<uint64_t>(first / 4)});
  for (int64_t skip = 0; skip < first % 4; ++skip) stream.NextU32();
  const T scale = static_cast<T>(1 / (1 - p));
  for (int64_t k = 0; k < count; ++k) {
    mask[k] = DropoutKeeps(stream.Uniform(), p) ? scale : T(0);
    out[k] = in[k] * mask[k];
  }
}

// ---- oneDNN (ops/cpu/rnn_dnnl.cc): float32 without lengths ----

// The bytes of the reserve's body for a training forward of these extents.
size_t DnnlReserveBytes(const RnnParam& p, const RnnDims& d);
// in: RNN's inputs; req and out: the visible outputs. `reserve`: the body, or null for a forward
// that keeps nothing (inference). `dropout`: the call's random range.
void RnnForwardDnnl(const OpContext& ctx, const RnnCall& c, std::span<const TensorView> in,
                    std::span<const OpReq> req, std::span<const TensorView> out, void* reserve,
                    RandomKey dropout);
// in: _backward_RNN's inputs; `reserve`: the body the forward filled.
void RnnBackwardDnnl(const OpContext& ctx, const RnnCall& c, std::span<const TensorView> in,
                     std::span<const OpReq> req, std::span<const TensorView> out, void* reserve);

// ---- loops (ops/cpu/rnn_loops.cc): float64, and lengths ----

// As RnnForwardDnnl, without a reserve; dropout draws from `dropout` in training.
void RnnForwardLoops(const OpContext& ctx, const RnnCall& c, std::span<const TensorView> in,
                     std::span<const OpReq> req, std::span<const TensorView> out,
                     RandomKey dropout);
// As RnnBackwardDnnl; runs the forward again first, with the forward's dropout range.
void RnnBackwardLoops(const OpContext& ctx, const RnnCall& c, std::span<const TensorView> in,
                      std::span<const OpReq> req, std::span<const TensorView> out,
                      RandomKey dropout);

}  // namespace weft::cpu
