#include "backend/sim/precompiled_header.h"

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

}  // namespace

std::optional<fs::path> precompiledHeader(const fs::path& header, const std::string& compiler,
                                          const std::vector<std::string>& flags) {
  // clang reads only its own precompiled format, and would stop at GCC's.
  const std::string version = harness::compilerVersion(compiler);
  if (version.empty() || harness::isClang(compiler)) return std::nullopt;
  std::string whyNot;
  std::optional<std::string> text = readRegularFile(header, kMaxSourceFileBytes, whyNot);
  if (!text) return std::nullopt;
  const fs::path parent = cacheFolder() / "sim-header";
  const fs::path folder = parent / stableHash(*text + '\0' + compiler + '\0' + version + '\0' + join(flags, " "));
  const fs::path copy = folder / header.filename();
  std::error_code error;
  if (fs::exists(fs::path(copy) += ".gch", error)) return copy;

  // Made in a folder of its own and renamed into place whole, so that processes that start together
  // never read a half-written one: the first rename wins, and the others' work is dropped.
  fs::create_directories(parent, error);
  if (error) return std::nullopt;
  const fs::path staging = parent / fmt::format("{}.{}.tmp", folder.filename().string(), ::getpid());
  fs::remove_all(staging, error);
  fs::create_directories(staging, error);
  if (error) return std::nullopt;
  try {
    writeFilesTogether({{staging / header.filename(), *text}});
    std::vector<std::string> command = {compiler};
    command.insert(command.end(), flags.begin(), flags.end());
    command.insert(command.end(), {"-x", "c++-header", header.filename().string(), "-o",
                                   header.filename().string() + ".gch"});
    ProcessOutcome outcome = runProcess(command, staging, staging / "precompile.log", std::chrono::seconds(300));
    if (outcome.kind != ProcessOutcome::Kind::Exited || outcome.code != 0) {
      fs::remove_all(staging, error);
      return std::nullopt;
    }
  } catch (const std::exception&) {  // a full disk, a missing compiler: the header is compiled each time
    fs::remove_all(staging, error);
    return std::nullopt;
  }
  fs::remove(staging / "precompile.log", error);
  fs::rename(staging, folder, error);
  if (error) fs::remove_all(staging, error);  // another process made it first
  removeStaleSiblings(parent, folder);
  if (fs::exists(fs::path(copy) += ".gch", error)) return copy;
  return std::nullopt;
}

}  // namespace emmy::sim
