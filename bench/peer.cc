#include "bench/peer.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

extern char** environ;

namespace bench {
namespace {

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

bool IsFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// `python -c "import torch"`, its output discarded: true when it exits with 0.
bool ImportsTorch(const std::string& python) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  std::vector<char*> argv = {const_cast<char*>(python.c_str()), const_cast<char*>("-c"),
                             const_cast<char*>("import torch"), nullptr};
  pid_t pid;
  const int error = posix_spawn(&pid, python.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  return error == 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// The binary's own path (its runfiles are beside it), or "".
std::string SelfPath() {
  std::array<char, 4096> buf;
  const ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  return n > 0 ? std::string(buf.data(), n) : "";
}

// Single-quoted for /bin/sh.
std::string ShellQuoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

int IntFlag(int argc, char** argv, const char* name, int fallback) {
  const std::string prefix = std::string("--") + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return std::atoi(argv[i] + prefix.size());
  }
  return fallback;
}

double MedianMs(int reps, const std::function<void()>& step) {
  step();  // warm-up: primitive caches, pools
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

std::string FindPeerPython(std::string* why) {
  if (const char* python = std::getenv("WEFT_PEER_PYTHON"); python != nullptr && *python != '\0') return python;
  const char* path = std::getenv("PATH");
  std::string tried;
  std::set<std::string> seen;  // the same interpreter under two PATH entries is tried once
  for (std::string rest = path != nullptr ? path : ""; !rest.empty();) {
    const size_t colon = rest.find(':');
    const std::string dir = rest.substr(0, colon);
    rest = colon == std::string::npos ? "" : rest.substr(colon + 1);
    const std::string python = dir + "/python3";
    if (dir.empty() || !IsExecutableFile(python)) continue;
    char* real = realpath(python.c_str(), nullptr);
    const bool fresh = seen.insert(real != nullptr ? real : python).second;
    std::free(real);
    if (!fresh) continue;
    if (ImportsTorch(python)) return python;
    tried += (tried.empty() ? "" : ", ") + python;
  }
  *why = "no python3 on PATH imports torch (tried: " + (tried.empty() ? std::string("none found") : tried) +
         "); set WEFT_PEER_PYTHON to an interpreter that does";
  return "";
}

std::string FindPeerScript(const std::string& path, std::string* why) {
  std::vector<std::string> candidates;
  if (const std::string self = SelfPath(); !self.empty()) candidates.push_back(self + ".runfiles/weft/" + path);
  if (const char* dir = std::getenv("RUNFILES_DIR")) candidates.push_back(std::string(dir) + "/weft/" + path);
  candidates.push_back(path);
  if (const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY")) candidates.push_back(std::string(ws) + "/" + path);
  std::string looked;
  for (const std::string& candidate : candidates) {
    if (IsFile(candidate)) return candidate;
    looked += (looked.empty() ? "" : ", ") + candidate;
  }
  *why = "cannot find the peer script " + path + " (looked at " + looked + ")";
  return "";
}

nlohmann::json RunPeer(const std::string& path, const std::string& args) {
  std::string why;
  const std::string script = FindPeerScript(path, &why);
  const std::string python = script.empty() ? "" : FindPeerPython(&why);
  if (python.empty()) return {{"available", false}, {"error", why}};
  const std::string cmd = ShellQuoted(python) + " " + ShellQuoted(script) + " " + args + " 2>&1";
  std::string out;
  if (FILE* pipe = popen(cmd.c_str(), "r")) {
    std::array<char, 4096> buf;
    while (fgets(buf.data(), buf.size(), pipe) != nullptr) out += buf.data();
    pclose(pipe);
  }
  try {
    // The peer prints its result as the last line; anything before it is noise (warnings).
    const size_t line = out.rfind("\n{");
    nlohmann::json result = nlohmann::json::parse(out.substr(line == std::string::npos ? out.find('{') : line + 1));
    result["python"] = python;
    return result;
  } catch (...) {
    return {{"available", false}, {"error", python + " " + script + ": " + (out.empty() ? "printed nothing" : out)}};
  }
}

void ChdirToWorkspace() {
  if (const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY")) (void)!chdir(ws);
}

}  // namespace bench
