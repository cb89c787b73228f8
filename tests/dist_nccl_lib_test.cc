// NCCL loaded at run time (distributed/gpu/nccl_lib.h), in a --config=cuda build with or without a
// GPU: $WEFT_NCCL_LIB naming a folder loads that folder's libnccl.so.2, and the library answers.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "distributed/gpu/nccl_lib.h"

namespace {

TEST(NcclLib, LoadsTheLibraryWeftNcclLibNames) {
  const char* cuda = std::getenv("WEFT_CUDA_PATH");
  const std::string folder =
      std::string(cuda != nullptr && *cuda != '\0' ? cuda : "/usr/local/cuda") + "/lib64";
  setenv("WEFT_NCCL_LIB", folder.c_str(), 1);  // before the first Nccl(), which loads once
  const weft::gpu::NcclApi& nccl = weft::gpu::Nccl();
  EXPECT_EQ(nccl.path, folder + "/libnccl.so.2");
  int version = 0;
  WEFT_NCCL_CHECK(nccl.GetVersion(&version));
  EXPECT_GE(version, 21000) << "NCCL 2.10 or newer (ncclAvg)";
  EXPECT_STREQ(nccl.GetErrorString(ncclInvalidArgument),
               "invalid argument (run with NCCL_DEBUG=WARN for details)");
}

}  // namespace
