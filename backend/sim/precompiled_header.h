// The simulation header precompiled (GCC's .gch), once per header text, compiler and flags, in Emmy's
// cache folder: parsing emmy_cuda_sim.h and the standard headers it includes is most of the time a
// simulated kernel takes to compile, and `emmy check` compiles one program per kernel.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace emmy::sim {

// A copy of `header` with its precompiled form beside it, made with `compiler` and `flags` (those of
// the compile that includes it, which GCC requires to match), created on first use in
// cacheFolder()/sim-header/KEY. std::nullopt where none can be used (clang, an unwritable cache, a
// failed precompilation): the compile then includes `header` itself, which gives the same program.
std::optional<std::filesystem::path> precompiledHeader(const std::filesystem::path& header, const std::string& compiler,
                                                       const std::vector<std::string>& flags);

}  // namespace emmy::sim
