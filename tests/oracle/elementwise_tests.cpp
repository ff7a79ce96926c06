// Index-form elementwise work against ATen: every builtin, literals, casts, comparisons with `where`,
// integer division and wrapping, bool arithmetic, type promotion, scalar parameters, sizes as values.
#include <cstdint>
#include <functional>
#include <limits>

#include "tests/oracle/oracle.h"

namespace emmy::oracle {
namespace {

const std::vector<int64_t> kLengths = {1, 3, 7, 17};
const std::vector<std::vector<int64_t>> kMatrixShapes = {{1, 1}, {1, 7}, {3, 1}, {3, 5}, {7, 17}};
constexpr DType kIntegerTypes[] = {DType::I8, DType::I32, DType::I64};
constexpr DType kFloatTypesAndF64[] = {DType::F32, DType::F16, DType::BF16, DType::F64};

// The type ATen computes a float function of `t` in: f32 for the narrower floats, as the spec says.
at::Tensor widened(const at::Tensor& t) { return t.scalar_type() == at::kDouble ? t : f32(t); }

using BinaryFunction = std::function<at::Tensor(const at::Tensor& x, const at::Tensor& y)>;

struct FunctionCase {
  std::string expression;  // over x[i] and y[i]
  BinaryFunction torch;    // on the widened inputs
  Range range = Range::Signed;
};

const std::vector<FunctionCase> kFloatFunctions = {
    {"-x[i]", [](auto& x, auto&) { return -x; }},
    {"x[i] + y[i]", [](auto& x, auto& y) { return x + y; }},
    {"x[i] - y[i]", [](auto& x, auto& y) { return x - y; }},
    {"x[i] * y[i]", [](auto& x, auto& y) { return x * y; }},
    {"x[i] / y[i]", [](auto& x, auto& y) { return x / y; }},
    {"x[i] % y[i]", [](auto& x, auto& y) { return at::fmod(x, y); }, Range::Positive},
    {"exp(x[i])", [](auto& x, auto&) { return x.exp(); }},
    {"exp2(x[i])", [](auto& x, auto&) { return x.exp2(); }},
    {"log(x[i])", [](auto& x, auto&) { return x.log(); }, Range::Positive},
    {"log2(x[i])", [](auto& x, auto&) { return x.log2(); }, Range::Positive},
    {"sqrt(x[i])", [](auto& x, auto&) { return x.sqrt(); }, Range::Positive},
    {"rsqrt(x[i])", [](auto& x, auto&) { return x.rsqrt(); }, Range::Positive},
    {"abs(x[i])", [](auto& x, auto&) { return x.abs(); }},
    {"sin(x[i])", [](auto& x, auto&) { return x.sin(); }},
    {"cos(x[i])", [](auto& x, auto&) { return x.cos(); }},
    {"tanh(x[i])", [](auto& x, auto&) { return x.tanh(); }},
    {"erf(x[i])", [](auto& x, auto&) { return x.erf(); }},
    {"sigmoid(x[i])", [](auto& x, auto&) { return x.sigmoid(); }},
    {"relu(x[i])", [](auto& x, auto&) { return x.relu(); }},
    {"gelu(x[i])", [](auto& x, auto&) { return at::gelu(x); }},
    {"silu(x[i])", [](auto& x, auto&) { return at::silu(x); }},
    {"floor(x[i])", [](auto& x, auto&) { return x.floor(); }},
    {"ceil(x[i])", [](auto& x, auto&) { return x.ceil(); }},
    {"min(x[i], y[i])", [](auto& x, auto& y) { return at::minimum(x, y); }},
    {"max(x[i], y[i])", [](auto& x, auto& y) { return at::maximum(x, y); }},
    {"pow(x[i], y[i])", [](auto& x, auto& y) { return x.pow(y); }, Range::Positive},
    {"clamp(x[i], -0.5, 1.5)", [](auto& x, auto&) { return x.clamp(-0.5, 1.5); }},
};

TEST_CASE("every builtin function and operator on floats, elementwise in index form", "[oracle]") {
  const std::string source = R"(
kernel f<T: f16 | bf16 | f32 | f64>(x: T[N], y: T[N]) -> (z: T[N]) {
    z[i] = $EXPR
}
)";
  for (const FunctionCase& function : kFloatFunctions)
    for (DType dtype : kFloatTypesAndF64)
      for (int64_t n : kLengths) {
        INFO(function.expression << " on " << dtypeName(dtype) << "[" << n << "]");
        at::Tensor x = randomTensor(dtype, {n}, 1, function.range);
        at::Tensor y = randomTensor(dtype, {n}, 2, function.range);
        expectKernelMatches(substitute(source, {{"$EXPR", function.expression}}), instance("f", dtype),
                            {{"x", x}, {"y", y}}, {{"z", roundTo(function.torch(widened(x), widened(y)), dtype)}});
      }
}

TEST_CASE("every builtin function and operator on whole tensors, broadcasting y over the rows of x", "[oracle]") {
  const std::string source = R"(
kernel f<T: f16 | bf16 | f32 | f64>(x: T[M, N], y: T[N]) -> (z: T[M, N]) {
    z = $EXPR
}
)";
  for (const FunctionCase& function : kFloatFunctions)
    for (DType dtype : kFloatTypesAndF64)
      for (const auto& shape : kMatrixShapes) {
        std::string expression = substitute(function.expression, {{"[i]", ""}});
        INFO(expression << " on " << dtypeName(dtype) << shapeName(shape));
        at::Tensor x = randomTensor(dtype, shape, 1, function.range);
        at::Tensor y = randomTensor(dtype, {shape[1]}, 2, function.range);
        expectKernelMatches(substitute(source, {{"$EXPR", expression}}), instance("f", dtype), {{"x", x}, {"y", y}},
                            {{"z", roundTo(function.torch(widened(x), widened(y)).expand(shape), dtype)}});
      }
}

