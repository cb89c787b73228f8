// Random programs on every engine configuration, checked against running the same ops one by one
// in push order. Each op folds the values of the vars it reads into a hash (recorded per op) and
// applies a non-commutative update to the vars it writes, so any op that runs too early, too late
// or concurrently with a conflicting op changes a result.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "engine/engine.h"
#include "tests/engine_test_util.h"

namespace weft {
namespace {

using engine::FnProperty;
using engine::RunContext;
using engine::VarHandle;
using testing::EngineConfig;

constexpr int kPrograms = 10000;
constexpr int kVars = 100;

struct RandomOp {
  std::vector<int> reads, writes;
  FnProperty prop = FnProperty::kNormal;
  int priority = 0;
  bool async = false;
};

struct Program {
  std::vector<RandomOp> ops;
  // The state the ops work on; the engine's ordering is the only thing protecting it.
  std::vector<uint64_t> values = std::vector<uint64_t>(kVars, 0);
  std::vector<uint64_t> observed;  // per op: the hash of what it read

  void RunOp(size_t i) {
    const RandomOp& op = ops[i];
    uint64_t h = i + 1;
    for (int r : op.reads) h = (h * 1000003u) ^ values[r];
    for (int w : op.writes) h = (h * 1000003u) ^ values[w];  // writes may read what they update
    observed[i] = h;
    for (size_t k = 0; k < op.writes.size(); ++k)
      values[op.writes[k]] = values[op.writes[k]] * 31 + h + k;
  }
};

std::vector<int> RandomVars(std::mt19937_64& rng, int max_count) {
  std::uniform_int_distribution<int> count(0, max_count), var(0, kVars - 1);
  std::vector<int> vars(count(rng));
  for (int& v : vars) v = var(rng);
  return vars;
}

Program MakeProgram(uint64_t seed) {
  std::mt19937_64 rng(seed);
  Program p;
  p.ops.resize(std::uniform_int_distribution<int>(1, 60)(rng));
  for (RandomOp& op : p.ops) {
    op.reads = RandomVars(rng, 4);
    op.writes = RandomVars(rng, 2);
    if (op.reads.empty() && op.writes.empty()) op.writes.push_back(0);
    const int kind = std::uniform_int_distribution<int>(0, 19)(rng);
    if (kind == 0) op.prop = FnProperty::kCpuPrioritized;
    if (kind == 1) op.async = true;
    if (kind == 2) op.priority = std::uniform_int_distribution<int>(-5, 5)(rng);
    if (kind >= 3 && kind <= 5)
      op.prop = FnProperty::kCpuSmall;  // draws nothing: earlier programs unchanged
  }
  p.observed.assign(p.ops.size(), 0);
  return p;
}

Program RunSequentially(uint64_t seed) {
  Program p = MakeProgram(seed);
  for (size_t i = 0; i < p.ops.size(); ++i) p.RunOp(i);
  return p;
}

void PushProgram(engine::Engine& engine, Program& p, const std::vector<VarHandle>& vars) {
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const RandomOp& op = p.ops[i];
    std::vector<VarHandle> reads, writes;
    for (int r : op.reads) reads.push_back(vars[r]);
    for (int w : op.writes) writes.push_back(vars[w]);
    if (op.async) {
      engine.PushAsync(
          [&p, i](RunContext, engine::OnComplete done) {
            p.RunOp(i);
            done();
          },
          Device::Cpu(), reads, writes, op.prop, op.priority, "random_async");
    } else {
      engine.PushSync([&p, i](RunContext) { p.RunOp(i); }, Device::Cpu(), reads, writes, op.prop,
                      op.priority, "random");
    }
  }
}

class EngineRandomWorkload : public ::testing::TestWithParam<EngineConfig> {};

TEST_P(EngineRandomWorkload, MatchesSequentialExecution) {
  testing::Watchdog watchdog(std::chrono::seconds(600), "random workload on " + GetParam().Name());
  auto engine = GetParam().Create();
  for (int program = 0; program < kPrograms; ++program) {
    const uint64_t seed = 0x5eed0000u + program;
    Program expected = RunSequentially(seed);
    Program actual = MakeProgram(seed);
    std::vector<VarHandle> vars(kVars);
    for (VarHandle& v : vars) v = engine->NewVariable();
    PushProgram(*engine, actual, vars);
    // Deleting every var right away is legal: each delete runs after the var's pending ops.
    for (VarHandle v : vars) engine->DeleteVariable([](RunContext) {}, Device::Cpu(), v);
    engine->WaitForAll();
    ASSERT_EQ(actual.observed, expected.observed)
        << "program " << program << " (seed " << seed << ")";
    ASSERT_EQ(actual.values, expected.values) << "program " << program << " (seed " << seed << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(AllEngines, EngineRandomWorkload,
                         ::testing::ValuesIn(testing::AllEngineConfigs()),
                         [](const auto& info) { return info.param.Name(); });

}  // namespace
}  // namespace weft
