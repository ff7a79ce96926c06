// The `emmy` command line. Exit codes: 0 success, 1 user errors (diagnostics), 2 usage errors, 3 no CUDA
// device (run, bench, tune), 70 internal errors (bugs). It links no LibTorch and loads NVRTC only when asked to compile, so that
// it starts in milliseconds.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "backend/nvrtc.h"
#include "check/check.h"
#include "compiler/elaborate.h"
#include "compiler/import.h"
#include "check/gpu.h"
#include "performance/performance.h"
#include "compiler/pipeline.h"
#include "ir/kernel/printer.h"
#include "ir/loop/printer.h"
#include "ir/tensor/printer.h"
#include "ir/tile/printer.h"
#include "support/diagnostics.h"
#include "support/files.h"
#include "tune/cost_model.h"
#include "tune/database.h"
#include "tune/device.h"
#include "tune/gpu_timing.h"
#include "tune/isolation.h"
#include "tune/progress.h"
#include "tune/tuner.h"

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
  std::vector<std::string> sizes;    // --size N=64: the sizes of the --stats report and of the tuned parameters
  bool stats = false;
  std::string database;  // --db PATH: the tuning database
  bool noTuned = false;  // --no-tuned: ignore the tuning database
  ModelImportOptions modelImport;    // --input, --name: for a TorchScript model
};

struct ImportCommandOptions {
  std::string model;
  std::string output;  // -o FILE.emmy; standard output without it
  ModelImportOptions modelImport;
};

struct TuneOptions {
  std::string file;
  std::string kernel;
  std::vector<std::string> sizes;
  std::vector<std::string> scalars;  // --scalar eps=1e-5
  std::optional<int64_t> budget;
  std::optional<double> seconds;
  uint64_t seed = 0;
  std::string database;
  std::string arch;  // default: the device's, or sm_90 for the static model
  double timeout = 30;  // seconds per candidate: compiling it, running it and checking its outputs
  runtime::Timing timing = tune::kDefaultTuningTiming;
  bool costModel = false;
  bool report = false;
};

// `--db PATH`, else the default place.
fs::path databasePath(const std::string& option) {
  return option.empty() ? tune::TuningDatabase::defaultPath() : fs::path(option);
}

// The path as the user would write it: ~ for the home folder.
std::string displayPath(const fs::path& path) {
  const char* home = std::getenv("HOME");
  std::string text = path.string();
  if (home && *home && text.rfind(std::string(home) + "/", 0) == 0) return "~" + text.substr(std::string(home).size());
  return text;
}

// The levels `--emit` names (spec section 6).
const std::vector<std::string> kEmitLevels = {"tensor", "loop",  "tile",  "kernel",  "cuda",
                                              "ptx",    "cubin", "schedule"};

int reportDiagnostics(const Diagnostics& diagnostics) {
  std::fputs(diagnostics.render().c_str(), stderr);
  return kExitUserError;
}

