#include "tests/op_test_util.h"

namespace weft::testing {
Device TestDevice() { return Device::Gpu(0); }
}  // namespace weft::testing
