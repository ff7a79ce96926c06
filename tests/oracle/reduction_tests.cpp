// Index-form reductions against ATen: sum, max, min, prod and mean over one index and several, nested
// reductions, integer and bool reductions, and f16/bf16 accumulating in f32 (ATen computes those in f32
// and rounds once, which is what the spec asks of Emmy).
#include <functional>
#include <limits>

#include "tests/oracle/oracle.h"

namespace emmy::oracle {
namespace {

const std::vector<std::vector<int64_t>> kMatrixShapes = {{1, 1}, {1, 7}, {3, 1}, {3, 5}, {7, 17}};
const std::vector<std::vector<int64_t>> kCubeShapes = {{1, 1, 1}, {2, 1, 7}, {3, 5, 1}, {3, 7, 5}};

using Reducer = std::function<at::Tensor(const at::Tensor& x, at::IntArrayRef dims)>;

// ATen's prod reduces one dimension at a time.
at::Tensor product(const at::Tensor& x, at::IntArrayRef dims) {
  at::Tensor result = x;
  for (size_t k = dims.size(); k-- > 0;) result = result.prod(dims[k]);
  return result;
}

struct ReductionCase {
  std::string op;
  Reducer torch;
  Range range;  // products of values near 1 stay in range
};

const std::vector<ReductionCase> kReductions = {
    {"sum", [](auto& x, auto dims) { return x.sum(dims); }, Range::Signed},
    {"max", [](auto& x, auto dims) { return x.amax(dims); }, Range::Signed},
    {"min", [](auto& x, auto dims) { return x.amin(dims); }, Range::Signed},
    {"prod", product, Range::NearOne},
    {"mean", [](auto& x, auto dims) { return x.mean(dims); }, Range::Signed},
};

TEST_CASE("reductions over one index, leading or trailing", "[oracle]") {
  const std::string source = R"(
kernel r<T: f16 | bf16 | f32>(x: T[N, D]) -> (rows: T[N], columns: T[D]) {
    rows[n]    = $OP[d](x[n, d])
    columns[d] = $OP[n](x[n, d])
}
)";
  for (const ReductionCase& reduction : kReductions)
    for (DType dtype : kFloatTypes)
      for (const auto& shape : kMatrixShapes) {
        INFO(reduction.op << " of " << dtypeName(dtype) << shapeName(shape));
        at::Tensor x = randomTensor(dtype, shape, 1, reduction.range);
        expectKernelMatches(substitute(source, {{"$OP", reduction.op}}), instance("r", dtype), {{"x", x}},
                            {{"rows", roundTo(reduction.torch(f32(x), {1}), dtype)},
                             {"columns", roundTo(reduction.torch(f32(x), {0}), dtype)}});
      }
}

TEST_CASE("reductions over several indices", "[oracle]") {
  const std::string source = R"(
kernel r<T: f16 | bf16 | f32>(x: T[A, B, C]) -> (outer: T[B], inner: T[A]) {
    outer[b] = $OP[a, c](x[a, b, c])
    inner[a] = $OP[c, b](x[a, b, c])
}
)";
  for (const ReductionCase& reduction : kReductions)
    for (DType dtype : kFloatTypes)
      for (const auto& shape : kCubeShapes) {
        INFO(reduction.op << " of " << dtypeName(dtype) << shapeName(shape));
        at::Tensor x = randomTensor(dtype, shape, 2, reduction.range);
        expectKernelMatches(substitute(source, {{"$OP", reduction.op}}), instance("r", dtype), {{"x", x}},
                            {{"outer", roundTo(reduction.torch(f32(x), {0, 2}), dtype)},
                             {"inner", roundTo(reduction.torch(f32(x), {1, 2}), dtype)}});
      }
}

