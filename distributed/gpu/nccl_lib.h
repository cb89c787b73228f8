// NCCL, loaded at run time: weft is built against the toolkit's nccl.h but does not link
// libnccl, because where the library lives differs between machines (the CUDA toolkit's lib64
// here; PyTorch's wheel, site-packages/nvidia/nccl/lib/libnccl.so.2, on a GPU machine). Nccl()
// dlopens, on first use: $WEFT_NCCL_LIB if set (a file, or a folder holding libnccl.so.2), else
// "libnccl.so.2" through the loader's search (LD_LIBRARY_PATH, which the GPU bundle's wrappers
// extend with PyTorch's folder, then the system's), else $WEFT_CUDA_PATH/lib64 (default
// /usr/local/cuda). Compiled only by --config=cuda.
//
//   const NcclApi& nccl = Nccl();     // throws weft::Error saying where it looked
//   WEFT_NCCL_CHECK(nccl.AllReduce(x, x, n, ncclFloat32, ncclSum, comm, stream));
#pragma once

#include <nccl.h>

#include <string>

namespace weft::gpu {

struct NcclApi {
  decltype(&ncclGetVersion) GetVersion;
  decltype(&ncclGetUniqueId) GetUniqueId;
  decltype(&ncclCommInitRank) CommInitRank;
  decltype(&ncclCommDestroy) CommDestroy;
  decltype(&ncclCommAbort) CommAbort;
  decltype(&ncclCommGetAsyncError) CommGetAsyncError;
  decltype(&ncclGetErrorString) GetErrorString;
  decltype(&ncclAllReduce) AllReduce;
  decltype(&ncclBroadcast) Broadcast;
  decltype(&ncclAllGather) AllGather;
  decltype(&ncclGroupStart) GroupStart;
  decltype(&ncclGroupEnd) GroupEnd;
  std::string path;  // the library loaded
};

const NcclApi& Nccl();

// Throws weft::Error "<call>: NCCL error <code>: <NCCL's message>".
void NcclCheck(ncclResult_t result, const char* call);

}  // namespace weft::gpu

#define WEFT_NCCL_CHECK(call) ::weft::gpu::NcclCheck((call), #call)
