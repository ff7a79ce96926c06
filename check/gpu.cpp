#include "check/gpu.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <future>
#include <memory>

#include <fmt/format.h>

#include "check/compare.h"
#include "compiler/elaborate.h"
#include "compiler/pipeline.h"
#include "frontend/frontend.h"
#include "runtime/torch_gpu.h"
#include "support/diagnostics.h"
#include "support/npy.h"
#include "support/text.h"

namespace emmy {

namespace {

namespace fs = std::filesystem;

// The T of a standard-library instance, as torch_stdlib.py names it.
std::string elementType(const tensor::Kernel& kernel) {
  return kernel.typeArguments.empty() ? "f32" : std::string(dtypeName(kernel.typeArguments.front().second));
}

runtime::TorchRequest torchRequest(const tensor::Kernel& kernel, const tensor::EvaluationInputs& inputs) {
  runtime::TorchRequest request;
  request.kernel = kernel.name;
  request.dtype = elementType(kernel);
  request.sizes = tensor::bindSizes(kernel, inputs.tensors, inputs.sizes);
  for (const auto& [name, value] : tensor::bindScalars(kernel, inputs.scalars)) request.scalars[name] = value.asDouble();
  request.params.insert(kernel.integerArguments.begin(), kernel.integerArguments.end());
  return request;
}

// `emmy run`'s second opinion: the same inputs through PyTorch on the GPU, compared with the GPU's outputs.
bool compareWithTorch(const tensor::Kernel& kernel, const tensor::EvaluationInputs& inputs,
                      const std::map<std::string, Buffer>& outputs, std::FILE* report) {
  TemporaryFolder folder;
  fs::path torchOutputs = folder.path() / "torch";
  fs::create_directory(torchOutputs);
  for (const auto& [name, buffer] : inputs.tensors) writeNpy(folder.path() / (name + ".npy"), buffer);
  runtime::TorchRequest request = torchRequest(kernel, inputs);
  for (const tensor::ScalarParamDecl& scalar : kernel.scalars) {
    Buffer value(scalar.dtype, {});
    value.set(0, Value::ofFloat(scalar.dtype, request.scalars.at(scalar.name)));
    writeNpy(folder.path() / (scalar.name + ".npy"), value);
  }
  request.inputsDir = folder.path().string();
  request.outputsDir = torchOutputs.string();
  runtime::TorchBatch batch = runtime::runTorch({request});
  if (batch.unavailable) {
    fmt::print(report, "  PyTorch: not compared ({})\n", *batch.unavailable);
    return true;
  }
  if (!batch.results[0].ok) {
    fmt::print(report, "  PyTorch: not compared ({})\n", batch.results[0].error);
    return true;
  }
  bool passed = true;
  for (const tensor::TensorParam& output : kernel.outputs) {
    Buffer expected = readNpy(torchOutputs / (output.name + ".npy"), output.dtype);
    const Buffer& generated = outputs.at(output.name);
    if (expected.shape() != generated.shape()) {
      fmt::print(report, "  {} vs PyTorch: FAILED: PyTorch's output has another shape\n", output.name);
      passed = false;
      continue;
    }
    OutputComparison comparison = compareOutput(output.name + " vs PyTorch " + batch.torchVersion, generated, expected,
                                                computedPrecision(kernel, output.name));
    fmt::print(report, "  {}\n", formatComparison(comparison));
    passed = passed && comparison.ok();
  }
  return passed;
}

std::string scaled(double value, const char* unit) {
  const char* prefixes[] = {"", "k", "M", "G", "T", "P"};
  int k = 0;
  while (value >= 1000 && k < 5) value /= 1000, ++k;
  return fmt::format("{:.2f} {}{}", value, prefixes[k], unit);
}

std::string percent(double fraction, const char* of = "peak") {
  return fraction > 0 ? fmt::format(", {:.0f}% of {}", 100 * fraction, of) : "";
}

std::string timingText(double median, double min, const runtime::Timing& timing) {
  return fmt::format("{:.4f} ms (median of {}, min {:.4f}{})", median, timing.repetitions, min,
                     timing.flushL2 ? ", L2 flushed" : "");
}

std::string clocksText(const runtime::TorchClocks& clocks) {
  return clocks.smMHz > 0 ? fmt::format(" [SM {:.0f} MHz, memory {:.0f} MHz]", clocks.smMHz, clocks.memoryMHz) : "";
}

// What an instance's preparation gives: its inputs, bound sizes and compiled program, or why the program
// could not be made (code that does not compile is a bug in Emmy: the other instances still run).
struct PreparedRow {
  tensor::EvaluationInputs inputs;
  std::map<std::string, int64_t> sizes;
  std::unique_ptr<runtime::GpuKernel> program;
  std::optional<std::string> failure;
};

// One instance to measure: lowered first, prepared ahead in parallel, then run one at a time.
struct BenchRow {
  const BenchCase* benchCase;
  std::map<std::string, int64_t> givenSizes;
  std::map<std::string, std::string> givenScalars;
  bool stdlib = false;  // compared with PyTorch
  tensor::Kernel kernel;
  Lowered lowered;
  cuda::GeneratedCuda source;
  std::future<PreparedRow> prepared;
};

// How many instances are prepared at once: random inputs, NVRTC and the host compiler.
constexpr size_t kParallelPreparations = 8;
// A compilation of torch.compile given less than this is not worth starting.
constexpr int kLeastCompileSeconds = 5;
// What a PyTorch bench request may take besides torch.compile's compilation.
constexpr std::chrono::seconds kTorchRequestTimeout{120};

// Prints each measurement's line and passes its record on.
class BenchReport {
public:
  BenchReport(const BenchSettings& settings, const runtime::CudaDevice& device, std::FILE* report)
      : settings_(settings), device_(device), report_(report) {}

