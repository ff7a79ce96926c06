#include "check/gpu.h"

#include <algorithm>
#include <filesystem>
#include <future>

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

std::string percent(double fraction) { return fraction > 0 ? fmt::format(", {:.0f}% of peak", 100 * fraction) : ""; }

std::string timingText(double median, double min, const runtime::Timing& timing) {
  return fmt::format("{:.4f} ms (median of {}, min {:.4f}{})", median, timing.repetitions, min,
                     timing.flushL2 ? ", L2 flushed" : "");
}

// One instance to measure: prepared first, compiled in parallel, then run one at a time.
struct BenchRow {
  std::string title;
  tensor::Kernel kernel;
  tensor::EvaluationInputs inputs;
  Work work;
  cuda::GeneratedCuda source;
  std::future<std::unique_ptr<runtime::GpuKernel>> program;
  std::optional<runtime::GpuRun> run;  // empty: failed
  std::optional<size_t> torchIndex;  // its request in the PyTorch batch
};

// How many instances NVRTC and the host compiler work on at once.
constexpr size_t kParallelCompiles = 8;

}  // namespace

bool isStdlibFile(const std::string& file) {
  std::error_code error;
  fs::path directory = fs::canonical(fs::path(file), error).parent_path();
  if (error) return false;
  fs::path stdlib = fs::canonical(Frontend::defaultStdlibDir(), error);
  return !error && directory == stdlib;
}

int runOnGpu(const CheckOptions& options, const CudaGenerator& generateCuda, std::FILE* report) {
  parseScalarOptions(options.scalars);  // a malformed option is a usage error, with a device or without
  runtime::CudaDevice device = runtime::requireCudaDevice();
  fmt::print(report, "on {}\n", device.describe());
  KernelCompiler compile = [&](const tensor::Kernel& kernel, const sim::CudaSource& source) -> std::unique_ptr<CompiledKernel> {
    return std::make_unique<runtime::GpuKernel>(device, kernel, source);
  };
  return runCheck(options, generateCuda, compile, report, isStdlibFile(options.file) ? OutputCrossCheck(compareWithTorch) : nullptr);
}

Throughput throughput(const Work& work, double milliseconds, const runtime::CudaDevice& device) {
  Throughput result;
  if (milliseconds <= 0) return result;
  double seconds = milliseconds * 1e-3;
  result.bytesPerSecond = work.bytes / seconds;
  result.flopsPerSecond = work.flops / seconds;
  if (double peak = device.peakBandwidth(); peak > 0) result.bandwidthFraction = result.bytesPerSecond / peak;
  if (double peak = device.peakFp32Flops(); peak > 0) result.flopsFraction = result.flopsPerSecond / peak;
  return result;
}

std::string formatThroughput(const Work& work, const Throughput& measured) {
  return fmt::format("{}, {}{}; {}, {}{}", scaled(work.bytes, "B"), scaled(measured.bytesPerSecond, "B/s"),
                     percent(measured.bandwidthFraction), scaled(work.flops, "FLOP"), scaled(measured.flopsPerSecond, "FLOP/s"),
                     percent(measured.flopsFraction));
}