TEST_CASE("reductions of every index give rank-0 tensors, in index and whole-tensor form", "[oracle]") {
  // `scale` is a rank-0 input, `total` a rank-0 stage read by both outputs.
  const std::string source = R"(
kernel r<T: f16 | bf16 | f32>(x: T[N, D], scale: T[]) -> (all: T[], whole: T[], scaled: T[N, D]) {
    total[] = $OP[n, d](x[n, d])
    all[] = total[] * scale[]
    whole = $OP(x, axis=[0, 1])
    scaled = x - total
}
)";
  for (const ReductionCase& reduction : kReductions)
    for (DType dtype : kFloatTypes)
      for (const auto& shape : kMatrixShapes) {
        INFO(reduction.op << " of " << dtypeName(dtype) << shapeName(shape));
        at::Tensor x = randomTensor(dtype, shape, 3, reduction.range);
        at::Tensor scale = randomTensor(dtype, {}, 4);
        at::Tensor total = roundTo(reduction.torch(f32(x), {0, 1}), dtype);
        expectKernelMatches(substitute(source, {{"$OP", reduction.op}}), instance("r", dtype),
                            {{"x", x}, {"scale", scale}},
                            {{"all", total * scale}, {"whole", total}, {"scaled", x - total}});
      }
}

TEST_CASE("reduction indices with a bound: prefix, reverse and triangular, windows", "[oracle]") {
  const std::string source = R"(
kernel b<T: f16 | bf16 | f32>(x: T[N, D], w: T[K]) -> (prefix: T[N, D], suffix: T[N, D], before: T[N, D],
                                                        lower: T[N], window: T[N, D], product: T[N, D],
                                                        average: T[N, D]) {
    prefix[n, d] = sum[k < d + 1](x[n, k])
    suffix[n, d] = sum[k < D - d](x[n, D - 1 - k])
    before[n, d] = max[k < d](x[n, k])
    lower[n] = sum[i < N, j < n + 1](x[i, j * 0] * 0 + x[n, 0])
    window[n, d] = sum[j < K](pad(x, 0)[n, d + j - 1] * w[j])
    product[n, d] = prod[k < d + 1](x[n, k])
    average[n, d] = mean[k < d + 1](x[n, k])
}
)";
  for (DType dtype : kFloatTypes)
    for (const auto& shape : kMatrixShapes) {
      INFO(dtypeName(dtype) << shapeName(shape));
      int64_t rows = shape[0], columns = shape[1];
      at::Tensor x = randomTensor(dtype, shape, 5, Range::NearOne), w = randomTensor(dtype, {3}, 6);
      at::Tensor wide = f32(x);
      // max over nothing (d = 0) is -inf; the others are running reductions and a 3-wide correlation
      // with one column of zeros on each side.
      at::Tensor before = at::full({rows, columns}, -std::numeric_limits<float>::infinity());
      if (columns > 1) before.slice(1, 1) = std::get<0>(at::cummax(wide, 1)).slice(1, 0, columns - 1);
      at::Tensor padded = at::constant_pad_nd(wide, {1, 1});
      at::Tensor window = at::zeros({rows, columns});
      for (int64_t j = 0; j < 3; ++j) window += padded.slice(1, j, j + columns) * f32(w)[j];
      at::Tensor lower = wide.select(1, 0) * (at::arange(rows).to(at::kFloat) + 1) * rows;
      expectKernelMatches(source, instance("b", dtype), {{"x", x}, {"w", w}},
                          {{"prefix", roundTo(at::cumsum(wide, 1), dtype)},
                           {"suffix", roundTo(at::flip(at::cumsum(at::flip(wide, {1}), 1), {1}), dtype)},
                           {"before", roundTo(before, dtype)},
                           {"lower", roundTo(lower, dtype)},
                           {"window", roundTo(window, dtype)},
                           {"product", roundTo(at::cumprod(wide, 1), dtype)},
                           {"average", roundTo(at::cumsum(wide, 1) / (at::arange(columns).to(at::kFloat) + 1), dtype)}});
    }
}

