#include "test_kernels.h"

#include <algorithm>
#include <random>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "check/check.h"
#include "check/compare.h"
#include "frontend/frontend.h"
#include "golden_files.h"

namespace emmy::testing {

namespace fs = std::filesystem;

std::vector<fs::path> acceptedSources() {
  std::vector<fs::path> sources;
  for (const char* folder : {"examples", "stdlib"})
    for (const fs::path& file : sortedFiles(fs::path(EMMY_SOURCE_DIR) / folder, ".emmy")) sources.push_back(file);
  return sources;
}

std::vector<fs::path> loweringSources() {
  std::vector<fs::path> sources = acceptedSources();
  for (const fs::path& file : sortedFiles(fs::path(EMMY_SOURCE_DIR) / "tests" / "lowering", ".emmy"))
    sources.push_back(file);
  return sources;
}

std::vector<tensor::Kernel> kernelsOf(const fs::path& file) {
  Diagnostics diagnostics;
  Frontend frontend(diagnostics, {Frontend::defaultStdlibDir()});
  std::vector<tensor::Kernel> kernels;
  if (const ast::Module* module = frontend.loadFile(file)) kernels = frontend.elaborateAll(*module);
  INFO(diagnostics.render());
  REQUIRE_FALSE(diagnostics.hasErrors());
  return kernels;
}

std::vector<tensor::Kernel> kernelsOfText(const std::string& source) {
  Diagnostics diagnostics;
  Frontend frontend(diagnostics, {Frontend::defaultStdlibDir()});
  std::vector<tensor::Kernel> kernels;
  if (const ast::Module* module = frontend.loadText("test.emmy", source, Frontend::defaultStdlibDir()))
    kernels = frontend.elaborateAll(*module);
  INFO(source << diagnostics.render());
  REQUIRE_FALSE(diagnostics.hasErrors());
  return kernels;
}

tensor::EvaluationInputs randomInputs(const tensor::Kernel& kernel, int64_t size, uint64_t seed) {
  return randomInputs(kernel, everySize(kernel, size), seed);
}

double workAt(const tensor::Kernel& kernel, const std::map<std::string, int64_t>& sizes) {
  std::map<std::string, int64_t> all = sizes;
  tensor::bindDerivedSizes(kernel, all);
  double work = 0;
  for (const tensor::Stage& stage : kernel.stages) {
    double terms = 1;
    for (const tensor::Axis& axis : stage.axes) terms *= static_cast<double>(tensor::evaluateDim(axis.extent, all));
    if (stage.reduction)
      for (const tensor::Axis& axis : stage.reduction->axes) terms *= static_cast<double>(tensor::evaluateDim(axis.extent, all));
    work += terms;
  }
  return work;
}

std::map<std::string, int64_t> everySize(const tensor::Kernel& kernel, int64_t size, double budget) {
  std::map<std::string, int64_t> sizes;
  for (; size >= 1; --size) {
    for (const std::string& name : kernel.sizes) sizes[name] = size;
    if (sizesValid(kernel, sizes) && workAt(kernel, sizes) <= budget) break;
  }
  return sizes;
}

std::vector<std::map<std::string, int64_t>> sizesWithOneEmpty(const tensor::Kernel& kernel) {
  std::vector<std::map<std::string, int64_t>> sizeSets;
  for (const std::string& empty : kernel.sizes) {
    std::map<std::string, int64_t> sizes;
    int64_t ragged = 3;
    for (const std::string& name : kernel.sizes) {
      sizes[name] = name == empty ? 0 : ragged;
      ragged += 2;
    }
    // A window larger than its input (a convolution's weight, its sizes not the first input's): 1 wide.
    if (!sizesValid(kernel, sizes) && !kernel.inputs.empty()) {
      const tensor::Shape& first = kernel.inputs.front().shape;
      for (auto& [name, value] : sizes)
        if (name != empty && std::find(first.begin(), first.end(), tensor::Dim::size(name)) == first.end()) value = 1;
    }
    if (sizesValid(kernel, sizes) && workAt(kernel, sizes) <= 1e5) sizeSets.push_back(std::move(sizes));
  }
  return sizeSets;
}

std::string describeSizes(const std::map<std::string, int64_t>& sizes) {
  std::string text;
  for (const auto& [name, value] : sizes) text += fmt::format(" {}={}", name, value);
  return text;
}

void checkAgainstEvaluator(const tensor::Kernel& kernel, const CompiledKernel& program,
                           const std::map<std::string, int64_t>& sizes, uint64_t seed) {
  INFO(kernel.instanceName() << " with" << describeSizes(sizes));
  if (!sizesValid(kernel, sizes)) return;
  checkAgainstEvaluator(kernel, program, randomInputs(kernel, sizes, seed));
}

bool sizesValid(const tensor::Kernel& kernel, const std::map<std::string, int64_t>& sizes) {
  std::map<std::string, int64_t> all = sizes;
  try {
    tensor::bindDerivedSizes(kernel, all);
  } catch (const tensor::EvaluationError&) {
    return false;
  }
  return true;
}

void checkAgainstEvaluator(const tensor::Kernel& kernel, const CompiledKernel& program,
                           const tensor::EvaluationInputs& inputs) {
  std::map<std::string, Buffer> reference = tensor::evaluate(kernel, inputs);
  KernelRun ran = program.run(inputs);
  INFO(ran.failure.value_or(""));
  REQUIRE_FALSE(ran.failure);
  for (const OutputComparison& comparison : compareOutputs(kernel, ran.outputs, reference)) {
    INFO(formatComparison(comparison));
    CHECK(comparison.ok());
  }
}

tensor::EvaluationInputs randomInputs(const tensor::Kernel& kernel, const std::map<std::string, int64_t>& sizes,
                                      uint64_t seed) {
  std::mt19937_64 random(seed);
  std::uniform_real_distribution<double> uniform(-1, 1);
  tensor::EvaluationInputs inputs;
  for (const std::string& name : kernel.sizes) inputs.sizes[name] = sizes.at(name);
  std::map<std::string, int64_t> allSizes = inputs.sizes;
  tensor::bindDerivedSizes(kernel, allSizes);
  for (const tensor::TensorParam& input : kernel.inputs) {
    std::vector<int64_t> shape;
    for (const tensor::Dim& dim : input.shape) shape.push_back(tensor::evaluateDim(dim, allSizes));
    Buffer buffer(input.dtype, shape);
    for (int64_t i = 0; i < buffer.numel(); ++i)
      buffer.set(i, isFloat(input.dtype) ? Value::ofFloat(input.dtype, uniform(random))
                                         : Value::ofInt(input.dtype, static_cast<int64_t>(random() % 17) - 8));
    inputs.tensors[input.name] = std::move(buffer);
  }
  for (const tensor::ScalarParamDecl& scalar : kernel.scalars)
    if (!scalar.defaultValue) inputs.scalars[scalar.name] = Value::ofFloat(scalar.dtype, 0.5);
  return inputs;
}

std::vector<const kernel::Function*> withoutWideTwins(const kernel::Program& program) {
  std::vector<const kernel::Function*> kernels;
  for (const kernel::Function& function : program.functions)
    if (!function.isWideTwin()) kernels.push_back(&function);
  return kernels;
}

}  // namespace emmy::testing
