// The reference evaluator of Tensor IR on kernels built by hand.
#include <cmath>
#include <cstring>
#include <limits>

#include <catch2/catch.hpp>

#include "ir/tensor/evaluator.h"
#include "support/diagnostics.h"
#include "support/half.h"
#include "tests/tensor_ir_builder.h"

using namespace emmy;
using namespace emmy::tensor;
using namespace emmy::tensor::build;

namespace {

const Dim N = Dim::size("N");
const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

Buffer bufferOf(DType dtype, std::vector<int64_t> shape, const std::vector<double>& values) {
  Buffer buffer(dtype, std::move(shape));
  REQUIRE(static_cast<size_t>(buffer.numel()) == values.size());
  for (size_t i = 0; i < values.size(); ++i) buffer.set(static_cast<int64_t>(i), Value::ofFloat(dtype, values[i]));
  return buffer;
}

Buffer intBufferOf(DType dtype, const std::vector<int64_t>& values) {
  Buffer buffer(dtype, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) buffer.set(static_cast<int64_t>(i), Value::ofInt(dtype, values[i]));
  return buffer;
}

std::vector<double> floatsOf(const Buffer& buffer) {
  std::vector<double> values;
  for (int64_t i = 0; i < buffer.numel(); ++i) values.push_back(buffer.get(i).f);
  return values;
}

std::vector<int64_t> intsOf(const Buffer& buffer) {
  std::vector<int64_t> values;
  for (int64_t i = 0; i < buffer.numel(); ++i) values.push_back(buffer.get(i).i);
  return values;
}

// A kernel with inputs `inputs` (all of shape [N]) and one output `y: dtype[N]` = `body` over axis i.
Kernel elementwise(std::vector<TensorParam> inputs, DType dtype, ExprPtr body) {
  Kernel kernel;
  kernel.name = "k";
  kernel.inputs = std::move(inputs);
  kernel.outputs = {tensorParam("y", dtype, {N})};
  kernel.sizes = {"N"};
  kernel.stages = {stage("y", dtype, {axisOf("i", "N")}, std::move(body))};
  return kernel;
}

ExprPtr at(DType dtype, const char* tensor) { return load(dtype, tensor, {axis("i")}); }

// y[i] = a[i] OP b[i] on integer vectors.
std::vector<int64_t> integerOp(BinaryOp op, DType dtype, const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  Kernel kernel = elementwise({tensorParam("a", dtype, {N}), tensorParam("b", dtype, {N})}, dtype,
                              binary(op, at(dtype, "a"), at(dtype, "b")));
  return intsOf(evaluate(kernel, {{{"a", intBufferOf(dtype, a)}, {"b", intBufferOf(dtype, b)}}, {}, {}}).at("y"));
}

// y[i] = a[i] OP b[i] on float vectors.
std::vector<double> floatOp(BinaryOp op, DType dtype, const std::vector<double>& a, const std::vector<double>& b) {
  Kernel kernel = elementwise({tensorParam("a", dtype, {N}), tensorParam("b", dtype, {N})}, dtype,
                              binary(op, at(dtype, "a"), at(dtype, "b")));
  int64_t n = static_cast<int64_t>(a.size());
  return floatsOf(evaluate(kernel, {{{"a", bufferOf(dtype, {n}, a)}, {"b", bufferOf(dtype, {n}, b)}}, {}, {}}).at("y"));
}

// y[i] = OP(a[i]).
std::vector<double> floatFunction(UnaryOp op, DType dtype, const std::vector<double>& a) {
  Kernel kernel = elementwise({tensorParam("a", dtype, {N})}, dtype, unary(op, at(dtype, "a")));
  return floatsOf(evaluate(kernel, {{{"a", bufferOf(dtype, {static_cast<int64_t>(a.size())}, a)}}, {}, {}}).at("y"));
}

// y: dtype[] = OP over (i: N) in accumulator of body(x[i]).
Kernel reduceAll(ReduceOp op, DType inputDType, DType dtype, DType accumulator) {
  ExprPtr element = load(inputDType, "x", {axis("i")});
  if (element->dtype != accumulator) element = cast(accumulator, element);
  Kernel kernel;
  kernel.name = "r";
  kernel.inputs = {tensorParam("x", inputDType, {N})};
  kernel.outputs = {tensorParam("y", dtype, {})};
  kernel.sizes = {"N"};
  kernel.stages = {reductionStage("y", dtype, {}, op, {axisOf("i", "N")}, element)};
  return kernel;
}

double reduceFloats(ReduceOp op, DType inputDType, DType dtype, DType accumulator, const std::vector<double>& x) {
  Kernel kernel = reduceAll(op, inputDType, dtype, accumulator);
  Buffer input = bufferOf(inputDType, {static_cast<int64_t>(x.size())}, x);
  return evaluate(kernel, {{{"x", input}}, {}, {}}).at("y").get(0).f;
}

bool sameBits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b)); }

}  // namespace

