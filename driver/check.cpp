#include "driver/check.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <set>

#include <unistd.h>

#include <fmt/format.h>

#include "driver/elaborate.h"
#include "ir/tensor/evaluator.h"
#include "support/diagnostics.h"
#include "support/files.h"
#include "support/npy.h"
#include "support/text.h"

namespace emmy {

namespace {

namespace fs = std::filesystem;

constexpr int kAllPassed = 0;
constexpr int kFailed = 1;

class RandomInputs {
public:
  explicit RandomInputs(uint64_t seed) : engine_(seed) {}

  Buffer make(DType dtype, std::vector<int64_t> shape) {
    Buffer buffer(dtype, std::move(shape));
    for (int64_t k = 0; k < buffer.numel(); ++k) buffer.set(k, next(dtype));
    return buffer;
  }

private:
  // Uses the engine's bits directly: the standard distributions differ between library implementations.
  Value next(DType dtype) {
    uint64_t bits = engine_();
    if (isFloat(dtype)) return Value::ofFloat(dtype, static_cast<double>(bits >> 11) * 0x1p-52 - 1);
    if (dtype == DType::Bool) return Value::ofBool(bits >> 63);
    return Value::ofInt(dtype, static_cast<int64_t>(bits % 17) - 8);
  }

  std::mt19937_64 engine_;
};

// The bytes of physical memory: what every tensor of a check together must fit in.
uint64_t physicalMemoryBytes() {
  long pages = sysconf(_SC_PHYS_PAGES), pageBytes = sysconf(_SC_PAGESIZE);
  return pages > 0 && pageBytes > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(pageBytes) : UINT64_MAX;
}

std::string byteText(uint64_t bytes) {
  if (bytes < (1ull << 30)) return fmt::format("{} bytes", bytes);
  return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / (1ull << 30));
}

}  // namespace

void checkTensorsFit(const tensor::Kernel& kernel, const std::map<std::string, int64_t>& sizes, uint64_t availableBytes) {
  std::vector<std::string> sizeTexts;
  for (const auto& [name, value] : sizes) sizeTexts.push_back(fmt::format("{}={}", name, value));
  auto tooLarge = [&](const std::string& what) {
    return UsageError(fmt::format("kernel {} with {}: {}, more than this machine's memory ({}); give smaller sizes",
                                  displayName(kernel), join(sizeTexts, ", "), what, byteText(availableBytes)));
  };
  uint64_t total = 0;
  auto add = [&](const std::string& what, DType dtype, const tensor::Shape& shape) {
    uint64_t bytes = static_cast<uint64_t>(dtypeBytes(dtype));
    bool overflows = false;
    for (const tensor::Dim& dim : shape) {
      uint64_t extent = static_cast<uint64_t>(dim.factor);
      for (const std::string& size : dim.sizes)
        overflows |= __builtin_mul_overflow(extent, static_cast<uint64_t>(sizes.at(size)), &extent);
      overflows |= __builtin_mul_overflow(bytes, extent, &bytes);
    }
    if (overflows || bytes > availableBytes)
      throw tooLarge(fmt::format("{} would need {}", what, overflows ? "more than 2^64 bytes" : byteText(bytes)));
    total += bytes;  // cannot overflow: both terms are at most availableBytes
    if (total > availableBytes)
      throw tooLarge(fmt::format("{} and the tensors before it would need {} together", what, byteText(total)));
  };
  for (const tensor::TensorParam& input : kernel.inputs) add("input " + input.name, input.dtype, input.shape);
  for (const tensor::Stage& stage : kernel.stages) {
    bool output = std::any_of(kernel.outputs.begin(), kernel.outputs.end(),
                              [&](const tensor::TensorParam& param) { return param.name == stage.name; });
    add((output ? "output " : "stage ") + stage.name, stage.dtype, stage.shape());
  }
}

