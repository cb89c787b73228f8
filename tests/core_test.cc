// core: errors and CHECK messages, devices, dtypes, shapes, environment settings, text for
// messages about untrusted input, and parsing JSON from outside.
#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <string>

#include "core/device.h"
#include "core/dtype.h"
#include "core/env.h"
#include "core/error.h"
#include "core/json.h"
#include "core/shape.h"
#include "core/text.h"
#include "tests/weft_test_util.h"

namespace weft {
namespace {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(Check, FailureNamesTheExpressionBothValuesTheFileAndTheContext) {
  int rows = 6, cols = 5;
  std::string msg =
      testing::ErrorMessage([&] { WEFT_CHECK_EQ(rows, cols) << "matmul: inner dims differ"; });
  EXPECT_TRUE(Contains(msg, "rows == cols")) << msg;
  EXPECT_TRUE(Contains(msg, "(6 vs. 5)")) << msg;
  EXPECT_TRUE(Contains(msg, "tests/core_test.cc:")) << msg;
  EXPECT_TRUE(Contains(msg, "matmul: inner dims differ")) << msg;
}

TEST(Check, PassingChecksDoNothingAndEvaluateOnce) {
  int calls = 0;
  auto next = [&] { return ++calls; };
  WEFT_CHECK_EQ(next(), 1) << "never printed";
  WEFT_CHECK(calls == 1);
  EXPECT_EQ(calls, 1);
}

TEST(Check, WorksInsideAnUnbracedIfElse) {
  bool reached_else = false;
  if (false)
    WEFT_CHECK(false) << "not taken";
  else
    reached_else = true;
  EXPECT_TRUE(reached_else);
}

TEST(Check, ErrorIsAStdException) {
  EXPECT_THROW(WEFT_CHECK_LT(3, 2), std::exception);
  std::string msg =
      testing::ErrorMessage([] { WEFT_THROW("expected " << 3 << " axes, found " << 2); });
  EXPECT_TRUE(Contains(msg, "expected 3 axes, found 2")) << msg;
}

TEST(Device, ParsesAndPrints) {
  EXPECT_EQ(Device::Parse("cpu"), Device::Cpu());
  EXPECT_EQ(Device::Parse("gpu"), Device::Gpu(0));
  EXPECT_EQ(Device::Parse("gpu:3"), Device::Gpu(3));
  EXPECT_EQ(Device::Gpu(3).ToString(), "gpu:3");
  EXPECT_NE(Device::Gpu(0), Device::Gpu(1));
}

TEST(Device, BadNamesSayWhatWasExpected) {
  EXPECT_TRUE(Contains(testing::ErrorMessage([] { Device::Parse("tpu:0"); }),
                       "expected 'cpu', 'gpu' or 'gpu:N'"));
  EXPECT_TRUE(Contains(testing::ErrorMessage([] { Device::Parse("gpu:-1"); }), "found '-1'"));
  EXPECT_TRUE(Contains(testing::ErrorMessage([] { Device::Parse("gpu:x"); }), "found 'x'"));
  EXPECT_TRUE(Contains(testing::ErrorMessage([] { Device::Parse("cpu:2"); }), "id 0"));
}

TEST(DType, TableIsConsistent) {
  EXPECT_EQ(DTypeSize(DType::kFloat32), 4u);
  EXPECT_EQ(DTypeSize(DType::kBFloat16), 2u);
  EXPECT_EQ(DTypeSize(DType::kInt64), 8u);
  for (int i = 0; i < kNumDTypes; ++i) {
    auto t = static_cast<DType>(i);
    EXPECT_EQ(ParseDType(DTypeName(t)), t);
  }
  EXPECT_TRUE(IsFloatingPoint(DType::kFloat16));
  EXPECT_FALSE(IsFloatingPoint(DType::kInt32));
  EXPECT_TRUE(
      Contains(testing::ErrorMessage([] { ParseDType("float33"); }), "unknown dtype 'float33'"));
}

TEST(Shape, SizeIndexingAndPrinting) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.ndim(), 3);
  EXPECT_EQ(s.Size(), 24);
  EXPECT_EQ(s[1], 3);
  EXPECT_EQ(s.ToString(), "(2, 3, 4)");
  EXPECT_EQ(Shape{5}.ToString(), "(5,)");
  EXPECT_EQ(Shape().Size(), 1);
  EXPECT_EQ(s.NormalizeAxis(-1), 2);
  EXPECT_TRUE(Contains(testing::ErrorMessage([&] { s.NormalizeAxis(3); }),
                       "axis 3 is out of range for shape (2, 3, 4)"));
  EXPECT_THROW(s[3], Error);
}

