// Prints what Dropout gives for seed 42 on fixed inputs, for ops_tensor_test, which runs this
// program under several engine and thread settings and expects the same text from each. Three
// calls of different sizes, pushed back to back, so that each one's reserved random range counts.
#include <cstdio>
#include <vector>

#include "core/error.h"
#include "storage/ndarray.h"
#include "storage/random.h"
#include "weft/imperative.h"

int main() {
  try {
    weft::SeedRandom(42);
    std::vector<std::vector<weft::NDArray>> calls;
    for (int64_t n :
         {8257, 7, 1000}) {  // 8257: several chunks of intra-op work, not a multiple of 4
      std::vector<float> values(n);
      for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>(1 + i % 7);
      weft::NDArray x = weft::NDArray::FromVector(values, weft::Shape{n});
      calls.push_back(weft::Invoke("Dropout", {x}, {{"p", "0.3"}}, {.is_train = true}));
    }
    for (const auto& out : calls) {
      std::printf("mask");
      for (float m : out[1].ToVector<float>()) std::printf(" %a", m);
      std::printf("\noutput");
      for (float y : out[0].ToVector<float>()) std::printf(" %a", y);
      std::printf("\n");
    }
  } catch (const weft::Error& e) {
    std::printf("<error: %s>\n", e.what());
    return 1;
  }
  return 0;
}
