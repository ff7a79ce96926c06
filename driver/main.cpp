// The `emmy` command line. Exit codes: 0 success, 1 user errors (diagnostics), 2 usage errors, 3 no CUDA
// device (run, bench), 70 internal errors (bugs). It links no LibTorch and loads NVRTC only when asked to compile, so that
// it starts in milliseconds.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "backend/nvrtc.h"
#include "driver/check.h"
#include "driver/elaborate.h"
#include "driver/gpu.h"
#include "driver/performance.h"
#include "driver/pipeline.h"
#include "ir/kernel/printer.h"
#include "ir/loop/printer.h"
#include "ir/tensor/printer.h"
#include "ir/tile/printer.h"
#include "support/diagnostics.h"

namespace {

namespace fs = std::filesystem;
using namespace emmy;

constexpr int kUserError = 1;
constexpr int kUsageError = 2;
constexpr int kInternalError = 70;

struct BuildOptions {
  std::string file;
  std::string outputDir;
  std::string emit = "cuda";
  std::string kernel;
  std::string dumpAfter;
  std::string arch = "sm_90";
  std::vector<std::string> defines;  // -D BM=64: schedule params
  std::string depfile;               // --depfile PATH: what the outputs depend on, for build systems
  std::vector<std::string> sizes;    // --size N=64 with --stats: the sizes of the performance report
  bool stats = false;
};

// The levels `--emit` names (spec section 6).
const std::vector<std::string> kEmitLevels = {"tensor", "loop",  "tile",  "kernel",  "cuda",
                                              "ptx",    "cubin", "schedule"};

int reportDiagnostics(const Diagnostics& diagnostics) {
  std::fputs(diagnostics.render().c_str(), stderr);
  return kUserError;
}

void writeFile(const fs::path& path, const std::string& bytes) {
  std::error_code ignored;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ignored);
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  if (!out) throw UsageError(fmt::format("cannot write {}", path.string()));
}

Level levelOf(const std::string& emit) {
  if (emit == "tensor") return Level::Tensor;
  if (emit == "loop") return Level::Loop;
  if (emit == "tile" || emit == "schedule") return Level::Tile;
  return Level::Kernel;
}

std::string printLevel(const Lowered& lowered, const std::string& emit) {
  if (emit == "tensor") return tensor::printKernel(lowered.tensor);
  if (emit == "loop") return loop::printProgram(lowered.loop);
  if (emit == "tile") return tile::printProgram(lowered.tile);
  if (emit == "schedule") return tile::printSchedule(lowered.tile);
  return kernel::printProgram(lowered.kernel);
}

// A Makefile-style dependency line (what CMake's DEPFILE reads): `output: the .emmy files it was built from`.
std::string depfile(const fs::path& output, const std::vector<fs::path>& sources) {
  auto escaped = [](const fs::path& path) {
    std::string text;
    for (char c : path.string()) text += c == ' ' ? std::string("\\ ") : std::string(1, c);
    return text;
  };
  std::string line = escaped(output) + ":";
  for (const fs::path& source : sources) line += " " + escaped(source);
  return line + "\n";
}