TEST_CASE("argmax and argmin: the first extreme, in index and whole-tensor form, also over several indices", "[oracle]") {
  const std::string source = R"(
kernel a<T: f16 | bf16 | f32>(x: T[N, D]) -> (rows: i64[N], columns: i64[D], kept: i64[N, 1], whole: i64[],
                                             first: i64[N]) {
    rows[n] = argmax[d](x[n, d])
    columns = argmin(x, axis=0)
    kept = argmax(x, axis=-1, keepdim=true)
    whole[] = argmin[n, d](x[n, d])
    first[n] = argmax[d < 2](pad(x, -inf)[n, d])
}
)";
  for (DType dtype : kFloatTypes)
    for (const auto& shape : kMatrixShapes) {
      INFO(dtypeName(dtype) << shapeName(shape));
      // Few distinct values, so that ties are common: the first of them wins.
      at::Tensor x = roundTo(at::round(f32(randomTensor(dtype, shape, 7)) * 2), dtype);
      at::Tensor padded = at::constant_pad_nd(f32(x), {0, std::max<int64_t>(0, 2 - shape[1])}, -INFINITY).slice(1, 0, 2);
      expectKernelMatches(substitute(source, {}), instance("a", dtype), {{"x", x}},
                          {{"rows", at::argmax(f32(x), 1)},
                           {"columns", at::argmin(f32(x), 0)},
                           {"kept", at::argmax(f32(x), -1, true)},
                           {"whole", at::argmin(f32(x))},
                           {"first", at::argmax(padded, 1)}});
    }
}

TEST_CASE("argmax and argmin of NaN, infinities and integers, as PyTorch", "[oracle]") {
  const std::string source = R"(
kernel a(x: f32[N, D], q: i32[N, D]) -> (big: i64[N], small: i64[N], ibig: i64[N], ismall: i64[D]) {
    big = argmax(x, axis=1)
    small[n] = argmin[d](x[n, d])
    ibig[n] = argmax[d](q[n, d] % 3)
    ismall = argmin(q, axis=0)
}
)";
  float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  at::Tensor x = at::tensor({1.0f, nan, 3.0f, nan, -inf, -inf, -inf, 2.0f, inf, 0.0f, inf, -1.0f}).reshape({3, 4});
  at::Tensor q = at::tensor({5, -7, 2, 2, 9, 9, -7, 0, 4, 1, 3, 8}, at::kInt).reshape({3, 4});
  expectKernelMatches(source, "a", {{"x", x}, {"q", q}},
                      {{"big", at::argmax(x, 1)}, {"small", at::argmin(x, 1)},
                       {"ibig", at::argmax(at::fmod(q, 3), 1)}, {"ismall", at::argmin(q, 0)}});
}

TEST_CASE("f16 and bf16 sums accumulate in f32", "[oracle]") {
  // 4097 ones: an f16 accumulator sticks at 2048 (2048 + 1 rounds back to 2048), an f32 one reaches
  // 4097, which rounds to 4096 in f16 and bf16 alike.
  const std::string source = R"(
kernel total<T: f16 | bf16>(x: T[N, D]) -> (s: T[N]) {
    s[n] = sum[d](x[n, d])
}
)";
  for (DType dtype : {DType::F16, DType::BF16}) {
    INFO(dtypeName(dtype));
    at::Tensor x = at::ones({2, 4097}, torchType(dtype));
    expectKernelMatches(source, instance("total", dtype), {{"x", x}}, {{"s", at::full({2}, 4096, torchType(dtype))}});
  }
}

