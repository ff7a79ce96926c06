#include "backend/sim/profile.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include <fmt/format.h>

#include "backend/cuda/emit_cuda.h"
#include "backend/harness.h"
#include "support/diagnostics.h"
#include "support/process.h"

namespace emmy::sim {

namespace fs = std::filesystem;

AccessCounters& AccessCounters::operator+=(const AccessCounters& other) {
  executions += other.executions;
  requests += other.requests;
  sectors += other.sectors;
  idealSectors += other.idealSectors;
  wavefronts += other.wavefronts;
  idealWavefronts += other.idealWavefronts;
  lanes += other.lanes;
  divergent += other.divergent;
  return *this;
}

AccessCounters KernelProfile::total(bool global) const {
  AccessCounters sum;
  for (const AccessSite& site : sites)
    if (site.global == global) sum += site.counters;
  return sum;
}

std::vector<std::string> profileCompileFlags(const std::string& hostCompiler) {
  // clang copies a 16-byte struct (`out[i] = in[i]` of float4) with a memcpy its instrumentation does not
  // report: the profile would miss the kernel's vector accesses.
  if (harness::isClang(hostCompiler))
    throw UsageError(fmt::format("emmy check --profile needs GCC as the host compiler, and {} is clang: set CXX=g++",
                                 hostCompiler));
  // The instrumentation calls __tsan_readN/__tsan_writeN at every load and store (emmy_cuda_sim.h defines
  // them); function entries and exits are left alone. No PIE, so that the addresses the program writes
  // are those of its debug information; DWARF 4, because binutils 2.40's addr2line names the wrong file
  // for GCC 12's DWARF 5 line tables. One OS thread: no atomic guards for local statics, which would call
  // the runtime. A 16-byte vector copied as one: GCC's scalar replacement would load a float4 local field
  // by field.
  return {"-DEMMY_PROFILE", "-fsanitize=thread", "--param=tsan-instrument-func-entry-exit=0", "-g", "-gdwarf-4",
          "-fno-pie", "-fno-threadsafe-statics", "-fno-tree-sra"};
}

std::vector<std::string> profileLinkFlags() { return {"-no-pie"}; }

namespace {

struct RawSite {
  uint64_t address;
  bool global, store;
  uint32_t bytes;
  AccessCounters counters;
};

// The line in `cuFileName` of each site (an address in the access's instruction): the outermost frame of the address's inline chain
// that lies in the .cu (an access in an inlined helper, of the simulation header or of the .cu's prelude,
// is the kernel line that called it), but for a kernel's call of the body it shares with its 64-bit twin
// (the statement in that body is the site). addr2line prints, per address, "0xADDR: FILE:LINE ..." and
// then " (inlined by) FILE:LINE ..." from the innermost frame out.
std::map<uint64_t, int> linesOf(const std::vector<uint64_t>& addresses, const fs::path& program,
                                const std::string& cuFileName, const std::string& cuSource) {
  std::map<uint64_t, int> lines;
  if (addresses.empty()) return lines;
  std::vector<std::string> command = {"addr2line", "-e", program.string(), "-a", "-i", "-p"};
  for (uint64_t address : addresses) command.push_back(fmt::format("0x{:x}", address));
  ProcessOutcome outcome;
  try {
    outcome = runProcess(command, program.parent_path(), program.parent_path() / "addr2line.log", std::chrono::seconds(60));
  } catch (const UsageError&) {
    return lines;  // no addr2line: the sites stay unnamed
  }
  if (outcome.kind != ProcessOutcome::Kind::Exited || outcome.code != 0) return lines;
  std::vector<std::string> cuRows;
  std::istringstream cuText(cuSource);
  for (std::string row; std::getline(cuText, row);) cuRows.push_back(row);
  std::istringstream text(outcome.output);
  uint64_t current = 0;
  for (std::string row; std::getline(text, row);) {
    std::string frame = row;
    if (row.rfind("0x", 0) == 0) {
      current = std::stoull(row.substr(0, row.find(':')), nullptr, 16);
      frame = row.substr(row.find(':') + 1);
    } else if (size_t inlined = row.find("(inlined by)"); inlined != std::string::npos) {
      frame = row.substr(inlined + 12);
    }
    // " FILE:LINE" or " FILE:LINE (discriminator N)"
    size_t start = frame.find_first_not_of(' ');
    if (start == std::string::npos) continue;
    frame = frame.substr(start, frame.find(' ', start) - start);
    size_t colon = frame.rfind(':');
    if (colon == std::string::npos) continue;
    if (fs::path(frame.substr(0, colon)).filename() != cuFileName) continue;
    try {
      int line = std::stoi(frame.substr(colon + 1));
      if (line < 1 || static_cast<size_t>(line) > cuRows.size() || !cuda::callsSharedBody(cuRows[line - 1])) lines[current] = line;
    } catch (const std::exception&) {
    }
  }
  return lines;
}

std::string sourceLine(const std::string& source, int line) {
  std::istringstream text(source);
  std::string row;
  for (int number = 1; std::getline(text, row); ++number)
    if (number == line) {
      size_t start = row.find_first_not_of(' ');
      return start == std::string::npos ? "" : row.substr(start);
    }
  return "";
}

}  // namespace

Profile readProfile(const fs::path& profileFile, const fs::path& program, const std::string& cuFileName,
                    const std::string& cuSource) {
  Profile profile;
  if (!fs::exists(profileFile)) return profile;  // no kernel ran: the program writes its profile at its first launch
  std::ifstream file(profileFile);
  std::string header;
  if (!std::getline(file, header) || header != "emmy-profile 1")
    throw InternalError(fmt::format("the profiling program wrote no profile to {} (a bug in Emmy)", profileFile.string()));
  std::vector<std::vector<RawSite>> raw;
  std::vector<uint64_t> addresses;
  for (std::string row; std::getline(file, row);) {
    std::istringstream fields(row);
    std::string kind;
    fields >> kind;
    if (kind == "kernel") {
      KernelProfile& kernel = profile.kernels.emplace_back();
      uint64_t sectors = 0;
      fields >> kernel.name >> kernel.launches >> kernel.blocks >> kernel.threadsPerBlock >> kernel.barriers >> sectors;
      kernel.distinctGlobalBytes = 32 * sectors;
      raw.emplace_back();
    } else if (kind == "site" && !raw.empty()) {
      RawSite site{};
      std::string space, access;
      AccessCounters& c = site.counters;
      fields >> std::hex >> site.address >> std::dec >> space >> access >> site.bytes >> c.executions >> c.requests >>
          c.sectors >> c.idealSectors >> c.wavefronts >> c.idealWavefronts >> c.lanes >> c.divergent;
      site.global = space == "global";
      site.store = access == "store";
      raw.back().push_back(site);
      addresses.push_back(site.address);
    }
    if (!fields) throw InternalError(fmt::format("{}: cannot read \"{}\" (a bug in Emmy)", profileFile.string(), row));
  }
  std::sort(addresses.begin(), addresses.end());
  addresses.erase(std::unique(addresses.begin(), addresses.end()), addresses.end());
  std::map<uint64_t, int> lines = linesOf(addresses, program, cuFileName, cuSource);
  for (size_t k = 0; k < profile.kernels.size(); ++k) {
    // Several instructions of one line (an unrolled loop's copies, a load and a store of one statement)
    // are one site per kind of access.
    std::map<std::tuple<int, bool, bool, uint32_t>, AccessSite> merged;
    for (const RawSite& site : raw[k]) {
      auto line = lines.find(site.address);
      int number = line == lines.end() ? 0 : line->second;
      AccessSite& into = merged[{number, !site.global, site.store, site.bytes}];
      into.line = number;
      into.global = site.global;
      into.store = site.store;
      into.bytes = site.bytes;
      into.counters += site.counters;
    }
    for (auto& [key, site] : merged) {
      site.code = sourceLine(cuSource, site.line);
      profile.kernels[k].sites.push_back(std::move(site));
    }
  }
  return profile;
}

}  // namespace emmy::sim
