// One imported model served from many threads (an inference service, as ONNX Runtime promises for
// its sessions): eight threads each bind the model over the same parameter arrays and run their
// own inputs, again and again, and every output equals the one thread's. Tagged "engine", so CI
// runs it under ThreadSanitizer too.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "executor/executor.h"
#include "weft/onnx.h"

namespace weft {
namespace {

// The CNN's output for a batch of 2 images whose pixels are `value`.
std::vector<float> Classify(const OnnxModel& m, float value) {
  Executor::ArrayMap args = m.params;  // shared: the same arrays in every thread
  NDArray x(Shape{2, 1, 8, 8}, Device::Cpu());
  x.Fill(value);
  args[m.inputs[0].name] = x;
  const std::unique_ptr<Executor> exec = Executor::Bind(m.symbol, Device::Cpu(), args);
  exec->Forward(/*is_train=*/false);
  return exec->outputs()[0].ToVector<float>();
}

TEST(OnnxThreads, EightThreadsOnSharedParametersGiveTheOneThreadResults) {
  const OnnxModel m = ImportOnnx("tests/onnx/cnn.onnx");
  constexpr int kThreads = 8, kRounds = 4;
  std::vector<std::vector<float>> want;
  for (int t = 0; t < kThreads; ++t) want.push_back(Classify(m, 0.1f * static_cast<float>(t)));
  std::vector<std::vector<std::vector<float>>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) got[t].push_back(Classify(m, 0.1f * static_cast<float>(t)));
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) {
    for (int r = 0; r < kRounds; ++r)
      EXPECT_EQ(got[t][r], want[t]) << "thread " << t << " round " << r;
  }
  EXPECT_NE(want[1], want[2]);  // the inputs differ, so would a mix-up
}

}  // namespace
}  // namespace weft
