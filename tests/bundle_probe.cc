// For bundle_layout_test: prints where this binary finds the GPU benchmark's peer script
// (bench/peer.h) and its LD_LIBRARY_PATH, as a binary of a bundle sees them.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench/peer.h"

int main() {
  std::string why;
  const std::string script = bench::FindPeerScript("bench/torch_gpu_peer.py", &why);
  std::printf("peer script: %s\n", script.empty() ? why.c_str() : script.c_str());
  const char* path = std::getenv("LD_LIBRARY_PATH");
  std::printf("LD_LIBRARY_PATH: %s\n", path != nullptr ? path : "");
  return script.empty() ? 1 : 0;
}