int runBench(const std::vector<BenchCase>& cases, const BenchSettings& settings, std::FILE* report) {
  for (const BenchCase& benchCase : cases) parseScalarOptions(benchCase.scalars);  // usage errors come first
  runtime::CudaDevice device = runtime::requireCudaDevice();
  fmt::print(report, "on {}: peak {} (memory clock x bus width x 2), {} FP32 (SMs x clock x FP32 lanes x 2)\n",
             device.describe(), scaled(device.peakBandwidth(), "B/s"), scaled(device.peakFp32Flops(), "FLOP/s"));
  std::fflush(report);
  bool allRan = true;
  std::vector<BenchRow> rows;
  std::vector<runtime::TorchRequest> torchRequests;
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
    bool stdlib = settings.compareWithTorch && isStdlibFile(benchCase.file);
    for (const tensor::Kernel& kernel : *kernels) {
      BenchRow row;
      row.kernel = kernel;
      row.inputs = prepareInputs(kernel, benchCase.inputsDir, benchCase.seed, givenSizes, givenScalars);
      std::map<std::string, int64_t> sizes;
      try {
        sizes = tensor::bindSizes(kernel, row.inputs.tensors, row.inputs.sizes);
        tensor::bindScalars(kernel, row.inputs.scalars);
      } catch (const tensor::EvaluationError& error) {
        throw UsageError(fmt::format("kernel {}: {}", displayName(kernel), error.what()));
      }
      std::vector<std::string> sizeTexts;
      for (const std::string& size : kernel.sizes) sizeTexts.push_back(fmt::format("{}={}", size, sizes.at(size)));
      row.title = displayName(kernel) + (sizeTexts.empty() ? "" : " (" + join(sizeTexts, ", ") + ")");
      Lowered lowered = lower(kernel, PipelineOptions{});
      row.work = instanceWork(lowered, sizes);
      row.source = emitCudaFiles({lowered}, benchCase.file);
      if (stdlib) {
        runtime::TorchRequest request = torchRequest(kernel, row.inputs);
        request.timing = settings.timing;
        row.torchIndex = torchRequests.size();
        torchRequests.push_back(std::move(request));
      }
      rows.push_back(std::move(row));
    }
  }

  // Compiling takes seconds per instance and running a fraction of that: compile ahead, in parallel.
  auto compile = [&](BenchRow& row) {
    row.program = std::async(std::launch::async, [&device, &row] {
      return std::make_unique<runtime::GpuKernel>(device, row.kernel, row.source);
    });
  };
  for (size_t k = 0; k < std::min(rows.size(), kParallelCompiles); ++k) compile(rows[k]);
  for (size_t k = 0; k < rows.size(); ++k) {
    BenchRow& row = rows[k];
    if (k + kParallelCompiles < rows.size()) compile(rows[k + kParallelCompiles]);
    runtime::GpuRun run;
    try {
      run = row.program.get()->run(row.inputs, settings.timing);
    } catch (const InternalError& error) {  // a generated file that does not compile: the others still run
      run.failure = error.what();
    }
    row.inputs = {};  // large at these sizes
    // Printed as soon as measured, so that a time limit on the whole leaves what was done.
    fmt::print(report, "{}\n", row.title);
    if (run.failure) {
      fmt::print(report, "  emmy: FAILED: {}\n", *run.failure);
      allRan = false;
    } else {
      fmt::print(report, "  emmy:    {}; {}\n", timingText(run.medianMilliseconds(), run.minMilliseconds(), settings.timing),
                 formatThroughput(row.work, throughput(row.work, run.medianMilliseconds(), device)));
      row.run = std::move(run);
    }
    std::fflush(report);
  }

  if (torchRequests.empty()) return allRan ? 0 : 1;
  runtime::TorchBatch torch = runtime::runTorch(torchRequests);
  if (torch.unavailable) {
    fmt::print(report, "PyTorch comparison unavailable: {}\n", *torch.unavailable);
    return allRan ? 0 : 1;
  }
  fmt::print(report, "PyTorch {} eager on {}, the same bytes and flops counted:\n", torch.torchVersion, torch.device);
  for (const BenchRow& row : rows) {
    if (!row.torchIndex) continue;
    const runtime::TorchResult& result = torch.results[*row.torchIndex];
    if (!result.ok) {
      fmt::print(report, "{}\n  PyTorch: FAILED: {}\n", row.title, result.error);
      continue;
    }
    Throughput measured = throughput(row.work, result.medianMilliseconds, device);
    std::string speed = row.run ? fmt::format("; Emmy {:.2f}x PyTorch's speed", result.medianMilliseconds / row.run->medianMilliseconds())
                                : "";
    fmt::print(report, "{}\n  PyTorch: {}; {}{}{}\n", row.title,
               timingText(result.medianMilliseconds, result.minMilliseconds, settings.timing), scaled(measured.bytesPerSecond, "B/s"),
               percent(measured.bandwidthFraction), speed);
  }
  return allRan ? 0 : 1;
}

}  // namespace emmy
