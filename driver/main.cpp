// The `emmy` command line. Exit codes: 0 success, 1 user errors (diagnostics), 2 usage errors,
// 70 internal errors (bugs). It links no LibTorch and loads NVRTC only when asked to compile, so that
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
#include "driver/import.h"
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
  ModelImportOptions modelImport;    // --input, --name: for a TorchScript model
};

struct ImportCommandOptions {
  std::string model;
  std::string output;  // -o FILE.emmy; standard output without it
  ModelImportOptions modelImport;
};

// The levels `--emit` names (spec section 6).
const std::vector<std::string> kEmitLevels = {"tensor", "loop",  "tile",  "kernel",  "cuda",
                                              "ptx",    "cubin", "schedule"};

int reportDiagnostics(const Diagnostics& diagnostics) {
  std::fputs(diagnostics.render().c_str(), stderr);
  return kExitUserError;
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
      options.file, options.kernel, /*requireTypes=*/false, parseNameValues(options.defines, "-D"), options.modelImport,
      diagnostics, &sources);
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

  cuda::GeneratedCuda files = emitCudaFiles(lowered, sourceName(options.file));
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

int check(const CheckOptions& options) {
  return runCheck(options, [&](const tensor::Kernel& kernel) {
    return emitCudaFiles({lower(kernel, PipelineOptions{})}, sourceName(options.file));
  });
}

int importCommand(const ImportCommandOptions& options) {
  std::string source = importModel(options.model, options.modelImport, options.output);
  if (options.output.empty()) std::fputs(source.c_str(), stdout);
  return 0;
}

// --input and --name, the options of a TorchScript model, on `command`.
void addModelOptions(CLI::App* command, ModelImportOptions& options) {
  command->add_option("--input", options.inputs,
                      "a TorchScript model's forward argument: dtype and dims, as x=f32[B,64] (repeatable)");
  command->add_option("--name", options.kernelName, "the kernel imported from a TorchScript model (default: forward)");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Emmy: a compiler from small tensor programs to CUDA"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "emmy 0.1");

  BuildOptions buildOptions;
  CLI::App* buildCommand = app.add_subcommand("build", "compile a .emmy file to CUDA (NAME.cu and NAME.h)");
  buildCommand->add_option("FILE", buildOptions.file, "the .emmy file or TorchScript model (.pt)")->required();
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
  checkCommand->add_option("FILE", checkOptions.file, "the .emmy file or TorchScript model (.pt)")->required();
  checkCommand->add_option("--kernel", checkOptions.kernel, "one kernel: NAME or NAME<TYPE, ...>");
  checkCommand->add_option("--size", checkOptions.sizes, "a size, as N=64 (repeatable)");
  checkCommand->add_option("-D", checkOptions.defines, "set a schedule param, as BM=64 (repeatable)");
  checkCommand->add_option("--inputs", checkOptions.inputsDir, "read inputs from DIR/NAME.npy");
  checkCommand->add_option("--save", checkOptions.saveDir, "write every output to DIR/NAME.npy");
  checkCommand->add_option("--seed", checkOptions.seed, "seed of the random inputs (default 0)");
  checkCommand->add_flag("--verbose", checkOptions.verbose, "print the host compiler's command and the time taken");
  addModelOptions(buildCommand, buildOptions.modelImport);
  addModelOptions(checkCommand, checkOptions.modelImport);

  ImportCommandOptions importOptions;
  CLI::App* importCommandLine =
      app.add_subcommand("import", "translate a TorchScript model (torch.jit.script or trace, saved) to .emmy source");
  importCommandLine->add_option("MODEL", importOptions.model, "the TorchScript model (.pt)")->required();
  importCommandLine->add_option("-o", importOptions.output, "write the source to FILE.emmy (default: standard output)");
  addModelOptions(importCommandLine, importOptions.modelImport);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : kExitUsageError;
  }
  return runReportingFailures("emmy", [&] {
    try {
      if (*buildCommand) return build(buildOptions);
      if (*checkCommand) return check(checkOptions);
      if (*importCommandLine) return importCommand(importOptions);
    } catch (const ImportFailed& failed) {
      std::fputs(failed.what(), stderr);  // emmy-import's own messages
      return failed.exitCode;
    } catch (const CompilationFailed& failed) {
      return reportDiagnostics(failed.diagnostics);
    } catch (const CudaUnavailable& e) {
      fmt::print(stderr, "emmy: error: {}\n", e.what());
      return kExitUserError;
    }
    return kExitUsageError;
  });
}