TEST_CASE("integer arithmetic wraps, truncates and never traps", "[evaluator]") {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
  CHECK(integerOp(BinaryOp::Add, DType::I32, {2147483647, -5}, {1, 3}) == std::vector<int64_t>{-2147483648, -2});
  CHECK(integerOp(BinaryOp::Mul, DType::I8, {16, -128}, {8, -1}) == std::vector<int64_t>{-128, -128});
  CHECK(integerOp(BinaryOp::Add, DType::I64, {kMax}, {1}) == std::vector<int64_t>{kMin});
  CHECK(integerOp(BinaryOp::Sub, DType::I64, {kMin}, {1}) == std::vector<int64_t>{kMax});
  CHECK(integerOp(BinaryOp::Div, DType::I64, {-7, 7, -7, 7, 5, kMin}, {2, -2, -2, 0, -1, -1}) ==
        std::vector<int64_t>{-3, -3, 3, 0, -5, kMin});
  CHECK(integerOp(BinaryOp::Mod, DType::I64, {-7, 7, -7, 7, kMin}, {2, -2, -2, 0, -1}) ==
        std::vector<int64_t>{-1, 1, -1, 0, 0});
  CHECK(integerOp(BinaryOp::Div, DType::I32, {-2147483648}, {-1}) == std::vector<int64_t>{-2147483648});
  CHECK(integerOp(BinaryOp::Pow, DType::I64, {2, 3, 2, 1, -1, -1, 0, 5, -3}, {10, 0, 63, -5, -3, -4, -1, -2, 3}) ==
        std::vector<int64_t>{1024, 1, kMin, 1, -1, 1, 0, 0, -27});
  CHECK(integerOp(BinaryOp::Pow, DType::I32, {3}, {21}) == std::vector<int64_t>{1870418611});  // 3^21 mod 2^32
  CHECK(integerOp(BinaryOp::Max, DType::I8, {-3, 7}, {2, -8}) == std::vector<int64_t>{2, 7});
}

TEST_CASE("integer unary operations stay integer and wrap", "[evaluator]") {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  auto apply = [](UnaryOp op, const std::vector<int64_t>& a) {
    Kernel kernel = elementwise({tensorParam("a", DType::I64, {N})}, DType::I64, unary(op, at(DType::I64, "a")));
    return intsOf(evaluate(kernel, {{{"a", intBufferOf(DType::I64, a)}}, {}, {}}).at("y"));
  };
  CHECK(apply(UnaryOp::Neg, {5, kMin}) == std::vector<int64_t>{-5, kMin});
  CHECK(apply(UnaryOp::Abs, {-5, kMin}) == std::vector<int64_t>{5, kMin});
  CHECK(apply(UnaryOp::Relu, {-5, 6}) == std::vector<int64_t>{0, 6});
  CHECK(apply(UnaryOp::Floor, {-5, 6}) == std::vector<int64_t>{-5, 6});
}

