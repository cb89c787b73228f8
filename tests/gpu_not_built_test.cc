// Stands in for a GPU test in a build without --config=cuda.
#include <gtest/gtest.h>

TEST(Gpu, NotBuilt) { GTEST_SKIP() << "GPU tests are built with --config=cuda"; }
