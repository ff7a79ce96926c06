#include "backend/nvrtc.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>

#include <fmt/format.h>

#include "support/diagnostics.h"
#include "support/text.h"

namespace emmy {
namespace {

namespace fs = std::filesystem;

// --- The part of nvrtc.h Emmy uses, declared here so that building Emmy does not need CUDA. -------------

using nvrtcResult = int;
constexpr nvrtcResult kNvrtcSuccess = 0;
struct NvrtcProgramHandle;
using nvrtcProgram = NvrtcProgramHandle*;

struct NvrtcApi {
  const char* (*getErrorString)(nvrtcResult);
  nvrtcResult (*version)(int* major, int* minor);
  nvrtcResult (*getNumSupportedArchs)(int* count);
  nvrtcResult (*getSupportedArchs)(int* archs);
  nvrtcResult (*createProgram)(nvrtcProgram*, const char* source, const char* name, int headerCount,
                               const char* const* headers, const char* const* includeNames);
  nvrtcResult (*destroyProgram)(nvrtcProgram*);
  nvrtcResult (*compileProgram)(nvrtcProgram, int optionCount, const char* const* options);
  nvrtcResult (*getProgramLogSize)(nvrtcProgram, size_t*);
  nvrtcResult (*getProgramLog)(nvrtcProgram, char*);
  nvrtcResult (*getPTXSize)(nvrtcProgram, size_t*);
  nvrtcResult (*getPTX)(nvrtcProgram, char*);
  nvrtcResult (*getCUBINSize)(nvrtcProgram, size_t*);
  nvrtcResult (*getCUBIN)(nvrtcProgram, char*);
};

// Resolves every function or returns the name of the first one missing.
std::optional<std::string> resolveApi(void* library, NvrtcApi& api) {
  auto resolve = [&](auto& function, const char* name) -> bool {
    function = reinterpret_cast<std::remove_reference_t<decltype(function)>>(dlsym(library, name));
    return function != nullptr;
  };
  const std::pair<bool, const char*> found[] = {
      {resolve(api.getErrorString, "nvrtcGetErrorString"), "nvrtcGetErrorString"},
      {resolve(api.version, "nvrtcVersion"), "nvrtcVersion"},
      {resolve(api.getNumSupportedArchs, "nvrtcGetNumSupportedArchs"), "nvrtcGetNumSupportedArchs"},
      {resolve(api.getSupportedArchs, "nvrtcGetSupportedArchs"), "nvrtcGetSupportedArchs"},
      {resolve(api.createProgram, "nvrtcCreateProgram"), "nvrtcCreateProgram"},
      {resolve(api.destroyProgram, "nvrtcDestroyProgram"), "nvrtcDestroyProgram"},
      {resolve(api.compileProgram, "nvrtcCompileProgram"), "nvrtcCompileProgram"},
      {resolve(api.getProgramLogSize, "nvrtcGetProgramLogSize"), "nvrtcGetProgramLogSize"},
      {resolve(api.getProgramLog, "nvrtcGetProgramLog"), "nvrtcGetProgramLog"},
      {resolve(api.getPTXSize, "nvrtcGetPTXSize"), "nvrtcGetPTXSize"},
      {resolve(api.getPTX, "nvrtcGetPTX"), "nvrtcGetPTX"},
      {resolve(api.getCUBINSize, "nvrtcGetCUBINSize"), "nvrtcGetCUBINSize"},
      {resolve(api.getCUBIN, "nvrtcGetCUBIN"), "nvrtcGetCUBIN"},
  };
  for (const auto& [ok, name] : found)
    if (!ok) return std::string(name);
  return std::nullopt;
}

// --- Finding and loading NVRTC ---------------------------------------------------------------------------

struct Nvrtc {
  NvrtcApi api;
  std::string libraryPath;
  std::string includeDir;  // holds cuda_fp16.h and cuda_bf16.h
  int major = 0;
  int minor = 0;
  std::vector<int> supportedArchs;  // compute capabilities: 75, 80, 90, ...
};

#if defined(__aarch64__)
constexpr const char* kTargetTriple = "sbsa-linux";
#else
constexpr const char* kTargetTriple = "x86_64-linux";
#endif

// Newest first: an unversioned name is whatever the toolkit installed as its development link.
const char* const kLibraryNames[] = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"};

struct ToolkitRoot {
  fs::path path;
  std::string origin;  // how it was found, for the error message
};

// CUDA toolkit folders, in the order the user most directly asked for them.
std::vector<ToolkitRoot> toolkitRoots() {
  std::vector<ToolkitRoot> roots;
  for (const char* variable : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* value = std::getenv(variable); value && *value)
      roots.push_back({value, fmt::format("${}", variable)});
  // The nvcc on PATH is usually a symlink into the toolkit (/usr/bin/nvcc -> /usr/local/cuda-13/bin/nvcc).
  if (const char* pathVariable = std::getenv("PATH")) {
    std::istringstream entries(pathVariable);
    for (std::string entry; std::getline(entries, entry, ':');) {
      std::error_code error;
      fs::path nvcc = fs::canonical(fs::path(entry.empty() ? "." : entry) / "nvcc", error);
      if (!error && fs::is_regular_file(nvcc, error)) {
        roots.push_back({nvcc.parent_path().parent_path(), "nvcc on PATH"});
        break;
      }
    }
  }
  roots.push_back({"/usr/local/cuda", "default location"});
  return roots;
}

std::vector<std::pair<fs::path, std::string>> libraryDirs(const std::vector<ToolkitRoot>& roots) {
  std::vector<std::pair<fs::path, std::string>> dirs;
  for (const ToolkitRoot& root : roots)
    for (const fs::path& dir : {root.path / "lib64", root.path / "targets" / kTargetTriple / "lib"})
      if (std::none_of(dirs.begin(), dirs.end(), [&](const auto& seen) { return seen.first == dir; }))
        dirs.emplace_back(dir, root.origin);
  return dirs;
}

// The toolkit's include folder: next to the library first, so that headers and compiler match.
std::optional<fs::path> findIncludeDir(const fs::path& libraryPath, const std::vector<ToolkitRoot>& roots,
                                       std::vector<std::string>& looked) {
  std::vector<fs::path> candidates = {libraryPath.parent_path().parent_path() / "include"};
  for (const ToolkitRoot& root : roots) candidates.push_back(root.path / "include");
  candidates.push_back("/usr/include");  // distribution packages of the toolkit
  for (const fs::path& dir : candidates) {
    if (std::find(looked.begin(), looked.end(), dir.string()) != looked.end()) continue;
    std::error_code error;
    if (fs::is_regular_file(dir / "cuda_fp16.h", error) && fs::is_regular_file(dir / "cuda_bf16.h", error))
      return dir;
    looked.push_back(dir.string());
  }
  return std::nullopt;
}

// The file a dlopen by bare soname resolved to.
std::string loadedPath(void* library, const std::string& fallback) {
  link_map* map = nullptr;
  if (dlinfo(library, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name) return map->l_name;
  return fallback;
}

struct LoadOutcome {
  std::optional<Nvrtc> nvrtc;
  std::string error;  // why it is missing
};

LoadOutcome loadNvrtc() {
  std::vector<ToolkitRoot> roots = toolkitRoots();
  std::vector<std::string> attempts;  // "PATH: what went wrong", for libraries that exist but do not work

  // Tries one library; `spec` is a path, or a bare soname for the dynamic loader's own search.
  auto tryLoad = [&](const std::string& spec) -> std::optional<Nvrtc> {
    void* library = dlopen(spec.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!library) {
      if (spec.find('/') != std::string::npos) attempts.push_back(fmt::format("{}: {}", spec, dlerror()));
      return std::nullopt;
    }
    Nvrtc nvrtc;
    nvrtc.libraryPath = loadedPath(library, spec);
    if (auto missing = resolveApi(library, nvrtc.api)) {
      attempts.push_back(fmt::format("{}: has no {} (NVRTC 11.2 or newer is needed)", nvrtc.libraryPath, *missing));
      dlclose(library);
      return std::nullopt;
    }
    int archCount = 0;
    if (nvrtc.api.version(&nvrtc.major, &nvrtc.minor) != kNvrtcSuccess ||
        nvrtc.api.getNumSupportedArchs(&archCount) != kNvrtcSuccess) {
      attempts.push_back(fmt::format("{}: does not answer nvrtcVersion", nvrtc.libraryPath));
      dlclose(library);
      return std::nullopt;
    }
    nvrtc.supportedArchs.resize(archCount);
    EMMY_INTERNAL_ASSERT(nvrtc.api.getSupportedArchs(nvrtc.supportedArchs.data()) == kNvrtcSuccess,
                         "nvrtcGetSupportedArchs failed after nvrtcGetNumSupportedArchs succeeded");
    // The library stays loaded for the life of the process: its functions are used until exit.
    return nvrtc;
  };

  std::optional<Nvrtc> found;
  std::vector<std::string> looked;
  for (const auto& [dir, origin] : libraryDirs(roots)) {
    looked.push_back(fmt::format("{} ({})", dir.string(), origin));
    for (const char* name : kLibraryNames) {
      std::error_code error;
      if (!found && fs::exists(dir / name, error)) found = tryLoad((dir / name).string());
    }
    if (found) break;
  }
  if (!found) {
    looked.push_back("the system library path (LD_LIBRARY_PATH, ldconfig)");
    for (const char* name : kLibraryNames)
      if (!found) found = tryLoad(name);
  }

  if (!found) {
    std::vector<std::string> names(std::begin(kLibraryNames), std::end(kLibraryNames));
    std::string error = fmt::format(
        "cannot load NVRTC, the CUDA compiler library needed for --emit ptx, --emit cubin and --stats: "
        "looked for {} in {}",
        join(names, ", "), join(looked, ", "));
    if (!attempts.empty()) error += fmt::format("; could not use {}", join(attempts, "; "));
    return {std::nullopt, error + ". Install the CUDA toolkit (12 or newer) or set CUDA_HOME to its folder."};
  }
  std::vector<std::string> includeLooked;
  std::optional<fs::path> includeDir = findIncludeDir(found->libraryPath, roots, includeLooked);
  if (!includeDir)
    return {std::nullopt,
            fmt::format("found NVRTC at {} but not the CUDA headers cuda_fp16.h and cuda_bf16.h: looked in {}. "
                        "Set CUDA_HOME to the CUDA toolkit's folder.",
                        found->libraryPath, join(includeLooked, ", "))};
  found->includeDir = includeDir->string();
  return {std::move(found), ""};
}

// Loaded once per process (thread-safe static initialisation); a failure is remembered, not retried.
const LoadOutcome& loadOutcome() {
  static const LoadOutcome outcome = loadNvrtc();
  return outcome;
}

const Nvrtc& nvrtc() {
  const LoadOutcome& outcome = loadOutcome();
  if (!outcome.nvrtc) throw CudaUnavailable(outcome.error);
  return *outcome.nvrtc;
}

// --- Compiling -------------------------------------------------------------------------------------------

// NVRTC ships no C library headers, but the generated file includes <stdint.h> outside its host-only
// guard (cuda_contract.md). These are the LP64 definitions glibc uses, so mangled names match nvcc's.
constexpr const char* kStdintHeader = R"(#pragma once
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long uint64_t;
typedef long intptr_t;
typedef unsigned long uintptr_t;
#define INT8_MIN (-128)
#define INT16_MIN (-32767 - 1)
#define INT32_MIN (-2147483647 - 1)
#define INT64_MIN (-9223372036854775807L - 1)
#define INT8_MAX 127
#define INT16_MAX 32767
#define INT32_MAX 2147483647
#define INT64_MAX 9223372036854775807L
#define UINT8_MAX 255
#define UINT16_MAX 65535
#define UINT32_MAX 4294967295U
#define UINT64_MAX 18446744073709551615UL
)";

// Included before the source: under nvcc, INFINITY and NAN come from <math.h>, which NVRTC lacks.
constexpr const char* kPreludeName = "emmy_nvrtc_prelude.h";
constexpr const char* kPreludeHeader = R"(#pragma once
#define INFINITY (__int_as_float(0x7f800000))
#define NAN (__int_as_float(0x7fc00000))
)";

const std::regex kArchPattern("sm_([0-9]{2,3})([af]?)");

// Destroys the NVRTC program however compileCuda leaves.
struct ProgramGuard {
  const NvrtcApi& api;
  nvrtcProgram program = nullptr;
  ~ProgramGuard() {
    if (program) api.destroyProgram(&program);
  }
};

void checkCall(const NvrtcApi& api, nvrtcResult result, const char* what) {
  EMMY_INTERNAL_ASSERT(result == kNvrtcSuccess, "{} failed: {}", what, api.getErrorString(result));
}

using SizeGetter = nvrtcResult (*)(nvrtcProgram, size_t*);
using OutputGetter = nvrtcResult (*)(nvrtcProgram, char*);

// Reads one of NVRTC's outputs through its size/get pair.
std::vector<char> readBytes(const NvrtcApi& api, nvrtcProgram program, SizeGetter getSize, OutputGetter get,
                            const char* what) {
  size_t size = 0;
  checkCall(api, getSize(program, &size), what);
  std::vector<char> bytes(size);
  checkCall(api, get(program, bytes.data()), what);
  return bytes;
}

// Text outputs (log, PTX) come with a terminating NUL, counted in their size.
std::string readText(const NvrtcApi& api, nvrtcProgram program, SizeGetter getSize, OutputGetter get,
                     const char* what) {
  std::vector<char> bytes = readBytes(api, program, getSize, get, what);
  return std::string(bytes.begin(), std::find(bytes.begin(), bytes.end(), '\0'));
}

// --- ptxas's report ---------------------------------------------------------------------------------------

// The kernels' symbols in the order of the PTX, which is the order of the source (ptxas reports them in
// another order).
std::vector<std::string> ptxEntries(const std::string& ptx) {
  static const std::regex entry(R"(\.entry\s+([A-Za-z0-9_$]+))");
  std::vector<std::string> names;
  for (auto it = std::sregex_iterator(ptx.begin(), ptx.end(), entry); it != std::sregex_iterator(); ++it)
    names.push_back((*it)[1]);
  return names;
}

// The `ptxas -v` lines of the log, per entry symbol:
//   ptxas info    : Compiling entry function '_Z5tiledPKfPf' for 'sm_90'
//   ptxas info    : Function properties for _Z5tiledPKfPf
//   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//   ptxas info    : Used 12 registers, used 1 barriers, 4224 bytes smem
std::map<std::string, KernelResources> parsePtxasReport(const std::string& log) {
  static const std::regex compiling(R"(Compiling entry function '([^']+)')");
  static const std::regex properties(R"(Function properties for (\S+))");
  static const std::regex spills(R"((\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex registers(R"(Used (\d+) registers)");
  static const std::regex shared(R"((\d+) bytes smem)");
  std::map<std::string, KernelResources> byEntry;
  std::string entry;        // the entry function being reported
  std::string propertiesOf; // whose properties the next spill line gives (may be a called device function)
  std::istringstream lines(log);
  std::smatch match;
  for (std::string line; std::getline(lines, line);) {
    if (std::regex_search(line, match, compiling)) {
      entry = match[1];
      byEntry[entry].registers = -1;  // until its "Used N registers" line
    } else if (std::regex_search(line, match, properties)) {
      propertiesOf = match[1];
    } else if (std::regex_search(line, match, spills)) {
      if (!entry.empty() && propertiesOf == entry) {
        byEntry[entry].spillStoreBytes = std::stoll(match[1]);
        byEntry[entry].spillLoadBytes = std::stoll(match[2]);
      }
    } else if (std::regex_search(line, match, registers) && !entry.empty()) {
      byEntry[entry].registers = std::stoi(match[1]);
      if (std::regex_search(line, match, shared)) byEntry[entry].sharedBytes = std::stoll(match[1]);
    }
  }
  return byEntry;
}

// The kernel's name as written: `_Z5tiledPKfPf` -> `tiled`; an extern "C" name is already that.
std::string sourceName(const std::string& symbol) {
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> demangled(
      abi::__cxa_demangle(symbol.c_str(), nullptr, nullptr, &status), &std::free);
  if (status != 0 || !demangled) return symbol;
  std::string name = demangled.get();
  // Drop the parameter list: from the last ')' back to its matching '('.
  if (name.empty() || name.back() != ')') return name;
  int depth = 0;
  for (size_t i = name.size(); i-- > 0;) {
    if (name[i] == ')') ++depth;
    if (name[i] == '(' && --depth == 0) return name.substr(0, i);
  }
  return name;
}

}  // namespace

void validateCudaArch(const std::string& arch) {
  if (!std::regex_match(arch, kArchPattern))
    throw UsageError(fmt::format("--arch '{}' is not a CUDA architecture: expected sm_ and the compute "
                                 "capability, like sm_80 or sm_90",
                                 arch));
}

bool nvrtcAvailable(std::string* whyNot) {
  const LoadOutcome& outcome = loadOutcome();
  if (whyNot) *whyNot = outcome.error;
  return outcome.nvrtc.has_value();
}

std::string nvrtcDescription() {
  const Nvrtc& loaded = nvrtc();
  return fmt::format("NVRTC {}.{} ({})", loaded.major, loaded.minor, loaded.libraryPath);
}

const std::vector<int>& nvrtcSupportedArchs() { return nvrtc().supportedArchs; }

CudaCompileResult compileCuda(const std::string& source, const std::string& fileName, const std::string& arch,
                              bool wantCubin) {
  validateCudaArch(arch);
  const Nvrtc& loaded = nvrtc();
  const NvrtcApi& api = loaded.api;

  std::smatch archParts;
  std::regex_match(arch, archParts, kArchPattern);
  int capability = std::stoi(archParts[1]);
  if (std::find(loaded.supportedArchs.begin(), loaded.supportedArchs.end(), capability) ==
      loaded.supportedArchs.end()) {
    std::vector<std::string> supported;
    for (int each : loaded.supportedArchs) supported.push_back(fmt::format("sm_{}", each));
    throw UsageError(fmt::format("--arch {} is not supported by {}: it supports {}", arch, nvrtcDescription(),
                                 join(supported, ", ")));
  }

  // A real architecture makes NVRTC run ptxas (cubin and PTX); a virtual one stops at PTX, which is faster.
  std::string target = wantCubin ? arch : fmt::format("compute_{}{}", archParts[1].str(), archParts[2].str());
  // No --use_fast_math: the generated code must give IEEE results, as the CPU check assumes.
  std::vector<std::string> options = {"-arch=" + target, "-std=c++17", "-I" + loaded.includeDir,
                                      fmt::format("-include={}", kPreludeName)};
  if (wantCubin) options.push_back("-Xptxas=-v");  // ptxas's resource report, read by resourceUsage
  std::vector<const char*> optionPointers;
  for (const std::string& option : options) optionPointers.push_back(option.c_str());

  const char* headers[] = {kStdintHeader, kPreludeHeader};
  const char* headerNames[] = {"stdint.h", kPreludeName};
  ProgramGuard guard{api};
  checkCall(api, api.createProgram(&guard.program, source.c_str(), fileName.c_str(), 2, headers, headerNames),
            "nvrtcCreateProgram");
  nvrtcResult compiled =
      api.compileProgram(guard.program, static_cast<int>(optionPointers.size()), optionPointers.data());

  CudaCompileResult result;
  result.log = readText(api, guard.program, api.getProgramLogSize, api.getProgramLog, "nvrtcGetProgramLog");
  if (compiled != kNvrtcSuccess) {
    // Usually a compile error, explained by the log; a rejected option may leave the log empty.
    if (result.log.empty()) result.log = fmt::format("nvrtcCompileProgram: {}", api.getErrorString(compiled));
    return result;
  }
  result.ok = true;
  result.ptx = readText(api, guard.program, api.getPTXSize, api.getPTX, "nvrtcGetPTX");
  if (wantCubin) result.cubin = readBytes(api, guard.program, api.getCUBINSize, api.getCUBIN, "nvrtcGetCUBIN");
  return result;
}

std::vector<KernelResources> resourceUsage(const CudaCompileResult& result) {
  EMMY_INTERNAL_ASSERT(result.ok && !result.cubin.empty(),
                       "resourceUsage needs a successful compileCuda with wantCubin");
  std::map<std::string, KernelResources> byEntry = parsePtxasReport(result.log);
  std::vector<KernelResources> kernels;
  for (const std::string& symbol : ptxEntries(result.ptx)) {
    auto found = byEntry.find(symbol);
    EMMY_INTERNAL_ASSERT(found != byEntry.end() && found->second.registers >= 0,
                         "ptxas reported no resource usage for kernel {}; its log:\n{}", symbol, result.log);
    KernelResources kernel = found->second;
    kernel.kernel = sourceName(symbol);
    kernels.push_back(std::move(kernel));
  }
  return kernels;
}

std::string formatResourceUsage(const std::vector<KernelResources>& kernels) {
  std::string text;
  for (const KernelResources& kernel : kernels)
    text += fmt::format("{}: registers={} spill_stores={} spill_loads={} smem={}\n", kernel.kernel,
                        kernel.registers, kernel.spillStoreBytes, kernel.spillLoadBytes, kernel.sharedBytes);
  return text;
}

}  // namespace emmy
