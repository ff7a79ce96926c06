#include "backend/sim/precompiled_simulation.h"

#include <chrono>
#include <system_error>
#include <unistd.h>

#include <fmt/format.h>

#include "backend/harness.h"
#include "support/diagnostics.h"
#include "support/files.h"
#include "support/process.h"
#include "support/text.h"

namespace emmy::sim {

namespace fs = std::filesystem;

namespace {

// Folders of other headers (an older Emmy's) untouched for this long are removed when a new one is made:
// a process that still compiles against one has used it more recently.
constexpr auto kStaleAfter = std::chrono::hours(24);

void removeStaleSiblings(const fs::path& parent, const fs::path& keep) {
  std::error_code error;
  const auto now = fs::file_time_type::clock::now();
  for (fs::directory_iterator entry(parent, error), end; !error && entry != end; entry.increment(error)) {
    if (entry->path() == keep) continue;
    std::error_code ignored;
    const auto written = fs::last_write_time(entry->path(), ignored);
    if (!ignored && now - written > kStaleAfter) fs::remove_all(entry->path(), ignored);
  }
}

constexpr const char* kRuntimeSourceName = "emmy_cuda_sim_runtime.cpp";
constexpr const char* kRuntimeObjectName = "emmy_cuda_sim_runtime.o";
constexpr const char* kLinkFlagsName = "link_flags";  // the linker flag, or nothing
// gold links a program in a third of the time GNU ld takes (0.06 s against 0.15 s), where it is installed.
constexpr const char* kFastLinkerFlag = "-fuse-ld=gold";

// Runs `command` in `folder`; false if it fails.
bool compiles(const std::vector<std::string>& command, const fs::path& folder) {
  ProcessOutcome outcome = runProcess(command, folder, folder / "precompile.log", std::chrono::seconds(300));
  return outcome.kind == ProcessOutcome::Kind::Exited && outcome.code == 0;
}

}  // namespace

std::optional<PrecompiledSimulation> precompiledSimulation(const fs::path& header, const std::string& compiler,
                                                           const std::vector<std::string>& flags) {
  // clang reads only its own precompiled format, and would stop at GCC's.
  const std::string version = harness::compilerVersion(compiler);
  if (version.empty() || harness::isClang(compiler)) return std::nullopt;
  std::string whyNot;
  std::optional<std::string> text = readRegularFile(header, kMaxSourceFileBytes, whyNot);
  if (!text) return std::nullopt;
  const fs::path parent = cacheFolder() / "sim-header";
  // The files the folder holds are part of the key, so that a folder an Emmy that made other files made is
  // never taken for a whole one.
  const fs::path folder =
      parent / stableHash(*text + '\0' + compiler + '\0' + version + '\0' + join(flags, " ") + '\0' +
                          kRuntimeObjectName + '\0' + kLinkFlagsName);
  // What the folder holds, once whole.
  auto made = [&]() -> std::optional<PrecompiledSimulation> {
    PrecompiledSimulation simulation{folder / header.filename(), folder / kRuntimeObjectName, {}};
    std::error_code error;
    std::string whyNot;
    std::optional<std::string> linkFlags = readRegularFile(folder / kLinkFlagsName, 1024, whyNot);
    if (!linkFlags || !fs::exists(fs::path(simulation.header) += ".gch", error) ||
        !fs::exists(simulation.runtimeObject, error))
      return std::nullopt;
    if (!linkFlags->empty()) simulation.linkFlags.push_back(*linkFlags);
    return simulation;
  };
  if (std::optional<PrecompiledSimulation> simulation = made()) return simulation;

  // Made in a folder of its own and renamed into place whole, so that processes that start together
  // never read a half-written one: the first rename wins, and the others' work is dropped.
  std::error_code error;
  fs::create_directories(parent, error);
  if (error) return std::nullopt;
  const fs::path staging = parent / fmt::format("{}.{}.tmp", folder.filename().string(), ::getpid());
  fs::remove_all(staging, error);
  fs::create_directories(staging, error);
  if (error) return std::nullopt;
  try {
    writeFilesTogether({{staging / header.filename(), *text},
                        {staging / kRuntimeSourceName, "#include \"" + header.filename().string() + "\"\n"},
                        {staging / "link_test.cpp", "int main() {}\n"}});
    std::vector<std::string> runtime = {compiler};
    runtime.insert(runtime.end(), flags.begin(), flags.end());
    runtime.insert(runtime.end(), {"-DEMMY_SIM_RUNTIME_OBJECT", "-c", kRuntimeSourceName, "-o", kRuntimeObjectName});
    std::vector<std::string> precompile = {compiler};
    precompile.insert(precompile.end(), flags.begin(), flags.end());
    precompile.insert(precompile.end(), {kLinkedRuntimeFlag, "-x", "c++-header", header.filename().string(), "-o",
                                         header.filename().string() + ".gch"});
    // The object first: GCC would try the .gch for its #include, made with other macros.
    if (!compiles(runtime, staging) || !compiles(precompile, staging)) {
      fs::remove_all(staging, error);
      return std::nullopt;
    }
    std::vector<std::string> fastLink = {compiler, kFastLinkerFlag, "link_test.cpp", kRuntimeObjectName, "-o", "linked"};
    writeFilesTogether({{staging / kLinkFlagsName, compiles(fastLink, staging) ? std::string(kFastLinkerFlag) : ""}});
  } catch (const std::exception&) {  // a full disk, a missing compiler: the header is compiled each time
    fs::remove_all(staging, error);
    return std::nullopt;
  }
  fs::remove(staging / "precompile.log", error);
  fs::remove(staging / kRuntimeSourceName, error);
  fs::remove(staging / "link_test.cpp", error);
  fs::remove(staging / "linked", error);
  fs::rename(staging, folder, error);
  if (error) fs::remove_all(staging, error);  // another process made it first
  removeStaleSiblings(parent, folder);
  return made();
}

}  // namespace emmy::sim
