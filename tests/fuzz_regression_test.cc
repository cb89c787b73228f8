// Every fuzz target (fuzz/targets.h) on its seed corpus (fuzz/corpus/<target>/) and on the input
// of every earlier finding (fuzz/regressions/<target>/), one test case a file: each must be
// accepted or refused with a weft::Error, never crash, hang or throw anything else. Run under
// --config=asan (and --config=fuzz) the cases also catch the memory errors the findings were.
// A finding whose fix is not in yet is listed in fuzz/regressions/known_failures.txt and skipped,
// with its reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz/targets.h"

namespace weft::fuzz {
namespace {

using Target = int (*)(const uint8_t*, size_t);

struct Case {
  std::string target;  // the corpus folder's name
  std::string file;    // relative to the runfiles root
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.file; }

Target TargetFor(const std::string& name) {
  if (name == "csv") return Csv;
  if (name == "graph_json") return GraphJson;
  if (name == "mnist") return Mnist;
  if (name == "onnx") return Onnx;
  if (name == "op_attrs") return OpAttrs;
  if (name == "safetensors") return Safetensors;
  return nullptr;
}

// fuzz/{corpus,regressions}/<target>/<file>, sorted.
std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (const char* root : {"fuzz/corpus", "fuzz/regressions"}) {
    if (!std::filesystem::is_directory(root)) continue;
    for (const auto& dir : std::filesystem::directory_iterator(root)) {
      if (!dir.is_directory()) continue;
      for (const auto& file : std::filesystem::directory_iterator(dir.path())) {
        cases.push_back({dir.path().filename().string(), file.path().string()});
      }
    }
  }
  std::sort(cases.begin(), cases.end(),
            [](const Case& a, const Case& b) { return a.file < b.file; });
  return cases;
}

// known_failures.txt: "<target>/<file>  <reason>" per line, by the file's path under
// fuzz/regressions.
std::map<std::string, std::string> KnownFailures() {
  std::map<std::string, std::string> known;
  std::ifstream in("fuzz/regressions/known_failures.txt");
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string file, reason;
    fields >> file;
    std::getline(fields >> std::ws, reason);
    known["fuzz/regressions/" + file] = reason;
  }
  return known;
}

std::string CaseName(const testing::TestParamInfo<Case>& info) {
  std::string name = info.param.file.substr(std::string("fuzz/").size());
  for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return name;
}

class FuzzRegression : public testing::TestWithParam<Case> {};

TEST_P(FuzzRegression, AcceptedOrRefusedWithWeftError) {
  const Case& c = GetParam();
  const std::map<std::string, std::string> known = KnownFailures();
  if (auto it = known.find(c.file); it != known.end())
    GTEST_SKIP() << "known finding, not fixed yet: " << it->second;
  const Target target = TargetFor(c.target);
  ASSERT_NE(target, nullptr) << "no fuzz target for the corpus folder '" << c.target << "'";
  std::ifstream in(c.file, std::ios::binary);
  ASSERT_TRUE(in) << "cannot read " << c.file;
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NO_THROW(target(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

INSTANTIATE_TEST_SUITE_P(Corpus, FuzzRegression, testing::ValuesIn(Cases()), CaseName);

// Every known failure names a file that is there (a stale line would skip nothing).
TEST(FuzzCorpus, KnownFailuresNameRegressionFiles) {
  for (const auto& [file, reason] : KnownFailures()) {
    EXPECT_TRUE(std::filesystem::is_regular_file(file))
        << "known_failures.txt names " << file << ": not there";
    EXPECT_FALSE(reason.empty()) << file << " has no reason in known_failures.txt";
  }
}

// The corpus is there: an empty list would pass without testing anything.
TEST(FuzzCorpus, EveryTargetHasSeeds) {
  std::vector<std::string> seen;
  for (const Case& c : Cases()) seen.push_back(c.target);
  for (const char* target : {"csv", "graph_json", "mnist", "op_attrs", "safetensors"}) {
    EXPECT_TRUE(std::find(seen.begin(), seen.end(), target) != seen.end())
        << "no seeds for " << target;
  }
}

}  // namespace
}  // namespace weft::fuzz