TEST_CASE("infinities and NaN: log of 0 and of negatives, division by 0, max propagating NaN", "[oracle]") {
  const std::string source = R"(
kernel special<T: f16 | bf16 | f32>(x: T[N], y: T[N]) -> (l: T[N], q: T[N], m: T[N]) {
    l[i] = log(x[i])
    q[i] = x[i] / y[i]
    m[i] = max(l[i], y[i])
}
)";
  for (DType dtype : kFloatTypes)
    for (int64_t n : kLengths) {
      INFO(dtypeName(dtype) << "[" << n << "]");
      // Small integers, zero included, as floats.
      at::Tensor x = randomTensor(DType::I8, {n}, 24, Range::Divisor).to(torchType(dtype));
      at::Tensor y = randomTensor(DType::I8, {n}, 25, Range::Divisor).to(torchType(dtype));
      at::Tensor logarithm = roundTo(f32(x).log(), dtype);
      expectKernelMatches(source, instance("special", dtype), {{"x", x}, {"y", y}},
                          {{"l", logarithm}, {"q", x / y}, {"m", at::maximum(logarithm, y)}});
    }
}

// Integer overflow in these stays inside i64, where ATen computes them; `.to` then wraps like Emmy.
const std::vector<FunctionCase> kIntegerFunctions = {
    {"-x[i]", [](auto& x, auto&) { return -x; }},
    {"x[i] + y[i]", [](auto& x, auto& y) { return x + y; }},
    {"x[i] - y[i]", [](auto& x, auto& y) { return x - y; }},
    {"x[i] * y[i]", [](auto& x, auto& y) { return x * y; }},
    {"abs(x[i])", [](auto& x, auto&) { return x.abs(); }},
    {"relu(x[i])", [](auto& x, auto&) { return x.relu(); }},
    {"min(x[i], y[i])", [](auto& x, auto& y) { return at::minimum(x, y); }},
    {"max(x[i], y[i])", [](auto& x, auto& y) { return at::maximum(x, y); }},
    {"clamp(x[i], -7, 20)", [](auto& x, auto&) { return x.clamp(-7, 20); }},
};