TEST(Shape, ParsesAttributeText) {
  EXPECT_EQ(Shape::Parse("(2, 3)"), (Shape{2, 3}));
  EXPECT_EQ(Shape::Parse("[2,3]"), (Shape{2, 3}));
  EXPECT_EQ(Shape::Parse("(5,)"), Shape{5});
  EXPECT_EQ(Shape::Parse("()"), Shape());
  EXPECT_TRUE(Contains(testing::ErrorMessage([] { Shape::Parse("(2, x)"); }), "found 'x'"));
  EXPECT_TRUE(Contains(testing::ErrorMessage([] { Shape::Parse("(2, -1)"); }), "found '-1'"));
  EXPECT_TRUE(Contains(testing::ErrorMessage([] { Shape::Parse("(1,1,1,1,1,1,1,1,1)"); }),
                       "at most 8 axes"));
  EXPECT_THROW((Shape{-1}), Error);
}

// What every broadcasting compute reads with: the operand aligned at its last axis, stride 0 where
// it has extent 1 or no axis, row-major strides elsewhere.
TEST(Shape, BroadcastStridesAlignAtTheLastAxisWithZeroWhereBroadcast) {
  using Strides = std::array<int64_t, Shape::kMaxDims>;
  EXPECT_EQ(BroadcastStrides(Shape{3, 1}, Shape{2, 3, 4}), (Strides{0, 1, 0}));
  EXPECT_EQ(BroadcastStrides(Shape{2, 3, 4}, Shape{2, 3, 4}), (Strides{12, 4, 1}));
  EXPECT_EQ(BroadcastStrides(Shape{4}, Shape{2, 3, 4}), (Strides{0, 0, 1}));
  EXPECT_EQ(BroadcastStrides(Shape{2, 1, 4}, Shape{2, 3, 4}), (Strides{4, 0, 1}));
  EXPECT_EQ(BroadcastStrides(Shape(), Shape{5, 6}), Strides{});
  EXPECT_EQ(BroadcastStrides(Shape{1, 1}, Shape{1, 1}), Strides{});
}

// Found by the op_attrs fuzzer: reshape's inference multiplied the extents of a parsed shape past
// int64 (undefined behaviour). A size that does not fit is an error; a zero extent makes any
// size 0.
TEST(Shape, SizeThatDoesNotFitInInt64IsAnError) {
  const Shape huge = Shape::Parse("(888888888888888882, 3, 4)");
  EXPECT_TRUE(
      Contains(testing::ErrorMessage([&] { (void)huge.Size(); }),
               "shape (888888888888888882, 3, 4) has more elements than a 64-bit count holds"));
  EXPECT_EQ((Shape{int64_t{1} << 62, 4, 0}).Size(), 0);
  EXPECT_EQ((Shape{int64_t{1} << 62, 1}).Size(), int64_t{1} << 62);
}

TEST(Env, ReadsAndValidatesSettings) {
  setenv("WEFT_TEST_INT", "12", 1);
  EXPECT_EQ(GetEnvInt("WEFT_TEST_INT", 3), 12);
  EXPECT_EQ(GetEnvInt("WEFT_TEST_UNSET", 3), 3);
  setenv("WEFT_TEST_INT", "twelve", 1);
  std::string msg = testing::ErrorMessage([] { GetEnvInt("WEFT_TEST_INT", 3); });
  EXPECT_TRUE(Contains(msg, "WEFT_TEST_INT")) << msg;
  EXPECT_TRUE(Contains(msg, "found 'twelve'")) << msg;
  setenv("WEFT_TEST_INT", "0", 1);
  EXPECT_THROW(GetEnvInt("WEFT_TEST_INT", 3, 1, 10), Error);
  setenv("WEFT_TEST_BOOL", "off", 1);
  EXPECT_FALSE(GetEnvBool("WEFT_TEST_BOOL", true));
  setenv("WEFT_TEST_BOOL", "maybe", 1);
  EXPECT_THROW(GetEnvBool("WEFT_TEST_BOOL", true), Error);
  EXPECT_GE(NumCores(), 1);
}

