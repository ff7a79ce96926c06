// Runs generated CUDA on the CPU: the .cu text is compiled as host C++ against the simulation header
// (backend/sim/emmy_cuda_sim.h), together with a small generated `main` that calls the kernel's host
// function on inputs read from files. The program runs in a child process, so that a crash or a hang of
// the generated code can neither take Emmy down nor stall it.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/emit_cuda.h"
#include "backend/harness.h"
#include "backend/sim/profile.h"
#include "ir/tensor/evaluator.h"
#include "ir/tensor/nodes.h"
#include "support/value.h"

namespace emmy {
class TemporaryFolder;
}

namespace emmy::sim {

// What `emmy build` writes: BASENAME.cu, which includes "BASENAME.h".
using CudaSource = cuda::GeneratedCuda;

struct SimulationOptions {
  std::chrono::seconds compileTimeout{300};
  std::chrono::seconds runTimeout{300};
  // Given to the host compiler after the others (tests: `-fsanitize=undefined`).
  std::vector<std::string> extraCompilerFlags;
  // `emmy check --profile`: every run also counts the accesses as the hardware groups them (profile.h);
  // the program is instrumented and runs a few times slower.
  bool profile = false;
};

// What SimulatedKernel::run returns (failures: the host function's error, a deadlock, a data race or an
// out-of-bounds access the simulation saw, a crash, or a timeout).
using SimulationResult = KernelRun;

// The folder holding emmy_cuda_sim.h: $EMMY_SIM_HEADER_DIR if set, else this source tree's backend/sim.
std::filesystem::path defaultSimHeaderDir();

// A kernel's generated code compiled for the simulation, ready to run on any number of inputs (the
// compiled program does not depend on the sizes, so checking several sizes compiles once). It lives in
// a temporary folder that goes away with the object.
class SimulatedKernel : public CompiledKernel {
public:
  // Compiles `source`. A .cu that does not compile is a bug in Emmy: InternalError, with the compiler's
  // messages and the folder where the files were kept. Throws UsageError when the simulation header or
  // the host compiler (harness::hostCompiler) is missing.
  SimulatedKernel(const tensor::Kernel& kernel, const CudaSource& source, const SimulationOptions& options = {});
  ~SimulatedKernel();
  SimulatedKernel(const SimulatedKernel&) = delete;
  SimulatedKernel& operator=(const SimulatedKernel&) = delete;

  // Calls the host function on `inputs`, whose sizes and scalars are completed exactly as
  // tensor::evaluate completes them (so both see the same values); throws tensor::EvaluationError when
  // the inputs do not fit the kernel.
  KernelRun run(const tensor::EvaluationInputs& inputs) const override;

  const std::string& compileCommand() const override { return compileCommand_; }
  double compileSeconds() const override { return compileSeconds_; }

private:
  tensor::Kernel kernel_;
  CudaSource source_;
  SimulationOptions options_;
  std::unique_ptr<TemporaryFolder> folder_;  // the sources and the compiled program
  std::string compileCommand_;
  double compileSeconds_ = 0;
};

// Compiles hand-written CUDA `cuSource` (the file `cuFileName`) with `mainSource`, a program that
// #includes it and launches its kernels, for the profiling simulation; runs it and returns the profile.
// For the baselines of `emmy check --profile` (bench/reference) and the counters' tests. Throws
// InternalError when it does not compile or does not run to its end with status 0.
Profile profileProgram(const std::string& cuFileName, const std::string& cuSource, const std::string& mainSource,
                       const SimulationOptions& options = {});

}  // namespace emmy::sim
