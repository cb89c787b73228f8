// main() for GPU tests: every test is skipped, saying why, on a machine without a usable CUDA GPU.
#include <gtest/gtest.h>

#include "core/gpu/cuda_check.h"

namespace {

class RequireGpu : public ::testing::Environment {
 public:
  void SetUp() override {
    if (weft::gpu::GpuCount() == 0) GTEST_SKIP() << "no CUDA GPU: " << weft::gpu::NoGpuReason();
  }
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new RequireGpu);  // gtest owns it
  return RUN_ALL_TESTS();
}
