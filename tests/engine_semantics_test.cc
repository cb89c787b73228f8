// The engine's ordering contract (engine.h), on the naive engine and on the threaded engine with
// 1, 2 and 8 workers.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"
#include "tests/engine_test_util.h"

namespace weft {
namespace {

using engine::Engine;
using engine::FnProperty;
using engine::RunContext;
using engine::VarHandle;
using testing::EngineConfig;
using testing::Latch;
using namespace std::chrono_literals;

const Device kCpu = Device::Cpu();

class EngineSemantics : public testing::EngineTest {};

TEST_P(EngineSemantics, WritesToOneVarRunInPushOrder) {
  VarHandle v = engine_->NewVariable();
  std::vector<int> order;
  for (int i = 0; i < 2000; ++i) {
    engine_->PushSync([&order, i](RunContext) { order.push_back(i); }, kCpu, {}, {v});
  }
  engine_->WaitForVar(v);
  ASSERT_EQ(order.size(), 2000u);
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(order[i], i);
}

TEST_P(EngineSemantics, ReadsOfOneVarRunConcurrently) {
  if (!threaded() || GetParam().workers < 2) GTEST_SKIP() << "needs two workers";
  VarHandle v = engine_->NewVariable();
  // Each read announces itself and then waits for the other: if the engine serialized the two
  // reads, the first would time out waiting for the second.
  Latch first_arrived, second_arrived;
  std::atomic<bool> first_saw_second{false}, second_saw_first{false};
  engine_->PushSync(
      [&](RunContext) {
        first_arrived.Open();
        first_saw_second = second_arrived.WaitFor(10s);
      },
      kCpu, {v}, {});
  engine_->PushSync(
      [&](RunContext) {
        second_arrived.Open();
        second_saw_first = first_arrived.WaitFor(10s);
      },
      kCpu, {v}, {});
  engine_->WaitForAll();
  EXPECT_TRUE(first_saw_second);
  EXPECT_TRUE(second_saw_first);
}

// The write is held until the read has been pushed (the naive engine runs each op at its push, so
// there the gate starts open): a read the engine let overtake the write would run while the write
// is held, and see the last round's value.
TEST_P(EngineSemantics, ReadAfterWriteSeesTheWrite) {
  VarHandle v = engine_->NewVariable(), out = engine_->NewVariable();
  int value = 0, seen = -1;
  for (int round = 1; round <= 200; ++round) {
    Latch write_may_run;
    if (!threaded()) write_may_run.Open();
    engine_->PushSync(
        [&, round](RunContext) {
          EXPECT_TRUE(write_may_run.WaitFor(10s));
          value = round;
        },
        kCpu, {}, {v});
    engine_->PushSync([&](RunContext) { seen = value; }, kCpu, {v}, {out});
    write_may_run.Open();
    engine_->WaitForVar(out);
    ASSERT_EQ(seen, round);
  }
}

// The reads are held until the write has been pushed (open from the start on the naive engine):
// a write the engine let overtake them would run while they are held, and they would see 8.
TEST_P(EngineSemantics, WriteAfterReadWaitsForTheRead) {
  VarHandle v = engine_->NewVariable();
  int value = 7;
  std::vector<int> seen(100, -1);
  Latch reads_may_run;
  if (!threaded()) reads_may_run.Open();
  for (int i = 0; i < 100; ++i) {
    engine_->PushSync(
        [&, i](RunContext) {
          EXPECT_TRUE(reads_may_run.WaitFor(10s));
          seen[i] = value;
        },
        kCpu, {v}, {});
  }
  engine_->PushSync([&](RunContext) { value = 8; }, kCpu, {}, {v});
  reads_may_run.Open();
  engine_->WaitForAll();
  for (int i = 0; i < 100; ++i) EXPECT_EQ(seen[i], 7) << "read " << i << " ran after the write";
  EXPECT_EQ(value, 8);
}

TEST_P(EngineSemantics, WriteAfterWriteKeepsTheLastValue) {
  VarHandle a = engine_->NewVariable(), b = engine_->NewVariable();
  int x = 0, y = 0;
  for (int i = 1; i <= 500; ++i) {
    engine_->PushSync([&x, i](RunContext) { x = i; }, kCpu, {}, {a});
    engine_->PushSync([&x, &y](RunContext) { y = y * 3 + x; }, kCpu, {a}, {b});  // order-sensitive
  }
  engine_->WaitForAll();
  int expected_y = 0;
  for (int i = 1; i <= 500; ++i) expected_y = expected_y * 3 + i;
  EXPECT_EQ(x, 500);
  EXPECT_EQ(y, expected_y);
}

TEST_P(EngineSemantics, PrioritiesOrderReadyOps) {
  if (!threaded() || GetParam().workers != 1) GTEST_SKIP() << "needs exactly one worker";
  Latch gate, gate_running;
  engine_->PushSync(
      [&](RunContext) {
        gate_running.Open();
        ASSERT_TRUE(gate.WaitFor(10s));
      },
      kCpu, {}, {engine_->NewVariable()});
  ASSERT_TRUE(gate_running.WaitFor(10s));  // the only worker is busy: what follows queues up
  std::mutex mu;
  std::vector<int> order;
  const std::vector<int> priorities = {0, 5, -3, 10, 0, 2, -1, 5};
  for (size_t i = 0; i < priorities.size(); ++i) {
    engine_->PushSync(
        [&, i](RunContext) {
          std::lock_guard<std::mutex> lock(mu);
          order.push_back(static_cast<int>(i));
        },
        kCpu, {}, {engine_->NewVariable()}, FnProperty::kNormal, priorities[i]);
  }
  gate.Open();
  engine_->WaitForAll();
  // Highest priority first; equal priorities in push order.
  EXPECT_EQ(order, (std::vector<int>{3, 1, 7, 5, 0, 4, 6, 2}));
}

TEST_P(EngineSemantics, PrioritizedPoolRunsWhileNormalWorkersAreBusy) {
  if (!threaded()) GTEST_SKIP() << "the naive engine has no pools";
  Latch gate, prioritized_ran;
  for (int i = 0; i < GetParam().workers; ++i) {
    engine_->PushSync([&](RunContext) { gate.WaitFor(10s); }, kCpu, {}, {engine_->NewVariable()});
  }
  engine_->PushSync([&](RunContext) { prioritized_ran.Open(); }, kCpu, {}, {engine_->NewVariable()},
                    FnProperty::kCpuPrioritized);
  EXPECT_TRUE(prioritized_ran.WaitFor(10s)) << "the prioritized op waited behind normal work";
  gate.Open();
  engine_->WaitForAll();
}

TEST_P(EngineSemantics, WorkerIdsAreUniqueAcrossPools) {
  std::mutex mu;
  std::map<int, std::set<std::thread::id>> threads_of_worker;
  for (int i = 0; i < 400; ++i) {
    engine_->PushSync(
        [&](RunContext ctx) {
          std::lock_guard<std::mutex> lock(mu);
          threads_of_worker[ctx.worker].insert(std::this_thread::get_id());
        },
        kCpu, {}, {engine_->NewVariable()},
        i % 2 ? FnProperty::kCpuPrioritized : FnProperty::kNormal);
  }
  engine_->WaitForAll();
  const int total_workers = GetParam().workers + 1;  // normal pool + one prioritized worker
  for (const auto& [worker, threads] : threads_of_worker) {
    if (!threaded()) {
      EXPECT_EQ(worker, -1) << "the naive engine runs ops on the caller";
      continue;
    }
    EXPECT_GE(worker, 0);
    EXPECT_LT(worker, total_workers);
    EXPECT_EQ(threads.size(), 1u) << "worker id " << worker << " was used by several threads";
  }
  if (threaded()) {
    EXPECT_TRUE(threads_of_worker.count(GetParam().workers)) << "the prioritized worker never ran";
  }
}

TEST_P(EngineSemantics, DeleteVariableRunsAfterPendingOps) {
  VarHandle v = engine_->NewVariable();
  std::atomic<int> done{0};
  int done_when_deleted = -1;
  for (int i = 0; i < 100; ++i) {
    bool write = i % 3 == 0;
    engine_->PushSync(
        [&, i](RunContext) {
          if (i % 25 == 0) std::this_thread::sleep_for(1ms);
          ++done;
        },
        kCpu, write ? engine::VarList{} : engine::VarList{v},
        write ? engine::VarList{v} : engine::VarList{});
  }
  engine_->DeleteVariable([&](RunContext) { done_when_deleted = done.load(); }, kCpu, v);
  engine_->WaitForAll();
  EXPECT_EQ(done_when_deleted, 100);
}

// Tries every use of `deleted`: each must be a weft::Error that names DeleteVariable. `live` is
// the other var of a rejected write; the ops would count in `ran` had they run.
void ExpectDeletedVarRejected(Engine& engine, VarHandle deleted, VarHandle live, int& ran) {
  auto expect_rejected = [&](auto&& use, const char* what) {
    try {
      use();
      ADD_FAILURE() << what << " on a deleted variable was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("DeleteVariable"), std::string::npos)
          << what << ": " << e.what();
    }
  };
  expect_rejected([&] { engine.PushSync([&](RunContext) { ++ran; }, kCpu, {deleted}, {}); },
                  "a read");
  expect_rejected([&] { engine.PushSync([&](RunContext) { ++ran; }, kCpu, {live}, {deleted}); },
                  "a write");
  expect_rejected([&] { engine.DeleteVariable([&](RunContext) { ++ran; }, kCpu, deleted); },
                  "a second delete");
  expect_rejected([&] { engine.WaitForVar(deleted); }, "WaitForVar");
}

TEST_P(EngineSemantics, PushAfterDeleteVariableIsAnError) {
  VarHandle v = engine_->NewVariable(), live = engine_->NewVariable();
  int ran = 0;
  Latch gate;
  if (!threaded()) gate.Open();  // the naive engine runs the op right here
  engine_->PushSync([&](RunContext) { gate.WaitFor(10s); }, kCpu, {}, {v});
  engine_->DeleteVariable([](RunContext) {}, kCpu, v);
  // Threaded: the delete is still queued behind the gated op. Naive: it has run.
  ExpectDeletedVarRejected(*engine_, v, live, ran);
  gate.Open();
  engine_->WaitForAll();
  // Both: the delete has run and the var is gone, and the misuse is still caught.
  ExpectDeletedVarRejected(*engine_, v, live, ran);
  // A rejected push leaves no trace: none of its ops ran and its other var is untouched.
  engine_->PushSync([&](RunContext) { ran += 10; }, kCpu, {}, {live});
  engine_->WaitForVar(live);
  EXPECT_EQ(ran, 10);
  engine_->WaitForAll();
}

// The same misuse gives the same message on both engines.
TEST(EngineDeletedVariable, BothEnginesRejectItTheSameWay) {
  std::vector<std::string> messages;
  for (engine::EngineKind kind : {engine::EngineKind::kNaive, engine::EngineKind::kThreaded}) {
    std::unique_ptr<Engine> engine = EngineConfig{kind, 2}.Create();
    VarHandle v = engine->NewVariable();
    engine->DeleteVariable([](RunContext) {}, kCpu, v);
    engine->WaitForAll();
    try {
      engine->PushSync([](RunContext) {}, kCpu, {v}, {}, FnProperty::kNormal, 0, "late_op");
      ADD_FAILURE() << EngineConfig{kind, 2}.Name() << " accepted a push on a deleted variable";
    } catch (const Error& e) {
      messages.push_back(e.what());
    }
  }
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_EQ(messages[0], messages[1]);
  EXPECT_NE(messages[0].find("late_op"), std::string::npos) << messages[0];
}

// A deleted var is kept for the next NewVariable, so a long program that creates and deletes vars
// holds no more of them than it had alive at once; a reused var is live again.
TEST_P(EngineSemantics, DeletedVariablesAreReused) {
  std::set<VarHandle> handles;
  int runs = 0;
  for (int i = 0; i < 100; ++i) {
    VarHandle v = engine_->NewVariable();
    handles.insert(v);
    engine_->PushSync([&](RunContext) { ++runs; }, kCpu, {}, {v});
    engine_->DeleteVariable([](RunContext) {}, kCpu, v);
    engine_->WaitForAll();
  }
  EXPECT_EQ(runs, 100);
  EXPECT_EQ(handles.size(), 1u) << "deleted vars were not reused";
}

TEST_P(EngineSemantics, WaitForVarWaitsOnlyForWhatItMust) {
  if (!threaded() || GetParam().workers < 2) GTEST_SKIP() << "needs two workers";
  VarHandle slow = engine_->NewVariable(), fast = engine_->NewVariable();
  Latch release_write, release_read;
  engine_->PushSync([&](RunContext) { release_write.WaitFor(10s); }, kCpu, {}, {slow});
  engine_->PushSync([](RunContext) {}, kCpu, {}, {fast});
  engine_->WaitForVar(fast);  // returns although the op on `slow` is still blocked
  release_write.Open();
  engine_->WaitForVar(slow);
  // A running read does not hold up WaitForVar: it waits for writes, not reads.
  engine_->PushSync([&](RunContext) { release_read.WaitFor(10s); }, kCpu, {slow}, {});
  engine_->WaitForVar(slow);
  release_read.Open();
  engine_->WaitForAll();
}

TEST_P(EngineSemantics, AsyncOpsCompleteFromAnotherThread) {
  VarHandle v = engine_->NewVariable(), out = engine_->NewVariable();
  int value = 0, seen = 0;
  testing::Completer completer(5ms);
  engine_->PushAsync(
      [&](RunContext, engine::OnComplete on_complete) {
        value = 99;  // the op's "device work"; it is complete only when the completer says so
        completer.Hand(on_complete);
      },
      kCpu, {}, {v});
  engine_->PushSync([&](RunContext) { seen = value; }, kCpu, {v}, {out});
  engine_->WaitForVar(out);
  EXPECT_EQ(seen, 99);
}

TEST_P(EngineSemantics, DuplicateVarsCountOnce) {
  VarHandle v = engine_->NewVariable();
  int runs = 0;
  engine_->PushSync([&](RunContext) { ++runs; }, kCpu, {v, v}, {v, v});
  engine_->PushSync([&](RunContext) { ++runs; }, kCpu, {v}, {});
  engine_->WaitForAll();
  EXPECT_EQ(runs, 2);
}

TEST_P(EngineSemantics, BadPushesAreErrorsThatSayWhy) {
  VarHandle v = engine_->NewVariable();
  try {
    engine_->PushSync([](RunContext) {}, Device::Gpu(0), {}, {v}, FnProperty::kNormal, 0, "my_op");
    FAIL() << "a GPU op was accepted by a CPU-only engine";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("my_op"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("gpu:0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(engine_->PushSync([](RunContext) {}, kCpu, {nullptr}, {}), Error);
  EXPECT_THROW(engine_->PushSync(nullptr, kCpu, {}, {v}), Error);
  auto other = GetParam().Create();
  EXPECT_THROW(engine_->PushSync([](RunContext) {}, kCpu, {other->NewVariable()}, {}), Error);
  // The engine still works.
  int x = 0;
  engine_->PushSync([&](RunContext) { x = 1; }, kCpu, {}, {v});
  engine_->WaitForVar(v);
  EXPECT_EQ(x, 1);
}

TEST_P(EngineSemantics, PushAfterShutdownIsAnError) {
  engine_->Shutdown();
  EXPECT_THROW(engine_->PushSync([](RunContext) {}, kCpu, {}, {}), Error);
  engine_->Shutdown();  // idempotent
}

TEST_P(EngineSemantics, ShutdownDrainsQueuedWork) {
  VarHandle v = engine_->NewVariable();
  std::atomic<int> ran{0};
  for (int i = 0; i < 1000; ++i) {
    engine_->PushSync([&](RunContext) { ++ran; }, kCpu, {}, {v});
  }
  engine_->Shutdown();
  EXPECT_EQ(ran.load(), 1000);
}

INSTANTIATE_TEST_SUITE_P(AllEngines, EngineSemantics,
                         ::testing::ValuesIn(testing::AllEngineConfigs()),
                         [](const auto& info) { return info.param.Name(); });

}  // namespace
}  // namespace weft
