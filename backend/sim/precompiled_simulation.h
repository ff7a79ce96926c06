// What every simulated program shares, made once per header text, compiler and flags in Emmy's cache
// folder: the simulation header precompiled (GCC's .gch), and the scheduler's functions compiled into an
// object that programs link. Parsing emmy_cuda_sim.h and the standard headers it includes, and generating
// the scheduler's code, are most of the time a simulated kernel takes to compile, and `emmy check`
// compiles one program per kernel.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace emmy::sim {

struct PrecompiledSimulation {
  std::filesystem::path header;         // a copy of the header, its .gch beside it: the program includes it
  std::filesystem::path runtimeObject;  // the scheduler's functions: the program links it
  std::vector<std::string> linkFlags;   // the faster linker (gold) where it links the object, else none
};

// Defined by a program compiled against a PrecompiledSimulation (and by the header's precompilation, which
// GCC requires to match): the program declares the scheduler's functions, and the runtime object defines them.
inline constexpr const char* kLinkedRuntimeFlag = "-DEMMY_SIM_LINKED_RUNTIME";

// The simulation of `header` for programs compiled by `compiler` with `flags` (and kLinkedRuntimeFlag),
// made on first use in cacheFolder()/sim-header/KEY. std::nullopt where none can be used (clang, an
// unwritable cache, a failed compile): the program then includes `header` itself and defines the
// scheduler's functions, which gives the same program.
std::optional<PrecompiledSimulation> precompiledSimulation(const std::filesystem::path& header,
                                                           const std::string& compiler,
                                                           const std::vector<std::string>& flags);

}  // namespace emmy::sim
