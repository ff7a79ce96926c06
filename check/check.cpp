#include "check/check.h"

#include "check/profile_report.h"
#include <charconv>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <filesystem>
#include <random>
#include <set>

#include <unistd.h>

#include <fmt/format.h>

#include "check/profile_report.h"
#include "compiler/elaborate.h"
#include "frontend/frontend.h"
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
  for (const std::string& name : kernel.sizes)
    if (auto it = sizes.find(name); it != sizes.end()) sizeTexts.push_back(fmt::format("{}={}", name, it->second));
  auto tooLarge = [&](const std::string& what) {
    return UsageError(fmt::format("kernel {} with {}: {}, more than this machine's memory ({}); give smaller sizes",
                                  kernel.selector(), join(sizeTexts, ", "), what, byteText(availableBytes)));
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
                 const std::map<std::string, int64_t>& givenSizes, const std::map<std::string, std::string>& givenScalars,
                 const CudaGenerator& generateCuda, const KernelCompiler& compileKernel, std::FILE* report,
                 const OutputCrossCheck& crossCheck) {
  ReferenceRun reference = referenceRun(kernel, options.inputsDir, options.seed, givenSizes, givenScalars);
  const tensor::EvaluationInputs& inputs = reference.inputs;
  std::vector<std::string> sizeTexts;
  for (const std::string& size : kernel.sizes) sizeTexts.push_back(fmt::format("{}={}", size, reference.sizes.at(size)));
  fmt::print(report, "{}{}\n", kernel.selector(), sizeTexts.empty() ? "" : " (" + join(sizeTexts, ", ") + ")");

  sim::CudaSource cuda = generateCuda(kernel);
  std::unique_ptr<CompiledKernel> program = compileKernel(kernel, cuda);
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
  if (ran.profile) printProfile(kernel, cuda, *ran.profile, reference.sizes, isStdlibFile(options.file), report);
  if (!options.saveDir.empty()) saveOutputs(options.saveDir, ran.outputs);
  return passed;
}

// Why the inputs of `kernel` cannot be made from these options: a scalar without a value, or (for random
// inputs) a size not given; nullopt when they can. Input files are read, and checked, by prepareInputs.
std::optional<std::string> missingInput(const tensor::Kernel& kernel, const std::string& inputsDir,
                                        const std::map<std::string, int64_t>& givenSizes,
                                        const std::map<std::string, std::string>& givenScalars) {
  for (const tensor::ScalarParamDecl& scalar : kernel.scalars) {
    fs::path path = fs::path(inputsDir) / (scalar.name + ".npy");
    if (!scalar.defaultValue && !givenScalars.count(scalar.name) && !(!inputsDir.empty() && fs::exists(path)))
      return fmt::format("kernel {}: scalar {} has no default: give it with --scalar {}=VALUE{}", kernel.selector(),
                         scalar.name, scalar.name, inputsDir.empty() ? "" : fmt::format(" or in {}", path.string()));
  }
  if (inputsDir.empty())
    for (const std::string& size : kernel.sizes)
      if (!givenSizes.count(size))
        return fmt::format("kernel {}: size {} is not given: add --size {}=VALUE, or read the inputs from files with "
                           "--inputs DIR",
                           kernel.selector(), size, size);
  return std::nullopt;
}

// Why `emmy check` without --kernel leaves `kernel` out: missingInput, or an input file missing.
std::optional<std::string> whySkipped(const tensor::Kernel& kernel, const std::string& inputsDir,
                                      const std::map<std::string, int64_t>& givenSizes,
                                      const std::map<std::string, std::string>& givenScalars) {
  if (std::optional<std::string> missing = missingInput(kernel, inputsDir, givenSizes, givenScalars)) return missing;
  if (!inputsDir.empty())
    for (const tensor::TensorParam& input : kernel.inputs)
      if (fs::path path = fs::path(inputsDir) / (input.name + ".npy"); !fs::exists(path))
        return fmt::format("kernel {}: input {} has no file {}", kernel.selector(), input.name, path.string());
  return std::nullopt;
}

}  // namespace

