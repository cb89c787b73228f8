// What the benchmarks share: integer flags, a median time, and running a peer (a Python script
// timing PyTorch) in the same run and reading the JSON object it prints last.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace bench {

// Milliseconds of one call of `step`: the median of `reps` calls, after one call to warm up.
double MedianMs(int reps, const std::function<void()>& step);

// --name=value, or `fallback`.
int IntFlag(int argc, char** argv, const char* name, int fallback);

// Runs `script` (relative to the workspace) with Debian's python3 and `args`; returns the JSON it
// printed on its last line, or {"available": false, "error": ...} when it did not run.
nlohmann::json RunPeer(const std::string& script, const std::string& args);

// bazel run starts in the runfiles tree: move to the workspace, where the peer scripts are.
void ChdirToWorkspace();

}  // namespace bench
