// Loading files of many small parts, which must take time linear in the number of parts:
//   safetensors  Load of a file of N one-element F32 tensors (N = 10,000, 40,000, 100,000)
//   graph JSON   LoadSymbol of a chain of N relu nodes, then its destruction
// Each figure is the median of --reps runs: wall time, the time per part, and the process's CPU
// time (all threads; on a loaded machine the steadier figure). Before weft made Load linear,
// 100,000 tensors took minutes.
//
//   bazel run --config=opt //bench:io_bench -- --reps=3
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "weft/weft.h"

namespace {

using Clock = std::chrono::steady_clock;

// A safetensors file of `n` one-element F32 tensors "t0".."t<n-1>", written byte by byte.
std::string WriteTensors(const std::string& path, int n) {
  std::string header = "{";
  for (int i = 0; i < n; ++i) {
    header += (i ? ",\"t" : "\"t") + std::to_string(i) +
              R"(":{"dtype":"F32","shape":[1],"data_offsets":[)" + std::to_string(4 * i) + "," +
              std::to_string(4 * i + 4) + "]}";
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary);
  const uint64_t length = header.size();
  out.write(reinterpret_cast<const char*>(&length), 8);  // little-endian hosts only, as weft
  out << header << std::string(4 * static_cast<size_t>(n), '\0');
  return path;
}

// A graph JSON file of a variable and `n` relus, each reading the one before.
std::string WriteChain(const std::string& path, int n) {
  std::string json = R"({"weft_graph": 1, "nodes": [{"op": "null", "name": "x", "inputs": []})";
  for (int i = 1; i <= n; ++i) {
    json += R"(, {"op": "relu", "name": "r)" + std::to_string(i) + R"(", "inputs": [[)" +
            std::to_string(i - 1) + ", 0]]}";
  }
  json += R"(], "outputs": [[)" + std::to_string(n) + ", 0]]}";
  std::ofstream(path, std::ios::binary) << json;
  return path;
}

struct Times {
  double wall = 0, cpu = 0;  // seconds
};

// Runs `fn` and measures it.
Times Measure(const std::function<void()>& fn) {
  const auto start = Clock::now();
  const std::clock_t cpu_start = std::clock();
  fn();
  return {std::chrono::duration<double>(Clock::now() - start).count(),
          static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC};
}

// The medians over `reps` calls of `run`, each returning what it measured.
Times Median(int reps, const std::function<Times()>& run) {
  std::vector<double> wall, cpu;
  for (int r = 0; r < reps; ++r) {
    const Times t = run();
    wall.push_back(t.wall);
    cpu.push_back(t.cpu);
  }
  std::sort(wall.begin(), wall.end());
  std::sort(cpu.begin(), cpu.end());
  return {wall[wall.size() / 2], cpu[cpu.size() / 2]};
}

void Report(const char* what, int n, Times t) {
  std::printf("%-12s %7d parts  %7.3f s  %6.2f us/part  (cpu %7.3f s)\n", what, n, t.wall,
              1e6 * t.wall / n, t.cpu);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 3;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--reps=", 7) == 0) reps = std::max(1, std::atoi(argv[i] + 7));
  }
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = tmp != nullptr ? tmp : "/tmp";
  for (int n : {10'000, 40'000, 100'000}) {
    const std::string path = WriteTensors(dir + "/weft_io_bench.safetensors", n);
    std::map<std::string, weft::NDArray> loaded;
    Report("safetensors", n, Median(reps, [&] {
             loaded.clear();  // the previous run's arrays: released before the clock starts
             weft::engine::Engine::Get()->WaitForAll();
             return Measure([&] { loaded = weft::Load(path); });
           }));
    if (loaded.size() != static_cast<size_t>(n))
      std::printf("  error: loaded %zu tensors\n", loaded.size());
    std::remove(path.c_str());
  }
  for (int n : {10'000, 40'000, 100'000}) {
    const std::string path = WriteChain(dir + "/weft_io_bench.json", n);
    Report("graph JSON", n,
           Median(reps, [&] { return Measure([&] { weft::LoadSymbol(path); }); }));  // and destroy
    std::remove(path.c_str());
  }
  return 0;
}
