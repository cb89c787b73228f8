// A process that ends with work still queued in the engine ends cleanly: every queued op runs,
// the workers are joined, the exit status is 0, and nothing hangs (each run has a time limit).
// Runs engine_exit_child many times in each mode.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace {

std::string child_path;

struct RunResult {
  int status = -1;
  std::string output;
};

RunResult RunChild(const std::string& env, const std::string& mode) {
  // `timeout` turns a hang into exit status 124.
  std::string command = env + " timeout 30 " + child_path + " " + mode + " 2>&1";
  RunResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 512> buf;
  while (fgets(buf.data(), buf.size(), pipe) != nullptr) result.output += buf.data();
  int raw = pclose(pipe);
  result.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  return result;
}

void ExpectCleanRuns(const std::string& env, const std::string& mode, int runs) {
  for (int i = 0; i < runs; ++i) {
    RunResult r = RunChild(env, mode);
    ASSERT_EQ(r.status, 0) << "run " << i << " of '" << mode << "' (124 = hung):\n" << r.output;
    ASSERT_NE(r.output.find("ran 10000 of 10000"), std::string::npos) << "run " << i << ":\n"
                                                                      << r.output;
  }
}

TEST(EngineExit, ReturningFromMainWithQueuedWorkDrainsIt) {
  ExpectCleanRuns("WEFT_CPU_WORKERS=2", "return", 20);
  ExpectCleanRuns("WEFT_CPU_WORKERS=8", "return", 10);
  ExpectCleanRuns("WEFT_ENGINE=naive", "return", 2);
}

TEST(EngineExit, ExitWithQueuedWorkDrainsIt) { ExpectCleanRuns("WEFT_CPU_WORKERS=2", "exit", 20); }

TEST(EngineExit, UnobservedFailuresAreReportedNotFatal) {
  RunResult r = RunChild("WEFT_CPU_WORKERS=2", "failures");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(
      r.output.find("weft: 5 failed op(s) were never waited for; the first: op failed at exit"),
      std::string::npos)
      << r.output;
}

TEST(EngineExit, ProfileIsWrittenAtExit) {
  std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/exit_profile.json";
  RunResult r = RunChild("WEFT_CPU_WORKERS=2 WEFT_PROFILE=" + path, "return");
  ASSERT_EQ(r.status, 0) << r.output;
  std::ifstream in(path);
  ASSERT_TRUE(in) << "no profile at " << path;
  nlohmann::json trace = nlohmann::json::parse(in);  // throws (fails the test) if invalid
  int ops = 0;
  for (const auto& e : trace["traceEvents"]) ops += e["ph"] == "X" && e["name"] == "exit_op";
  EXPECT_EQ(ops, 10000);
}

TEST(EngineExit, ABadSettingIsAnErrorNotACrash) {
  RunResult r = RunChild("WEFT_CPU_WORKERS=lots", "return");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("WEFT_CPU_WORKERS"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("found 'lots'"), std::string::npos) << r.output;
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: engine_exit_test <path to engine_exit_child>\n");
    return 2;
  }
  child_path = argv[1];
  return RUN_ALL_TESTS();
}
