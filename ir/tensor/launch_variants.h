// Launch variants: a schedule whose params are chosen by sizes (`param LANES in [..] = 32 if D <= 1024
// else 256`) builds its kernel once per combination of values they take. Each variant is lowered on its
// own, knowing the ranges of the sizes it runs at, and the launcher picks the one the sizes call for.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir/tensor/nodes.h"

namespace emmy::tensor {

struct LaunchVariant {
  Kernel kernel;      // the schedule's numbers at this variant's values, its sizes' ranges in sizeAtMost
  ExprPtr when;       // a Bool expression of sizes: where the launcher runs this variant; null for the only one
  std::string name;   // "LANES32" (the params and their values); empty for the only one
};

// The variants of `kernel`, in the order of the sizes they run at: one, unchanged, when its schedule
// chooses nothing at launch. A case testing a size the kernel does not have throws CompilationFailed.
std::vector<LaunchVariant> launchVariants(const Kernel& kernel);

// The largest value `dim` takes where `kernel` runs (its sizeAtMost), or nullopt where it has no bound.
std::optional<int64_t> largestExtent(const Dim& dim, const Kernel& kernel);

}  // namespace emmy::tensor
