#include "tests/oracle/oracle.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "frontend/frontend.h"
#include "ir/tensor/evaluator.h"

namespace emmy::oracle {

at::ScalarType torchType(DType dtype) {
  switch (dtype) {
    case DType::Bool: return at::kBool;
    case DType::I8: return at::kChar;
    case DType::I32: return at::kInt;
    case DType::I64: return at::kLong;
    case DType::F16: return at::kHalf;
    case DType::BF16: return at::kBFloat16;
    case DType::F32: return at::kFloat;
    case DType::F64: return at::kDouble;
  }
  throw std::logic_error("unknown dtype");
}

DType emmyType(at::ScalarType type) {
  for (DType dtype : kAllDTypes)
    if (torchType(dtype) == type) return dtype;
  throw std::invalid_argument(fmt::format("no Emmy dtype for torch's {}", c10::toString(type)));
}

at::Tensor toTorch(const Buffer& buffer) {
  at::Tensor tensor = at::empty(buffer.shape(), at::TensorOptions().dtype(torchType(buffer.dtype())));
  REQUIRE(tensor.nbytes() == buffer.byteSize());
  std::memcpy(tensor.data_ptr(), buffer.data(), buffer.byteSize());
  return tensor;
}

Buffer toBuffer(const at::Tensor& tensor) {
  at::Tensor dense = tensor.contiguous();
  Buffer buffer(emmyType(dense.scalar_type()), dense.sizes().vec());
  REQUIRE(dense.nbytes() == buffer.byteSize());
  std::memcpy(buffer.data(), dense.data_ptr(), buffer.byteSize());
  return buffer;
}

namespace {

std::pair<int64_t, int64_t> integerBounds(DType dtype, Range range) {
  switch (range) {
    case Range::Signed: return {dtype == DType::I8 ? -50 : -100, dtype == DType::I8 ? 50 : 100};
    case Range::Positive: return {1, 100};
    case Range::NearOne: return {-2, 2};
    case Range::Divisor: return {-5, 5};
  }
  throw std::logic_error("unknown range");
}

std::pair<double, double> floatBounds(Range range) {
  switch (range) {
    case Range::Signed: return {-3, 3};
    case Range::Positive: return {0.1, 3};
    case Range::NearOne: return {0.5, 1.5};
    case Range::Divisor: return {-5, 5};
  }
  throw std::logic_error("unknown range");
}

}  // namespace

at::Tensor randomTensor(DType dtype, std::vector<int64_t> shape, uint64_t seed, Range range) {
  std::mt19937_64 generator(seed);
  int64_t count = 1;
  for (int64_t extent : shape) count *= extent;
  if (isFloat(dtype)) {
    auto [low, high] = floatBounds(range);
    std::uniform_real_distribution<double> distribution(low, high);
    std::vector<double> values(count);
    for (double& value : values) value = distribution(generator);
    return at::tensor(values, at::kDouble).reshape(shape).to(torchType(dtype));
  }
  auto [low, high] = dtype == DType::Bool ? std::pair<int64_t, int64_t>{0, 1} : integerBounds(dtype, range);
  std::uniform_int_distribution<int64_t> distribution(low, high);
  std::vector<int64_t> values(count);
  for (int64_t& value : values) value = distribution(generator);
  return at::tensor(values, at::kLong).reshape(shape).to(torchType(dtype));
}

at::Tensor f32(const at::Tensor& tensor) { return tensor.to(at::kFloat); }
at::Tensor roundTo(const at::Tensor& tensor, DType dtype) { return tensor.to(torchType(dtype)); }

std::string sourceFile(const std::string& relativePath) {
  std::string path = std::string(EMMY_SOURCE_DIR) + "/" + relativePath;
  std::ifstream file(path);
  REQUIRE(file.good());
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

std::map<std::string, Buffer> runEmmy(const std::string& source, const std::string& selector,
                                      const TensorMap& inputs, const ScalarMap& scalars) {
  Diagnostics diagnostics;
  Frontend frontend(diagnostics, {Frontend::defaultStdlibDir()});
  const ast::Module* module = frontend.loadText("test.emmy", source, EMMY_SOURCE_DIR "/tests");
  std::vector<tensor::Kernel> kernels;
  if (module) kernels = frontend.elaborateSelected(*module, selector, true);
  if (diagnostics.hasErrors())
    FAIL("kernel " << selector << " does not compile:\n" << diagnostics.render() << "source:\n" << source);
  REQUIRE(kernels.size() == 1);

  tensor::EvaluationInputs evaluationInputs;
  for (const auto& [name, tensor] : inputs) evaluationInputs.tensors.emplace(name, toBuffer(tensor));
  evaluationInputs.scalars = scalars;
  return tensor::evaluate(kernels.front(), evaluationInputs);
}

double tolerance(DType dtype) {
  switch (dtype) {
    case DType::F16: return 1e-2;
    case DType::BF16: return 2e-2;
    case DType::F32: return 1e-4;
    // Not in the spec: both sides compute f64 in double, so only the order of operations differs.
    case DType::F64: return 1e-10;
    default: return 0;
  }
}

namespace {

std::vector<int64_t> unflatten(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return index;
}

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// How far `actual` is from `expected`, in units of the tolerance: at most 1 is a match.
double excess(double actual, double expected, double tol) {
  if (actual == expected || (std::isnan(actual) && std::isnan(expected))) return 0;
  double difference = std::fabs(actual - expected);
  if (std::isnan(difference)) return kInfinity;
  return difference / (tol + tol * std::fabs(expected));
}

// Empty when `actual` matches `expected`, else what is wrong.
std::string mismatch(const Buffer& actual, const at::Tensor& expected) {
  DType expectedType = emmyType(expected.scalar_type());
  if (actual.dtype() != expectedType)
    return fmt::format("Emmy gives {} but torch {}", dtypeName(actual.dtype()), dtypeName(expectedType));
  std::vector<int64_t> shape = expected.sizes().vec();
  if (actual.shape() != shape)
    return fmt::format("Emmy gives shape {} but torch {}", shapeName(actual.shape()), shapeName(shape));

  bool floating = isFloat(expectedType);
  at::Tensor actualValues = toTorch(actual).to(floating ? at::kDouble : at::kLong).contiguous();
  at::Tensor expectedValues = expected.to(floating ? at::kDouble : at::kLong).contiguous();
  double tol = tolerance(expectedType);
  int64_t bad = 0, worst = -1;
  double worstExcess = 0;
  auto elementExcess = [&](int64_t k) {
    if (floating) return excess(actualValues.data_ptr<double>()[k], expectedValues.data_ptr<double>()[k], tol);
    return actualValues.data_ptr<int64_t>()[k] == expectedValues.data_ptr<int64_t>()[k] ? 0 : kInfinity;
  };
  for (int64_t k = 0; k < actualValues.numel(); ++k) {
    double e = elementExcess(k);
    if (e <= 1) continue;
    ++bad;
    if (e > worstExcess) worst = k, worstExcess = e;
  }
  if (bad == 0) return "";
  auto element = [&](const at::Tensor& values) {
    return floating ? fmt::format("{}", values.data_ptr<double>()[worst])
                    : fmt::format("{}", values.data_ptr<int64_t>()[worst]);
  };
  return fmt::format("{} of {} elements of {}{} differ; the worst is at {}: Emmy {}, torch {} (tolerance {})", bad,
                     actualValues.numel(), dtypeName(expectedType), shapeName(shape),
                     shapeName(unflatten(worst, shape)), element(actualValues), element(expectedValues), tol);
}

}  // namespace

void expectClose(const std::string& name, const Buffer& actual, const at::Tensor& expected) {
  std::string problem = mismatch(actual, expected);
  if (problem.empty())
    SUCCEED(name);
  else
    FAIL_CHECK(name << ": " << problem);
}

void expectKernelMatches(const std::string& source, const std::string& selector, const TensorMap& inputs,
                         const TensorMap& expected, const ScalarMap& scalars) {
  std::map<std::string, Buffer> outputs = runEmmy(source, selector, inputs, scalars);
  std::vector<std::string> outputNames, expectedNames;
  for (const auto& [name, buffer] : outputs) outputNames.push_back(name);
  for (const auto& [name, tensor] : expected) expectedNames.push_back(name);
  REQUIRE(outputNames == expectedNames);
  for (const auto& [name, tensor] : expected) expectClose(selector + " output " + name, outputs.at(name), tensor);
}

std::string shapeName(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::string instance(const std::string& kernel, DType dtype) { return fmt::format("{}<{}>", kernel, dtypeName(dtype)); }

std::string substitute(std::string text, std::initializer_list<std::pair<std::string_view, std::string_view>> values) {
  for (const auto& [placeholder, value] : values) {
    for (size_t at = text.find(placeholder); at != std::string::npos; at = text.find(placeholder, at + value.size()))
      text.replace(at, placeholder.size(), value);
  }
  return text;
}

}  // namespace emmy::oracle
