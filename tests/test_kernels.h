// What the IR and lowering tests share: the kernels of the examples and the standard library, and
// seeded random inputs for them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "ir/tensor/evaluator.h"
#include "ir/tensor/nodes.h"

namespace emmy::testing {

// examples/*.emmy and stdlib/*.emmy, sorted.
std::vector<std::filesystem::path> acceptedSources();

// The accepted sources plus tests/lowering/*.emmy, which cover the language's constructs.
std::vector<std::filesystem::path> loweringSources();

// Every kernel instance of `file` (a Catch2 failure with the diagnostics when it does not compile).
std::vector<tensor::Kernel> kernelsOf(const std::filesystem::path& file);

// Inputs with every size equal to `size` and every scalar without a default set to 0.5; floats are
// uniform in [-1, 1), integers in [-8, 8].
tensor::EvaluationInputs randomInputs(const tensor::Kernel& kernel, int64_t size, uint64_t seed);

}  // namespace emmy::testing
