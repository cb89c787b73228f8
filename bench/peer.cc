#include "bench/peer.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
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
  return error == 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
         WEXITSTATUS(status) == 0;
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

std::string StringFlag(int argc, char** argv, const char* name, const std::string& fallback) {
  const std::string prefix = std::string("--") + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return argv[i] + prefix.size();
  }
  return fallback;
}

int IntFlag(int argc, char** argv, const char* name, int fallback) {
  const std::string value = StringFlag(argc, argv, name, "");
  return value.empty() ? fallback : std::atoi(value.c_str());
}

double MedianMs(int reps, const std::function<void()>& step) {
  step();  // warm-up: primitive caches, pools
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

std::string FindPeerPython(std::string* why) {
  if (const char* python = std::getenv("WEFT_PEER_PYTHON"); python != nullptr && *python != '\0')
    return python;
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
  *why = "no python3 on PATH imports torch (tried: " +
         (tried.empty() ? std::string("none found") : tried) +
         "); set WEFT_PEER_PYTHON to an interpreter that does";
  return "";
}

std::string FindPeerScript(const std::string& path, std::string* why) {
  std::vector<std::string> candidates;
  if (const std::string self = SelfPath(); !self.empty())
    candidates.push_back(self + ".runfiles/weft/" + path);
  if (const char* dir = std::getenv("RUNFILES_DIR"))
    candidates.push_back(std::string(dir) + "/weft/" + path);
  candidates.push_back(path);
  if (const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY"))
    candidates.push_back(std::string(ws) + "/" + path);
  std::string looked;
  for (const std::string& candidate : candidates) {
    if (IsFile(candidate)) return candidate;
    looked += (looked.empty() ? "" : ", ") + candidate;
  }
  *why = "cannot find the peer script " + path + " (looked at " + looked + ")";
  return "";
}

int RunCommand(const std::string& command, std::string* output) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return -1;
  std::array<char, 4096> buf;
  while (fgets(buf.data(), buf.size(), pipe) != nullptr) *output += buf.data();
  return pclose(pipe);
}

nlohmann::json RunPeer(const std::string& path, const std::string& args) {
  std::string why;
  const std::string script = FindPeerScript(path, &why);
  const std::string python = script.empty() ? "" : FindPeerPython(&why);
  if (python.empty()) return {{"available", false}, {"error", why}};
  const std::string cmd = ShellQuoted(python) + " " + ShellQuoted(script) + " " + args + " 2>&1";
  std::string out;
  RunCommand(cmd, &out);
  try {
    // The peer prints its result as the last line; anything before it is noise (warnings).
    const size_t line = out.rfind("\n{");
    nlohmann::json result =
        nlohmann::json::parse(out.substr(line == std::string::npos ? out.find('{') : line + 1));
    result["python"] = python;
    return result;
  } catch (...) {
    return {{"available", false},
            {"error", python + " " + script + ": " + (out.empty() ? "printed nothing" : out)}};
  }
}

PeerSession::PeerSession(const std::string& path, const std::string& args) {
  const std::string script = FindPeerScript(path, &error_);
  const std::string python = script.empty() ? "" : FindPeerPython(&error_);
  if (python.empty()) return;
  int in[2], out[2];
  if (pipe(in) != 0) {
    error_ = "pipe: " + std::string(std::strerror(errno));
    return;
  }
  if (pipe(out) != 0) {
    error_ = "pipe: " + std::string(std::strerror(errno));
    close(in[0]), close(in[1]);
    return;
  }
  const std::string cmd = "exec " + ShellQuoted(python) + " -u " + ShellQuoted(script) + " " + args;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, out[1], 2);
  for (int fd : {in[0], in[1], out[0], out[1]}) posix_spawn_file_actions_addclose(&actions, fd);
  std::vector<char*> argv = {const_cast<char*>("/bin/sh"), const_cast<char*>("-c"),
                             const_cast<char*>(cmd.c_str()), nullptr};
  const int spawned = posix_spawn(&pid_, "/bin/sh", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(in[0]);
  close(out[1]);
  if (spawned != 0) {
    close(in[1]), close(out[0]);
    pid_ = -1;
    error_ = "posix_spawn: " + std::string(std::strerror(spawned));
    return;
  }
  to_ = fdopen(in[1], "w");
  from_ = fdopen(out[0], "r");
  hello_ = ReadAnswer();
  if (!hello_.value("available", false)) {
    error_ = python + " " + script + ": " + hello_.value("error", std::string("?"));
    fclose(to_), to_ = nullptr;
  }
  hello_["python"] = python;
}

PeerSession::~PeerSession() {
  if (to_ != nullptr) fclose(to_);
  if (from_ != nullptr) fclose(from_);
  int status = 0;
  if (pid_ > 0) waitpid(pid_, &status, 0);
}

// The next line that starts with '{', parsed; what came before it is kept for the error.
nlohmann::json PeerSession::ReadAnswer() {
  std::string noise;
  std::array<char, 4096> buf;
  while (from_ != nullptr && fgets(buf.data(), buf.size(), from_) != nullptr) {
    if (buf[0] != '{') {
      noise += buf.data();
      continue;
    }
    try {
      return nlohmann::json::parse(buf.data());
    } catch (...) {
      noise += buf.data();
    }
  }
  return {{"available", false},
          {"error", noise.empty() ? "the peer ended without answering" : noise}};
}

nlohmann::json PeerSession::Ask(const std::string& request) {
  if (to_ == nullptr) return {{"available", false}, {"error", error_}};
  std::fprintf(to_, "%s\n", request.c_str());
  std::fflush(to_);
  return ReadAnswer();
}

void ChdirToWorkspace() {
  if (const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY")) (void)!chdir(ws);
}

}  // namespace bench
