// What the IR and lowering tests share: the kernels of the examples and the standard library, and
// seeded random inputs for them.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backend/sim/simulator.h"
#include "ir/kernel/nodes.h"
#include "ir/tensor/evaluator.h"
#include "ir/tensor/nodes.h"

namespace emmy::testing {

// Sets an environment variable for one scope (the simulated programs inherit it).
struct ScopedEnvironment {
  std::string name;
  std::optional<std::string> previous;
  ScopedEnvironment(std::string variable, const std::string& value) : name(std::move(variable)) {
    if (const char* old = std::getenv(name.c_str())) previous = old;
    setenv(name.c_str(), value.c_str(), 1);
  }
  ~ScopedEnvironment() {
    if (previous)
      setenv(name.c_str(), previous->c_str(), 1);
    else
      unsetenv(name.c_str());
  }
  ScopedEnvironment(const ScopedEnvironment&) = delete;
  ScopedEnvironment& operator=(const ScopedEnvironment&) = delete;
};

// examples/*.emmy and stdlib/*.emmy, sorted.
std::vector<std::filesystem::path> acceptedSources();

// The accepted sources plus tests/lowering/*.emmy, which cover the language's constructs.
std::vector<std::filesystem::path> loweringSources();

// Every kernel instance of `file` (a Catch2 failure with the diagnostics when it does not compile).
std::vector<tensor::Kernel> kernelsOf(const std::filesystem::path& file);

// The kernel instances of the text `source` (a Catch2 failure with the diagnostics when it does not
// compile); imports resolve in the standard library.
std::vector<tensor::Kernel> kernelsOfText(const std::string& source);

// Inputs with `sizes` and every scalar without a default set to 0.5; floats are uniform in [-1, 1),
// integers in [-8, 8].
tensor::EvaluationInputs randomInputs(const tensor::Kernel& kernel, const std::map<std::string, int64_t>& sizes,
                                      uint64_t seed);
// The same with every size equal to `size`.
tensor::EvaluationInputs randomInputs(const tensor::Kernel& kernel, int64_t size, uint64_t seed);

// One size set per size of `kernel`: that size 0, the others small and ragged (3, 5, 7, ...), for the
// sweep over empty tensors; a window the others leave larger than its input is 1 wide, and a set that
// still makes a dimension negative, or takes over 10^5 elements and reduction terms, is left out.
std::vector<std::map<std::string, int64_t>> sizesWithOneEmpty(const tensor::Kernel& kernel);

// " N=3 M=0": how a test names the sizes it runs at.
std::string describeSizes(const std::map<std::string, int64_t>& sizes);

// Every size `size`, or the largest below it at which the kernel's stages take at most `budget` elements
// and reduction terms together (a transposed 3-d convolution at 13 would take 10^11: the simulation and
// the interpreter run on a CPU).
std::map<std::string, int64_t> everySize(const tensor::Kernel& kernel, int64_t size, double budget = 2e6);
// The elements and reduction terms of every stage of the kernel at `sizes` (valid ones).
double workAt(const tensor::Kernel& kernel, const std::map<std::string, int64_t>& sizes);

// Whether `sizes` are inputs the kernel takes: no dimension it computes from them is negative (a window
// larger than its input) or divides by zero. The evaluator and the launcher refuse the others.
bool sizesValid(const tensor::Kernel& kernel, const std::map<std::string, int64_t>& sizes);

// Runs `program` (the generated CUDA of `kernel`) on those inputs and checks every output against the
// reference evaluator within the dtype's tolerance, at sizes the kernel takes (others are skipped); a
// failed run (deadlock, fault, crash) fails the test.
void checkAgainstEvaluator(const tensor::Kernel& kernel, const CompiledKernel& program,
                           const std::map<std::string, int64_t>& sizes, uint64_t seed);
// The same on given inputs.
void checkAgainstEvaluator(const tensor::Kernel& kernel, const CompiledKernel& program,
                           const tensor::EvaluationInputs& inputs);

// The CUDA kernels of `program` but the 64-bit twins (ir/kernel/index_widths.h): one per kernel the
// lowering made, in order.
std::vector<const kernel::Function*> withoutWideTwins(const kernel::Program& program);

}  // namespace emmy::testing
