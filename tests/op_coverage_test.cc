// Every registered op has a declarative test case (tests/op_test_util.h) on every device it has a
// compute for. This file is linked with every ops_*_test.cc into one binary per device
// (op_coverage_test on the CPU, gpu_op_coverage_test on gpu:0): after all their tests have run,
// the check below compares the ops RunOpCase ran there (CoveredOps: forward cases, and the
// backward ops their gradient checks ran) with every op that has a compute on that device.
//
// The check needs every test of the binary to have run: under a filter or a shard (or without a
// GPU, where every GPU test is filtered out) it says so and checks nothing.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/device.h"
#include "ops/op.h"
#include "tests/op_test_util.h"

namespace weft::testing {
namespace {

// Whether every test of this binary (but the no-GPU placeholder) was selected to run.
bool EveryTestRan() {
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  for (int s = 0; s < unit.total_test_suite_count(); ++s) {
    const ::testing::TestSuite& suite = *unit.GetTestSuite(s);
    if (std::string(suite.name()) == "NoGpu") continue;
    for (int t = 0; t < suite.total_test_count(); ++t) {
      if (!suite.GetTestInfo(t)->should_run()) return false;
    }
  }
  return true;
}

// The ops with a compute on `device` that no case ran.
std::vector<std::string> UncoveredOps(DeviceType device) {
  std::vector<std::string> missing;
  for (const std::string& name : ListOps()) {
    if (GetOp(name).On(device).compute != nullptr && !CoveredOps().contains(name)) {
      missing.push_back(name);
    }
  }
  return missing;
}

class OpCoverageCheck : public ::testing::Environment {
 public:
  void TearDown() override {
    const Device device = TestDevice();
    if (!EveryTestRan()) {
      std::printf("op coverage on %s: not checked, some tests were filtered out\n",
                  device.ToString().c_str());
      return;
    }
    const std::vector<std::string> missing = UncoveredOps(device.type);
    std::string list;
    for (const std::string& name : missing) list += " " + name;
    EXPECT_TRUE(missing.empty())
        << missing.size() << " op(s) with a compute on " << device.ToString()
        << " have no declarative test case (RunOpCase) there, forward or through a "
           "gradient rule:"
        << list;
  }
};

[[maybe_unused]] ::testing::Environment* const coverage_check =
    ::testing::AddGlobalTestEnvironment(new OpCoverageCheck);

}  // namespace
}  // namespace weft::testing