KernelCompiler simulationCompiler(const sim::SimulationOptions& options) {
  return [options](const tensor::Kernel& kernel, const sim::CudaSource& source) -> std::unique_ptr<CompiledKernel> {
    return std::make_unique<sim::SimulatedKernel>(kernel, source, options);
  };
}

bool isStdlibFile(const std::string& file) {
  std::error_code error;
  fs::path directory = fs::canonical(fs::path(file), error).parent_path();
  if (error) return false;
  fs::path stdlib = fs::canonical(Frontend::defaultStdlibDir(), error);
  return !error && directory == stdlib;
}

namespace {

// The value of `--scalar NAME=TEXT` in the scalar's dtype; a UsageError when TEXT is no such value.
Value scalarOptionValue(const tensor::ScalarParamDecl& scalar, const std::string& text) {
  std::string option = fmt::format("--scalar {}={}", scalar.name, text);
  std::string_view type = dtypeName(scalar.dtype);
  const char* end = text.data() + text.size();
  if (scalar.dtype == DType::Bool) {
    if (text == "true" || text == "1") return Value::ofBool(true);
    if (text == "false" || text == "0") return Value::ofBool(false);
    throw UsageError(fmt::format("{}: {} is bool: write true or false", option, scalar.name));
  }
  if (isInteger(scalar.dtype)) {
    int64_t value = 0;
    auto [stop, status] = std::from_chars(text.data(), end, value);
    if (stop != end || (status != std::errc() && status != std::errc::result_out_of_range))
      throw UsageError(fmt::format("{}: {} is {}: write an integer", option, scalar.name, type));
    int bits = 8 * dtypeBytes(scalar.dtype);
    int64_t largest = bits == 64 ? std::numeric_limits<int64_t>::max() : (int64_t{1} << (bits - 1)) - 1;
    if (status == std::errc::result_out_of_range || value > largest || value < -largest - 1)
      throw UsageError(fmt::format("{}: does not fit {} ({} to {})", option, type, -largest - 1, largest));
    return Value::ofInt(scalar.dtype, value);
  }
  // strtod, unlike from_chars, tells an overflow (infinity) from an underflow (zero), which fits.
  char* stop = nullptr;
  errno = 0;
  double value = text.empty() ? 0 : std::strtod(text.c_str(), &stop);
  if (text.empty() || stop != end)
    throw UsageError(fmt::format("{}: {} is {}: write a number (or inf, nan)", option, scalar.name, type));
  double largest = scalar.dtype == DType::F16    ? 65504.0
                   : scalar.dtype == DType::BF16 ? 3.3895313892515355e38
                   : scalar.dtype == DType::F32  ? static_cast<double>(std::numeric_limits<float>::max())
                                                 : std::numeric_limits<double>::max();
  bool overflow = errno == ERANGE && std::isinf(value);
  if (overflow || (std::isfinite(value) && std::abs(value) > largest))
    throw UsageError(fmt::format("{}: does not fit {} (the largest is {:g})", option, type, largest));
  return Value::ofFloat(scalar.dtype, value);
}

}  // namespace

