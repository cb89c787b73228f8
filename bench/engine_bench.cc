// Engine overhead against oneTBB's flow graph, on three DAGs of empty ops:
//   chains   1,000 independent chains of 1,000 ops, one var per chain (pushed layer by layer)
//   chain    one chain of 100,000 ops
//   fan-in   100,000 readers of one var, then one writer
// weft: ns per op for push + execute (PushSync of an empty function, then WaitForAll).
// TBB:  ns per node for build + execute (continue_nodes and edges, try_put, wait_for_all).
// Both sides get the same number of threads; each figure is the median of --reps runs.
//
//   bazel run --config=opt //bench:engine_bench -- --workers=2 --reps=5 [--dag=1 (only the single
//   chain)]
// For profiling: --before=0 runs the 1,000 chains once on weft's engine before the rows measured
// (what the single chain sees right after them in a full run), --tbb=0 skips the TBB side.
#include <oneapi/tbb/flow_graph.h>
#include <oneapi/tbb/global_control.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "bench/peer.h"
#include "engine/engine.h"

namespace {

using Clock = std::chrono::steady_clock;
using weft::engine::Engine;
using weft::engine::RunContext;
using weft::engine::VarHandle;
namespace flow = oneapi::tbb::flow;

struct Dag {
  const char* name;
  int64_t ops;
  std::function<void(Engine&)> weft;  // push every op, then wait
  std::function<void()> tbb;          // build the graph, run it, wait
};

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// ---- weft ----

void WeftChains(Engine& engine, int chains, int length) {
  std::vector<VarHandle> vars(chains);
  for (VarHandle& v : vars) v = engine.NewVariable();
  for (int i = 0; i < length; ++i) {
    for (int c = 0; c < chains; ++c)
      engine.PushSync([](RunContext) {}, weft::Device::Cpu(), {}, {vars[c]});
  }
  engine.WaitForAll();
  for (VarHandle v : vars) engine.DeleteVariable([](RunContext) {}, weft::Device::Cpu(), v);
  engine.WaitForAll();
}

void WeftFanIn(Engine& engine, int readers) {
  VarHandle v = engine.NewVariable();
  for (int i = 0; i < readers; ++i)
    engine.PushSync([](RunContext) {}, weft::Device::Cpu(), {v}, {});
  engine.PushSync([](RunContext) {}, weft::Device::Cpu(), {}, {v});
  engine.WaitForAll();
  engine.DeleteVariable([](RunContext) {}, weft::Device::Cpu(), v);
  engine.WaitForAll();
}

// ---- oneTBB flow graph ----

using Node = flow::continue_node<flow::continue_msg>;
constexpr auto kEmptyBody = [](const flow::continue_msg&) {};

void TbbChains(int chains, int length) {
  flow::graph g;
  std::deque<Node> nodes;  // stable addresses
  std::vector<Node*> heads(chains), tails(chains);
  for (int i = 0; i < length; ++i) {
    for (int c = 0; c < chains; ++c) {
      Node* n = &nodes.emplace_back(g, kEmptyBody);
      if (i == 0) {
        heads[c] = n;
      } else {
        flow::make_edge(*tails[c], *n);
      }
      tails[c] = n;
    }
  }
  for (Node* h : heads) h->try_put(flow::continue_msg());
  g.wait_for_all();
}

void TbbFanIn(int readers) {
  flow::graph g;
  flow::broadcast_node<flow::continue_msg> source(g);
  std::deque<Node> nodes;
  Node writer(g, kEmptyBody);
  for (int i = 0; i < readers; ++i) {
    Node& n = nodes.emplace_back(g, kEmptyBody);
    flow::make_edge(source, n);
    flow::make_edge(n, writer);
  }
  source.try_put(flow::continue_msg());
  g.wait_for_all();
}

template <typename F>
double MedianNsPerOp(int reps, int64_t ops, F&& run) {
  std::vector<double> ns;
  for (int r = 0; r < reps; ++r) {
    Clock::time_point start = Clock::now();
    run();
    ns.push_back(Seconds(start) * 1e9 / static_cast<double>(ops));
  }
  std::sort(ns.begin(), ns.end());
  return ns[ns.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int workers = bench::IntFlag(argc, argv, "workers", 2);
  const int reps = bench::IntFlag(argc, argv, "reps", 5);
  weft::engine::EngineOptions options;
  options.cpu_workers = workers;
  auto engine = weft::engine::CreateEngine(weft::engine::EngineKind::kThreaded, options);
  oneapi::tbb::global_control tbb_threads(oneapi::tbb::global_control::max_allowed_parallelism,
                                          workers);

  const std::vector<Dag> dags = {
      {"1000 chains x 1000", 1000000, [](Engine& e) { WeftChains(e, 1000, 1000); },
       [] { TbbChains(1000, 1000); }},
      {"1 chain x 100000", 100000, [](Engine& e) { WeftChains(e, 1, 100000); },
       [] { TbbChains(1, 100000); }},
      {"100000 readers + 1 writer", 100001, [](Engine& e) { WeftFanIn(e, 100000); },
       [] { TbbFanIn(100000); }},
  };
  std::printf("engine overhead, %d worker thread(s), median of %d runs\n\n", workers, reps);
  std::printf("%-28s %14s %14s %12s\n", "DAG", "weft ns/op", "TBB ns/node", "weft/TBB");
  const int only =
      bench::IntFlag(argc, argv, "dag", -1);  // one DAG by its row (0, 1, 2), for profiling
  const int before = bench::IntFlag(argc, argv, "before", -1);
  const bool run_tbb = bench::IntFlag(argc, argv, "tbb", 1) != 0;
  if (before >= 0 && static_cast<size_t>(before) < dags.size()) dags[before].weft(*engine);
  for (size_t d = 0; d < dags.size(); ++d) {
    if (only >= 0 && static_cast<size_t>(only) != d) continue;
    const Dag& dag = dags[d];
    dag.weft(*engine);  // warm-up: pools, threads, allocator
    double weft_ns = MedianNsPerOp(reps, dag.ops, [&] { dag.weft(*engine); });
    double tbb_ns = run_tbb ? MedianNsPerOp(reps, dag.ops, dag.tbb) : 0.0;
    if (run_tbb) {
      std::printf("%-28s %14.1f %14.1f %12.2f\n", dag.name, weft_ns, tbb_ns, weft_ns / tbb_ns);
    } else {
      std::printf("%-28s %14.1f %14s %12s\n", dag.name, weft_ns, "-", "-");
    }
  }
  engine->Shutdown();
  return 0;
}