int build(const BuildOptions& options) {
  validateCudaArch(options.arch);
  Diagnostics diagnostics;
  std::vector<fs::path> sources;
  std::optional<std::vector<tensor::Kernel>> kernels = elaborateFile(
      options.file, options.kernel, /*requireTypes=*/false, parseNameValues(options.defines, "-D"), diagnostics, &sources);
  if (!kernels) return reportDiagnostics(diagnostics);

  std::map<std::string, int64_t> sizes = parseNameValues(options.sizes, "--size");
  if (!sizes.empty() && !options.stats) throw UsageError("--size gives the sizes of the --stats report; add --stats");
  checkSizeNamesExist(sizes, *kernels);

  PipelineOptions pipeline;
  pipeline.stopAfter = levelOf(options.emit);
  pipeline.dumpAfter = options.dumpAfter;
  pipeline.dump = &std::cerr;
  std::vector<Lowered> lowered;
  for (const tensor::Kernel& kernel : *kernels) lowered.push_back(lower(kernel, pipeline));

  std::string baseName = fs::path(options.file).stem().string();
  fs::path directory = options.outputDir.empty() ? fs::path(".") : fs::path(options.outputDir);
  bool textLevel = options.emit == "tensor" || options.emit == "loop" || options.emit == "tile" ||
                   options.emit == "kernel" || options.emit == "schedule";
  if (textLevel) {
    std::string text;
    for (const Lowered& instance : lowered) text += (text.empty() ? "" : "\n") + printLevel(instance, options.emit);
    if (options.outputDir.empty())
      std::fputs(text.c_str(), stdout);
    else
      writeFile(directory / (baseName + "." + options.emit), text);
    return 0;
  }

  cuda::GeneratedCuda files = emitCudaFiles(lowered, options.file);
  bool compile = options.emit == "ptx" || options.emit == "cubin" || options.stats;
  CudaCompileResult compiled;
  if (compile) {
    compiled = compileCuda(files.source, files.baseName + ".cu", options.arch, options.emit == "cubin" || options.stats);
    if (!compiled.ok)
      throw InternalError(fmt::format("the generated CUDA for {} does not compile:\n{}", options.file, compiled.log));
  }
  // Everything succeeded: only now is anything written.
  if (options.emit == "cuda") {
    writeFile(directory / (files.baseName + ".cu"), files.source);
    writeFile(directory / (files.baseName + ".h"), files.header);
    if (!options.depfile.empty()) writeFile(options.depfile, depfile(directory / (files.baseName + ".cu"), sources));
  } else if (options.emit == "ptx") {
    writeFile(directory / (files.baseName + ".ptx"), compiled.ptx);
  } else if (options.emit == "cubin") {
    writeFile(directory / (files.baseName + ".cubin"), std::string(compiled.cubin.begin(), compiled.cubin.end()));
  }
  if (options.stats) {
    std::vector<KernelResources> usage = resourceUsage(compiled);
    std::vector<std::string> report = performanceReport(lowered, usage, options.arch, sizes);
    for (size_t k = 0; k < usage.size(); ++k)
      std::fputs((formatResourceUsage({usage[k]}) + (k < report.size() ? report[k] + "\n" : "")).c_str(), stdout);
  }
  return 0;
}

// What `emmy build` writes for one kernel instance of `file`, which check and run run.
CudaGenerator generatorFor(const std::string& file) {
  return [file](const tensor::Kernel& kernel) { return emitCudaFiles({lower(kernel, PipelineOptions{})}, file); };
}