  // The instance the next measurements are of.
  void instance(const tensor::Kernel& kernel, const std::map<std::string, int64_t>& sizes, const Work& work) {
    std::vector<std::string> sizeTexts;
    for (const std::string& size : kernel.sizes) sizeTexts.push_back(fmt::format("{}={}", size, sizes.at(size)));
    fmt::print(report_, "{}\n", kernel.selector() + (sizeTexts.empty() ? "" : " (" + join(sizeTexts, ", ") + ")"));
    instance_ = BenchRecord{};
    instance_.kernel = kernel.name;
    instance_.dtype = kernel.typeArguments.empty() ? "" : std::string(dtypeName(kernel.typeArguments.front().second));
    instance_.sizes = sizes;
    instance_.work = work;
    emmyMilliseconds_ = 0;
  }

  void emmy(const runtime::GpuRun& run, const runtime::TorchClocks& clocks) {
    BenchRecord record = measurement("emmy", run.failure, run.medianMilliseconds(), run.minMilliseconds(), clocks);
    if (!run.failure) emmyMilliseconds_ = record.medianMilliseconds;
    print(record, "");
  }

  // PyTorch eager and the baselines timed beside it; `compileSkipped`: why torch.compile was not asked for.
  void torch(const runtime::TorchResult& eager, const std::optional<std::string>& compileSkipped) {
    BenchRecord record = measurement("torch eager", eager.ok ? std::nullopt : std::optional(eager.error),
                                     eager.medianMilliseconds, eager.minMilliseconds, eager.clocks);
    record.sdpaBackend = eager.sdpaBackend;
    print(record, eager.sdpaBackend.empty() ? "" : "; SDPA picked " + eager.sdpaBackend);
    if (compileSkipped) {
      BenchRecord skipped = measurement("torch.compile", compileSkipped, 0, 0, {});
      skipped.skipped = true;
      print(skipped, "");
    }
    for (const runtime::TorchBaseline& baseline : eager.baselines) {
      BenchRecord each = measurement(baseline.name, baseline.ok ? std::nullopt : std::optional(baseline.error),
                                     baseline.medianMilliseconds, baseline.minMilliseconds, baseline.clocks);
      each.skipped = baseline.skipped;
      each.compileSeconds = baseline.compileSeconds;
      print(each, baseline.compileSeconds > 0 ? fmt::format("; compiled in {:.1f} s", baseline.compileSeconds) : "");
    }
  }

private:
  BenchRecord measurement(const std::string& implementation, const std::optional<std::string>& failure, double median,
                          double min, const runtime::TorchClocks& clocks) const {
    BenchRecord record = instance_;
    record.implementation = implementation;
    record.failure = failure;
    record.clocks = clocks;
    if (failure) return record;
    record.medianMilliseconds = median;
    record.minMilliseconds = min;
    record.repetitions = settings_.timing.repetitions;
    record.throughput = throughput(record.work, median, device_, settings_.copyBytesPerSecond,
                                   record.dtype == "f16" || record.dtype == "bf16");
    if (implementation != "emmy" && emmyMilliseconds_ > 0) record.emmySpeedup = median / emmyMilliseconds_;
    return record;
  }