TEST_CASE("float operations round once per operation to their dtype", "[evaluator]") {
  // f32: identical to float arithmetic.
  float a = 0.1f, b = 0.2f;
  CHECK(floatOp(BinaryOp::Add, DType::F32, {a}, {b})[0] == static_cast<double>(a + b));
  CHECK(floatOp(BinaryOp::Div, DType::F32, {1}, {3})[0] == static_cast<double>(1.0f / 3.0f));
  // f16: 2048 + 1 is a tie between 2048 and 2050 and rounds to even; 2048 + 3 rounds up to 2052.
  CHECK(floatOp(BinaryOp::Add, DType::F16, {2048, 2048}, {1, 3}) == std::vector<double>{2048, 2052});
  // bf16: 1 + 2^-8 is a tie and rounds to 1; 1 + 3 * 2^-8 rounds to even 1 + 2^-6.
  CHECK(floatOp(BinaryOp::Add, DType::BF16, {1, 1}, {std::ldexp(1, -8), 3 * std::ldexp(1, -8)}) ==
        std::vector<double>{1, 1 + std::ldexp(1, -6)});
  // f16 overflow to infinity, and a product of 1.5 subnormal units that rounds to even (2 units).
  CHECK(floatOp(BinaryOp::Mul, DType::F16, {300, std::ldexp(1, -12)}, {300, std::ldexp(3, -13)}) ==
        std::vector<double>{kInf, std::ldexp(1, -23)});
  // Float remainder is fmod; division by zero is IEEE.
  CHECK(floatOp(BinaryOp::Mod, DType::F32, {-7.5, 7.5}, {2, -2}) == std::vector<double>{-1.5, 1.5});
  std::vector<double> quotients = floatOp(BinaryOp::Div, DType::F32, {1, 0}, {0, 0});
  CHECK(quotients[0] == kInf);
  CHECK(std::isnan(quotients[1]));
  CHECK(floatOp(BinaryOp::Pow, DType::F32, {2, 9}, {-1, 0.5}) == std::vector<double>{0.5, 3});
}

TEST_CASE("min and max propagate NaN", "[evaluator]") {
  std::vector<double> maxima = floatOp(BinaryOp::Max, DType::F32, {kNaN, 1, 2}, {1, kNaN, -3});
  CHECK(std::isnan(maxima[0]));
  CHECK(std::isnan(maxima[1]));
  CHECK(maxima[2] == 2);
  std::vector<double> minima = floatOp(BinaryOp::Min, DType::F32, {kNaN, 1, 2}, {1, kNaN, -3});
  CHECK(std::isnan(minima[0]));
  CHECK(std::isnan(minima[1]));
  CHECK(minima[2] == -3);
  std::vector<double> relu = floatFunction(UnaryOp::Relu, DType::F32, {kNaN, -1, 2});
  CHECK(std::isnan(relu[0]));
  CHECK(relu[1] == 0);
  CHECK(relu[2] == 2);
}

TEST_CASE("functions follow their definitions, rounded to the dtype", "[evaluator]") {
  std::vector<double> xs = {-2.5, -0.5, 0, 0.75, 3};
  auto rounded = [](double v) { return static_cast<double>(static_cast<float>(v)); };
  std::vector<double> sigmoid = floatFunction(UnaryOp::Sigmoid, DType::F32, xs);
  std::vector<double> gelu = floatFunction(UnaryOp::Gelu, DType::F32, xs);
  std::vector<double> silu = floatFunction(UnaryOp::Silu, DType::F32, xs);
  std::vector<double> rsqrt = floatFunction(UnaryOp::Rsqrt, DType::F32, {4, 2});
  for (size_t i = 0; i < xs.size(); ++i) {
    double x = xs[i], s = 1 / (1 + std::exp(-x));
    CHECK(sigmoid[i] == rounded(s));
    CHECK(gelu[i] == rounded(x * 0.5 * (1 + std::erf(x / std::sqrt(2.0)))));
    CHECK(silu[i] == rounded(x * s));
  }
  CHECK(rsqrt == std::vector<double>{0.5, rounded(1 / std::sqrt(2.0))});
  CHECK(floatFunction(UnaryOp::Exp, DType::F16, {1})[0] == 2.71875);  // e rounded to f16
  CHECK(floatFunction(UnaryOp::Floor, DType::F32, {-2.5, 2.5}) == std::vector<double>{-3, 2});
  CHECK(floatFunction(UnaryOp::Ceil, DType::F32, {-2.5, 2.5}) == std::vector<double>{-2, 3});
}

TEST_CASE("casts truncate toward zero and test for non-zero", "[evaluator]") {
  auto castAll = [](DType from, DType to, const std::vector<double>& a) {
    Kernel kernel = elementwise({tensorParam("a", from, {N})}, to, cast(to, at(from, "a")));
    return evaluate(kernel, {{{"a", bufferOf(from, {static_cast<int64_t>(a.size())}, a)}}, {}, {}}).at("y");
  };
  CHECK(intsOf(castAll(DType::F32, DType::I32, {3.7, -3.7, 0.5})) == std::vector<int64_t>{3, -3, 0});
  CHECK(intsOf(castAll(DType::F32, DType::Bool, {0, 0.25, -2})) == std::vector<int64_t>{0, 1, 1});
  CHECK(floatsOf(castAll(DType::F32, DType::F16, {0.1})) == std::vector<double>{0.0999755859375});
}

