// Index-form subscripts against ATen: affine reads (transposes, flips, strides, shifts), reads guarded by
// `where`, `pad(x, v)[...]` stencils, and kernels with several outputs.
#include <cstdlib>

#include "tests/oracle/oracle.h"

namespace emmy::oracle {
namespace {

const std::vector<int64_t> kLengths = {1, 3, 7, 17};
const std::vector<std::vector<int64_t>> kMatrixShapes = {{1, 1}, {1, 7}, {3, 1}, {3, 5}, {7, 17}};

// t[index] = x[index + offsets] inside x and `fill` outside: what `pad(x, fill)[i + a, j + b]` reads.
at::Tensor shifted(const at::Tensor& x, const std::vector<int64_t>& offsets, double fill) {
  std::vector<int64_t> padding;  // ATen lists the last dimension first
  for (size_t d = offsets.size(); d-- > 0;) padding.insert(padding.end(), {std::abs(offsets[d]), std::abs(offsets[d])});
  at::Tensor padded = at::constant_pad_nd(x, padding, fill);
  for (size_t d = 0; d < offsets.size(); ++d)
    padded = padded.narrow(d, std::abs(offsets[d]) + offsets[d], x.size(d));
  return padded;
}

// The values of index `d` over a tensor of `shape`, broadcastable against it.
at::Tensor indexValues(const std::vector<int64_t>& shape, size_t d) {
  std::vector<int64_t> view(shape.size(), 1);
  view[d] = shape[d];
  return at::arange(shape[d], at::kLong).reshape(view);
}

TEST_CASE("transposed and flipped reads", "[oracle]") {
  const std::string source = R"(
kernel t<T: f16 | bf16 | f32>(x: T[M, N]) -> (y: T[N, M], z: T[N, M], flipped: T[M, N]) {
    y[j, i]       = x[i, j]
    z[i, j]       = x[j, i]
    flipped[i, j] = x[M - 1 - i, N - 1 - j]
}
)";
  for (DType dtype : kFloatTypes)
    for (const auto& shape : kMatrixShapes) {
      INFO(dtypeName(dtype) << shapeName(shape));
      at::Tensor x = randomTensor(dtype, shape, 1);
      expectKernelMatches(source, instance("t", dtype), {{"x", x}},
                          {{"y", x.t()}, {"z", x.t()}, {"flipped", x.flip({0, 1})}});
    }
}

TEST_CASE("strided and shifted reads within literal sizes", "[oracle]") {
  const std::string source = R"(
kernel s<T: f16 | bf16 | f32>(x: T[N, 6], v: T[8]) -> (odd: T[N, 3], thirds: T[3], pairs: T[4], inner: T[N, 4]) {
    odd[n, i] = x[n, 2 * i + 1]
    thirds[i] = v[3 * i]
    pairs[i]  = v[2 * i + 1] - v[2 * i]
    middle[n < N, i < 4] = x[n, i + 1]
    inner[n, i] = middle[n, i] * 2
}
)";
  for (DType dtype : kFloatTypes)
    for (int64_t n : kLengths) {
      INFO(dtypeName(dtype) << ", N = " << n);
      at::Tensor x = randomTensor(dtype, {n, 6}, 2), v = randomTensor(dtype, {8}, 3);
      expectKernelMatches(source, instance("s", dtype), {{"x", x}, {"v", v}},
                          {{"odd", x.slice(1, 1, 6, 2)}, {"thirds", v.slice(0, 0, 8, 3)},
                           {"pairs", v.slice(0, 1, 8, 2) - v.slice(0, 0, 8, 2)},
                           {"inner", x.slice(1, 1, 5) * 2}});
    }
}

