// The layer order of DESIGN.md, checked on the sources: a file of a layer includes only its own
// layer and the layers above it, and a layer's internal/ headers are included only from inside
// that layer (and from tests/, which test internals). A file's layer is the first component of
// its path, so new folders inside a layer need no change here.
//
// The sources come from //tests:layered_sources (tests/layering.bzl): every source file of the
// targets the layers' libraries and the examples are built from, listed in the file passed as
// argv[1] and present as runfiles.
#include <gtest/gtest.h>

#include <array>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

// DESIGN.md's layers, in order: each may use only those before it.
constexpr std::array<std::string_view, 9> kLayers = {
    "core", "engine", "storage", "ops", "graph", "passes", "executor", "distributed", "weft"};
// Folders after the layers: they may include any layer, and each other.
constexpr std::array<std::string_view, 5> kUsers = {"examples", "tests", "bench", "tools", "fuzz"};
constexpr int kUsersRank = static_cast<int>(kLayers.size());

const char* g_manifest = nullptr;  // argv[1]

std::string FirstComponent(std::string_view path) {
  return std::string(path.substr(0, path.find('/')));
}

// The position of a path's top folder in the order: a layer's index, kUsersRank for the folders
// after the layers, nullopt for anything else (a system or third-party header).
std::optional<int> Rank(std::string_view path) {
  const std::string top = FirstComponent(path);
  for (size_t i = 0; i < kLayers.size(); ++i) {
    if (top == kLayers[i]) return static_cast<int>(i);
  }
  for (std::string_view user : kUsers) {
    if (top == user) return kUsersRank;
  }
  return std::nullopt;
}

bool IsInternal(std::string_view include) {
  const size_t dir_end = include.rfind('/');
  if (dir_end == std::string_view::npos) return false;
  const std::string dirs = "/" + std::string(include.substr(0, dir_end)) + "/";
  return dirs.find("/internal/") != std::string::npos;
}

std::string LayerList() {
  std::string list;
  for (std::string_view layer : kLayers) list += std::string(layer) + ", ";
  list += "then";
  for (std::string_view user : kUsers) list += " " + std::string(user);
  return list;
}

// Why `file` may not include `include` (a path as written in #include "..."), or nullopt if it may.
std::optional<std::string> Violation(std::string_view file, std::string_view include) {
  const std::optional<int> file_rank = Rank(file), include_rank = Rank(include);
  if (!file_rank || !include_rank) return std::nullopt;
  const std::string file_top = FirstComponent(file), include_top = FirstComponent(include);
  if (*include_rank > *file_rank) {
    return "a file of layer '" + file_top +
           "' may include only its own layer and those before it in DESIGN.md's "
           "order (" +
           LayerList() + "), found '" + include_top + "', which comes after it";
  }
  if (IsInternal(include) && file_top != include_top && file_top != "tests") {
    return "an internal/ header of layer '" + include_top + "' may be included only from inside '" +
           include_top + "' (or from tests/), found it included from '" + file_top + "'";
  }
  return std::nullopt;
}

// Every rule broken by `file`, as "file:line: #include "x": why".
std::vector<std::string> ViolationsIn(const std::string& file, std::istream& text) {
  static const std::regex kInclude(R"re(^\s*#\s*include\s*"([^"]+)")re");
  std::vector<std::string> found;
  std::string line;
  for (int number = 1; std::getline(text, line); ++number) {
    std::smatch match;
    if (!std::regex_search(line, match, kInclude)) continue;
    if (std::optional<std::string> why = Violation(file, match[1].str())) {
      found.push_back(file + ":" + std::to_string(number) + ": #include \"" + match[1].str() +
                      "\": " + *why);
    }
  }
  return found;
}

std::vector<std::string> Sources() {
  std::ifstream manifest(g_manifest);
  EXPECT_TRUE(manifest) << "cannot read the list of sources " << g_manifest;
  std::vector<std::string> paths;
  for (std::string path; std::getline(manifest, path);) {
    if (!path.empty()) paths.push_back(path);
  }
  return paths;
}

TEST(Layering, TheRuleFollowsDesignOrder) {
  EXPECT_FALSE(Violation("storage/ndarray.cc", "engine/engine.h"));
  EXPECT_FALSE(Violation("weft/ops.cc", "core/error.h"));
  EXPECT_FALSE(Violation("ops/nn/conv.cc", "ops/cpu/internal/dnnl_util.h"));  // a folder inside ops
  EXPECT_FALSE(Violation("engine/gpu/cuda_backend.cc", "engine/internal/var.h"));
  EXPECT_FALSE(
      Violation("tests/engine_test.cc", "engine/internal/var.h"));  // tests may test internals
  EXPECT_FALSE(Violation("examples/train_mlp.cc", "weft/weft.h"));
  EXPECT_FALSE(Violation("core/error.cc", "gtest/gtest.h"));  // not a weft path
  EXPECT_TRUE(Violation("engine/engine.cc", "storage/ndarray.h"));
  EXPECT_TRUE(Violation("core/device.cc", "weft/weft.h"));
  EXPECT_TRUE(Violation("ops/math/dot.cc", "graph/graph.h"));
  EXPECT_TRUE(Violation("weft/ops.cc", "tests/op_test_util.h"));  // layers never use tests
  EXPECT_TRUE(Violation("storage/ndarray.cc", "engine/internal/var.h"));
  EXPECT_TRUE(Violation("ops/gpu/gemm.cc", "storage/gpu/internal/pool.h"));
  EXPECT_TRUE(Violation("examples/engine_dag.cc", "engine/internal/profiler.h"));
  const std::optional<std::string> why = Violation("engine/engine.cc", "storage/ndarray.h");
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("'engine'"), std::string::npos) << *why;
  EXPECT_NE(why->find("'storage'"), std::string::npos) << *why;
}

TEST(Layering, ViolationsNameTheFileTheLineAndTheInclude) {
  std::istringstream text(
      "#include <vector>\n\n#include \"core/error.h\"\n  #  include \"passes/cse.h\"\n");
  const std::vector<std::string> found = ViolationsIn("storage/ndarray.cc", text);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rfind("storage/ndarray.cc:4: #include \"passes/cse.h\": ", 0), 0u) << found[0];
}

// The check itself. Every layer must be present: an empty or partial list would pass vacuously.
TEST(Layering, EverySourceIncludesOnlyWhatItsLayerMay) {
  ASSERT_NE(g_manifest, nullptr) << "usage: layering_test <file listing the sources>";
  const std::vector<std::string> sources = Sources();
  std::array<int, kLayers.size()> files_per_layer{};
  std::vector<std::string> violations;
  for (const std::string& path : sources) {
    std::ifstream text(path);
    ASSERT_TRUE(text) << "cannot read " << path;
    if (std::optional<int> rank = Rank(path); rank && *rank < kUsersRank) ++files_per_layer[*rank];
    for (std::string& v : ViolationsIn(path, text)) violations.push_back(std::move(v));
  }
  for (size_t i = 0; i < kLayers.size(); ++i) {
    EXPECT_GT(files_per_layer[i], 0) << "no source of layer '" << kLayers[i] << "' was listed";
  }
  std::string report;
  for (const std::string& v : violations) report += "\n  " + v;
  EXPECT_TRUE(violations.empty()) << violations.size()
                                  << " include(s) break the layer order:" << report;
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc > 1) g_manifest = argv[1];
  return RUN_ALL_TESTS();
}
