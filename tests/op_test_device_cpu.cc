#include "tests/op_test_util.h"

namespace weft::testing {
Device TestDevice() { return Device::Cpu(); }
}  // namespace weft::testing