// Writes the outputs of a build together (support/files.h), creating their folders first.
void writeOutputs(const std::vector<std::pair<fs::path, std::string>>& files) {
  for (const auto& [path, bytes] : files) {
    std::error_code error;
    if (path.has_parent_path()) fs::create_directories(path.parent_path(), error);
    if (error) throw FileError(fmt::format("cannot create {}: {}", path.parent_path().string(), error.message()));
  }
  writeFilesTogether(files);
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

// Replaces each kernel of `kernels` that has tuned parameters in the tuning database (tune::bestRecorded)
// by the same kernel elaborated with them; explicit -D values win. Says so on stderr. A database that
// cannot be read is a warning: the build goes on with the defaults.
void useTunedParams(const BuildOptions& options, const std::map<std::string, int64_t>& sizes,
                    std::vector<tensor::Kernel>& kernels) {
  // (emmy tune takes .emmy files: a model's kernels are tuned as the source emmy import writes.)
  if (isTorchScriptModel(options.file)) return;
  fs::path path = databasePath(options.database);
  std::error_code ignored;
  if (!fs::exists(path, ignored)) return;  // nothing tuned yet: a build never creates the database
  std::map<std::string, int64_t> defines = parseNameValues(options.defines, "-D");
  std::vector<tensor::Kernel> tunedKernels = kernels;
  std::vector<std::string> messages;
  try {
    tune::TuningDatabase database(path, /*create=*/false);
    for (tensor::Kernel& kernel : tunedKernels) {
      std::string label = kernel.selector();
      Diagnostics diagnostics;
      ElaborationDetails details;
      EMMY_INTERNAL_ASSERT(elaborateFile(options.file, label, /*requireTypes=*/true, defines, diagnostics, &details),
                           "{} does not elaborate alone", label);
      if (details.params.empty()) continue;
      std::string note;
      std::optional<tune::TuningRecord> best =
          tune::bestRecorded(database, kernel, details.params, options.arch, sizes, note);
      if (!note.empty()) messages.push_back(fmt::format("emmy: note: {}\n", note));
      if (!best) continue;
      tune::Candidate tuned;
      for (const auto& [name, value] : best->params)
        if (!defines.count(name)) tuned[name] = value;
      if (tuned.empty()) continue;  // every param set by -D
      std::map<std::string, int64_t> values = defines;
      values.insert(tuned.begin(), tuned.end());
      std::optional<std::vector<tensor::Kernel>> retuned =
          elaborateFile(options.file, label, /*requireTypes=*/true, values, diagnostics);
      EMMY_INTERNAL_ASSERT(retuned && retuned->size() == 1, "{} does not elaborate with its tuned parameters", label);
      kernel = retuned->front();
      messages.push_back(fmt::format(
          "emmy: using tuned parameters {} for {} ({}, {}, {}) from {} (--no-tuned ignores them)\n",
          tune::candidateText(tuned), label, best->key.sizes, best->key.device, best->key.arch, displayPath(path)));
    }
  } catch (const tune::DatabaseError& error) {
    fmt::print(stderr, "emmy: warning: {}; building with the default parameters\n", error.what());
    return;
  }
  for (const std::string& message : messages) std::fputs(message.c_str(), stderr);
  kernels = std::move(tunedKernels);
}

int build(const BuildOptions& options) {
  validateCudaArch(options.arch);
  Diagnostics diagnostics;
  ElaborationDetails details;
  std::optional<std::vector<tensor::Kernel>> kernels = elaborateFile(
      options.file, options.kernel, /*requireTypes=*/false, parseNameValues(options.defines, "-D"), diagnostics, &details,
      options.modelImport);
  if (!kernels) return reportDiagnostics(diagnostics);

  std::map<std::string, int64_t> sizes = parseNameValues(options.sizes, "--size");
  checkSizeNamesExist(sizes, *kernels);
  if (!options.noTuned) useTunedParams(options, sizes, *kernels);

  PipelineOptions pipeline;
  pipeline.stopAfter = levelOf(options.emit);
  pipeline.dumpAfter = options.dumpAfter;
  pipeline.dump = &std::cerr;
  std::vector<Lowered> lowered = lowerAll(*kernels, pipeline);

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
      writeOutputs({{directory / (baseName + "." + options.emit), text}});
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
    std::vector<std::pair<fs::path, std::string>> outputs = {{directory / (files.baseName + ".cu"), files.source},
                                                             {directory / (files.baseName + ".h"), files.header}};
    if (!options.depfile.empty())
      outputs.emplace_back(options.depfile, depfile(directory / (files.baseName + ".cu"), details.loadedFiles));
    writeOutputs(outputs);
  } else if (options.emit == "ptx") {
    writeOutputs({{directory / (files.baseName + ".ptx"), compiled.ptx}});
  } else if (options.emit == "cubin") {
    writeOutputs({{directory / (files.baseName + ".cubin"), std::string(compiled.cubin.begin(), compiled.cubin.end())}});
  }
  if (options.stats) {
    std::vector<KernelResources> usage = resourceUsage(compiled);
    std::vector<std::string> report = performanceReport(lowered, usage, compiled.ptx, options.arch, sizes);
    for (size_t k = 0; k < usage.size(); ++k)
      std::fputs((formatResourceUsage({usage[k]}) + (k < report.size() ? report[k] + "\n" : "")).c_str(), stdout);
  }
  return 0;
}