TEST_CASE("reductions accumulate in the accumulator dtype and cast once", "[evaluator]") {
  std::vector<double> ones(4096, 1.0);
  // f16 accumulation stalls at 2048 (2048 + 1 rounds back to 2048); f32 accumulation does not.
  CHECK(reduceFloats(ReduceOp::Sum, DType::F16, DType::F16, DType::F32, ones) == 4096);
  CHECK(reduceFloats(ReduceOp::Sum, DType::F16, DType::F16, DType::F16, ones) == 2048);
  CHECK(reduceFloats(ReduceOp::Mean, DType::F32, DType::F32, DType::F32, {1, 2, 3, 4}) == 2.5);
  // The mean is taken in f32, then rounded once to f16.
  CHECK(reduceFloats(ReduceOp::Mean, DType::F16, DType::F16, DType::F32, {0.1, 0.2, 0.3}) ==
        static_cast<double>(halfBitsToFloat(
            floatToHalfBits((static_cast<float>(halfBitsToFloat(floatToHalfBits(0.1f))) +
                             halfBitsToFloat(floatToHalfBits(0.2f)) + halfBitsToFloat(floatToHalfBits(0.3f))) /
                            3.0f))));
  CHECK(reduceFloats(ReduceOp::Prod, DType::F32, DType::F32, DType::F32, {2, -3, 0.5}) == -3);
  CHECK(reduceFloats(ReduceOp::Max, DType::F32, DType::F32, DType::F32, {2, -3, 0.5}) == 2);
  CHECK(reduceFloats(ReduceOp::Min, DType::F32, DType::F32, DType::F32, {2, -3, 0.5}) == -3);
  CHECK(std::isnan(reduceFloats(ReduceOp::Max, DType::F32, DType::F32, DType::F32, {2, kNaN, 5})));
  CHECK(std::isnan(reduceFloats(ReduceOp::Min, DType::F32, DType::F32, DType::F32, {kNaN, 2})));
}

TEST_CASE("empty reductions give their identity", "[evaluator]") {
  CHECK(reduceFloats(ReduceOp::Sum, DType::F32, DType::F32, DType::F32, {}) == 0);
  CHECK(reduceFloats(ReduceOp::Prod, DType::F32, DType::F32, DType::F32, {}) == 1);
  CHECK(reduceFloats(ReduceOp::Max, DType::F32, DType::F32, DType::F32, {}) == -kInf);
  CHECK(reduceFloats(ReduceOp::Min, DType::F16, DType::F16, DType::F32, {}) == kInf);
  CHECK(std::isnan(reduceFloats(ReduceOp::Mean, DType::F32, DType::F32, DType::F32, {})));
  auto integerIdentity = [](ReduceOp op, DType dtype) {
    Kernel kernel = reduceAll(op, dtype, dtype, dtype);
    return evaluate(kernel, {{{"x", Buffer(dtype, {0})}}, {}, {}}).at("y").get(0).i;
  };
  CHECK(integerIdentity(ReduceOp::Max, DType::I32) == std::numeric_limits<int32_t>::min());
  CHECK(integerIdentity(ReduceOp::Min, DType::I8) == 127);
  CHECK(integerIdentity(ReduceOp::Max, DType::I64) == std::numeric_limits<int64_t>::min());
}

