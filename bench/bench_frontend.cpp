// Frontend latency: how long `emmy build EXAMPLE --emit tensor` takes as a process (spawned the way a
// user or a build system runs it) and how much of that is parsing and elaboration (in this process,
// through the Frontend API). Prints the median and the 90th percentile per example in milliseconds,
// and whether the process stays within the 50 ms the project promises.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "frontend/frontend.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;

constexpr double kProcessBudgetMs = 50;

struct Percentiles {
  double median;
  double p90;
};

// Nearest-rank percentiles: actual samples, never interpolated.
Percentiles percentiles(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  auto rank = [&](double fraction) {
    size_t rank = static_cast<size_t>(std::ceil(fraction * static_cast<double>(samples.size())));
    return samples[std::max<size_t>(rank, 1) - 1];
  };
  return {rank(0.5), rank(0.9)};
}

// Runs `once` untimed (to warm the caches) and then `runs` timed times; nullopt when any run fails.
std::optional<Percentiles> timeRuns(int runs, const std::function<bool()>& once) {
  if (!once()) return std::nullopt;
  std::vector<double> milliseconds;
  for (int run = 0; run < runs; ++run) {
    auto start = std::chrono::steady_clock::now();
    if (!once()) return std::nullopt;
    milliseconds.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  return percentiles(std::move(milliseconds));
}

// `DRIVER build FILE --emit tensor` as a child process with its output discarded (its errors are not);
// true when it exits with 0.
bool runDriver(const std::string& driver, const std::string& file) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  std::vector<std::string> arguments = {driver, "build", file, "--emit", "tensor"};
  std::vector<char*> argv;
  for (std::string& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);
  pid_t child = 0;
  int error = posix_spawn(&child, driver.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) {
    fmt::print(stderr, "cannot run {}: {}\n", driver, std::strerror(error));
    return false;
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// What `emmy build FILE --emit tensor` does before printing, minus process start-up.
bool parseAndElaborate(const std::string& file) {
  emmy::Diagnostics diagnostics;
  emmy::Frontend frontend(diagnostics, {emmy::Frontend::defaultStdlibDir()});
  if (const emmy::ast::Module* module = frontend.loadFile(file)) frontend.elaborateAll(*module);
  return !diagnostics.hasErrors();
}

std::vector<std::string> examples() {
  std::vector<std::string> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(EMMY_EXAMPLES_DIR))
    if (entry.path().extension() == ".emmy") files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

std::string formatTimes(const std::optional<Percentiles>& times) {
  return times ? fmt::format("{:>8.2f} {:>8.2f}", times->median, times->p90) : fmt::format("{:>17}", "failed");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Frontend latency of `emmy build FILE --emit tensor`, per file"};
  int runs = 30;
  std::string driver = EMMY_DRIVER_PATH;
  std::vector<std::string> files;
  app.add_option("--runs", runs, "timed runs per file (after one warm-up run)")->check(CLI::Range(1, 100000));
  app.add_option("--emmy", driver, "the emmy executable to time")->check(CLI::ExistingFile);
  app.add_option("files", files, ".emmy files (default: every example)")->check(CLI::ExistingFile);
  CLI11_PARSE(app, argc, argv);
  if (files.empty()) files = examples();

  fmt::print("emmy build FILE --emit tensor: {} timed runs per file, milliseconds\n", runs);
  fmt::print("{:<24} {:>17}   {:>17}\n", "", "process", "parse+elaborate");
  fmt::print("{:<24} {:>8} {:>8}   {:>8} {:>8}\n", "file", "median", "p90", "median", "p90");
  int failures = 0, overBudget = 0;
  for (const std::string& file : files) {
    std::optional<Percentiles> process = timeRuns(runs, [&] { return runDriver(driver, file); });
    std::optional<Percentiles> inProcess = timeRuns(runs, [&] { return parseAndElaborate(file); });
    failures += !process || !inProcess;
    overBudget += process && process->p90 > kProcessBudgetMs;
    fmt::print("{:<24} {}   {}\n", fs::path(file).filename().string(), formatTimes(process), formatTimes(inProcess));
  }
  fmt::print("budget: p90 of the process under {} ms: {} of {} files within{}\n", kProcessBudgetMs,
             static_cast<int>(files.size()) - failures - overBudget, files.size(),
             failures ? fmt::format(", {} failed", failures) : "");
  return failures ? 1 : 0;
}