// What `emmy build` writes for one kernel instance of `file` (a model's under its imported name), which
// check and run run.
CudaGenerator generatorFor(const std::string& file) {
  return [file](const tensor::Kernel& kernel) {
    return emitCudaFiles({lower(kernel, PipelineOptions{})}, sourceName(file));
  };
}

// --input and --name, the options of a TorchScript model, on `command`.
void addModelOptions(CLI::App* command, ModelImportOptions& options) {
  command->add_option("--input", options.inputs,
                      "a TorchScript model's forward argument: dtype and dims, as x=f32[B,64] (repeatable)");
  command->add_option("--name", options.kernelName, "the kernel imported from a TorchScript model (default: forward)");
}

// --repeat and --warmup of `emmy bench` and `emmy tune`, with `timing`'s values as their defaults.
void addTimingOptions(CLI::App* command, runtime::Timing& timing) {
  command->add_option("--repeat", timing.repetitions, fmt::format("timed calls (default {})", timing.repetitions))
      ->check(CLI::Range(1, 100000));
  command->add_option("--warmup", timing.warmup, fmt::format("untimed calls first (default {})", timing.warmup))
      ->check(CLI::Range(0, 100000));
}

// --scalar of check, run, bench and tune.
void addScalarOption(CLI::App* command, std::vector<std::string>& scalars) {
  command->add_option("--scalar", scalars,
                      "a scalar parameter's value, as eps=1e-5 (repeatable; before its DIR/NAME.npy and its default)");
}

// The options `emmy check` and `emmy run` share.
void addCheckOptions(CLI::App* command, CheckOptions& options) {
  command->add_option("FILE", options.file, "the .emmy file or TorchScript model (.pt)")->required();
  command->add_option("--kernel", options.kernel, "one kernel: NAME or NAME<TYPE, ...>");
  command->add_option("--size", options.sizes, "a size, as N=64 (repeatable)");
  command->add_option("-D", options.defines, "set a schedule param, as BM=64 (repeatable)");
  addScalarOption(command, options.scalars);
  command->add_option("--inputs", options.inputsDir, "read inputs from DIR/NAME.npy");
  command->add_option("--save", options.saveDir, "write every output to DIR/NAME.npy");
  command->add_option("--seed", options.seed, "seed of the random inputs (default 0)");
  command->add_flag("--verbose", options.verbose, "print the host compiler's command and the time taken");
  addModelOptions(command, options.modelImport);
}

// What times candidates on the GPU: the CUDA runtime's GpuKernel, each candidate in a child process of its own.
std::unique_ptr<tune::MeasurementBackend> gpuTimingBackend(const runtime::CudaDevice& device, const TuneOptions& options) {
  return std::make_unique<tune::IsolatedBackend>(
      std::make_unique<tune::GpuTimingBackend>(device, tune::gpuCompiler(device), options.timing),
      std::chrono::milliseconds(static_cast<int64_t>(options.timeout * 1000)));
}

