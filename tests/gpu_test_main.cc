// main() for GPU tests: with no usable GPU (no driver, no device) the tests are not run, and the
// one test that reports it is skipped with the reason, so a --config=cuda build runs cleanly on a
// machine without a GPU and says why nothing ran.
#include <gtest/gtest.h>

#include <string>

#include "core/gpu/cuda_check.h"

namespace {

TEST(NoGpu, EveryGpuTestIsSkipped) { GTEST_SKIP() << "no CUDA GPU: " << weft::gpu::NoGpuReason(); }

}  // namespace

// The user's filter with NoGpu.* added to its negative patterns ("POSITIVE[-NEGATIVE]").
std::string WithoutNoGpu(const std::string& filter) {
  return filter + (filter.find('-') == std::string::npos ? "-" : ":") + "NoGpu.*";
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  GTEST_FLAG_SET(filter,
                 weft::gpu::GpuCount() == 0 ? "NoGpu.*" : WithoutNoGpu(GTEST_FLAG_GET(filter)));
  return RUN_ALL_TESTS();
}
