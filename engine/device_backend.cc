#include "engine/device_backend.h"

#include <array>

#include "core/error.h"

namespace weft::engine {

namespace {
// Written at static initialization (before any engine exists), read afterwards.
std::array<DeviceBackend*, kNumDeviceTypes> backends{};
}  // namespace

void RegisterDeviceBackend(std::unique_ptr<DeviceBackend> backend) {
  DeviceBackend*& slot = backends[static_cast<int>(backend->type())];
  WEFT_CHECK(slot == nullptr) << "a device backend for this device type is registered twice";
  slot = backend.release();  // never destroyed: engine work at exit may still use it
}

DeviceBackend* GetDeviceBackend(DeviceType type) { return backends[static_cast<int>(type)]; }

std::unique_ptr<RecordedWork> DeviceBackend::Record(const RunContext& ctx, size_t,
                                                    const RecordFn&) {
  WEFT_THROW("device " << ctx.device.ToString() << " cannot record work for replay");
}

}  // namespace weft::engine
