// What the two ways of running generated code share: the CPU simulation (backend/sim) and the GPU
// (runtime/). Each compiles the kernel's NAME.cu with a small generated program, the harness, whose
// `main` reads the inputs from files, calls the host function and writes the outputs to files; Emmy runs
// it in a child process (support/process.h), so that a crash, a fault or a hang of the generated code
// can neither take Emmy down nor stall it. This file holds that protocol and the interface `emmy check`
// and `emmy run` see.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backend/sim/profile.h"
#include "support/process.h"
#include "ir/tensor/evaluator.h"
#include "ir/tensor/nodes.h"
#include "support/value.h"

namespace emmy {

// One run of a kernel's generated code.
struct KernelRun {
  // Every output by name; empty when `failure` is set.
  std::map<std::string, Buffer> outputs;
  // Why the run failed: the host function's error (a deadlock, a fault, a size mismatch), a crash, or a
  // timeout.
  std::optional<std::string> failure;
  bool timedOut = false;  // the failure is that the program did not finish in time (else it crashed or reported an error)
  double runSeconds = 0;  // the whole program's, start-up included
  std::optional<sim::Profile> profile;  // what the CPU simulation counted, when it profiles (`emmy check --profile`)
};

// A kernel's generated code, compiled once and ready to run on any number of inputs (the program does
// not depend on the sizes).
class CompiledKernel {
public:
  virtual ~CompiledKernel() = default;
  // Calls the host function on `inputs`, whose sizes and scalars are completed exactly as tensor::evaluate
  // completes them (so both see the same values); throws tensor::EvaluationError when the inputs do not
  // fit the kernel.
  virtual KernelRun run(const tensor::EvaluationInputs& inputs) const = 0;
  virtual const std::string& compileCommand() const = 0;  // how it was compiled, the commands as a shell spells them
  virtual double compileSeconds() const = 0;
};

namespace harness {

// The harness's exit status when the host function returns non-zero; it prints emmy_last_error().
constexpr int kHostFunctionFailed = 3;
// The files of a compiled harness in its folder: the source and the program.
constexpr const char* kHarnessSourceName = "harness.cpp";
constexpr const char* kHarnessProgramName = "run";
// How many lines of a compiler's messages an internal error quotes.
constexpr size_t kCompilerMessageLines = 60;
// Outputs start filled with this byte, so that an element the generated code never writes differs from
// the reference instead of happening to hold the right value.
constexpr unsigned kPoisonByte = 0xa5;

// The statements of a harness's `main` around the host function. They use what every harness defines:
// `emmy_harness_read(FILE, BYTES)` (memory the kernels can read, holding the file),
// `emmy_harness_read_host(FILE, BYTES)` (host memory holding the file), `emmy_harness_allocate(BYTES,
// FILL)`, `emmy_harness_write(FILE, POINTER, BYTES)` and the variable `emmy_harness_stream`. Variables
// are prefixed so that no parameter name can clash with a C++ keyword, helpers so that none clashes with
// the .cu's.
struct HarnessCall {
  std::string declarations;  // every argument of the host function, read or allocated
  std::string call;          // an expression: the call of the host function, giving its status
  std::string writes;        // every output written back
};
HarnessCall harnessCall(const tensor::Kernel& kernel);

// One run of the harness compiled in `programFolder`, in a fresh folder of its own: the inputs written
// there (arguments.bin: as int64_t the byte size of every input, then of every output, then every size of
// the kernel; NAME.bin per input and scalar), the program run with `arguments` in a child process with a
// time limit, and the outputs (NAME.bin, filled with kPoisonByte first) read back; a bool output holding
// anything but 0 or 1 is a failure. A failed run is described as the host function's message (exit
// status kHostFunctionFailed) or as what `program` ("the simulated kernel") did, with its output.
// `readMore`, after a run that succeeded, reads what else the program wrote into the run's folder.
KernelRun runHarness(const tensor::Kernel& kernel, const tensor::EvaluationInputs& inputs,
                     const std::filesystem::path& programFolder, const std::vector<std::string>& arguments,
                     const std::string& program, std::chrono::seconds timeout,
                     const std::function<void(const std::filesystem::path& runFolder)>& readMore = {});

// The host C++ compiler: $CXX, else the first of c++, g++ and clang++ on PATH.
std::string hostCompiler();

// What `compiler --version` prints, asked once per process and compiler ("" when it cannot run: the
// compile that follows says why).
std::string compilerVersion(const std::string& compiler);

// Whether `compiler` is clang (`c++` may be either): its --version says so.
bool isClang(const std::string& compiler);

// Writes `text` to `path`; throws UsageError when it cannot.
void writeText(const std::filesystem::path& path, const std::string& text);

// The first `count` lines of `text`, with "..." when there were more (compiler messages).
std::string firstLines(const std::string& text, size_t count);

}  // namespace harness
}  // namespace emmy
