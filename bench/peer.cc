#include "bench/peer.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace bench {

int IntFlag(int argc, char** argv, const char* name, int fallback) {
  const std::string prefix = std::string("--") + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return std::atoi(argv[i] + prefix.size());
  }
  return fallback;
}

double MedianMs(int reps, const std::function<void()>& step) {
  step();  // warm-up: primitive caches, pools
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

nlohmann::json RunPeer(const std::string& script, const std::string& args) {
  // Debian's PyTorch is installed for Debian's python3, which a user's PATH may shadow.
  // WEFT_PEER_PYTHON picks another interpreter (a GPU machine's PyTorch may live elsewhere).
  const char* python = std::getenv("WEFT_PEER_PYTHON");
  if (python == nullptr) python = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
  const std::string cmd = std::string(python) + " " + script + " " + args + " 2>&1";
  std::string out;
  if (FILE* pipe = popen(cmd.c_str(), "r")) {
    std::array<char, 4096> buf;
    while (fgets(buf.data(), buf.size(), pipe) != nullptr) out += buf.data();
    pclose(pipe);
  }
  try {
    // The peer prints its result as the last line; anything before it is noise (warnings).
    const size_t line = out.rfind("\n{");
    return nlohmann::json::parse(out.substr(line == std::string::npos ? out.find('{') : line + 1));
  } catch (...) {
    return {{"available", false}, {"error", out.empty() ? "python3 did not run" : out}};
  }
}

void ChdirToWorkspace() {
  if (const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY")) (void)!chdir(ws);
}

}  // namespace bench