namespace {

std::vector<int64_t> declaredShape(const tensor::TensorParam& tensor, const std::map<std::string, int64_t>& sizes) {
  std::vector<int64_t> shape;
  for (const tensor::Dim& dim : tensor.shape) shape.push_back(tensor::evaluateDim(dim, sizes));
  return shape;
}

void saveOutputs(const fs::path& folder, const std::map<std::string, Buffer>& outputs) {
  std::error_code error;
  fs::create_directories(folder, error);
  if (error) throw UsageError(fmt::format("--save: cannot create {}: {}", folder.string(), error.message()));
  std::vector<std::pair<fs::path, std::string>> files;
  for (const auto& [name, buffer] : outputs) files.emplace_back(folder / (name + ".npy"), npyBytes(buffer));
  writeFilesTogether(files);
}

// Checks one kernel and prints its report; returns whether everything passed.
bool checkKernel(const tensor::Kernel& kernel, const CheckOptions& options,
                 const std::map<std::string, int64_t>& givenSizes, const CudaGenerator& generateCuda,
                 const KernelCompiler& compileKernel, std::FILE* report, const OutputCrossCheck& crossCheck) {
  ReferenceRun reference = referenceRun(kernel, options.inputsDir, options.seed, givenSizes);
  const tensor::EvaluationInputs& inputs = reference.inputs;
  std::vector<std::string> sizeTexts;
  for (const std::string& size : kernel.sizes) sizeTexts.push_back(fmt::format("{}={}", size, reference.sizes.at(size)));
  fmt::print(report, "{}{}\n", displayName(kernel), sizeTexts.empty() ? "" : " (" + join(sizeTexts, ", ") + ")");

  std::unique_ptr<CompiledKernel> program = compileKernel(kernel, generateCuda(kernel));
  KernelRun ran = program->run(inputs);
  if (options.verbose)
    fmt::print(report, "  compiled in {:.2f} s: {}\n  ran in {:.2f} s\n", program->compileSeconds(), program->compileCommand(),
               ran.runSeconds);
  if (ran.failure) {
    fmt::print(report, "  FAILED: {}\n", *ran.failure);
    return false;
  }

  bool passed = true;
  for (const OutputComparison& comparison : compareOutputs(kernel, ran.outputs, reference.outputs)) {
    fmt::print(report, "  {}\n", formatComparison(comparison));
    passed = passed && comparison.ok();
  }
  if (crossCheck) passed = crossCheck(kernel, inputs, ran.outputs, report) && passed;
  if (!options.saveDir.empty()) saveOutputs(options.saveDir, ran.outputs);
  return passed;
}

}  // namespace

KernelCompiler simulationCompiler(const sim::SimulationOptions& options) {
  return [options](const tensor::Kernel& kernel, const sim::CudaSource& source) -> std::unique_ptr<CompiledKernel> {
    return std::make_unique<sim::SimulatedKernel>(kernel, source, options);
  };
}

std::string displayName(const tensor::Kernel& kernel) {
  if (kernel.typeArguments.empty()) return kernel.name;
  std::vector<std::string> types;
  for (const auto& [parameter, dtype] : kernel.typeArguments) types.emplace_back(dtypeName(dtype));
  return fmt::format("{}<{}>", kernel.name, join(types, ", "));
}