TEST(Text, AbbreviateKeepsShortTextAndSaysHowLongTheRestWas) {
  EXPECT_EQ(Abbreviate("relu"), "relu");
  EXPECT_EQ(Abbreviate(std::string(kMaxQuotedBytes, 'x')), std::string(kMaxQuotedBytes, 'x'));
  EXPECT_EQ(Abbreviate(std::string(1'000'000, 'x')),
            std::string(kMaxQuotedBytes, 'x') + "... (1000000 bytes)");
  EXPECT_EQ(Abbreviate("abcdef", 3), "abc... (6 bytes)");
  // e-acute is two bytes in UTF-8: the cut never splits it.
  EXPECT_EQ(Abbreviate("ab\u00e9cd", 3), "ab... (6 bytes)");
}

TEST(Text, IsUtf8AcceptsWellFormedTextOnly) {
  for (const char* good : {"", "relu", "caf\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80"})
    EXPECT_TRUE(IsUtf8(good)) << good;
  for (const char* bad :
       {"\x90", "a\xc3", "\xe2\x82", "\xc0\xaf" /* overlong */, "\xed\xa0\x80" /* a surrogate */,
        "\xf4\x90\x80\x80" /* > U+10FFFF */, "\xff"})
    EXPECT_FALSE(IsUtf8(bad)) << bad;
}

TEST(Text, ClosestNameIsAtMostTwoEditsAway) {
  const std::vector<std::string> names = {"data", "fc_weight", "fc_bias"};
  EXPECT_EQ(ClosestName("fc_wieght", names), "fc_weight");
  EXPECT_EQ(ClosestName("Data", names), "data");
  EXPECT_EQ(ClosestName("labels", names), "");
  EXPECT_EQ(ClosestName(std::string(10'000'000, 'x'), names), "")
      << "skipped by length, not compared";
  EXPECT_EQ(DidYouMean("fc_bais", names), "; did you mean 'fc_bias'?");
  EXPECT_EQ(DidYouMean("labels", names), "");
  EXPECT_EQ(QuotedList(names), "'data', 'fc_weight', 'fc_bias'");
  EXPECT_EQ(QuotedList({}), "(none)");
  EXPECT_EQ(QuotedList(names, 2), "'data', 'fc_weight', ... (3 in all)");
}

TEST(Json, ParsesShallowTextAndRefusesDeepNestingAndRepeatedKeys) {
  const ParsedJson ok = ParseJson(R"({"a": [1, {"b": "c"}]})", 3);
  ASSERT_TRUE(ok.ok()) << ok.error;
  EXPECT_EQ(ok.value["a"][1]["b"], "c");
  EXPECT_TRUE(Contains(ParseJson("[[[1]]]", 2).error, "nested deeper than 2 levels"))
      << ParseJson("[[[1]]]", 2).error;
  const std::string deep = std::string(1'000'000, '[') + std::string(1'000'000, ']');
  EXPECT_TRUE(Contains(ParseJson(deep, 8).error, "nested deeper than 8 levels"));
  EXPECT_EQ(ParseJson(R"({"a": 1, "b": {"a": 2}})", 4).error, "")
      << "one key per object, not per text";
  EXPECT_EQ(ParseJson(R"({"a": 1, "a": 2})", 4).error, "duplicate key 'a'");
  const std::string open_string = "[\"" + std::string(1'000'000, 'x');
  const ParsedJson bad = ParseJson(open_string, 4);
  EXPECT_TRUE(Contains(bad.error, "invalid JSON")) << bad.error.substr(0, 1000);
  EXPECT_LT(bad.error.size(), 300u) << bad.error.substr(0, 1000);
  EXPECT_TRUE(bad.value.is_null());
}

TEST(Json, ValuesForMessagesAreAbbreviated) {
  EXPECT_EQ(JsonForMessage(nlohmann::json::parse("[1, 2.5]")), "[1,2.5]");
  const std::string message = JsonForMessage(nlohmann::json(std::string(1'000'000, 'x')));
  EXPECT_EQ(message, "\"" + std::string(kMaxQuotedBytes - 1, 'x') + "... (1000002 bytes)");
}

}  // namespace
}  // namespace weft