int report(const TuneOptions& options) {
  fs::path path = databasePath(options.database);
  std::error_code ignored;
  if (!fs::exists(path, ignored)) {
    fmt::print("no tuning records: {} does not exist\n", displayPath(path));
    return 0;
  }
  std::vector<std::string> kernelHashes;
  if (!options.file.empty()) {
    Diagnostics diagnostics;
    std::optional<std::vector<tensor::Kernel>> kernels = elaborateFile(options.file, options.kernel, false, {}, diagnostics);
    if (!kernels) return reportDiagnostics(diagnostics);
    for (const tensor::Kernel& kernel : *kernels) kernelHashes.push_back(tune::tuningKey(kernel, {}, {}, "", "").kernelHash);
  }
  tune::TuningDatabase database(path, /*create=*/false);
  std::fputs(tune::formatReport(database.records(), kernelHashes).c_str(), stdout);
  return 0;
}

int tuneFile(const TuneOptions& options) {
  if (options.report) return report(options);
  if (options.file.empty()) throw UsageError("tune: a FILE is required (or --report)");
  if (options.budget && *options.budget < 1) throw UsageError("--budget must be at least 1");
  if (options.seconds && *options.seconds <= 0) throw UsageError("--time must be positive");
  std::unique_ptr<tune::MeasurementBackend> backend;
  if (options.costModel) {
    backend = std::make_unique<tune::CostModelBackend>(options.arch.empty() ? "sm_90" : options.arch);
  } else {
    runtime::DeviceProbe probe = tune::probeCudaDeviceInChild();
    if (!probe.device) {
      fmt::print(stderr, "emmy: error: no CUDA device found ({}); emmy tune --cost-model ranks the candidates by the "
                         "static model instead\n", probe.reason);
      return kExitNoCudaDevice;
    }
    backend = gpuTimingBackend(*probe.device, options);
  }

  std::vector<std::string> untunable;
  std::vector<tune::TuningTarget> targets = tune::tuningTargets(
      options.file, options.kernel, parseNameValues(options.sizes, "--size"), backend->device(), backend->arch(), untunable,
      parseScalarOptions(options.scalars));
  for (const std::string& kernel : untunable)
    fmt::print(stderr, "emmy: note: the schedule of {} declares no param; it is not tuned\n", kernel);
  fs::path path = databasePath(options.database);
  tune::TuningDatabase database(path, /*create=*/true);
  tune::ProgressDisplay progress(stderr, isatty(fileno(stderr)) != 0);
  tune::Budget budget{options.budget, options.seconds};
  for (size_t k = 0; k < targets.size(); ++k) {
    tune::TuningRun run = tune::tune(targets[k], budget, options.seed, *backend, database,
                                     [&](const tune::Progress& step) { progress.show(step); });
    progress.finish();
    std::string table = tune::formatTable(targets[k], run, backend->description(), displayPath(path));
    std::fputs(((k ? "\n" : "") + table).c_str(), stdout);
    std::fflush(stdout);
  }
  return 0;
}