TEST_CASE("a matrix product sums in order, last reduction axis innermost", "[evaluator]") {
  // c[i, j] = sum over (k: K) of a[i, k] * b[k, j], compared bit for bit with float arithmetic.
  const int64_t m = 5, k = 7, n = 3;
  Kernel kernel;
  kernel.name = "matmul";
  kernel.inputs = {tensorParam("a", DType::F32, {Dim::size("M"), Dim::size("K")}),
                   tensorParam("b", DType::F32, {Dim::size("K"), N})};
  kernel.outputs = {tensorParam("c", DType::F32, {Dim::size("M"), N})};
  kernel.sizes = {"M", "K", "N"};
  kernel.stages = {reductionStage(
      "c", DType::F32, {axisOf("i", "M"), axisOf("j", "N")}, ReduceOp::Sum, {axisOf("k", "K")},
      mul(load(DType::F32, "a", {axis("i"), axis("k")}), load(DType::F32, "b", {axis("k"), axis("j")})))};
  std::vector<double> aValues, bValues;
  for (int64_t e = 0; e < m * k; ++e) aValues.push_back(std::sin(e * 0.7) * 3);
  for (int64_t e = 0; e < k * n; ++e) bValues.push_back(std::cos(e * 1.3) / 7);
  Buffer c =
      evaluate(kernel,
               {{{"a", bufferOf(DType::F32, {m, k}, aValues)}, {"b", bufferOf(DType::F32, {k, n}, bValues)}}, {}, {}})
          .at("c");
  REQUIRE(c.shape() == std::vector<int64_t>{m, n});
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float sum = 0;
      for (int64_t r = 0; r < k; ++r)
        sum += static_cast<float>(aValues[i * k + r]) * static_cast<float>(bValues[r * n + j]);
      CHECK(c.get(i * n + j).f == static_cast<double>(sum));
    }
}

TEST_CASE("padded loads read the pad value outside the tensor", "[evaluator]") {
  // y[i] = pad(x, -1)[i - 1] + pad(x, -1)[i + 1]
  auto padded = [](ExprPtr index) { return load(DType::F32, "x", {std::move(index)}, f32(-1)); };
  Kernel kernel = elementwise({tensorParam("x", DType::F32, {N})}, DType::F32,
                              add(padded(sub(axis("i"), i64(1))), padded(add(axis("i"), i64(1)))));
  Buffer y = evaluate(kernel, {{{"x", bufferOf(DType::F32, {4}, {10, 20, 30, 40})}}, {}, {}}).at("y");
  CHECK(floatsOf(y) == std::vector<double>{19, 40, 60, 29});
}

TEST_CASE("where evaluates only the taken branch", "[evaluator]") {
  // y[i] = where(i > 0, x[i - 1], 0): x[-1] is never read.
  ExprPtr previous = load(DType::F32, "x", {sub(axis("i"), i64(1))});
  Kernel guarded = elementwise({tensorParam("x", DType::F32, {N})}, DType::F32,
                               select(binary(BinaryOp::Gt, axis("i"), i64(0)), previous, f32(0)));
  EvaluationInputs inputs{{{"x", bufferOf(DType::F32, {3}, {5, 6, 7})}}, {}, {}};
  CHECK(floatsOf(evaluate(guarded, inputs).at("y")) == std::vector<double>{0, 5, 6});

  // The same read unguarded is a bug in whoever produced the IR.
  Kernel unguarded = elementwise({tensorParam("x", DType::F32, {N})}, DType::F32, previous);
  REQUIRE_THROWS_AS(evaluate(unguarded, inputs), InternalError);
  REQUIRE_THROWS_WITH(evaluate(unguarded, inputs),
                      Catch::Matchers::Contains("x[i - 1] reads index -1 of dimension 0, which has extent 3"));
}

TEST_CASE("and and or do not evaluate their right operand when the left decides", "[evaluator]") {
  // y[i] = where(i > 0 and x[i - 1] > 0, 1, 0)
  ExprPtr previousPositive = binary(BinaryOp::Gt, load(DType::F32, "x", {sub(axis("i"), i64(1))}), f32(0));
  ExprPtr condition = binary(BinaryOp::And, binary(BinaryOp::Gt, axis("i"), i64(0)), previousPositive);
  Kernel kernel = elementwise({tensorParam("x", DType::F32, {N})}, DType::F32, select(condition, f32(1), f32(0)));
  CHECK(floatsOf(evaluate(kernel, {{{"x", bufferOf(DType::F32, {3}, {5, -6, 7})}}, {}, {}}).at("y")) ==
        std::vector<double>{0, 1, 0});
}

