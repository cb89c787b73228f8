#include "core/gpu/cuda_check.h"

#include <mutex>
#include <sstream>

namespace weft::gpu {

void ThrowCudaError(cudaError_t error, const char* call, const char* file, int line) {
  cudaGetLastError();  // a non-sticky error would otherwise be reported again by the next call
  std::ostringstream os;
  os << file << ":" << line << ": CUDA error: " << call << ": " << cudaGetErrorName(error) << ": "
     << cudaGetErrorString(error);
  throw Error(os.str());
}

namespace {

struct GpuInventory {
  int count = 0;
  std::string reason;
};

const GpuInventory& Inventory() {
  static const GpuInventory inventory = [] {
    GpuInventory inv;
    const cudaError_t error = cudaGetDeviceCount(&inv.count);
    if (error != cudaSuccess) {
      cudaGetLastError();
      inv.count = 0;
      inv.reason = std::string(cudaGetErrorName(error)) + ": " + cudaGetErrorString(error);
    } else if (inv.count == 0) {
      inv.reason = "the CUDA runtime found no device";
    }
    return inv;
  }();
  return inventory;
}

}  // namespace

int GpuCount() { return Inventory().count; }

std::string NoGpuReason() { return Inventory().reason; }

void CheckGpu(int device) {
  const int count = GpuCount();
  if (count == 0)
    WEFT_THROW("expected a CUDA GPU for gpu:" << device << ", found none (" << NoGpuReason()
                                              << ")");
  if (device < 0 || device >= count) {
    WEFT_THROW("expected a GPU id in [0, " << count << "), found gpu:" << device);
  }
}

int ComputeCapability(int device) {
  CheckGpu(device);
  int major = 0, minor = 0;
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major * 10 + minor;
}

DeviceGuard::DeviceGuard(int device) {
  WEFT_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) WEFT_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current != previous_) cudaSetDevice(previous_);
}

}  // namespace weft::gpu