int importCommand(const ImportCommandOptions& options) {
  std::string source = importModel(options.model, options.modelImport, options.output);
  if (options.output.empty()) std::fputs(source.c_str(), stdout);
  return 0;
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
  buildCommand->add_option("--size", buildOptions.sizes, "a size, as N=4096 (repeatable): with --stats for bytes, flops "
                                                         "and the roofline bound; selects the tuned parameters of those sizes");
  buildCommand->add_flag("--stats", buildOptions.stats, "print ptxas resource usage per CUDA kernel");
  std::vector<std::string> dumpChoices = passNames();
  dumpChoices.push_back("all");
  buildCommand->add_option("--dump-after", buildOptions.dumpAfter, "print the IR to stderr after a pass (or all)")
      ->check(CLI::IsMember(dumpChoices));

  CheckOptions checkOptions;
  CLI::App* checkCommand =
      app.add_subcommand("check", "run the generated code on the CPU and compare it with the reference meaning");
  addCheckOptions(checkCommand, checkOptions);
  checkCommand->add_flag("--profile", checkOptions.profile,
                         "also count global sectors, shared-memory wavefronts, barriers and divergence per access site "
                         "(docs/profile.md)");

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
  addScalarOption(benchCommand, benchCase.scalars);
  benchCommand->add_option("--inputs", benchCase.inputsDir, "read inputs from DIR/NAME.npy");
  benchCommand->add_option("--seed", benchCase.seed, "seed of the random inputs (default 0)");
  addTimingOptions(benchCommand, benchSettings.timing);
  benchCommand->add_flag("--flush-l2", benchSettings.timing.flushL2, "overwrite the L2 cache before each timed call");
  benchCommand->add_flag("!--no-torch", benchSettings.compareWithTorch, "do not time PyTorch eager for the stdlib");

  addModelOptions(buildCommand, buildOptions.modelImport);

  ImportCommandOptions importOptions;
  CLI::App* importCommandLine =
      app.add_subcommand("import", "translate a TorchScript model (torch.jit.script or trace, saved) to .emmy source");
  importCommandLine->add_option("MODEL", importOptions.model, "the TorchScript model (.pt)")->required();
  importCommandLine->add_option("-o", importOptions.output, "write the source to FILE.emmy (default: standard output)");
  addModelOptions(importCommandLine, importOptions.modelImport);

  buildCommand->add_option("--db", buildOptions.database, "the tuning database (default: $EMMY_TUNING_DB, else "
                                                          "~/.cache/emmy/tuning.db)");
  buildCommand->add_flag("--no-tuned", buildOptions.noTuned, "ignore the tuning database's parameters");

  TuneOptions tuneOptions;
  CLI::App* tuneCommand = app.add_subcommand(
      "tune", "search a kernel's schedule params for the fastest, on the GPU or (--cost-model) by the static model");
  tuneCommand->add_option("FILE", tuneOptions.file, "the .emmy file");
  tuneCommand->add_option("--kernel", tuneOptions.kernel, "one kernel: NAME or NAME<TYPE, ...> (default: every one)");
  tuneCommand->add_option("--size", tuneOptions.sizes, "a size, as N=4096 (repeatable; every size is needed)");
  addScalarOption(tuneCommand, tuneOptions.scalars);
  tuneCommand->add_option("--budget", tuneOptions.budget, "candidates per kernel, failed ones included (default 64)");
  tuneCommand->add_option("--time", tuneOptions.seconds, "seconds of search per kernel");
  tuneCommand->add_option("--seed", tuneOptions.seed, "seed of the random sampling (default 0)");
  tuneCommand->add_option("--db", tuneOptions.database, "the tuning database (default: $EMMY_TUNING_DB, else "
                                                        "~/.cache/emmy/tuning.db)");
  tuneCommand->add_option("--arch", tuneOptions.arch, "with --cost-model: the CUDA target (default sm_90)");
  tuneCommand->add_option("--timeout", tuneOptions.timeout, "seconds one candidate may take before it counts as hung (default 30)");
  addTimingOptions(tuneCommand, tuneOptions.timing);
  tuneCommand->add_flag("--cost-model", tuneOptions.costModel, "rank by the static model instead of timing on a GPU");
  tuneCommand->add_flag("--report", tuneOptions.report, "list the recorded results (of FILE's kernels, if given)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : kExitUsageError;
  }
  return runReportingFailures("emmy", [&] {
    try {
      if (*buildCommand) return build(buildOptions);
      if (*checkCommand) {
        sim::SimulationOptions simulation;
        simulation.profile = checkOptions.profile;
        return runCheck(checkOptions, generatorFor(checkOptions.file), simulationCompiler(simulation));
      }
      if (*runCommand) return runOnGpu(runOptions, generatorFor(runOptions.file));
      if (*benchCommand) return runBench({benchCase}, benchSettings);
      if (*importCommandLine) return importCommand(importOptions);
      if (*tuneCommand) return tuneFile(tuneOptions);
    } catch (const runtime::NoCudaDevice& e) {
      fmt::print(stderr, "emmy: error: {}\n", e.what());
      return kExitNoCudaDevice;
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
