// The tiling of Attention's kernels (kernels/attention.cuh), read by them and by the host code
// that launches them (ops/gpu/attention.cc): a block's rows, its threads per row, the
// accumulators per thread and the work items of a launch (one block each).
#pragma once

#include "core/host_device.h"
#include "params.cuh"

namespace weft {

constexpr int kAttnTile = 32;                          // rows of a block, and of a visited tile
constexpr int kAttnLanes = kGpuBlock / kAttnTile;      // threads per row: 8
constexpr int kAttnPerLane = kAttnTile / kAttnLanes;   // visited rows per lane: 4
constexpr int kAttnChunk = kAttnLanes * kAttnPerLane;  // columns staged at once: 32
constexpr int kAttnMaxPerThread = 32;                  // accumulators: 256 columns per block
// AttnForwardTiled (kernels/attention_tiled.cuh): queries of a block, keys of a visited
// tile, and the widest head (D and Dv) it takes.
constexpr int kAtTile = 64;

// Accumulators per thread (the kernels' COLS) for outputs of `cols` columns: the least of 4, 8,
// 16 and 32 that covers them with kAttnLanes threads per row; 32 (several column chunks) past
// 256 columns.
WEFT_HOST_DEVICE inline int AttnPerThread(long long cols) {
  int per_thread = kAttnPerLane;
  while (per_thread < kAttnMaxPerThread && per_thread * kAttnLanes < cols) per_thread *= 2;
  return per_thread;
}

WEFT_HOST_DEVICE inline long long AttnTiles(long long rows) {
  return (rows + kAttnTile - 1) / kAttnTile;
}
WEFT_HOST_DEVICE inline long long AttnChunks(long long cols, int per_thread) {
  return (cols + per_thread * kAttnLanes - 1) / (per_thread * kAttnLanes);
}

// Work items of a launch over `heads` (b, h) pairs, each of `rows` rows and `cols` output
// columns: (pair, row tile, column chunk), the chunk varying fastest.
WEFT_HOST_DEVICE inline long long AttnItems(long long heads, long long rows, long long cols,
                                            int per_thread) {
  return heads * AttnTiles(rows) * AttnChunks(cols, per_thread);
}

}  // namespace weft