TEST_CASE("stages read earlier stages, and sizes and scalars are values", "[evaluator]") {
  // t[i] = x[i] * scale + N;  y[i] = t[N - 1 - i]
  Kernel kernel;
  kernel.name = "k";
  kernel.inputs = {tensorParam("x", DType::F32, {N})};
  kernel.outputs = {tensorParam("y", DType::F32, {N})};
  kernel.scalars = {{"scale", DType::F32, f32(2), {}}};
  kernel.sizes = {"N"};
  kernel.stages = {
      stage("t", DType::F32, {axisOf("i", "N")},
            add(mul(at(DType::F32, "x"), scalar(DType::F32, "scale")), cast(DType::F32, size("N")))),
      stage("y", DType::F32, {axisOf("i", "N")}, load(DType::F32, "t", {sub(sub(size("N"), i64(1)), axis("i"))})),
  };
  Buffer x = bufferOf(DType::F32, {3}, {1, 2, 3});
  CHECK(floatsOf(evaluate(kernel, {{{"x", x}}, {}, {}}).at("y")) == std::vector<double>{9, 7, 5});
  CHECK(floatsOf(evaluate(kernel, {{{"x", x}}, {{"scale", Value::ofFloat(DType::F32, -1)}}, {}}).at("y")) ==
        std::vector<double>{0, 1, 2});
  std::map<std::string, Buffer> outputs = evaluate(kernel, {{{"x", x}}, {}, {}});
  CHECK(outputs.size() == 1);  // t is not an output
}

// ---------------------------------------------------------------------------------------------------
// Inputs that do not fit the kernel.

namespace {

// k(x: f32[N, D], w: f32[N], z: f32[N*D], c: f32[4]) -> (y: f32[N]), with size K fixed by nothing.
Kernel sizedKernel(bool withK) {
  Kernel kernel;
  kernel.name = "k";
  kernel.inputs = {tensorParam("x", DType::F32, {N, Dim::size("D")}), tensorParam("w", DType::F32, {N}),
                   tensorParam("z", DType::F32, {N * Dim::size("D")}),
                   tensorParam("c", DType::F32, {Dim::constant(4)})};
  kernel.outputs = {tensorParam("y", DType::F32, {N})};
  kernel.scalars = {{"alpha", DType::F32, nullptr, {}}};
  kernel.sizes = {"N", "D"};
  ExprPtr body = mul(at(DType::F32, "w"), scalar(DType::F32, "alpha"));
  if (withK) {
    kernel.sizes.push_back("K");
    body = add(body, cast(DType::F32, size("K")));
  }
  kernel.stages = {stage("y", DType::F32, {axisOf("i", "N")}, body)};
  return kernel;
}

std::map<std::string, Buffer> sizedTensors(int64_t n, int64_t d, int64_t wn, int64_t zn, int64_t cn) {
  return {{"x", Buffer(DType::F32, {n, d})},
          {"w", Buffer(DType::F32, {wn})},
          {"z", Buffer(DType::F32, {zn})},
          {"c", Buffer(DType::F32, {cn})}};
}

void requireEvaluationError(const std::function<void()>& run, const std::string& message) {
  REQUIRE_THROWS_MATCHES(run(), EvaluationError, Catch::Matchers::Message(message));
}

}  // namespace

TEST_CASE("bindSizes takes every size from the inputs' shapes", "[evaluator]") {
  Kernel kernel = sizedKernel(false);
  std::map<std::string, int64_t> sizes = bindSizes(kernel, sizedTensors(3, 5, 3, 15, 4), {});
  CHECK(sizes == std::map<std::string, int64_t>{{"N", 3}, {"D", 5}});
  CHECK(evaluateDim(Dim::constant(2) * N * Dim::size("D"), sizes) == 30);
  // A given size that agrees is fine.
  CHECK(bindSizes(kernel, sizedTensors(3, 5, 3, 15, 4), {{"N", 3}}) == sizes);
}

TEST_CASE("bindSizes reports sizes that disagree", "[evaluator]") {
  Kernel kernel = sizedKernel(false);
  requireEvaluationError([&] { bindSizes(kernel, sizedTensors(3, 5, 4, 15, 4), {}); },
                         "size N is 3 in x (dimension 0) but 4 in w (dimension 0)");
  requireEvaluationError([&] { bindSizes(kernel, sizedTensors(3, 5, 3, 14, 4), {}); },
                         "dimension 0 of z is 14 but must be D*N = 15");
  requireEvaluationError([&] { bindSizes(kernel, sizedTensors(3, 5, 3, 15, 5), {}); },
                         "dimension 0 of c is 5 but must be 4");
  requireEvaluationError(
      [&] {
        bindSizes(kernel, sizedTensors(3, 5, 3, 15, 4), {{"D", 6}});
      },
      "size D is 5 in x (dimension 1) but is given as 6");
  requireEvaluationError(
      [&] {
        bindSizes(kernel, sizedTensors(3, 5, 3, 15, 4), {{"Dd", 6}});
      },
      "kernel k has no size Dd; did you mean 'D'?");
  requireEvaluationError(
      [&] {
        bindSizes(kernel, sizedTensors(3, 5, 3, 15, 4), {{"N", -1}});
      },
      "size N is given as -1, but sizes are not negative");
}

