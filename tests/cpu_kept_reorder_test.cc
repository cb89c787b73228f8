// A bound convolution reorders its weight into oneDNN's layout once per version of the weight
// (engine::LastWritePushed: the stamp of its last write, OpContext::input_versions;
// ops/cpu/internal/dnnl_util.h's ReorderedOnce), not at every call: its outputs follow every change
// of the weight, and of the data, as a fresh call's do. The engine's ordering makes each case
// deterministic: a write pushed after a Forward runs after it, and the next Forward after the
// write.
#include <gtest/gtest.h>

#include <vector>

#include "engine/engine.h"
#include "executor/executor.h"
#include "ops/cpu/internal/dnnl_util.h"
#include "tests/weft_test_util.h"
#include "weft/imperative.h"

namespace weft {
namespace {

const AttrMap kConv = {
    {"kernel", "(3, 3)"}, {"num_filter", "16"}, {"pad", "(1, 1)"}, {"no_bias", "true"}};

std::vector<float> Values(int64_t n, float scale) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>((i * 37) % 23 - 11) / 11;
  return v;
}

// The convolution called on its own (no versions: reordered for the call).
std::vector<float> Reference(const NDArray& data, const NDArray& weight) {
  return Invoke("Convolution", {data, weight}, kConv)[0].ToVector<float>();
}

// A read leaves the stamp; each write gives a new one, never given to another write (of this var
// or any other).
TEST(KeptReorder, LastWritePushedStampsWritesOnly) {
  engine::Engine* e = engine::Engine::Get();
  const engine::VarHandle v = e->NewVariable(), w = e->NewVariable();
  const uint64_t before = engine::LastWritePushed(v);
  e->PushSync([](engine::RunContext) {}, Device::Cpu(), {v}, {});
  EXPECT_EQ(engine::LastWritePushed(v), before);
  e->PushSync([](engine::RunContext) {}, Device::Cpu(), {}, {v});
  const uint64_t first = engine::LastWritePushed(v);
  EXPECT_GT(first, before);
  e->PushSync([](engine::RunContext) {}, Device::Cpu(), {}, {w});
  e->PushSync([](engine::RunContext) {}, Device::Cpu(), {}, {v});
  EXPECT_GT(engine::LastWritePushed(w), first);
  EXPECT_GT(engine::LastWritePushed(v), engine::LastWritePushed(w));
  e->DeleteVariable([](engine::RunContext) {}, Device::Cpu(), v);
  e->DeleteVariable([](engine::RunContext) {}, Device::Cpu(), w);
}

// A second model's weight in the buffer the first one's freed (the storage pool hands it back):
// its own write, its own version, never the first weight's kept layout.
TEST(KeptReorder, AWeightInAReusedBufferIsNotTakenForTheOldOne) {
  const Symbol y =
      Symbol::Op("Convolution", {Symbol::Variable("data"), Symbol::Variable("weight")}, kConv);
  const Shape data_shape{2, 8, 10, 10}, weight_shape{16, 8, 3, 3};
  const NDArray data = NDArray::FromVector(Values(data_shape.Size(), 1), data_shape, Device::Cpu());
  for (float scale : {0.5f, -2.0f, 0.25f}) {
    const NDArray weight =
        NDArray::FromVector(Values(weight_shape.Size(), scale), weight_shape, Device::Cpu());
    const std::unique_ptr<Executor> exec =
        Executor::Bind(y, Device::Cpu(), {{"data", data}, {"weight", weight}});
    exec->Forward(false);
    EXPECT_EQ(exec->outputs()[0].ToVector<float>(), Reference(data, weight)) << scale;
  }
}

TEST(KeptReorder, ABoundConvolutionFollowsItsWeightAndData) {
  const Symbol y =
      Symbol::Op("Convolution", {Symbol::Variable("data"), Symbol::Variable("weight")}, kConv);
  const Shape data_shape{2, 8, 10, 10}, weight_shape{16, 8, 3, 3};
  NDArray data = NDArray::FromVector(Values(data_shape.Size(), 1), data_shape, Device::Cpu());
  NDArray weight =
      NDArray::FromVector(Values(weight_shape.Size(), 0.5), weight_shape, Device::Cpu());
  const std::unique_ptr<Executor> exec =
      Executor::Bind(y, Device::Cpu(), {{"data", data}, {"weight", weight}});
  exec->Forward(false);
  EXPECT_EQ(exec->outputs()[0].ToVector<float>(), Reference(data, weight));
  EXPECT_GE(cpu::KeptReorderBytes(), weight_shape.Size() * sizeof(float));  // the weight is kept
  exec->Forward(false);                                                     // the kept weight
  EXPECT_EQ(exec->outputs()[0].ToVector<float>(), Reference(data, weight));

  const std::vector<float> w2 = Values(weight_shape.Size(), -2);
  weight.SyncCopyFromHost(w2.data(), w2.size() * sizeof(float));  // a new version
  exec->Forward(false);
  EXPECT_EQ(exec->outputs()[0].ToVector<float>(), Reference(data, weight));

  const std::vector<float> d2 = Values(data_shape.Size(), 3);
  data.SyncCopyFromHost(d2.data(), d2.size() * sizeof(float));  // the data alone
  exec->Forward(false);
  EXPECT_EQ(exec->outputs()[0].ToVector<float>(), Reference(data, weight));
}

}  // namespace
}  // namespace weft