TEST_CASE("integer operators and functions, elementwise in index form", "[oracle]") {
  const std::string source = R"(
kernel g<T: i8 | i32 | i64>(x: T[N], y: T[N]) -> (z: T[N]) {
    z[i] = $EXPR
}
)";
  for (const FunctionCase& function : kIntegerFunctions)
    for (DType dtype : kIntegerTypes)
      for (int64_t n : kLengths) {
        INFO(function.expression << " on " << dtypeName(dtype) << "[" << n << "]");
        at::Tensor x = randomTensor(dtype, {n}, 3), y = randomTensor(dtype, {n}, 4);
        expectKernelMatches(substitute(source, {{"$EXPR", function.expression}}), instance("g", dtype),
                            {{"x", x}, {"y", y}},
                            {{"z", roundTo(function.torch(x.to(at::kLong), y.to(at::kLong)), dtype)}});
      }
}

TEST_CASE("arithmetic with literals rounds after every operation, as ATen does on the type itself", "[oracle]") {
  const std::string source = R"(
kernel f<T: f16 | bf16 | f32>(x: T[N], y: T[N]) -> (z: T[N]) {
    z[i] = x[i] * 0.1 + y[i] * 2 - 1
}
)";
  for (DType dtype : kFloatTypes)
    for (int64_t n : kLengths) {
      INFO(dtypeName(dtype) << "[" << n << "]");
      at::Tensor x = randomTensor(dtype, {n}, 5), y = randomTensor(dtype, {n}, 6);
      expectKernelMatches(source, instance("f", dtype), {{"x", x}, {"y", y}}, {{"z", x * 0.1 + y * 2 - 1}});
    }
}

TEST_CASE("casts between every pair of dtypes", "[oracle]") {
  const std::string source = R"(
kernel c(x: $FROM[N]) -> (y: $TO[N]) {
    y[i] = $TO(x[i])
}
)";
  for (DType from : kAllDTypes)
    for (DType to : kAllDTypes)
      for (int64_t n : kLengths) {
        INFO(dtypeName(from) << " to " << dtypeName(to) << ", length " << n);
        at::Tensor x = randomTensor(from, {n}, 7);
        expectKernelMatches(substitute(source, {{"$FROM", dtypeName(from)}, {"$TO", dtypeName(to)}}),
                            "c", {{"x", x}}, {{"y", x.to(torchType(to))}});
      }
}

TEST_CASE("a cast to a narrower integer wraps, and a float cast truncates toward zero", "[oracle]") {
  const std::string source = R"(
kernel c(x: i32[N], f: f32[N]) -> (narrow: i8[N], truncated: i32[N]) {
    narrow[i]    = i8(x[i])
    truncated[i] = i32(f[i])
}
)";
  at::Tensor x = at::tensor({200, -200, 127, 128, -129, 65541}, at::kInt);
  at::Tensor f = at::tensor({2.7f, -2.7f, 0.5f, -0.5f, 99.99f, -1.0f}, at::kFloat);
  expectKernelMatches(source, "c", {{"x", x}, {"f", f}},
                      {{"narrow", at::tensor({-56, 56, 127, -128, 127, 5}, at::kChar)},
                       {"truncated", at::tensor({2, -2, 0, 0, 99, -1}, at::kInt)}});
}

TEST_CASE("comparisons give bool", "[oracle]") {
  const std::string source = R"(
kernel cmp(x: $T[N], y: $T[N]) -> (b: bool[N]) {
    b[i] = x[i] $OP y[i]
}
)";
  const std::vector<std::pair<std::string, BinaryFunction>> comparisons = {
      {"<", [](auto& x, auto& y) { return x < y; }},   {"<=", [](auto& x, auto& y) { return x <= y; }},
      {">", [](auto& x, auto& y) { return x > y; }},   {">=", [](auto& x, auto& y) { return x >= y; }},
      {"==", [](auto& x, auto& y) { return x == y; }}, {"!=", [](auto& x, auto& y) { return x != y; }},
  };
  for (const auto& [op, torch] : comparisons)
    for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I8})
      for (int64_t n : kLengths) {
        INFO("x " << op << " y on " << dtypeName(dtype) << "[" << n << "]");
        // Small integers (also as floats) make equal pairs common.
        at::Tensor x = randomTensor(DType::I8, {n}, 8, Range::Divisor).to(torchType(dtype));
        at::Tensor y = randomTensor(DType::I8, {n}, 9, Range::Divisor).to(torchType(dtype));
        expectKernelMatches(substitute(source, {{"$T", dtypeName(dtype)}, {"$OP", op}}), "cmp",
                            {{"x", x}, {"y", y}}, {{"b", torch(x, y)}});
      }
}

