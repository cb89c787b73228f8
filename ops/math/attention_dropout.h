// Which random number decides whether Attention's dropout keeps probability (b, h, i, j): the
// one rule of the CPU's loops (ops/cpu/attention.cc), a GPU kernel (this header is embedded for
// NVRTC as "ops/math/attention_dropout.h", as ops/gpu/BUILD embeds every ops/math header) and
// the tests' reference, so every device drops the same probabilities for a random key.
//
// The op reserves B * H * Tq * Tk numbers (storage/random.h). Probability (b, h, i, j) is element
// e = ((b * H + h) * Tq + i) * Tk + j of that range, whatever the layout: number e % 4 of Philox
// block offset + e / 4 (core/philox.h), kept when DropoutKeeps(PhiloxUniform(number), p). A loop
// along j draws one block per four elements:
//
//   const unsigned long long e = attention::DropoutElement(b, h, i, j, H, Tq, Tk);
//   const PhiloxBlock bits = PhiloxBlockAt(seed, offset + attention::DropoutBlock(e));
//   const bool keep = attention::DropoutKeepsIn(bits, e, p);
#pragma once

#include "core/host_device.h"
#include "core/philox.h"

namespace weft::attention {

// The index of probability (b, h, i, j) in the op's range of B * H * Tq * Tk numbers.
WEFT_HOST_DEVICE inline unsigned long long DropoutElement(long long b, long long h, long long i,
                                                          long long j, long long heads,
                                                          long long tq, long long tk) {
  return static_cast<unsigned long long>(((b * heads + h) * tq + i) * tk + j);
}

// The Philox block, counted from the range's offset, that holds element e's number.
WEFT_HOST_DEVICE inline unsigned long long DropoutBlock(unsigned long long e) { return e / 4; }

// Whether element e is kept, given its block `bits` (PhiloxBlockAt(seed, offset +
// DropoutBlock(e))).
WEFT_HOST_DEVICE inline bool DropoutKeepsIn(const PhiloxBlock& bits, unsigned long long e,
                                            double p) {
  return DropoutKeeps(PhiloxUniform(bits.v[e % 4]), p);
}

// Whether element e of the range (seed, offset) is kept: one block drawn for one element.
WEFT_HOST_DEVICE inline bool DropoutKeepsAt(unsigned long long seed, unsigned long long offset,
                                            unsigned long long e, double p) {
  return DropoutKeepsIn(PhiloxBlockAt(seed, offset + DropoutBlock(e)), e, p);
}

}  // namespace weft::attention
