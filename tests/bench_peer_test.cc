// How the benchmarks find their PyTorch peer (bench/peer.h): the interpreter (WEFT_PEER_PYTHON, or
// the first python3 on PATH that imports torch), from fake python3 scripts on a PATH of temporary
// folders; the peer script, from the binary's runfiles whatever the current folder; and a peer
// session's requests and answers in turn.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "bench/peer.h"

namespace bench {
namespace {

namespace fs = std::filesystem;

class PeerTest : public testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(std::getenv("TEST_TMPDIR")) /
            testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::create_directories(root_);
    const char* path = std::getenv("PATH");
    old_path_ = path != nullptr ? path : "";
    unsetenv("WEFT_PEER_PYTHON");
  }
  void TearDown() override {
    setenv("PATH", old_path_.c_str(), 1);
    unsetenv("WEFT_PEER_PYTHON");
  }

  // <root>/<dir>/python3: a shell script that exits with `import_status` for `-c "import torch"`
  // and otherwise prints a peer's JSON line naming `dir`.
  std::string FakePython(const std::string& dir, int import_status, bool executable = true) {
    fs::create_directories(root_ / dir);
    const fs::path python = root_ / dir / "python3";
    std::ofstream(python) << "#!/bin/sh\n"
                          << "if [ \"$1\" = -c ]; then exit " << import_status << "; fi\n"
                          << "echo 'a warning first'\n"
                          << "echo '{\"available\": true, \"from\": \"" << dir
                          << "\", \"args\": \"'\"$2 $3\"'\"}'\n";
    fs::permissions(
        python, executable ? fs::perms::owner_all : fs::perms::owner_read | fs::perms::owner_write);
    return python.string();
  }
  std::string Dir(const std::string& dir) const { return (root_ / dir).string(); }

  fs::path root_;
  std::string old_path_;
};

TEST_F(PeerTest, TakesTheFirstPython3OnPathThatImportsTorch) {
  FakePython("no_torch", 1);
  FakePython("not_executable", 0, /*executable=*/false);
  const std::string with_torch = FakePython("with_torch", 0);
  FakePython("also_torch", 0);
  const std::string path = ":" + Dir("missing") + ":" + Dir("no_torch") + ":" +
                           Dir("not_executable") + ":" + Dir("with_torch") + ":" +
                           Dir("also_torch");
  setenv("PATH", path.c_str(), 1);
  std::string why;
  EXPECT_EQ(FindPeerPython(&why), with_torch) << why;
}

TEST_F(PeerTest, WeftPeerPythonWins) {
  setenv("PATH", Dir("with_torch").c_str(), 1);
  FakePython("with_torch", 0);
  setenv("WEFT_PEER_PYTHON", "/opt/torch/bin/python", 1);
  std::string why;
  EXPECT_EQ(FindPeerPython(&why), "/opt/torch/bin/python");
}

TEST_F(PeerTest, NoneImportsTorchSaysWhatWasTried) {
  const std::string no_torch = FakePython("no_torch", 1);
  setenv("PATH", Dir("no_torch").c_str(), 1);
  std::string why;
  EXPECT_EQ(FindPeerPython(&why), "");
  EXPECT_NE(why.find(no_torch), std::string::npos) << why;
  EXPECT_NE(why.find("WEFT_PEER_PYTHON"), std::string::npos) << why;
  const nlohmann::json result = RunPeer("bench/torch_peer.py", "1 1");
  EXPECT_FALSE(result.value("available", true));
  EXPECT_NE(result.value("error", std::string()).find("no python3 on PATH imports torch"),
            std::string::npos);
}

// From another folder, with no RUNFILES_DIR: the script is found beside the binary.
TEST_F(PeerTest, FindsTheScriptFromAnyFolder) {
  const fs::path old_cwd = fs::current_path();
  ASSERT_EQ(chdir(root_.c_str()), 0);
  const char* runfiles = std::getenv("RUNFILES_DIR");
  const std::string saved = runfiles != nullptr ? runfiles : "";
  unsetenv("RUNFILES_DIR");
  std::string why;
  const std::string script = FindPeerScript("bench/torch_peer.py", &why);
  EXPECT_NE(script.find(".runfiles/weft/bench/torch_peer.py"), std::string::npos) << why;
  EXPECT_TRUE(fs::exists(script)) << script;
  EXPECT_EQ(FindPeerScript("bench/no_such_peer.py", &why), "");
  EXPECT_NE(why.find("bench/no_such_peer.py"), std::string::npos) << why;

  const std::string with_torch = FakePython("with_torch", 0);
  setenv("PATH", Dir("with_torch").c_str(), 1);
  const nlohmann::json result = RunPeer("bench/torch_peer.py", "2 7");
  EXPECT_TRUE(result.value("available", false)) << result.dump();
  EXPECT_EQ(result.value("from", std::string()), "with_torch");
  EXPECT_EQ(result.value("args", std::string()), "2 7");
  EXPECT_EQ(result.value("python", std::string()), with_torch);
  if (!saved.empty()) setenv("RUNFILES_DIR", saved.c_str(), 1);
  ASSERT_EQ(chdir(old_cwd.c_str()), 0);
}

// A peer that stays up: its first answer says it runs, then each request gets its answer in turn
// (noise lines skipped); one that ends without answering is not available, and says what it
// printed.
TEST_F(PeerTest, ASessionAnswersEachRequestInTurn) {
  fs::create_directories(root_ / "serving");
  const fs::path python = root_ / "serving" / "python3";
  std::ofstream(python)
      << "#!/bin/sh\n"
      << "if [ \"$1\" = -c ]; then exit 0; fi\n"
      << "echo 'a warning first'\n"
      << "echo '{\"available\": true, \"args\": \"'\"$3 $4\"'\"}'\n"
      << "while read line; do echo noise; echo \"{\\\"echo\\\": \\\"$line\\\"}\"; done\n";
  fs::permissions(python, fs::perms::owner_all);
  setenv("PATH", Dir("serving").c_str(), 1);
  {
    PeerSession peer("bench/torch_peer.py", "2 --serve");
    ASSERT_TRUE(peer.available()) << peer.error();
    EXPECT_EQ(peer.hello().value("args", std::string()), "2 --serve");
    EXPECT_EQ(peer.hello().value("python", std::string()), python.string());
    EXPECT_EQ(peer.Ask("inplace").value("echo", std::string()), "inplace");
    EXPECT_EQ(peer.Ask("alloc").value("echo", std::string()), "alloc");
  }  // closes its stdin: the loop ends and the destructor reaps it

  std::ofstream(python) << "#!/bin/sh\n"
                        << "if [ \"$1\" = -c ]; then exit 0; fi\n"
                        << "echo 'no torch here after all'\n";
  PeerSession silent("bench/torch_peer.py", "2 --serve");
  EXPECT_FALSE(silent.available());
  EXPECT_NE(silent.error().find("no torch here after all"), std::string::npos) << silent.error();
  EXPECT_FALSE(silent.Ask("inplace").value("available", true));
}

}  // namespace
}  // namespace bench
