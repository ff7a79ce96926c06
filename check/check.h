// `emmy check` and `emmy run`: run the generated CUDA, on the CPU (backend/sim) or on the GPU (runtime/),
// and compare every output with the reference evaluator of Tensor IR (spec section 6).
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/harness.h"
#include "backend/sim/simulator.h"
#include "check/compare.h"
#include "compiler/import.h"
#include "ir/tensor/nodes.h"

namespace emmy {

struct CheckOptions {
  std::string file;
  std::string kernel;              // --kernel NAME or NAME<TYPE, ...>; empty: every kernel, every instance
  std::vector<std::string> sizes;  // --size N=64, repeated
  std::vector<std::string> defines;  // -D BM=64, repeated: schedule params
  std::vector<std::string> scalars;  // --scalar eps=1e-5, repeated
  std::string inputsDir;           // --inputs DIR: DIR/NAME.npy per input tensor and scalar
  std::string saveDir;             // --save DIR: DIR/NAME.npy per output of the generated code
  uint64_t seed = 0;               // --seed S, for inputs that are not read from files
  bool verbose = false;            // also print the host compiler's command and the time taken
  bool profile = false;            // --profile: print what the simulation counted (check/profile_report.h)
  ModelImportOptions modelImport;  // --input, --name: for a TorchScript model
};

// The CUDA that `emmy build` writes for a kernel. The driver passes the lowering in, so that checking
// and building cannot drift apart.
using CudaGenerator = std::function<sim::CudaSource(const tensor::Kernel&)>;

// How that CUDA is compiled to run: in the CPU simulation (`emmy check`) or on the GPU (`emmy run`).
using KernelCompiler = std::function<std::unique_ptr<CompiledKernel>(const tensor::Kernel&, const sim::CudaSource&)>;

// The CPU simulation (backend/sim), as `emmy check` runs the code.
KernelCompiler simulationCompiler(const sim::SimulationOptions& options = {});

// A second comparison of the generated code's outputs, after the reference's (`emmy run`: PyTorch on the
// GPU, for the standard library). Prints its lines to `report` and returns whether they passed.
using OutputCrossCheck = std::function<bool(const tensor::Kernel& kernel, const tensor::EvaluationInputs& inputs,
                                            const std::map<std::string, Buffer>& outputs, std::FILE* report)>;

// Runs the check and prints to `report` a line per kernel (its sizes) and one per output. Without
// --kernel, of a file's several kernels those whose inputs cannot be made from the options (a size or a
// scalar's value missing, an input file missing) are skipped with a line that says why; when none is
// left that is a UsageError. Returns 0
// when every output of every kernel is within tolerance and no run reported a failure (deadlock, fault,
// crash, timeout, an error of the host function), 1 otherwise or after errors in the source (printed as
// diagnostics). Throws UsageError for a bad option, a bad input file or inputs that do not fit the kernel
// (exit code 2).
int runCheck(const CheckOptions& options, const CudaGenerator& generateCuda, const KernelCompiler& compileKernel,
             std::FILE* report = stdout, const OutputCrossCheck& crossCheck = {});

// Whether `file` is in the standard library's folder (its kernels are compared with PyTorch by `emmy run`
// and with their baselines by `emmy check --profile`).
bool isStdlibFile(const std::string& file);

// Throws UsageError, naming the tensor, when the inputs and stages (the outputs among them) of `kernel`
// at `sizes` (every size bound) need more than `availableBytes`, alone or together: what the evaluator
// and the simulation allocate, checked before they allocate it. Overflow-safe, for any sizes.
void checkTensorsFit(const tensor::Kernel& kernel, const std::map<std::string, int64_t>& sizes, uint64_t availableBytes);

// The inputs of one kernel: DIR/NAME.npy from `inputsDir` when it is not empty (sizes from the files and
// `givenSizes`), else random. Random inputs come from std::mt19937_64 seeded with `seed` afresh for each
// kernel, drawing the inputs in declaration order, element by element: floats uniform in [-1, 1) (53
// random bits), integers uniform in [-8, 8], bool true or false with equal chance. A scalar takes its
// value from `givenScalars` (--scalar, by name, as text), else from its file in `inputsDir`, else its
// default. Throws UsageError when a size or a scalar's value is missing or a --scalar value does not
// parse or fit the scalar's dtype, NpyError for a bad file.
tensor::EvaluationInputs prepareInputs(const tensor::Kernel& kernel, const std::string& inputsDir, uint64_t seed,
                                       const std::map<std::string, int64_t>& givenSizes,
                                       const std::map<std::string, std::string>& givenScalars = {});

// What generated code is checked against: the inputs of prepareInputs, every size bound, and the reference
// evaluator's outputs for them.
struct ReferenceRun {
  tensor::EvaluationInputs inputs;
  std::map<std::string, int64_t> sizes;  // every size of the kernel
  std::map<std::string, Buffer> outputs;
};
// Throws UsageError when the inputs do not fit the kernel (and as prepareInputs does).
ReferenceRun referenceRun(const tensor::Kernel& kernel, const std::string& inputsDir, uint64_t seed,
                          const std::map<std::string, int64_t>& givenSizes,
                          const std::map<std::string, std::string>& givenScalars = {});

// Every output of `kernel` in `generated` compared with the reference's (compare.h), in declaration order.
std::vector<OutputComparison> compareOutputs(const tensor::Kernel& kernel, const std::map<std::string, Buffer>& generated,
                                             const std::map<std::string, Buffer>& reference);

}  // namespace emmy