  // The line of `record` (`detail` before Emmy's speed against it) as soon as it is measured, so that a
  // time limit on the whole leaves what was done.
  void print(const BenchRecord& record, const std::string& detail) {
    std::string label = fmt::format("  {:<17}", record.implementation + ":");
    if (record.failure)
      fmt::print(report_, "{}{}: {}\n", label, record.skipped ? "skipped" : "FAILED", *record.failure);
    else
      fmt::print(report_, "{}{}; {}{}{}{}\n", label,
                 timingText(record.medianMilliseconds, record.minMilliseconds, settings_.timing),
                 formatThroughput(record.work, record.throughput), detail,
                 record.emmySpeedup > 0 ? fmt::format("; Emmy {:.2f}x as fast", record.emmySpeedup) : "",
                 clocksText(record.clocks));
    std::fflush(report_);
    if (settings_.record) settings_.record(record);
  }

  const BenchSettings& settings_;
  const runtime::CudaDevice& device_;
  std::FILE* report_;
  BenchRecord instance_;  // what the records of the current instance share
  double emmyMilliseconds_ = 0;
};

}  // namespace

int runOnGpu(const CheckOptions& options, const CudaGenerator& generateCuda, std::FILE* report) {
  parseScalarOptions(options.scalars);  // a malformed option is a usage error, with a device or without
  runtime::CudaDevice device = runtime::requireCudaDevice();
  fmt::print(report, "on {}\n", device.describe());
  KernelCompiler compile = [&](const tensor::Kernel& kernel, const sim::CudaSource& source) -> std::unique_ptr<CompiledKernel> {
    return std::make_unique<runtime::GpuKernel>(device, kernel, source);
  };
  return runCheck(options, generateCuda, compile, report, isStdlibFile(options.file) ? OutputCrossCheck(compareWithTorch) : nullptr);
}

Throughput throughput(const Work& work, double milliseconds, const runtime::CudaDevice& device,
                      double copyBytesPerSecond, bool tensorCores) {
  Throughput result;
  if (milliseconds <= 0) return result;
  double seconds = milliseconds * 1e-3;
  result.bytesPerSecond = work.bytes / seconds;
  result.flopsPerSecond = work.flops / seconds;
  if (double peak = device.peakBandwidth(); peak > 0) result.bandwidthFraction = result.bytesPerSecond / peak;
  if (double peak = device.peakFp32Flops(); peak > 0) result.flopsFraction = result.flopsPerSecond / peak;
  if (copyBytesPerSecond > 0) result.copyFraction = result.bytesPerSecond / copyBytesPerSecond;
  if (double peak = device.peakTensorFlops(); tensorCores && peak > 0) result.tensorFraction = result.flopsPerSecond / peak;
  return result;
}

std::string formatThroughput(const Work& work, const Throughput& measured) {
  return fmt::format("{}, {}{}{}; {}, {}{}{}", scaled(work.bytes, "B"), scaled(measured.bytesPerSecond, "B/s"),
                     percent(measured.bandwidthFraction), percent(measured.copyFraction, "measured copy"),
                     scaled(work.flops, "FLOP"), scaled(measured.flopsPerSecond, "FLOP/s"), percent(measured.flopsFraction),
                     percent(measured.tensorFraction, "tensor-core peak"));
}

int runBench(const std::vector<BenchCase>& cases, const BenchSettings& settings, std::FILE* report) {
  for (const BenchCase& benchCase : cases) parseScalarOptions(benchCase.scalars);  // usage errors come first
  runtime::CudaDevice device = runtime::requireCudaDevice();
  fmt::print(report, "on {}: peak {} (memory clock x bus width x 2), {} FP32 (SMs x clock x FP32 lanes x 2){}{}\n",
             device.describe(), scaled(device.peakBandwidth(), "B/s"), scaled(device.peakFp32Flops(), "FLOP/s"),
             device.peakTensorFlops() > 0 ? fmt::format(", {} on tensor cores (f16, bf16)", scaled(device.peakTensorFlops(), "FLOP/s")) : "",
             settings.copyBytesPerSecond > 0 ? fmt::format("; measured copy {}", scaled(settings.copyBytesPerSecond, "B/s")) : "");
  std::fflush(report);
  bool allRan = true;
  std::vector<BenchRow> rows;
  for (const BenchCase& benchCase : cases) {
    Diagnostics diagnostics;
    std::optional<std::vector<tensor::Kernel>> kernels = elaborateFile(
        benchCase.file, benchCase.kernel, /*requireTypes=*/true, parseNameValues(benchCase.defines, "-D"), diagnostics);
    if (!kernels) {
      std::fputs(diagnostics.render().c_str(), stderr);
      allRan = false;
      continue;
    }
    std::map<std::string, int64_t> givenSizes = parseNameValues(benchCase.sizes, "--size");
    checkSizeNamesExist(givenSizes, *kernels);
    std::map<std::string, std::string> givenScalars = parseScalarOptions(benchCase.scalars);
    checkScalarNamesExist(givenScalars, *kernels);
    for (const tensor::Kernel& kernel : *kernels) {
      BenchRow row;
      row.benchCase = &benchCase;
      row.givenSizes = givenSizes;
      row.givenScalars = givenScalars;
      row.stdlib = settings.compareWithTorch && isStdlibFile(benchCase.file);
      row.kernel = kernel;
      row.lowered = lower(kernel, PipelineOptions{});
      row.source = emitCudaFiles({row.lowered}, benchCase.file);
      rows.push_back(std::move(row));
    }
  }

  // PyTorch imports while the first instances are prepared.
  std::optional<runtime::TorchSession> ownSession;
  runtime::TorchSession* torch = settings.torch;
  if (!torch && std::any_of(rows.begin(), rows.end(), [](const BenchRow& row) { return row.stdlib; }))
    torch = &ownSession.emplace();

  // Inputs take a second per hundred MB and compiling seconds per instance, running a fraction of that:
  // both ahead, in parallel. A usage error (a size missing) comes out where its instance would run.
  auto prepare = [&device](BenchRow& row) {
    row.prepared = std::async(std::launch::async, [&device, &row] {
      PreparedRow prepared;
      prepared.inputs = prepareInputs(row.kernel, row.benchCase->inputsDir, row.benchCase->seed, row.givenSizes, row.givenScalars);
      try {
        prepared.sizes = tensor::bindSizes(row.kernel, prepared.inputs.tensors, prepared.inputs.sizes);
        tensor::bindScalars(row.kernel, prepared.inputs.scalars);
      } catch (const tensor::EvaluationError& error) {
        throw UsageError(fmt::format("kernel {}: {}", row.kernel.selector(), error.what()));
      }
      try {
        prepared.program = std::make_unique<runtime::GpuKernel>(device, row.kernel, row.source);
      } catch (const InternalError& error) {  // a generated file that does not compile: the others still run
        prepared.failure = error.what();
      }
      return prepared;
    });
  };
  for (size_t k = 0; k < std::min(rows.size(), kParallelPreparations); ++k) prepare(rows[k]);

  BenchReport bench(settings, device, report);
  bool toldTorch = false;
  double compileSeconds = 0;  // torch.compile's, so far
  for (size_t k = 0; k < rows.size(); ++k) {
    BenchRow& row = rows[k];
    if (k + kParallelPreparations < rows.size()) prepare(rows[k + kParallelPreparations]);
    PreparedRow prepared = row.prepared.get();
    Work work = instanceWork(row.lowered, prepared.sizes);
    if (row.benchCase->flops > 0) work.flops = row.benchCase->flops;
    bench.instance(row.kernel, prepared.sizes, work);
    runtime::GpuRun run;
    run.failure = prepared.failure;
    if (prepared.program) {
      try {
        run = prepared.program->run(prepared.inputs, settings.timing);
      } catch (const InternalError& error) {
        run.failure = error.what();
      }
    }
    allRan = allRan && !run.failure;
    bench.emmy(run, torch ? torch->clocks() : runtime::TorchClocks{});
    if (!row.stdlib) continue;

    if (const std::optional<std::string>& why = torch->unavailable()) {
      if (!toldTorch) fmt::print(report, "PyTorch: not measured ({})\n", *why);
      toldTorch = true;
      continue;
    }
    if (!toldTorch)
      fmt::print(report, "PyTorch {} on {}: timed right after Emmy on each instance, the same bytes and flops counted\n",
                 torch->torchVersion(), torch->device());
    toldTorch = true;
    runtime::TorchRequest request = torchRequest(row.kernel, prepared.inputs);
    request.timing = settings.timing;
    std::optional<std::string> compileSkipped;
    if (settings.torchCompileSeconds > 0) {
      double left = settings.torchCompileBudget > 0 ? settings.torchCompileBudget - compileSeconds : settings.torchCompileSeconds;
      if (left >= kLeastCompileSeconds)
        request.compileSeconds = std::min(settings.torchCompileSeconds, static_cast<int>(left));
      else
        compileSkipped = fmt::format("this run's {} s for torch.compile are spent", settings.torchCompileBudget);
    }
    prepared = {};  // the inputs are large at these sizes; PyTorch draws its own
    runtime::TorchResult result = torch->bench(request, std::chrono::seconds(request.compileSeconds) + kTorchRequestTimeout);
    for (const runtime::TorchBaseline& baseline : result.baselines) compileSeconds += baseline.compileSeconds;
    bench.torch(result, compileSkipped);
  }
  return allRan ? 0 : 1;
}

}  // namespace emmy