TEST_CASE("and, or, not and where", "[oracle]") {
  const std::string source = R"(
kernel logic(x: $T[N], y: $T[N], p: bool[N], q: bool[N]) -> (z: $T[N], exclusive: bool[N]) {
    z[i]         = where(x[i] > 0 and not (y[i] > 1) or x[i] == y[i], x[i] * 2, y[i])
    exclusive[i] = (p[i] and not q[i]) or (q[i] and not p[i])
}
)";
  for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::I32})
    for (int64_t n : kLengths) {
      INFO(dtypeName(dtype) << "[" << n << "]");
      at::Tensor x = randomTensor(DType::I8, {n}, 10, Range::Divisor).to(torchType(dtype));
      at::Tensor y = randomTensor(DType::I8, {n}, 11, Range::Divisor).to(torchType(dtype));
      at::Tensor p = randomTensor(DType::Bool, {n}, 12), q = randomTensor(DType::Bool, {n}, 13);
      at::Tensor taken = ((x > 0) & ~(y > 1)) | (x == y);
      expectKernelMatches(substitute(source, {{"$T", dtypeName(dtype)}}), "logic",
                          {{"x", x}, {"y", y}, {"p", p}, {"q", q}},
                          {{"z", at::where(taken, x * 2, y)}, {"exclusive", p ^ q}});
    }
}

// ATen has no division that gives 0 for a zero divisor: the expectation divides by 1 there and masks.
// It computes in i64, so that i8 and i32 overflow (MIN / -1) wraps only in the final conversion.
at::Tensor integerDivision(const at::Tensor& a, const at::Tensor& b, bool remainder) {
  at::Tensor zero = b == 0;
  at::Tensor wideA = a.to(at::kLong), safeB = at::where(zero, at::ones_like(b), b).to(at::kLong);
  at::Tensor result = remainder ? at::fmod(wideA, safeB) : at::div(wideA, safeB, "trunc");
  return at::where(zero, at::zeros_like(result), result).to(a.scalar_type());
}

const std::string kDivisionKernel = R"(
kernel d<T: i8 | i32 | i64>(a: T[N], b: T[N]) -> (q: T[N], r: T[N]) {
    q[i] = a[i] / b[i]
    r[i] = a[i] % b[i]
}
)";

TEST_CASE("integer / truncates, % takes the dividend's sign, and both give 0 for a zero divisor", "[oracle]") {
  for (DType dtype : kIntegerTypes)
    for (int64_t n : kLengths) {
      INFO(dtypeName(dtype) << "[" << n << "]");
      at::Tensor a = randomTensor(dtype, {n}, 14), b = randomTensor(dtype, {n}, 15, Range::Divisor);
      expectKernelMatches(kDivisionKernel, instance("d", dtype), {{"a", a}, {"b", b}},
                          {{"q", integerDivision(a, b, false)}, {"r", integerDivision(a, b, true)}});
    }
}

TEST_CASE("integer division by hand: signs, zero divisors and the overflowing MIN / -1", "[oracle]") {
  constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
  at::Tensor a = at::tensor({7, -7, 7, -7, 5, kMin, 0, kMin}, at::kInt);
  at::Tensor b = at::tensor({2, 2, -2, -2, 0, -1, 0, 1}, at::kInt);
  expectKernelMatches(kDivisionKernel, "d<i32>", {{"a", a}, {"b", b}},
                      {{"q", at::tensor({3, -3, -3, 3, 0, kMin, 0, kMin}, at::kInt)},
                       {"r", at::tensor({1, -1, 1, -1, 0, 0, 0, 0}, at::kInt)}});
}

