// Running work to completion in another process with a time limit: a program (the host compiler, the
// simulated kernel of `emmy check`, the TorchScript importer) or a function in a forked child (a
// candidate of `emmy tune`, which may crash or hang); and the scratch folders they run in.
#pragma once

#include <spawn.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace emmy {

// posix_spawn's objects, destroyed on every path out (runProcess, and runtime/'s python3 session).
struct SpawnSetup {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attributes;
  SpawnSetup() {
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attributes);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
  }
  SpawnSetup(const SpawnSetup&) = delete;
  SpawnSetup& operator=(const SpawnSetup&) = delete;
};

struct ProcessOutcome {
  enum class Kind { Exited, Signaled, TimedOut };
  Kind kind = Kind::Exited;
  int code = 0;        // the exit status (Exited) or the signal number (Signaled)
  std::string output;  // standard output and standard error together
  double seconds = 0;
};

// Runs `argv` (argv[0] looked up in PATH) in `workDir`, with its standard output and error collected in
// `logFile`. The program gets its own process group, and the whole group is killed when `timeout` passes.
// Throws UsageError when the program cannot be started (it is the environment's, e.g. no compiler).
ProcessOutcome runProcess(const std::vector<std::string>& argv, const std::filesystem::path& workDir,
                          const std::filesystem::path& logFile, std::chrono::milliseconds timeout);

// Runs `body` in a forked child, in a process group of its own, with its standard output and error
// collected in `logFile`; the child exits with what `body` returns (1 if it throws) and never returns
// into the caller's code. As runProcess, the group is killed when `timeout` passes. The child is a copy
// of this process with one thread: `body` must not need the others (nor a GPU context the parent made).
ProcessOutcome runInChild(const std::function<int()>& body, const std::filesystem::path& logFile,
                          std::chrono::milliseconds timeout);

// A fresh folder (mkdtemp) under `parent`, removed with everything in it on destruction unless kept.
class TemporaryFolder {
public:
  // Throws UsageError when the folder cannot be created.
  explicit TemporaryFolder(const std::filesystem::path& parent = std::filesystem::temp_directory_path());
  ~TemporaryFolder();
  TemporaryFolder(const TemporaryFolder&) = delete;
  TemporaryFolder& operator=(const TemporaryFolder&) = delete;

  const std::filesystem::path& path() const { return path_; }
  void keep() { keep_ = true; }

private:
  std::filesystem::path path_;
  bool keep_ = false;
};

// `argv` as one shell command line, quoting what needs it (for --verbose and error messages).
std::string shellCommand(const std::vector<std::string>& argv);

// The whole content of a file; empty when it cannot be read.
std::string readWholeFile(const std::filesystem::path& path);

}  // namespace emmy