// The options `emmy check` and `emmy run` share.
void addCheckOptions(CLI::App* command, CheckOptions& options) {
  command->add_option("FILE", options.file, "the .emmy file")->required();
  command->add_option("--kernel", options.kernel, "one kernel: NAME or NAME<TYPE, ...>");
  command->add_option("--size", options.sizes, "a size, as N=64 (repeatable)");
  command->add_option("-D", options.defines, "set a schedule param, as BM=64 (repeatable)");
  command->add_option("--inputs", options.inputsDir, "read inputs from DIR/NAME.npy");
  command->add_option("--save", options.saveDir, "write every output to DIR/NAME.npy");
  command->add_option("--seed", options.seed, "seed of the random inputs (default 0)");
  command->add_flag("--verbose", options.verbose, "print the host compiler's command and the time taken");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Emmy: a compiler from small tensor programs to CUDA"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "emmy 0.1");

  BuildOptions buildOptions;
  CLI::App* buildCommand = app.add_subcommand("build", "compile a .emmy file to CUDA (NAME.cu and NAME.h)");
  buildCommand->add_option("FILE", buildOptions.file, "the .emmy file")->required();
  buildCommand->add_option("-o", buildOptions.outputDir,
                           "output folder (default: the current one; IR levels print to standard output)");
  buildCommand->add_option("--emit", buildOptions.emit, "what to produce (default: cuda)")
      ->check(CLI::IsMember(kEmitLevels));
  buildCommand->add_option("--kernel", buildOptions.kernel, "one kernel: NAME or NAME<TYPE, ...>");
  buildCommand->add_option("--arch", buildOptions.arch, "the CUDA target of --emit ptx|cubin and --stats (default sm_90)");
  buildCommand->add_option("-D", buildOptions.defines, "set a schedule param, as BM=64 (repeatable)");
  buildCommand->add_option("--depfile", buildOptions.depfile,
                           "with --emit cuda: also write a Makefile-style list of the .emmy files the output depends on");
  buildCommand->add_option("--size", buildOptions.sizes, "with --stats: a size, as N=4096 (repeatable), for bytes, flops "
                                                         "and the roofline bound");
  buildCommand->add_flag("--stats", buildOptions.stats, "print ptxas resource usage per CUDA kernel");
  std::vector<std::string> dumpChoices = passNames();
  dumpChoices.push_back("all");
  buildCommand->add_option("--dump-after", buildOptions.dumpAfter, "print the IR to stderr after a pass (or all)")
      ->check(CLI::IsMember(dumpChoices));

  CheckOptions checkOptions;
  CLI::App* checkCommand =
      app.add_subcommand("check", "run the generated code on the CPU and compare it with the reference meaning");
  addCheckOptions(checkCommand, checkOptions);

  CheckOptions runOptions;
  CLI::App* runCommand = app.add_subcommand(
      "run", "run the generated code on the GPU and compare it with the reference meaning (and PyTorch, for the stdlib)");
  addCheckOptions(runCommand, runOptions);

  BenchCase benchCase;
  BenchSettings benchSettings;
  CLI::App* benchCommand =
      app.add_subcommand("bench", "time the generated code on the GPU: GB/s, TFLOP/s, the device's peak, PyTorch eager");
  benchCommand->add_option("FILE", benchCase.file, "the .emmy file")->required();
  benchCommand->add_option("--kernel", benchCase.kernel, "one kernel: NAME or NAME<TYPE, ...>");
  benchCommand->add_option("--size", benchCase.sizes, "a size, as N=4096 (repeatable)");
  benchCommand->add_option("-D", benchCase.defines, "set a schedule param, as BM=64 (repeatable)");
  benchCommand->add_option("--inputs", benchCase.inputsDir, "read inputs from DIR/NAME.npy");
  benchCommand->add_option("--seed", benchCase.seed, "seed of the random inputs (default 0)");
  benchCommand->add_option("--repeat", benchSettings.timing.repetitions, "timed calls (default 100)")
      ->check(CLI::Range(1, 100000));
  benchCommand->add_option("--warmup", benchSettings.timing.warmup, "untimed calls first (default 10)")
      ->check(CLI::Range(0, 100000));
  benchCommand->add_flag("--flush-l2", benchSettings.timing.flushL2, "overwrite the L2 cache before each timed call");
  benchCommand->add_flag("!--no-torch", benchSettings.compareWithTorch, "do not time PyTorch eager for the stdlib");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : kUsageError;
  }
  try {
    if (*buildCommand) return build(buildOptions);
    if (*checkCommand) return runCheck(checkOptions, generatorFor(checkOptions.file), simulationCompiler());
    if (*runCommand) return runOnGpu(runOptions, generatorFor(runOptions.file));
    if (*benchCommand) return runBench({benchCase}, benchSettings);
  } catch (const runtime::NoCudaDevice& e) {
    fmt::print(stderr, "emmy: error: {}\n", e.what());
    return runtime::kNoDeviceExitCode;
  } catch (const CompilationFailed& failed) {
    return reportDiagnostics(failed.diagnostics);
  } catch (const UsageError& e) {
    fmt::print(stderr, "emmy: error: {}\n", e.what());
    return kUsageError;
  } catch (const CudaUnavailable& e) {
    fmt::print(stderr, "emmy: error: {}\n", e.what());
    return kUserError;
  } catch (const InternalError& e) {
    fmt::print(stderr, "emmy: {}\n", e.what());
    return kInternalError;
  } catch (const std::exception& e) {
    fmt::print(stderr, "emmy: internal error (this is a bug in Emmy, please report it): {}\n", e.what());
    return kInternalError;
  }
  return kUsageError;
}
