// Running a program to completion with a time limit (the host compiler and the simulated kernel of
// `emmy check`, the TorchScript importer), and the scratch folders they run in.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

namespace emmy {

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
                          const std::filesystem::path& logFile, std::chrono::seconds timeout);

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

}  // namespace emmy
