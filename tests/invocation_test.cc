// ops/invocation.h: what one op call reads, writes and draws, as imperative calls and bound graphs
// both push it.
#include "ops/invocation.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "engine/engine.h"
#include "storage/ndarray.h"
#include "tests/engine_test_util.h"
#include "tests/weft_test_util.h"

namespace weft {
namespace {

bool Contains(std::span<const engine::VarHandle> vars, engine::VarHandle v) {
  return std::find(vars.begin(), vars.end(), v) != vars.end();
}

TEST(Invocation, AnInputTheOpMutatesIsWrittenAndAnOutputNotNeededIsNot) {
  const Op& op = GetOp("sgd_mom_update");
  NDArray w(Shape{3}), g(Shape{3}), mom(Shape{3}), out(Shape{3});
  Invocation call(op, ParseAttrs(op, {{"lr", "0.1"}}), Device::Cpu());
  for (const NDArray* a : {&w, &g, &mom}) call.AddInput(a->View(), a->var());
  call.AddOutput(out.View(), out.var(), OpReq::kWrite);
  EXPECT_TRUE(Contains(call.reads(), w.var()));
  EXPECT_TRUE(Contains(call.reads(), g.var()));
  EXPECT_TRUE(Contains(call.writes(), mom.var())) << "the momentum is updated in place";
  EXPECT_TRUE(Contains(call.writes(), out.var()));
  EXPECT_EQ(call.writes().size(), 2u);

  Invocation unused(op, ParseAttrs(op, {{"lr", "0.1"}}), Device::Cpu());
  for (const NDArray* a : {&w, &g, &mom}) unused.AddInput(a->View(), a->var());
  unused.AddOutput(out.View(), out.var(), OpReq::kNull);
  EXPECT_FALSE(Contains(unused.writes(), out.var()));
  EXPECT_TRUE(Contains(unused.writes(), mom.var())) << "mutating is not an output request";
}

TEST(Invocation, AnInputReadForItsShapeOrDtypeOnlyIsNotARead) {
  // reshape_like reads its second input for the shape, _backward_Cast for the dtype
  // (Op::ReadsInputValues): the call does not wait for that input's writer.
  for (const std::string name : {"reshape_like", "_backward_Cast"}) {
    const Op& op = GetOp(name);
    NDArray a = NDArray::FromVector(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{2, 3});
    NDArray like(name == "reshape_like" ? Shape{3, 2} : Shape{2, 3}, Device::Cpu(),
                 DType::kFloat64);
    NDArray out(like.shape(), Device::Cpu(),
                name == "reshape_like" ? DType::kFloat32 : DType::kFloat64);
    Invocation call(op, ParseAttrs(op, {}), Device::Cpu());
    call.AddInput(a.View(), a.var());
    call.AddInput(like.View(), like.var());
    call.AddOutput(out.View(), out.var(), OpReq::kWrite);
    EXPECT_FALSE(op.ReadsInputValues(ParseAttrs(op, {}), 1)) << name;
    EXPECT_TRUE(Contains(call.reads(), a.var())) << name;
    EXPECT_FALSE(Contains(call.reads(), like.var())) << name << ": its writer is not waited for";
    EXPECT_EQ(call.input_vars().size(), 2u);

    // Pushed while the second input's writer is held by a gate, it runs: had it waited, `reached`
    // would not open until the gate did.
    engine::Engine* engine = engine::Engine::Get();
    testing::Latch gate, reached;
    engine->PushSync([&gate](engine::RunContext) { gate.WaitFor(std::chrono::seconds(60)); },
                     Device::Cpu(), {}, {like.var()}, engine::FnProperty::kCpuPrioritized);
    engine->PushSync(
        [&](engine::RunContext run) {
          call.Run(OpContext{.run = run});
          reached.Open();
        },
        Device::Cpu(), call.reads(), call.writes());
    EXPECT_TRUE(reached.WaitFor(std::chrono::seconds(30))) << name << " waited for the gate";
    gate.Open();
    like.WaitToRead();  // the gate's op has returned: `gate` may go (it was read after its end)
    if (out.dtype() == DType::kFloat64) {
      EXPECT_EQ(out.ToVector<double>(), (std::vector<double>{1, 2, 3, 4, 5, 6})) << name;
    } else {
      EXPECT_EQ(out.ToVector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6})) << name;
    }
  }
  EXPECT_TRUE(GetOp("add").ReadsInputValues(ParseAttrs(GetOp("add"), {}), 1));
}

TEST(Invocation, RandomDrawsAreWhatTheComputeDraws) {
  const Op& dropout = GetOp("Dropout");
  NDArray x(Shape{5, 3}), y(Shape{5, 3}), mask(Shape{5, 3});
  Invocation call(dropout, ParseAttrs(dropout, {{"p", "0.5"}}), Device::Cpu());
  call.AddInput(x.View(), x.var());
  call.AddOutput(y.View(), y.var(), OpReq::kWrite);
  call.AddOutput(mask.View(), mask.var(), OpReq::kWrite);
  EXPECT_EQ(call.RandomDraws(/*is_train=*/true), 15u) << "one uniform number per element";
  EXPECT_EQ(call.RandomDraws(/*is_train=*/false), 0u) << "outside training Dropout is the identity";
  Invocation none(dropout, ParseAttrs(dropout, {{"p", "0"}}), Device::Cpu());
  none.AddInput(x.View(), x.var());
  EXPECT_EQ(none.RandomDraws(true), 0u) << "p = 0 keeps everything without drawing";
  const Op& relu = GetOp("relu");
  Invocation plain(relu, ParseAttrs(relu, {}), Device::Cpu());
  plain.AddInput(x.View(), x.var());
  EXPECT_EQ(plain.RandomDraws(true), 0u);
}

TEST(Invocation, AnOpWithoutComputeForTheDeviceIsAClearError) {
  static const bool registered = [] {
    RegisterOp("_test_no_compute")
        .Inputs({"data"})
        .InferShape(
            [](const Attrs&, const std::vector<Shape>& in) { return std::vector<Shape>{in[0]}; });
    return true;
  }();
  ASSERT_TRUE(registered);
  const Op& op = GetOp("_test_no_compute");
  testing::ExpectErrorContains([&] { Invocation(op, ParseAttrs(op, {}), Device::Cpu()); },
                               {"op '_test_no_compute' has no implementation for cpu"});
}

}  // namespace
}  // namespace weft
