// What `emmy check --profile` counts in the CPU simulation of generated CUDA (backend/sim/ARCHITECTURE.md,
// "Profiling"; docs/profile.md defines each counter): per CUDA kernel and per access site (a line of the
// .cu), the warp instructions, the global requests and the 32-byte sectors they touch, the shared-memory
// wavefronts, the barriers and the warps that diverge.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace emmy::sim {

// The counters of an access site, summed over its warp instructions (emmy_cuda_sim.h, SiteCounters).
struct AccessCounters {
  uint64_t executions = 0;       // warp instructions
  uint64_t requests = 0;         // their parts of at most 128 bytes: the whole warp up to 4-byte accesses, half for 8, a quarter for 16
  uint64_t sectors = 0;          // global: the 32-byte sectors each request touches
  uint64_t idealSectors = 0;     // global: the fewest that could hold the bytes each request touches
  uint64_t wavefronts = 0;       // shared: the passes each request needs, 1 + its bank conflicts
  uint64_t idealWavefronts = 0;  // shared: 1 per request
  uint64_t lanes = 0;            // active lanes, summed over the warp instructions
  uint64_t divergent = 0;        // warp instructions with some of the warp's running lanes inactive

  AccessCounters& operator+=(const AccessCounters& other);
};

// The accesses of one kind at one line of the .cu.
struct AccessSite {
  int line = 0;      // in the .cu; 0 when the debug information does not name one
  std::string code;  // that line's text, without its indentation
  bool global = true;  // else shared memory
  bool store = false;  // else a load
  uint32_t bytes = 0;  // of each lane's access
  AccessCounters counters;
};

struct KernelProfile {
  std::string name;  // the CUDA kernel
  uint64_t launches = 0;
  uint64_t blocks = 0;  // summed over its launches
  unsigned threadsPerBlock = 0;
  uint64_t barriers = 0;           // __syncthreads() that released a block, summed over blocks
  uint64_t distinctGlobalBytes = 0;  // 32 x the distinct sectors of global memory it touched
  std::vector<AccessSite> sites;     // by line, then global before shared, loads before stores

  AccessCounters total(bool global) const;
  uint64_t requestedGlobalBytes() const { return 32 * total(true).sectors; }
};

struct Profile {
  std::vector<KernelProfile> kernels;  // by name
};

// The compiler flags that make the simulation profile (with the others of the simulation): GCC's
// -fsanitize=thread instrumentation without its runtime, and the debug lines that name the sites. Throws
// UsageError when `hostCompiler` is clang.
std::vector<std::string> profileCompileFlags(const std::string& hostCompiler);
// ... and those of the link, which leaves the ThreadSanitizer runtime out.
std::vector<std::string> profileLinkFlags();
// The file a profiling program writes at exit, in its working folder.
constexpr const char* kProfileFileName = "profile.txt";

// Reads `profileFile`, written by `program`, and names each site's line in the CUDA file `cuFileName`
// (whose text is `cuSource`) through the program's debug information (addr2line, from binutils; a site
// stays at line 0 without it). No file: no kernel ran (every output was empty), an empty profile. Throws
// InternalError when the file is not a profile.
Profile readProfile(const std::filesystem::path& profileFile, const std::filesystem::path& program,
                    const std::string& cuFileName, const std::string& cuSource);

}  // namespace emmy::sim
