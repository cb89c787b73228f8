// NDArray: operations are asynchronous yet results are as if run in order; views share memory
// and ordering; errors thrown inside an op reach WaitToRead; memory comes back to the pool.
#include "storage/ndarray.h"

#include <gtest/gtest.h>

#include <numeric>
#include <stdexcept>

#include "core/bfloat16.h"
#include "core/error.h"
#include "engine/engine.h"
#include "storage/random.h"
#include "storage/storage.h"
#include "weft/imperative.h"

namespace weft {
namespace {

TEST(NDArray, OperationsRunInProgramOrder) {
  NDArray a(Shape{1000});
  for (int round = 0; round < 50; ++round) {
    a.Fill(round);
    a = Invoke("mul_scalar", {a}, {{"scalar", "2"}})[0];
    a = Invoke("add_scalar", {a}, {{"scalar", "1"}})[0];
  }
  for (float x : a.ToVector<float>()) ASSERT_EQ(x, 49 * 2 + 1);
}

TEST(NDArray, ViewsSeeWritesAndShareOrdering) {
  NDArray a = NDArray::Arange(12).Reshape(Shape{4, 3});
  NDArray rows = a.Slice(1, 3);
  EXPECT_EQ(rows.shape(), (Shape{2, 3}));
  rows.Fill(-1);
  EXPECT_EQ(a.ToVector<float>(), (std::vector<float>{0, 1, 2, -1, -1, -1, -1, -1, -1, 9, 10, 11}));
  NDArray flat = a.Reshape(Shape{12});
  Invoke("mul_scalar", {flat}, {{"scalar", "10"}},
         {.outputs = {flat}});  // in place, through a view
  EXPECT_EQ(rows.ToVector<float>(), (std::vector<float>(6, -10)));
  EXPECT_TRUE(rows.SharesMemoryWith(a));
}

TEST(NDArray, CopiesAreIndependent) {
  NDArray a = NDArray::FromVector(std::vector<float>{1, 2, 3}, Shape{3});
  NDArray b = a.Copy(Device::Cpu());
  a.Fill(7);
  EXPECT_EQ(b.ToVector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(a.ToVector<float>(), (std::vector<float>{7, 7, 7}));
  float host[3];
  b.SyncCopyToHost(host, sizeof(host));
  EXPECT_EQ(host[2], 3);
  const float src[3] = {4, 5, 6};
  b.SyncCopyFromHost(src, sizeof(src));
  EXPECT_EQ(b.ToVector<float>(), (std::vector<float>{4, 5, 6}));
}

TEST(NDArray, ErrorsInsideAnOpReachWaitToRead) {
  NDArray a(Shape{4});
  a.Fill(1);
  // An op that fails while running (not at the call): the array holds its error.
  engine::Engine::Get()->PushSync(
      [](engine::RunContext) { throw Error("kernel failed: bad value"); }, Device::Cpu(), {},
      {a.var()});
  NDArray b = Invoke("exp", {a})[0];  // depends on the failed write: skipped, carries the error
  try {
    b.WaitToRead();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kernel failed: bad value"), std::string::npos);
  }
  EXPECT_THROW(a.ToVector<float>(), Error);
  a.Fill(2);  // the error was reported: the array is usable again
  EXPECT_EQ(a.ToVector<float>(), (std::vector<float>(4, 2)));
}

TEST(NDArray, MemoryIsLazyAndComesBackToThePool) {
  Storage& pool = *Storage::Get(Device::Cpu());
  engine::Engine::Get()->WaitForAll();
  const size_t before = pool.Stats().bytes_in_use;
  {
    NDArray big(Shape{1 << 18});
    EXPECT_EQ(pool.Stats().bytes_in_use, before) << "nothing is allocated before the first op";
    big.Fill(1);
    NDArray c = Invoke("add", {big, big})[0];
    c.WaitToRead();
    EXPECT_GE(pool.Stats().bytes_in_use, before + 2 * (1u << 20));
  }
  engine::Engine::Get()->WaitForAll();  // the frees are engine ops after the last use
  EXPECT_EQ(pool.Stats().bytes_in_use, before) << "every block came back";
}

// Fill writes bfloat16 (a bfloat16 graph's Backward fills its head gradients with ones), rounding
// the value once, to nearest even: 1/3 becomes 0x3eab.
TEST(NDArray, FillWritesBFloat16) {
  for (double value : {1.0, 1.0 / 3, -2.5}) {
    NDArray a(Shape{5}, Device::Cpu(), DType::kBFloat16);
    a.Fill(value);
    const std::vector<float> got = Invoke("Cast", {a}, {{"dtype", "float32"}})[0].ToVector<float>();
    EXPECT_EQ(got, std::vector<float>(5, BFloat16::FromFloat(static_cast<float>(value)).ToFloat()))
        << value;
  }
  NDArray third(Shape{1}, Device::Cpu(), DType::kBFloat16);
  third.Fill(1.0 / 3);
  EXPECT_EQ(Invoke("Cast", {third}, {{"dtype", "float32"}})[0].ToVector<float>()[0], 0.333984375f);
}

TEST(NDArray, RandomFillsAreReproducible) {
  SeedRandom(42);
  NDArray a(Shape{100}), b(Shape{100});
  a.FillUniform(-1, 1);
  b.FillNormal(0, 1);
  std::vector<float> ua = a.ToVector<float>(), nb = b.ToVector<float>();
  SeedRandom(42);
  a.FillUniform(-1, 1);
  b.FillNormal(0, 1);
  EXPECT_EQ(a.ToVector<float>(), ua);
  EXPECT_EQ(b.ToVector<float>(), nb);
  for (float x : ua) {
    EXPECT_GE(x, -1);
    EXPECT_LT(x, 1);
  }
}

TEST(NDArray, MisuseIsAClearError) {
  NDArray none;
  EXPECT_THROW(none.ToVector<float>(), Error);
  NDArray a(Shape{2, 3});
  EXPECT_THROW(a.Reshape(Shape{4, 2}), Error);
  EXPECT_THROW(a.Slice(1, 5), Error);
  EXPECT_THROW(a.ToVector<double>(), Error);
  EXPECT_THROW(a.CopyFrom(std::vector<float>{1, 2}), Error);
  EXPECT_THROW(a.CopyTo(NDArray(Shape{3, 2})), Error);
  EXPECT_THROW(NDArray(Shape{2}, Device::Gpu(0)), Error);
}

}  // namespace
}  // namespace weft