TEST_CASE("bindSizes reports tensors that do not fit", "[evaluator]") {
  Kernel kernel = sizedKernel(false);
  std::map<std::string, Buffer> tensors = sizedTensors(3, 5, 3, 15, 4);
  SECTION("missing") {
    tensors.erase("w");
    requireEvaluationError([&] { bindSizes(kernel, tensors, {}); }, "no tensor given for input w");
  }
  SECTION("unknown") {
    tensors["ww"] = Buffer(DType::F32, {3});
    requireEvaluationError([&] { bindSizes(kernel, tensors, {}); }, "kernel k has no input ww; did you mean 'w'?");
  }
  SECTION("wrong dtype") {
    tensors["w"] = Buffer(DType::F16, {3});
    requireEvaluationError([&] { bindSizes(kernel, tensors, {}); }, "input w is f32 but the tensor given is f16");
  }
  SECTION("wrong rank") {
    tensors["x"] = Buffer(DType::F32, {3, 5, 1});
    requireEvaluationError([&] { bindSizes(kernel, tensors, {}); },
                           "input x has rank 2 (f32[N, D]) but the tensor given has rank 3");
  }
}

TEST_CASE("a size no input determines must be given", "[evaluator]") {
  Kernel kernel = sizedKernel(true);
  requireEvaluationError([&] { bindSizes(kernel, sizedTensors(3, 5, 3, 15, 4), {}); },
                         "size K is not determined by any input; give it with --size K=...");
  CHECK(bindSizes(kernel, sizedTensors(3, 5, 3, 15, 4), {{"K", 7}}).at("K") == 7);
}

TEST_CASE("scalars take their value, their default, or are an error", "[evaluator]") {
  Kernel kernel = sizedKernel(true);
  EvaluationInputs inputs{sizedTensors(2, 1, 2, 2, 4), {}, {{"K", 10}}};
  inputs.tensors["w"] = bufferOf(DType::F32, {2}, {1, 2});
  requireEvaluationError([&] { evaluate(kernel, inputs); }, "no value given for scalar alpha, which has no default");
  inputs.scalars["alpha"] = Value::ofFloat(DType::F64, 3);
  requireEvaluationError([&] { evaluate(kernel, inputs); }, "scalar alpha is f32 but the value given is f64");
  inputs.scalars["alpha"] = Value::ofFloat(DType::F32, 3);
  CHECK(floatsOf(evaluate(kernel, inputs).at("y")) == std::vector<double>{13, 16});
  inputs.scalars["alph"] = Value::ofFloat(DType::F32, 3);
  requireEvaluationError([&] { evaluate(kernel, inputs); }, "kernel k has no scalar alph; did you mean 'alpha'?");
}

TEST_CASE("f16 elementwise results match per-operation rounding bit for bit", "[evaluator]") {
  // y[i] = (a[i] * b[i] + a[i]) / b[i] in f16, against the same computation rounded step by step.
  Kernel kernel =
      elementwise({tensorParam("a", DType::F16, {N}), tensorParam("b", DType::F16, {N})}, DType::F16,
                  div(add(mul(at(DType::F16, "a"), at(DType::F16, "b")), at(DType::F16, "a")), at(DType::F16, "b")));
  std::vector<double> a, b;
  for (int e = 0; e < 64; ++e) {
    a.push_back(std::sin(e) * 100);
    b.push_back(std::cos(e * 0.3) * 7 + 0.01);
  }
  Buffer y =
      evaluate(kernel, {{{"a", bufferOf(DType::F16, {64}, a)}, {"b", bufferOf(DType::F16, {64}, b)}}, {}, {}}).at("y");
  auto half = [](float v) { return halfBitsToFloat(floatToHalfBits(v)); };
  for (int e = 0; e < 64; ++e) {
    float ah = half(static_cast<float>(a[e])), bh = half(static_cast<float>(b[e]));
    float expected = half(half(half(ah * bh) + ah) / bh);
    CHECK(sameBits(y.get(e).f, expected));
  }
}
