// The libFuzzer entry point of one fuzz binary: WEFT_FUZZ_TARGET names the target (fuzz/BUILD sets
// it per binary, e.g. weft::fuzz::Safetensors).
#include <cstddef>
#include <cstdint>

#include "fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return WEFT_FUZZ_TARGET(data, size);
}
