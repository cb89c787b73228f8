#include "engine/internal/routing.h"

#include "core/error.h"
#include "engine/device_backend.h"

namespace weft::engine {

namespace {

const char* PropertyName(FnProperty prop) {
  switch (prop) {
    case FnProperty::kNormal:
      return "normal";
    case FnProperty::kCopyToGpu:
      return "copy to GPU";
    case FnProperty::kCopyFromGpu:
      return "copy from GPU";
    case FnProperty::kCpuPrioritized:
      return "CPU prioritized";
    case FnProperty::kGpuPrioritized:
      return "GPU prioritized";
    case FnProperty::kAsync:
      return "async";
    case FnProperty::kCpuSmall:
      return "small CPU";
  }
  return "unknown";
}

bool NeedsGpu(Device device, FnProperty prop) {
  return device.is_gpu() || prop == FnProperty::kCopyToGpu || prop == FnProperty::kCopyFromGpu ||
         prop == FnProperty::kGpuPrioritized;
}

}  // namespace

void CheckRoutable(Device device, FnProperty prop, const char* name) {
  if (!NeedsGpu(device, prop)) return;
  DeviceBackend* gpu = GetDeviceBackend(DeviceType::kGpu);
  if (gpu != nullptr) {
    if (!device.is_gpu()) {
      WEFT_THROW("op '" << (name ? name : "op") << "' (" << PropertyName(prop) << ") on " << device
                        << ": expected a GPU device for a GPU property (a copy runs on the GPU it "
                           "copies to or from)");
    }
    if (prop == FnProperty::kAsync || prop == FnProperty::kCpuSmall) {
      WEFT_THROW(
          "op '"
          << (name ? name : "op") << "' (" << PropertyName(prop) << ") on " << device
          << ": expected the CPU (this property runs on the thread that makes the op ready)");
    }
    gpu->CheckDevice(device.id);
    return;
  }
  WEFT_THROW(
      "op '" << (name ? name : "op") << "' (" << PropertyName(prop) << ") on " << device
             << ": expected a CPU op; this build has no GPU backend (GPU support comes with a "
                "--config=cuda build)");
}

}  // namespace weft::engine