TEST_CASE("i32 and i64 arithmetic wraps on overflow", "[oracle]") {
  const std::string source = R"(
kernel w<T: i32 | i64>(a: T[N], b: T[N]) -> (s: T[N], p: T[N], n: T[N]) {
    s[i] = a[i] + b[i]
    p[i] = a[i] * b[i]
    n[i] = -a[i]
}
)";
  constexpr int32_t kMax32 = std::numeric_limits<int32_t>::max(), kMin32 = std::numeric_limits<int32_t>::min();
  at::Tensor a32 = at::tensor({kMax32, kMin32, 65536, 46341, 3, kMin32}, at::kInt);
  at::Tensor b32 = at::tensor({1, -1, 65536, 46341, -5, kMin32}, at::kInt);
  at::Tensor wideA = a32.to(at::kLong), wideB = b32.to(at::kLong);
  expectKernelMatches(source, "w<i32>", {{"a", a32}, {"b", b32}},
                      {{"s", (wideA + wideB).to(at::kInt)}, {"p", (wideA * wideB).to(at::kInt)},
                       {"n", (-wideA).to(at::kInt)}});

  constexpr int64_t kMax64 = std::numeric_limits<int64_t>::max(), kMin64 = std::numeric_limits<int64_t>::min();
  at::Tensor a64 = at::tensor({kMax64, kMin64, int64_t{1} << 32, int64_t{3}}, at::kLong);
  at::Tensor b64 = at::tensor({int64_t{1}, int64_t{-1}, int64_t{1} << 32, int64_t{-5}}, at::kLong);
  expectKernelMatches(source, "w<i64>", {{"a", a64}, {"b", b64}},
                      {{"s", at::tensor({kMin64, kMax64, int64_t{1} << 33, int64_t{-2}}, at::kLong)},
                       {"p", at::tensor({kMax64, kMin64, int64_t{0}, int64_t{-15}}, at::kLong)},
                       {"n", at::tensor({-kMax64, kMin64, -(int64_t{1} << 32), int64_t{-3}}, at::kLong)}});
}

TEST_CASE("bool in arithmetic is an integer", "[oracle]") {
  // Emmy differs from ATen on purpose for bool + bool, which ATen keeps bool: here it is i64.
  const std::string source = R"(
kernel b(p: bool[N], q: bool[N], x: i32[N]) -> (s: i64[N], t: i32[N], u: f32[N]) {
    s[i] = p[i] + q[i]
    t[i] = p[i] * x[i]
    u[i] = p[i] - 0.5
}
)";
  for (int64_t n : kLengths) {
    INFO("length " << n);
    at::Tensor p = randomTensor(DType::Bool, {n}, 16), q = randomTensor(DType::Bool, {n}, 17);
    at::Tensor x = randomTensor(DType::I32, {n}, 18);
    expectKernelMatches(source, "b", {{"p", p}, {"q", q}, {"x", x}},
                        {{"s", p.to(at::kLong) + q.to(at::kLong)}, {"t", p * x}, {"u", p.to(at::kFloat) - 0.5}});
  }
}

TEST_CASE("two tensors of different dtypes promote as in PyTorch", "[oracle]") {
  // The output is declared with ATen's result type, and Emmy's value must match ATen's, which it would
  // not if it computed in a narrower type (bf16 for f16 + bf16, say) and converted afterwards.
  const std::string source = R"(
kernel p(a: $A[N], b: $B[N]) -> (sum: $C[N], product: $C[N]) {
    sum[i]     = a[i] + b[i]
    product[i] = a[i] * b[i]
}
)";
  for (DType typeA : kAllDTypes)
    for (DType typeB : kAllDTypes)
      for (int64_t n : kLengths) {
        if (typeA == DType::Bool && typeB == DType::Bool) continue;  // see "bool in arithmetic is an integer"
        at::Tensor a = randomTensor(typeA, {n}, 19), b = randomTensor(typeB, {n}, 20);
        DType result = emmyType(at::result_type(a, b));
        INFO(dtypeName(typeA) << " with " << dtypeName(typeB) << " gives " << dtypeName(result) << ", length " << n);
        expectKernelMatches(substitute(source, {{"$A", dtypeName(typeA)},
                                                {"$B", dtypeName(typeB)},
                                                {"$C", dtypeName(result)}}),
                            "p", {{"a", a}, {"b", b}}, {{"sum", a + b}, {"product", a * b}});
      }
}

struct LiteralCase {
  DType input;
  std::string expression;  // over x[i]
  DType output;            // wider than the expression's type, so that computing in a wider type shows
  std::function<at::Tensor(const at::Tensor& x)> torch;
  Range range = Range::Signed;
};