TEST_CASE("nested reductions and reductions inside expressions", "[oracle]") {
  const std::string source = R"(
kernel nested<T: f16 | bf16 | f32>(x: T[N, D], w: T[D]) -> (centred: T[N, D], weighted: f32[N], peaks: T[N]) {
    centred[n, d] = x[n, d] - max[e](x[n, e])
    weighted[n]   = sum[d](f32(x[n, d]) * w[d]) / sum[d](w[d]) + 1
    peaks[n]      = max[d](x[n, d] * min[e](w[e]))
}
)";
  for (DType dtype : kFloatTypes)
    for (const auto& shape : kMatrixShapes) {
      INFO(dtypeName(dtype) << shapeName(shape));
      at::Tensor x = randomTensor(dtype, shape, 3), w = randomTensor(dtype, {shape[1]}, 4, Range::Positive);
      at::Tensor rowMax = roundTo(f32(x).amax(1, true), dtype);
      at::Tensor weightSum = roundTo(f32(w).sum(), dtype);
      at::Tensor weightMin = roundTo(f32(w).amin(), dtype);
      expectKernelMatches(source, instance("nested", dtype), {{"x", x}, {"w", w}},
                          {{"centred", x - rowMax},
                           {"weighted", (f32(x) * f32(w)).sum(1) / f32(weightSum) + 1},
                           {"peaks", roundTo(f32(x * weightMin).amax(1), dtype)}});
    }
}

TEST_CASE("a reduction of reductions", "[oracle]") {
  const std::string source = R"(
kernel r<T: f16 | bf16 | f32>(x: T[A, B, C]) -> (y: T[A]) {
    y[a] = sum[b](max[c](x[a, b, c]))
}
)";
  for (DType dtype : kFloatTypes)
    for (const auto& shape : kCubeShapes) {
      INFO(dtypeName(dtype) << shapeName(shape));
      at::Tensor x = randomTensor(dtype, shape, 5);
      expectKernelMatches(source, instance("r", dtype), {{"x", x}}, {{"y", roundTo(f32(x).amax(2).sum(1), dtype)}});
    }
}

TEST_CASE("integer reductions stay in their type and wrap", "[oracle]") {
  const std::string source = R"(
kernel r<T: i8 | i32 | i64>(x: T[N, D]) -> (s: T[N], hi: T[N], lo: T[N], p: T[N]) {
    s[n]  = sum[d](x[n, d])
    hi[n] = max[d](x[n, d])
    lo[n] = min[d](x[n, d])
    p[n]  = prod[d](x[n, d])
}
)";
  for (DType dtype : {DType::I8, DType::I32, DType::I64})
    for (const auto& shape : kMatrixShapes) {
      INFO(dtypeName(dtype) << shapeName(shape));
      // i8 sums of up to 17 values of [-50, 50] overflow: ATen sums in i64, and the conversion wraps.
      at::Tensor x = randomTensor(dtype, shape, 6), small = randomTensor(dtype, shape, 7, Range::NearOne);
      at::ScalarType type = torchType(dtype);
      std::map<std::string, Buffer> outputs = runEmmy(source, instance("r", dtype), {{"x", x}});
      expectClose("sum", outputs.at("s"), x.sum(1, false, at::kLong).to(type));
      expectClose("max", outputs.at("hi"), x.amax(1));
      expectClose("min", outputs.at("lo"), x.amin(1));
      outputs = runEmmy(source, instance("r", dtype), {{"x", small}});
      expectClose("prod", outputs.at("p"), small.to(at::kLong).prod(1).to(type));
    }
}

TEST_CASE("a sum of bools counts in i64", "[oracle]") {
  const std::string source = R"(
kernel count(x: f32[N, D]) -> (positive: i64[N], any: bool[N], all: bool[N]) {
    positive[n] = sum[d](x[n, d] > 0)
    any[n]      = max[d](x[n, d] > 0)
    all[n]      = min[d](x[n, d] > 0)
}
)";
  for (const auto& shape : kMatrixShapes) {
    INFO(shapeName(shape));
    at::Tensor x = randomTensor(DType::F32, shape, 8);
    expectKernelMatches(source, "count", {{"x", x}},
                        {{"positive", (x > 0).sum(1)}, {"any", (x > 0).any(1)}, {"all", (x > 0).all(1)}});
  }
}

}  // namespace
}  // namespace emmy::oracle