TEST_CASE("reads outside the tensor guarded by where", "[oracle]") {
  const std::string source = R"(
kernel g<T: f16 | bf16 | f32>(x: T[N], m: T[R, C]) -> (back: T[N], central: T[N], diagonal: T[R, C]) {
    back[i]        = where(i > 0, x[i] - x[i - 1], x[i])
    central[i]     = where(i > 0 and i < N - 1, (x[i + 1] - x[i - 1]) * 0.5, 0)
    diagonal[i, j] = where(i >= 1 and j + 1 < C, m[i - 1, j + 1], -1)
}
)";
  for (DType dtype : kFloatTypes)
    for (int64_t n : kLengths)
      for (const auto& shape : kMatrixShapes) {
        INFO(dtypeName(dtype) << "[" << n << "] and " << shapeName(shape));
        at::Tensor x = randomTensor(dtype, {n}, 4), m = randomTensor(dtype, shape, 5);
        at::Tensor i = at::arange(n, at::kLong);
        at::Tensor central = (shifted(x, {1}, 0) - shifted(x, {-1}, 0)) * 0.5;
        at::Tensor inside = (indexValues(shape, 0) >= 1) & (indexValues(shape, 1) + 1 < shape[1]);
        expectKernelMatches(source, instance("g", dtype), {{"x", x}, {"m", m}},
                            {{"back", at::where(i > 0, x - shifted(x, {-1}, 0), x)},
                             {"central", at::where((i > 0) & (i < n - 1), central, at::zeros_like(x))},
                             {"diagonal", at::where(inside, shifted(m, {-1, 1}, 0), at::full_like(m, -1))}});
      }
}

TEST_CASE("pad(x, v) reads v outside the tensor", "[oracle]") {
  const std::string source = R"(
kernel p<T: f16 | bf16 | f32>(x: T[R, C], v: T[N], w: T[3]) -> (y: T[R, C], conv: T[N]) {
    y[i, j] = pad(x, 0)[i - 1, j + 1] + pad(x, -1.5)[i + 2, j]
    conv[i] = sum[k](pad(v, 0)[i + k - 1] * w[k])
}
)";
  for (DType dtype : kFloatTypes)
    for (const auto& shape : kMatrixShapes) {
      int64_t n = shape[1];
      INFO(dtypeName(dtype) << shapeName(shape) << " and [" << n << "]");
      at::Tensor x = randomTensor(dtype, shape, 6), v = randomTensor(dtype, {n}, 7), w = randomTensor(dtype, {3}, 8);
      // Each product is rounded to T, then the sum accumulates in f32 and is rounded once.
      at::Tensor conv = at::zeros({n}, at::kFloat);
      for (int64_t k = 0; k < 3; ++k) conv = conv + f32(shifted(v, {k - 1}, 0) * w[k]);
      expectKernelMatches(source, instance("p", dtype), {{"x", x}, {"v", v}, {"w", w}},
                          {{"y", shifted(x, {-1, 1}, 0) + shifted(x, {2, 0}, -1.5)}, {"conv", roundTo(conv, dtype)}});
    }
}

TEST_CASE("several outputs, one read by the next", "[oracle]") {
  const std::string source = R"(
kernel stats<T: f16 | bf16 | f32>(x: T[N, D]) -> (mu: T[N], centred: T[N, D], above: i64[N]) {
    mu[n]         = mean[d](x[n, d])
    centred[n, d] = x[n, d] - mu[n]
    above[n]      = sum[d](x[n, d] > mu[n])
}
)";
  for (DType dtype : kFloatTypes)
    for (const auto& shape : kMatrixShapes) {
      INFO(dtypeName(dtype) << shapeName(shape));
      at::Tensor x = randomTensor(dtype, shape, 9);
      at::Tensor mu = roundTo(f32(x).mean(1), dtype);
      // A count flips with the last bit of mu, so centred and above are checked against Emmy's mu, which
      // is itself checked against ATen's.
      std::map<std::string, Buffer> outputs = runEmmy(source, instance("stats", dtype), {{"x", x}});
      at::Tensor emmyMu = toTorch(outputs.at("mu"));
      expectClose("mu", outputs.at("mu"), mu);
      expectClose("centred", outputs.at("centred"), x - emmyMu.unsqueeze(1));
      expectClose("above", outputs.at("above"), (x > emmyMu.unsqueeze(1)).sum(1));
    }
}

}  // namespace
}  // namespace emmy::oracle
