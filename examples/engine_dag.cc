// engine_dag: a real computation pushed to weft's engine as a DAG of ops, printing what ran, in
// what order, on which worker. Nearest-centroid classification of the 8x8 digits data set:
//
//   load ──► class_mean[0..9] (ten concurrent readers of the data) ──► evaluate
//        └──────────────────────────────────────────────────────────►┘
//
// Every op is pushed at once with the vars it reads and writes; the engine runs each when its
// inputs are ready. Run with WEFT_CPU_WORKERS=N to change the worker count, WEFT_ENGINE=naive to
// run everything on the calling thread, --profile=trace.json (or WEFT_PROFILE=trace.json) for a
// trace to open in Perfetto.
//
//   bazel run //examples:engine_dag -- [--data=path/to/digits.csv] [--profile=trace.json]
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"
#include "examples/common/data.h"
#include "examples/common/flags.h"
#include "examples/common/profile.h"

namespace {

using weft::engine::RunContext;
using weft::engine::VarHandle;
constexpr int kClasses = 10;

struct Event {
  int order;
  std::string op;
  int worker;
  double start_ms, end_ms;
};

// What each op logs about itself; the vector is guarded by mu.
class RunLog {
 public:
  RunLog() : origin_(std::chrono::steady_clock::now()) {}
  template <typename F>
  void Run(const std::string& op, const RunContext& ctx, F&& body) {
    double start = Ms();
    body();
    double end = Ms();
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back({static_cast<int>(events_.size()), op, ctx.worker, start, end});
  }
  void Print() const {
    std::printf("%-5s %-14s %-8s %10s %10s\n", "done", "op", "worker", "start ms", "end ms");
    for (const Event& e : events_) {
      std::string worker = e.worker < 0 ? "caller" : std::to_string(e.worker);
      std::printf("%-5d %-14s %-8s %10.3f %10.3f\n", e.order, e.op.c_str(), worker.c_str(),
                  e.start_ms, e.end_ms);
    }
  }

 private:
  double Ms() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - origin_)
        .count();
  }
  const std::chrono::steady_clock::time_point origin_;
  std::mutex mu_;
  std::vector<Event> events_;
};

// Squared distance between a 64-pixel image and a centroid.
float Distance(const float* image, const std::array<float, 64>& centroid) {
  float d = 0;
  for (int p = 0; p < 64; ++p) d += (image[p] - centroid[p]) * (image[p] - centroid[p]);
  return d;
}

int Run(const std::string& data_path, const std::string& profile_path) {
  auto& engine = *weft::engine::Engine::Get();
  examples::ProfileScope profile(profile_path);
  const weft::Device cpu = weft::Device::Cpu();
  RunLog log;
  examples::Digits digits;
  std::array<std::array<float, 64>, kClasses> means{};
  float accuracy = 0;

  VarHandle data = engine.NewVariable(), result = engine.NewVariable();
  std::vector<VarHandle> mean_vars;
  for (int k = 0; k < kClasses; ++k) mean_vars.push_back(engine.NewVariable());

  engine.PushSync(
      [&](RunContext ctx) {
        log.Run("load", ctx, [&] { digits = examples::LoadDigitsCsv(data_path); });
      },
      cpu, {}, {data}, weft::engine::FnProperty::kNormal, 0, "load");
  for (int k = 0; k < kClasses; ++k) {
    engine.PushSync(
        [&, k](RunContext ctx) {
          log.Run("class_mean[" + std::to_string(k) + "]", ctx,
                  [&] { means[k] = examples::ClassMean(digits, k, /*train=*/true); });
        },
        cpu, {data}, {mean_vars[k]}, weft::engine::FnProperty::kNormal, 0, "class_mean");
  }
  std::vector<VarHandle> eval_reads = mean_vars;
  eval_reads.push_back(data);
  engine.PushSync(
      [&](RunContext ctx) {
        log.Run("evaluate", ctx, [&] {
          int correct = 0, total = 0;
          for (int i = 0; i < digits.count(); ++i) {
            if (examples::IsTrainSample(i)) continue;
            int best = 0;
            for (int k = 1; k < kClasses; ++k) {
              if (Distance(digits.image(i), means[k]) < Distance(digits.image(i), means[best]))
                best = k;
            }
            correct += best == digits.labels[i];
            ++total;
          }
          accuracy = static_cast<float>(correct) / static_cast<float>(total);
        });
      },
      cpu, eval_reads, {result}, weft::engine::FnProperty::kNormal, 0, "evaluate");
  const weft::engine::EngineOptions options = weft::engine::EngineOptions::FromEnv();
  std::printf("engine: %s, %d CPU worker(s); pushed %d ops, waiting for the result\n\n",
              engine.kind() == weft::engine::EngineKind::kNaive ? "naive" : "threaded",
              options.cpu_workers, kClasses + 2);

  engine.WaitForVar(result);  // rethrows the load's error, if the file was bad
  log.Print();
  std::printf("\nnearest-centroid test accuracy on %d held-out digits: %.1f%%\n",
              digits.count() - examples::NumTrainSamples(digits.count()), 100.0 * accuracy);
  engine.WaitForAll();
  profile.Stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  examples::Flags flags(
      "engine_dag",
      "Pushes a nearest-centroid classifier over the digits data to weft's engine "
      "as a DAG of ops and prints what ran, in what order, on which worker.");
  flags.AddString("data", examples::DefaultDigitsPath(argv[0]),
                  "digits CSV: 64 pixel values then the label, per row");
  flags.AddString("profile", "", examples::kProfileHelp);
  try {
    if (!flags.Parse(argc, argv)) return 0;  // --help
    return Run(flags.GetString("data"), flags.GetString("profile"));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