tensor::EvaluationInputs prepareInputs(const tensor::Kernel& kernel, const std::string& inputsDir, uint64_t seed,
                                       const std::map<std::string, int64_t>& givenSizes,
                                       const std::map<std::string, std::string>& givenScalars) {
  tensor::EvaluationInputs inputs;
  for (const std::string& size : kernel.sizes)
    if (auto it = givenSizes.find(size); it != givenSizes.end()) inputs.sizes.insert(*it);

  if (std::optional<std::string> missing = missingInput(kernel, inputsDir, givenSizes, givenScalars))
    throw UsageError(*missing);
  // Each scalar: --scalar, else its file, else its default (spec section 6).
  fs::path folder = inputsDir;
  for (const tensor::ScalarParamDecl& scalar : kernel.scalars) {
    fs::path path = folder / (scalar.name + ".npy");
    if (auto given = givenScalars.find(scalar.name); given != givenScalars.end()) {
      inputs.scalars.emplace(scalar.name, scalarOptionValue(scalar, given->second));
    } else if (!inputsDir.empty() && fs::exists(path)) {
      Buffer value = readNpy(path, scalar.dtype);
      if (!value.shape().empty())
        throw NpyError(fmt::format("{}: scalar {} needs a 0-d array, but the file holds one of {} dimension(s)",
                                   path.string(), scalar.name, value.shape().size()));
      inputs.scalars.emplace(scalar.name, value.get(0));
    }
  }

  if (!inputsDir.empty()) {
    for (const tensor::TensorParam& input : kernel.inputs)
      inputs.tensors.emplace(input.name, readNpy(folder / (input.name + ".npy"), input.dtype));
    return inputs;
  }

  std::map<std::string, int64_t> sizes = inputs.sizes;
  tensor::bindDerivedSizes(kernel, sizes);
  checkTensorsFit(kernel, sizes, physicalMemoryBytes());
  RandomInputs random(seed);
  for (const tensor::TensorParam& input : kernel.inputs)
    inputs.tensors.emplace(input.name, random.make(input.dtype, declaredShape(input, sizes)));
  return inputs;
}

ReferenceRun referenceRun(const tensor::Kernel& kernel, const std::string& inputsDir, uint64_t seed,
                          const std::map<std::string, int64_t>& givenSizes,
                          const std::map<std::string, std::string>& givenScalars) {
  ReferenceRun reference;
  try {
    reference.inputs = prepareInputs(kernel, inputsDir, seed, givenSizes, givenScalars);
    reference.sizes = tensor::bindSizes(kernel, reference.inputs.tensors, reference.inputs.sizes);
    if (!inputsDir.empty()) checkTensorsFit(kernel, reference.sizes, physicalMemoryBytes());  // else prepareInputs did
    reference.outputs = tensor::evaluate(kernel, reference.inputs);
  } catch (const tensor::EvaluationError& error) {
    throw UsageError(fmt::format("kernel {}: {}", kernel.selector(), error.what()));
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
    for (const tensor::Kernel& kernel : kernels) names.push_back(kernel.selector());
    throw UsageError(fmt::format("--save needs --kernel here: the outputs of {} would overwrite each other",
                                 join(names, ", ")));
  }
  checkSizeNamesExist(givenSizes, kernels);
  std::map<std::string, std::string> givenScalars = parseScalarOptions(options.scalars);
  checkScalarNamesExist(givenScalars, kernels);

  // Without --kernel, a kernel of several whose inputs cannot be made (a helper that another one calls,
  // with sizes of its own) is skipped with a note, as long as another one is checked.
  std::vector<const tensor::Kernel*> checked;
  std::vector<std::string> skipped;
  for (const tensor::Kernel& kernel : kernels) {
    std::optional<std::string> why = options.kernel.empty() && kernels.size() > 1
                                         ? whySkipped(kernel, options.inputsDir, givenSizes, givenScalars)
                                         : std::nullopt;
    if (why) skipped.push_back(*why);
    else checked.push_back(&kernel);
  }
  if (checked.empty()) throw UsageError("no kernel can be checked:\n  " + join(skipped, "\n  "));
  for (const std::string& why : skipped) fmt::print(report, "skipped {}\n", why);

  bool allPassed = true;
  for (const tensor::Kernel* kernel : checked)
    allPassed = checkKernel(*kernel, options, givenSizes, givenScalars, generateCuda, compileKernel, report, crossCheck) &&
                allPassed;
  return allPassed ? kAllPassed : kFailed;
}

}  // namespace emmy
