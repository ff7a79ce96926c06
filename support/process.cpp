#include "support/process.h"

#include <fcntl.h>
#include <stdlib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>

#include <fmt/format.h>

#include "support/diagnostics.h"

extern char** environ;

namespace emmy {

namespace {


// Waits for `pid` (the leader of its own process group) until `timeout` after `start`, then kills the
// group. Polls rather than blocking in waitpid, so that the deadline needs no signal handler; the interval
// grows to keep a long compilation from waking Emmy often.
ProcessOutcome waitWithDeadline(pid_t pid, std::chrono::steady_clock::time_point start,
                                std::chrono::milliseconds timeout, const std::filesystem::path& logFile) {
  ProcessOutcome outcome;
  auto interval = std::chrono::milliseconds(1);
  int status = 0;
  while (true) {
    pid_t waited = waitpid(pid, &status, WNOHANG);
    if (waited == pid) break;
    EMMY_INTERNAL_ASSERT(waited == 0 || errno == EINTR, "waitpid failed: {}", std::strerror(errno));
    if (std::chrono::steady_clock::now() - start > timeout) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      outcome.kind = ProcessOutcome::Kind::TimedOut;
      break;
    }
    std::this_thread::sleep_for(interval);
    interval = std::min(interval * 2, std::chrono::milliseconds(20));
  }
  outcome.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (outcome.kind != ProcessOutcome::Kind::TimedOut) {
    if (WIFEXITED(status)) {
      outcome.kind = ProcessOutcome::Kind::Exited;
      outcome.code = WEXITSTATUS(status);
    } else {
      outcome.kind = ProcessOutcome::Kind::Signaled;
      outcome.code = WTERMSIG(status);
    }
  }
  outcome.output = readWholeFile(logFile);
  return outcome;
}

}  // namespace

std::string readWholeFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

ProcessOutcome runProcess(const std::vector<std::string>& argv, const std::filesystem::path& workDir,
                          const std::filesystem::path& logFile, std::chrono::milliseconds timeout) {
  EMMY_INTERNAL_ASSERT(!argv.empty(), "runProcess without a program");
  SpawnSetup setup;
  std::string workDirText = workDir.string(), logText = logFile.string();
  posix_spawn_file_actions_addchdir_np(&setup.actions, workDirText.c_str());
  posix_spawn_file_actions_addopen(&setup.actions, STDOUT_FILENO, logText.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&setup.actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawnattr_setflags(&setup.attributes, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&setup.attributes, 0);  // a group of its own, so that a timeout kills its children too

  std::vector<char*> arguments;
  for (const std::string& argument : argv) arguments.push_back(const_cast<char*>(argument.c_str()));
  arguments.push_back(nullptr);

  auto start = std::chrono::steady_clock::now();
  pid_t pid;
  if (int error = posix_spawnp(&pid, arguments[0], &setup.actions, &setup.attributes, arguments.data(), environ))
    throw UsageError(fmt::format("cannot run {}: {}", argv[0], std::strerror(error)));
  return waitWithDeadline(pid, start, timeout, logFile);
}

ProcessOutcome runInChild(const std::function<int()>& body, const std::filesystem::path& logFile,
                          std::chrono::milliseconds timeout) {
  // Opened before the fork, so that a failure is the parent's to report.
  int log = open(logFile.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log < 0) throw UsageError(fmt::format("cannot write {}: {}", logFile.string(), std::strerror(errno)));
  // Buffered output would otherwise be written twice, once by each process.
  std::fflush(stdout);
  std::fflush(stderr);
  auto start = std::chrono::steady_clock::now();
  pid_t pid = fork();
  if (pid < 0) {
    close(log);
    throw UsageError(fmt::format("cannot start a process: {}", std::strerror(errno)));
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a killed parent (Ctrl-C on emmy tune) leaves no child running
    dup2(log, STDOUT_FILENO);
    dup2(log, STDERR_FILENO);
    int code = 1;
    try {
      code = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
    }
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(code);  // not exit: the parent's atexit handlers and static destructors are not the child's to run
  }
  // Also from the parent, so that the group exists before a timeout can kill it.
  setpgid(pid, pid);
  close(log);
  return waitWithDeadline(pid, start, timeout, logFile);
}

TemporaryFolder::TemporaryFolder(const std::filesystem::path& parent) {
  std::string pattern = (parent / "emmy-XXXXXX").string();
  if (!mkdtemp(pattern.data()))
    throw UsageError(fmt::format("cannot create a folder like {}: {}", pattern, std::strerror(errno)));
  path_ = pattern;
}

TemporaryFolder::~TemporaryFolder() {
  std::error_code ignored;
  if (!keep_) std::filesystem::remove_all(path_, ignored);
}

std::string shellCommand(const std::vector<std::string>& argv) {
  std::string command;
  for (const std::string& argument : argv) {
    bool plain = !argument.empty() && std::all_of(argument.begin(), argument.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("-_./=+:,", c) != nullptr;
    });
    if (!command.empty()) command += ' ';
    if (plain) {
      command += argument;
    } else {
      command += '\'';
      for (char c : argument) command += c == '\'' ? std::string("'\\''") : std::string(1, c);
      command += '\'';
    }
  }
  return command;
}

}  // namespace emmy
