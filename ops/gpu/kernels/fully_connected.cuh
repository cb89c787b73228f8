// FullyConnected's bias (ops/gpu/fully_connected.cc), around cuBLAS's GEMMs: the forward starts y
// from the bias rows and lets the GEMM add x * W^T to it (one rounding in bf16). (The backward's
// bias gradient sums out_grad's rows: SumRowsGpu, ops/gpu/internal/reduce.h.) T: float, double
// or bf16 (float arithmetic).
#pragma once

#include "common.cuh"

namespace weft {

// y[i, o] = b[o] (plus what y held, when req is add), for rows x cols.
template <typename T>
__global__ void BiasRows(const T* b, T* y, int64 rows, int64 cols, int req) {
  for (int64 at = GlobalThread(); at < rows * cols; at += GridThreads())
    Store1(y + at, ToArith(b[at % cols]), req);
}

}  // namespace weft
