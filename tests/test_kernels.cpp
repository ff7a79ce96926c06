#include "test_kernels.h"

#include <random>

#include <catch2/catch.hpp>

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

tensor::EvaluationInputs randomInputs(const tensor::Kernel& kernel, int64_t size, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::uniform_real_distribution<double> uniform(-1, 1);
  tensor::EvaluationInputs inputs;
  for (const std::string& name : kernel.sizes) inputs.sizes[name] = size;
  for (const tensor::TensorParam& input : kernel.inputs) {
    std::vector<int64_t> shape;
    for (const tensor::Dim& dim : input.shape) shape.push_back(tensor::evaluateDim(dim, inputs.sizes));
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

}  // namespace emmy::testing
