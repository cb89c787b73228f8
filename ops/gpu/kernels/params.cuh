// What the host passes to kernels by value, in one definition read by both sides: the host's
// C++ compiler (ops/gpu/*.cc) and NVRTC (the kernel sources #include it). Plain structs of plain
// types only, so that both lay them out alike.
#pragma once

namespace weft {

// Threads per block of every kernel in ops/gpu/kernels (block reductions assume it).
constexpr int kGpuBlock = 256;
// Axes after merging those that can be (Shape::kMaxDims at most).
constexpr int kGpuMaxDims = 8;
// Inputs one add_n launch sums; more take several launches.
constexpr int kGpuMaxAddN = 32;

// An output request, as kernels see it (OpReq kWrite and kWriteInplace are both a write).
enum GpuReq : int { kReqNull = 0, kReqWrite = 1, kReqAdd = 2 };

// A row-major walk over `ndim` axes of extents dim[], with, for each of three arrays (0: the
// output or output gradient, 1: lhs, 2: rhs), the stride of each axis in elements (0 along an
// axis the array is broadcast over).
struct GpuAxes {
  int ndim;
  long long dim[kGpuMaxDims];
  long long stride[3][kGpuMaxDims];
};

// The arrays one add_n launch sums.
struct GpuAddNArgs {
  const void* in[kGpuMaxAddN];
  int count;
};

// The longest row LayerNorm's warp kernels hold in a warp's registers (kernels/layer_norm.cuh): a
// lane holds 4 values of the backward per value of the row it owns, 128 floats at 1024.
constexpr int kGpuLnWarpMaxC = 1024;

// The arrays one multi_sum_sq launch reads (kernels/multi_sum_sq.cuh): array k's `size` elements
// at in[k], cut into chunks of kGpuSumSqChunk elements, its chunks [first_chunk[k],
// first_chunk[k + 1]) of the launch.
constexpr int kGpuMaxSumSq = 64;
constexpr long long kGpuSumSqChunk = 1 << 16;
struct GpuSumSqArgs {
  const void* in[kGpuMaxSumSq];
  long long size[kGpuMaxSumSq];
  long long first_chunk[kGpuMaxSumSq + 1];
  int count;
};

// Pooling windows over `planes` planes of (h, w) into (oh, ow) (kernels/pooling.cuh): the kernel,
// stride and leading padding of rows [0] and columns [1]. `channels`: 1 where each plane lies
// whole (NCHW), else the channels that lie interleaved, one after another at each position (NHWC:
// plane q = n * channels + c).
struct GpuPool2d {
  long long planes, h, w, oh, ow, channels;
  long long kernel[2], stride[2], pad[2];
  int max;          // 1: max pooling; 0: average
  int include_pad;  // average: count_include_pad
};

// A check of an input by an op's kernels (device_error.cuh), laid out as the engine's
// DeviceErrorReport and DeviceErrorSlot (engine/gpu/device_error.h; ops/gpu/internal/bad_input.cc
// asserts they agree). The report is host memory the device writes.
struct GpuErrorReport {
  unsigned long long failed;  // the ticket of the last use that found a bad item
  unsigned long long done;    // the ticket of the last use whose check is complete
  long long item;             // that use's smallest bad item
  double value;               // and its value
};

struct GpuErrorSlot {
  unsigned long long* first_bad;  // device memory: the smallest bad item noted, ~0 while none
  GpuErrorReport* report;
  unsigned long long ticket;
};

// One tensor of Attention (kernels/attention.cuh) seen as (B, H, T, C): the element strides of b,
// h and t; c is contiguous. A packed (B, T, 3, H, D) input is q, k and v at offsets 0, H*D and
// 2*H*D with strides (3*T*H*D, D, 3*H*D).
struct GpuAttnStrides {
  long long b, h, t;
};

// One Attention call (ops/nn/attention.h's AttentionDims) as its kernels read it: q (B, H, Tq, D),
// k (B, H, Tk, D), v (B, H, Tk, Dv) and out (B, H, Tq, Dv) by their strides (the gradients d_q,
// d_k, d_v take those of q, k, v; out_grad those of out), the mask's element strides over
// (B, H, Tq, Tk) (0 where broadcast), the scale and causal (key j masked for query i when j > i).
struct GpuAttention {
  long long b, h, tq, tk, d, dv;
  GpuAttnStrides q, k, v, o;
  long long mask[4];
  double scale;
  int causal;
};

// Attention's dropout on the probabilities (ops/math/attention_dropout.h) as its kernels read it:
// p (0: none) and the op's random range, by value in the forward (seed, offset + *shift, shift
// null: 0) or, in the backward, from `key`, the forward's rng output in device memory (seed,
// offset, applied), which decides then.
struct GpuAttnDropout {
  double p;
  unsigned long long seed, offset;
  const unsigned long long* shift;
  const long long* key;
};

}  // namespace weft
