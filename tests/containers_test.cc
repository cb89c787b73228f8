// The small containers on the hot paths: SmallVector (inline, then heap) and engine::Function
// (move-only, small closures inline). Both must construct, move and destroy exactly what they hold.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "core/small_vector.h"
#include "engine/function.h"

namespace weft {
namespace {

TEST(SmallVector, KeepsOrderAcrossTheSpillToTheHeap) {
  SmallVector<std::string, 3> v;
  for (int i = 0; i < 10; ++i) v.push_back("item " + std::to_string(i));
  ASSERT_EQ(v.size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(v[i], "item " + std::to_string(i));
  SmallVector<std::string, 3> copy = v;
  EXPECT_EQ(copy.span().size(), 10u);
  EXPECT_EQ(copy[9], "item 9");
}

TEST(SmallVector, DestroysWhatItHolds) {
  auto counter = std::make_shared<int>(0);
  {
    SmallVector<std::shared_ptr<int>, 2> inline_only, spilled;
    inline_only.push_back(counter);
    for (int i = 0; i < 5; ++i) spilled.push_back(counter);
    EXPECT_EQ(counter.use_count(), 7);
  }
  EXPECT_EQ(counter.use_count(), 1);
}

TEST(Function, HoldsSmallAndLargeClosuresAndMoves) {
  auto token = std::make_shared<int>(41);
  engine::Function<int(int)> small = [token](int x) { return *token + x; };
  EXPECT_EQ(small(1), 42);
  std::array<int64_t, 16> big{};
  big[15] = 5;
  engine::Function<int(int)> large = [big, token](int x) {
    return static_cast<int>(big[15]) + *token + x;
  };
  EXPECT_EQ(large(0), 46);
  engine::Function<int(int)> moved = std::move(small);
  EXPECT_FALSE(small);
  EXPECT_EQ(moved(2), 43);
  EXPECT_EQ(token.use_count(), 3);
  moved = nullptr;
  large = engine::Function<int(int)>();
  EXPECT_EQ(token.use_count(), 1) << "closures were not destroyed";
}

TEST(Function, AcceptsMoveOnlyClosuresAndComparesWithNull) {
  auto owned = std::make_unique<int>(7);
  engine::Function<int()> f = [p = std::move(owned)] { return *p; };
  EXPECT_EQ(f(), 7);
  engine::Function<int()> empty;
  EXPECT_TRUE(empty == nullptr);
  EXPECT_TRUE(f != nullptr);
}

}  // namespace
}  // namespace weft