tensor::EvaluationInputs prepareInputs(const tensor::Kernel& kernel, const std::string& inputsDir, uint64_t seed,
                                       const std::map<std::string, int64_t>& givenSizes) {
  tensor::EvaluationInputs inputs;
  for (const std::string& size : kernel.sizes)
    if (auto it = givenSizes.find(size); it != givenSizes.end()) inputs.sizes.insert(*it);

  if (!inputsDir.empty()) {
    fs::path folder = inputsDir;
    for (const tensor::TensorParam& input : kernel.inputs)
      inputs.tensors.emplace(input.name, readNpy(folder / (input.name + ".npy"), input.dtype));
    for (const tensor::ScalarParamDecl& scalar : kernel.scalars) {
      fs::path path = folder / (scalar.name + ".npy");
      if (!fs::exists(path)) continue;  // takes its default
      Buffer value = readNpy(path, scalar.dtype);
      if (!value.shape().empty())
        throw NpyError(fmt::format("{}: scalar {} needs a 0-d array, but the file holds one of {} dimension(s)",
                                   path.string(), scalar.name, value.shape().size()));
      inputs.scalars.emplace(scalar.name, value.get(0));
    }
    return inputs;
  }

  for (const std::string& size : kernel.sizes)
    if (!inputs.sizes.count(size))
      throw UsageError(fmt::format("kernel {}: size {} is not given: add --size {}=VALUE, or read the inputs from "
                                   "files with --inputs DIR",
                                   displayName(kernel), size, size));
  checkTensorsFit(kernel, inputs.sizes, physicalMemoryBytes());
  RandomInputs random(seed);
  for (const tensor::TensorParam& input : kernel.inputs)
    inputs.tensors.emplace(input.name, random.make(input.dtype, declaredShape(input, inputs.sizes)));
  return inputs;
}

ReferenceRun referenceRun(const tensor::Kernel& kernel, const std::string& inputsDir, uint64_t seed,
                          const std::map<std::string, int64_t>& givenSizes) {
  ReferenceRun reference;
  try {
    reference.inputs = prepareInputs(kernel, inputsDir, seed, givenSizes);
    reference.sizes = tensor::bindSizes(kernel, reference.inputs.tensors, reference.inputs.sizes);
    if (!inputsDir.empty()) checkTensorsFit(kernel, reference.sizes, physicalMemoryBytes());  // else prepareInputs did
    reference.outputs = tensor::evaluate(kernel, reference.inputs);
  } catch (const tensor::EvaluationError& error) {
    throw UsageError(fmt::format("kernel {}: {}", displayName(kernel), error.what()));
  }
  return reference;
}

std::vector<OutputComparison> compareOutputs(const tensor::Kernel& kernel, const std::map<std::string, Buffer>& generated,
                                             const std::map<std::string, Buffer>& reference) {
  std::vector<OutputComparison> comparisons;
  for (const tensor::TensorParam& output : kernel.outputs)
    comparisons.push_back(compareOutput(output.name, generated.at(output.name), reference.at(output.name),
                                        computedPrecision(kernel, output.name)));
  return comparisons;
}

int runCheck(const CheckOptions& options, const CudaGenerator& generateCuda, const KernelCompiler& compileKernel,
             std::FILE* report, const OutputCrossCheck& crossCheck) {
  std::map<std::string, int64_t> givenSizes = parseNameValues(options.sizes, "--size");
  Diagnostics diagnostics;
  // A model's forward arguments take their ranks and dtypes from the input files, when there are some.
  ModelImportOptions modelImport = options.modelImport;
  modelImport.shapesFrom = options.inputsDir;
  std::optional<std::vector<tensor::Kernel>> elaborated =
      elaborateFile(options.file, options.kernel, /*requireTypes=*/true, parseNameValues(options.defines, "-D"),
                    diagnostics, nullptr, modelImport);
  if (!elaborated) {
    std::fputs(diagnostics.render().c_str(), stderr);
    return kFailed;
  }
  const std::vector<tensor::Kernel>& kernels = *elaborated;
  if (kernels.empty()) throw UsageError(fmt::format("{} has no kernel to check", options.file));
  if (!options.saveDir.empty() && kernels.size() > 1) {
    std::vector<std::string> names;
    for (const tensor::Kernel& kernel : kernels) names.push_back(displayName(kernel));
    throw UsageError(fmt::format("--save needs --kernel here: the outputs of {} would overwrite each other",
                                 join(names, ", ")));
  }
  checkSizeNamesExist(givenSizes, kernels);

  bool allPassed = true;
  for (const tensor::Kernel& kernel : kernels)
    allPassed = checkKernel(kernel, options, givenSizes, generateCuda, compileKernel, report, crossCheck) && allPassed;
  return allPassed ? kAllPassed : kFailed;
}

}  // namespace emmy