TEST_CASE("a literal takes the other operand's type", "[oracle]") {
  const std::vector<LiteralCase> cases = {
      {DType::F16, "x[i] * 100.1", DType::F32, [](auto& x) { return x * 100.1; }},
      {DType::BF16, "x[i] * 10.1 + 1", DType::F32, [](auto& x) { return x * 10.1 + 1; }},
      {DType::F16, "(x[i] + 1000) / 3", DType::F32, [](auto& x) { return (x + 1000) / 3; }},
      {DType::F16, "x[i] * (10.1 + 0.2)", DType::F32, [](auto& x) { return x * (10.1 + 0.2); }},
      {DType::F64, "x[i] * 0.1", DType::F64, [](auto& x) { return x * 0.1; }},
      {DType::I32, "x[i] * 0.5", DType::F64, [](auto& x) { return x * 0.5; }},
      {DType::I32, "x[i] + 1", DType::I64, [](auto& x) { return x + 1; }},
      {DType::I8, "x[i] * 3", DType::I32, [](auto& x) { return x * 3; }},
      {DType::Bool, "x[i] * 2", DType::I64, [](auto& x) { return x * 2; }},
      {DType::I32, "exp(x[i])", DType::F64, [](auto& x) { return x.exp(); }, Range::NearOne},
  };
  const std::string source = R"(
kernel l(x: $IN[N]) -> (y: $OUT[N]) {
    y[i] = $EXPR
}
)";
  for (const LiteralCase& literal : cases)
    for (int64_t n : kLengths) {
      INFO(literal.expression << " on " << dtypeName(literal.input) << "[" << n << "]");
      at::Tensor x = randomTensor(literal.input, {n}, 21, literal.range);
      expectKernelMatches(substitute(source, {{"$IN", dtypeName(literal.input)},
                                              {"$OUT", dtypeName(literal.output)},
                                              {"$EXPR", literal.expression}}),
                          "l", {{"x", x}}, {{"y", literal.torch(x).to(torchType(literal.output))}});
    }
}

TEST_CASE("scalar parameters, with their defaults and given", "[oracle]") {
  const std::string source = R"(
kernel s<T: f16 | bf16 | f32>(x: T[N], alpha: f32 = 0.5, k: i32 = 3) -> (y: f32[N], z: T[N]) {
    y[i] = x[i] * alpha + k
    z[i] = x[i] + k
}
)";
  for (DType dtype : kFloatTypes)
    for (int64_t n : kLengths) {
      INFO(dtypeName(dtype) << "[" << n << "]");
      at::Tensor x = randomTensor(dtype, {n}, 22);
      // A typed scalar is not a literal: f16 * (alpha: f32) computes in f32; i32 beside T gives T.
      expectKernelMatches(source, instance("s", dtype), {{"x", x}}, {{"y", f32(x) * 0.5f + 3}, {"z", x + 3}});
      expectKernelMatches(source, instance("s", dtype), {{"x", x}}, {{"y", f32(x) * 2.5f - 4}, {"z", x - 4}},
                          {{"alpha", Value::ofFloat(DType::F32, 2.5)}, {"k", Value::ofInt(DType::I32, -4)}});
    }
}

TEST_CASE("indices and sizes used as values", "[oracle]") {
  const std::string source = R"(
kernel sz<T: f16 | bf16 | f32>(x: T[M, N]) -> (y: T[M, N], flat: i64[M, N]) {
    y[i, j]    = x[i, j] / N + j - M
    flat[i, j] = i * N + j
}
)";
  for (DType dtype : kFloatTypes)
    for (const auto& shape : kMatrixShapes) {
      INFO(dtypeName(dtype) << shapeName(shape));
      int64_t rows = shape[0], columns = shape[1];
      at::Tensor x = randomTensor(dtype, shape, 23);
      at::Tensor column = at::arange(columns, x.options());
      expectKernelMatches(source, instance("sz", dtype), {{"x", x}},
                          {{"y", x / columns + column - rows},
                           {"flat", at::arange(rows * columns, at::kLong).reshape(shape)}});
    }
}

}  // namespace
}  // namespace emmy::oracle
