// Stands in for gpu_bench in a build without --config=cuda.
#include <cstdio>

int main() {
  std::printf("gpu_bench is built with --config=cuda (see tools/gpu_bundle.sh)\n");
  return 0;
}
