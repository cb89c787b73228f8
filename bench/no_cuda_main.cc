// Stands in for a GPU benchmark in a build without --config=cuda.
#include <cstdio>

int main() {
  std::printf("GPU benchmarks are built with --config=cuda\n");
  return 0;
}
