// Helpers of the LibTorch oracle tests: an Emmy kernel, given as .emmy text, runs on the reference
// evaluator and its outputs are compared with the same computation written with ATen ops.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <ATen/ATen.h>
// ATen's logging defines glog's CHECK, which aborts the whole run on a failure; the tests mean Catch's,
// which is defined here, after it (a test file that includes Catch first does not compile).
#undef CHECK
#include <catch2/catch.hpp>

#include "support/dtype.h"
#include "support/value.h"

namespace emmy::oracle {

// ---------------------------------------------------------------------------------------------------
// Conversions, bit-exact for every dtype (f16 is at::kHalf, bf16 at::kBFloat16).
at::ScalarType torchType(DType dtype);
DType emmyType(at::ScalarType type);
at::Tensor toTorch(const Buffer& buffer);
Buffer toBuffer(const at::Tensor& tensor);

// ---------------------------------------------------------------------------------------------------
// Seeded random inputs. Floats are drawn in double and rounded once to their dtype; integers and bools
// are drawn as integers.
enum class Range {
  Signed,    // floats in [-3, 3]; integers in [-100, 100] (i8: [-50, 50])
  Positive,  // floats in [0.1, 3], for log, sqrt, rsqrt, pow; integers in [1, 100]
  NearOne,   // floats in [0.5, 1.5], for products; integers in [-2, 2]
  Divisor,   // integers in [-5, 5], zero included, for / and %
};
at::Tensor randomTensor(DType dtype, std::vector<int64_t> shape, uint64_t seed, Range range = Range::Signed);

// The tests compute an f16 or bf16 function (or reduction) in f32 and round the result once, which is the
// meaning the spec gives it, and which ATen's CPU kernels, lacking most f16 functions, cannot do alone:
// roundTo(at::softmax(f32(x), -1), dtype).
at::Tensor f32(const at::Tensor& tensor);
at::Tensor roundTo(const at::Tensor& tensor, DType dtype);

// ---------------------------------------------------------------------------------------------------
// Kernel text.

// The text of a file of the project, e.g. "stdlib/nn.emmy" or "examples/softmax.emmy".
std::string sourceFile(const std::string& relativePath);
// `text` with every occurrence of each key replaced by its value. The tests' kernel templates spell their
// placeholders with a `$`, which .emmy never uses.
std::string substitute(std::string text, std::initializer_list<std::pair<std::string_view, std::string_view>> values);

// ---------------------------------------------------------------------------------------------------
// Running Emmy.
using TensorMap = std::map<std::string, at::Tensor>;
using ScalarMap = std::map<std::string, Value>;

// Loads `source` (imports resolve against tests/ and then the standard library), elaborates the kernel
// `selector` ("name" or "name<f16>") and evaluates it. Fails the test case with the rendered diagnostics
// when the source does not compile.
std::map<std::string, Buffer> runEmmy(const std::string& source, const std::string& selector,
                                      const TensorMap& inputs, const ScalarMap& scalars = {});

// The spec's tolerance for `dtype`: |actual - expected| <= tol + tol * |expected| (0 for integers, bool).
double tolerance(DType dtype);

// Checks `actual` against `expected`: same dtype, same shape, every element within tolerance (NaN equals
// NaN). A mismatch fails the check with `name`, the number of bad elements, and the worst one's index and
// values.
void expectClose(const std::string& name, const Buffer& actual, const at::Tensor& expected);

// runEmmy, then expectClose for every output; `expected` must name exactly the kernel's outputs.
void expectKernelMatches(const std::string& source, const std::string& selector, const TensorMap& inputs,
                         const TensorMap& expected, const ScalarMap& scalars = {});

// "[3, 17]", for messages.
std::string shapeName(const std::vector<int64_t>& shape);

// The dtypes a generic kernel `<T: f16 | bf16 | f32>` is instantiated with, and its selector.
inline constexpr DType kFloatTypes[] = {DType::F32, DType::F16, DType::BF16};
std::string instance(const std::string& kernel, DType dtype);  // "softmax<f16>"

}  // namespace emmy::oracle
