#include "examples/common/profile.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <utility>

#include "weft/profiler.h"

namespace examples {

namespace {

// Under `bazel run` the working directory is the runfiles tree: write where the user ran it.
std::string FromWorkspace(const std::string& path) {
  const char* workspace = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  if (path.empty() || path[0] == '/' || workspace == nullptr) return path;
  return std::string(workspace) + "/" + path;
}

}  // namespace

ProfileScope::ProfileScope(const std::string& path) : path_(FromWorkspace(path)) {
  if (!path_.empty()) weft::Profiler::Start(path_);
}

ProfileScope::~ProfileScope() {
  try {
    Stop();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  }
}

void ProfileScope::Stop() {
  if (path_.empty()) return;
  const std::string path = std::exchange(path_, std::string());
  weft::Profiler::Stop();
  std::printf("wrote the profile to %s (open it in https://ui.perfetto.dev or chrome://tracing)\n",
              path.c_str());
}

}  // namespace examples
