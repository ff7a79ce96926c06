// Calls against ATen: fn definitions inlined, kernel calls expanded in place (several results too),
// generic kernels per type, every kernel and fn of the standard library, and the examples.
#include <cmath>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "tests/oracle/oracle.h"

namespace emmy::oracle {
namespace {

const std::vector<std::vector<int64_t>> kMatrixShapes = {{1, 1}, {1, 7}, {3, 1}, {3, 5}, {7, 17}};

Value f32Scalar(double value) { return Value::ofFloat(DType::F32, value); }

// ---------------------------------------------------------------------------------------------------
// The computations of the standard library in ATen, in f32; the tests round the result to T once.

at::Tensor rmsNorm(const at::Tensor& x, const at::Tensor& g, double eps) {
  return x * at::rsqrt((x * x).mean(-1, true) + eps) * g;
}

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale, bool causal) {
  at::Tensor logits = at::matmul(q, k.transpose(-1, -2)) * scale;
  if (causal) {
    int64_t s = q.size(-2);
    logits = logits.masked_fill(at::ones({s, s}, at::kBool).triu(1), -INFINITY);
  }
  return at::matmul(at::softmax(logits, -1), v);
}

// ---------------------------------------------------------------------------------------------------
TEST_CASE("fn definitions are inlined, also when they call each other", "[oracle]") {
  const std::string source = R"(
fn square(x) = x * x
fn poly(x) = square(x) + 2 * x + 1
fn lerp(a, b, t) = a + (b - a) * t

kernel f<T: f16 | bf16 | f32>(x: T[N, D], y: T[D]) -> (p: T[N, D], q: T[N, D], r: T[N, D]) {
    p[n, d] = poly(x[n, d])
    q       = lerp(x, y, 0.25)
    r       = poly(x) - square(y)
}
)";
  for (DType dtype : kFloatTypes)
    for (const auto& shape : kMatrixShapes) {
      INFO(dtypeName(dtype) << shapeName(shape));
      at::Tensor x = randomTensor(dtype, shape, 1), y = randomTensor(dtype, {shape[1]}, 2);
      at::Tensor poly = x * x + 2 * x + 1;
      expectKernelMatches(source, instance("f", dtype), {{"x", x}, {"y", y}},
                          {{"p", poly}, {"q", x + (y - x) * 0.25}, {"r", poly - y * y}});
    }
}

TEST_CASE("kernel calls are expanded in place, with several results and renamed sizes", "[oracle]") {
  const std::string source = R"(
kernel moments<T: f16 | bf16 | f32>(x: T[R, C]) -> (mu: f32[R], var: f32[R]) {
    mu[r]  = mean[c](f32(x[r, c]))
    var[r] = mean[c]((f32(x[r, c]) - mu[r]) * (f32(x[r, c]) - mu[r]))
}

kernel centre<T: f16 | bf16 | f32>(x: T[R, C]) -> (y: T[R, C]) {
    y = x - max(x, axis=1, keepdim=true)
}

kernel caller<T: f16 | bf16 | f32>(x: T[N, D]) -> (y: T[N, D], spread: f32[N], z: T[N, D]) {
    (mu, var) = moments(x)
    y         = T((x - unsqueeze(mu, 1)) * rsqrt(unsqueeze(var, 1) + 1e-5))
    spread    = sqrt(var)
    z         = centre(x) * 2 + centre(centre(x))
}
)";
  for (DType dtype : kFloatTypes)
    for (const auto& shape : kMatrixShapes) {
      INFO(dtypeName(dtype) << shapeName(shape));
      at::Tensor x = randomTensor(dtype, shape, 3);
      at::Tensor mu = f32(x).mean(1, true), var = ((f32(x) - mu) * (f32(x) - mu)).mean(1, true);
      at::Tensor centred = x - x.amax(1, true);  // its row maximum is 0, so centring it again changes nothing
      expectKernelMatches(source, instance("caller", dtype), {{"x", x}},
                          {{"y", roundTo((f32(x) - mu) * at::rsqrt(var + 1e-5), dtype)},
                           {"spread", var.sqrt().squeeze(1)},
                           {"z", centred * 2 + centred}});
    }
}

TEST_CASE("a generic kernel calls standard-library kernels, which take its type", "[oracle]") {
  const std::string source = R"(
import nn
import linalg

kernel block<T: f16 | bf16 | f32>(x: T[N, D], g: T[D], w: T[D, D], a: T[B, N, D]) -> (y: T[N, D], c: T[B, N, N]) {
    h = nn.rmsnorm(x, g, eps=1e-3)
    y = linalg.matmul(h, w) + x
    c = linalg.bmm(a, transpose(a, 1, 2)) + 1
}
)";
  for (DType dtype : kFloatTypes)
    for (const auto& shape : kMatrixShapes) {
      INFO(dtypeName(dtype) << shapeName(shape));
      int64_t n = shape[0], d = shape[1];
      at::Tensor x = randomTensor(dtype, {n, d}, 4), g = randomTensor(dtype, {d}, 5);
      at::Tensor w = randomTensor(dtype, {d, d}, 6), a = randomTensor(dtype, {2, n, d}, 7);
      at::Tensor h = roundTo(rmsNorm(f32(x), f32(g), 1e-3), dtype);
      at::Tensor product = roundTo(at::bmm(f32(a), f32(a).transpose(1, 2)), dtype);
      expectKernelMatches(source, instance("block", dtype), {{"x", x}, {"g", g}, {"w", w}, {"a", a}},
                          {{"y", roundTo(at::mm(f32(h), f32(w)), dtype) + x}, {"c", product + 1}});
    }
}

TEST_CASE("the fns of nn: the activations of torch.nn.functional", "[oracle]") {
  const std::string source = R"(
import nn

kernel f<T: f16 | bf16 | f32>(x: T[N]) -> (a: T[N], b: T[N], c: T[N], d: T[N], e: T[N], g: T[N], h: T[N], k: T[N], l: T[N]) {
    a[i] = T(nn.gelu_tanh(f32(x[i])))
    b[i] = T(nn.softplus(f32(x[i])))
    c[i] = T(nn.mish(f32(x[i])))
    d[i] = T(nn.elu(f32(x[i]), 0.7))
    e[i] = T(nn.selu(f32(x[i])))
    g[i] = T(nn.celu(f32(x[i]), 1.3))
    h[i] = T(nn.hardsigmoid(f32(x[i])))
    k[i] = T(nn.hardswish(f32(x[i])))
    l[i] = T(nn.logsigmoid(f32(x[i])))
}
)";
  for (DType dtype : kFloatTypes)
    for (int64_t n : {1, 3, 7, 17})
      for (double scale : {1.0, 30.0}) {  // 30: past softplus's threshold and the clamps of the hard ones
        INFO(dtypeName(dtype) << "[" << n << "] times " << scale);
        at::Tensor x = roundTo(f32(randomTensor(dtype, {n}, 8)) * scale, dtype);
        at::Tensor wide = f32(x);
        expectKernelMatches(source, instance("f", dtype), {{"x", x}},
                            {{"a", roundTo(at::gelu(wide, "tanh"), dtype)},
                             {"b", roundTo(at::softplus(wide), dtype)},
                             {"c", roundTo(at::mish(wide), dtype)},
                             {"d", roundTo(at::elu(wide, 0.7), dtype)},
                             {"e", roundTo(at::selu(wide), dtype)},
                             {"g", roundTo(at::celu(wide, 1.3), dtype)},
                             {"h", roundTo(at::hardsigmoid(wide), dtype)},
                             {"k", roundTo(at::hardswish(wide), dtype)},
                             {"l", roundTo(at::log_sigmoid(wide), dtype)}});
      }
}

// ---------------------------------------------------------------------------------------------------
// The kernels of the standard library, selected directly from their module.

TEST_CASE("nn.softmax and nn.log_softmax", "[oracle]") {
  std::string nn = sourceFile("stdlib/nn.emmy");
  for (DType dtype : kFloatTypes)
    for (const auto& shape : kMatrixShapes) {
      INFO(dtypeName(dtype) << shapeName(shape));
      at::Tensor x = randomTensor(dtype, shape, 9);
      expectKernelMatches(nn, instance("softmax", dtype), {{"x", x}}, {{"y", roundTo(at::softmax(f32(x), -1), dtype)}});
      expectKernelMatches(nn, instance("log_softmax", dtype), {{"x", x}},
                          {{"y", roundTo(at::log_softmax(f32(x), -1), dtype)}});
    }
}

TEST_CASE("nn.layernorm and nn.rmsnorm, with eps left out and given", "[oracle]") {
  std::string nn = sourceFile("stdlib/nn.emmy");
  for (DType dtype : kFloatTypes)
    for (const auto& shape : kMatrixShapes) {
      INFO(dtypeName(dtype) << shapeName(shape));
      int64_t d = shape[1];
      at::Tensor x = randomTensor(dtype, shape, 10), w = randomTensor(dtype, {d}, 11), b = randomTensor(dtype, {d}, 12);
      auto layerNorm = [&](double eps) { return roundTo(at::layer_norm(f32(x), {d}, f32(w), f32(b), eps), dtype); };
      expectKernelMatches(nn, instance("layernorm", dtype), {{"x", x}, {"w", w}, {"b", b}}, {{"y", layerNorm(1e-5)}});
      expectKernelMatches(nn, instance("layernorm", dtype), {{"x", x}, {"w", w}, {"b", b}}, {{"y", layerNorm(0.5)}},
                          {{"eps", f32Scalar(0.5)}});
      expectKernelMatches(nn, instance("rmsnorm", dtype), {{"x", x}, {"g", w}},
                          {{"y", roundTo(rmsNorm(f32(x), f32(w), 1e-6), dtype)}});
      expectKernelMatches(nn, instance("rmsnorm", dtype), {{"x", x}, {"g", w}},
                          {{"y", roundTo(rmsNorm(f32(x), f32(w), 0.5), dtype)}}, {{"eps", f32Scalar(0.5)}});
    }
}

TEST_CASE("nn.linear and nn.mlp", "[oracle]") {
  std::string nn = sourceFile("stdlib/nn.emmy");
  const std::vector<std::vector<int64_t>> sizes = {{1, 1, 1}, {3, 5, 7}, {7, 17, 3}, {2, 1, 5}};  // N, D (IN), H (OUT)
  for (DType dtype : kFloatTypes)
    for (const auto& size : sizes) {
      int64_t n = size[0], d = size[1], h = size[2];
      INFO(dtypeName(dtype) << " N=" << n << " D=" << d << " H=" << h);
      at::Tensor x = randomTensor(dtype, {n, d}, 13);
      at::Tensor w1 = randomTensor(dtype, {h, d}, 14), b1 = randomTensor(dtype, {h}, 15);
      at::Tensor w2 = randomTensor(dtype, {d, h}, 16), b2 = randomTensor(dtype, {d}, 17);
      auto linear = [dtype](const at::Tensor& in, const at::Tensor& w, const at::Tensor& b) {
        return roundTo(at::linear(f32(in), f32(w), f32(b)), dtype);
      };
      expectKernelMatches(nn, instance("linear", dtype), {{"x", x}, {"w", w1}, {"b", b1}}, {{"y", linear(x, w1, b1)}});
      // mlp calls linear twice: each result, and the gelu between them, is rounded to T.
      at::Tensor hidden = roundTo(at::gelu(f32(linear(x, w1, b1))), dtype);
      expectKernelMatches(nn, instance("mlp", dtype), {{"x", x}, {"w1", w1}, {"b1", b1}, {"w2", w2}, {"b2", b2}},
                          {{"y", linear(hidden, w2, b2)}});
    }
}

TEST_CASE("nn.attention and nn.causal_attention", "[oracle]") {
  std::string nn = sourceFile("stdlib/nn.emmy");
  struct Sizes { int64_t b, h, s, l, e; };
  const std::vector<Sizes> sizes = {{1, 1, 1, 1, 1}, {2, 3, 5, 7, 4}, {1, 2, 7, 3, 17}, {2, 1, 3, 1, 5}};
  for (DType dtype : kFloatTypes)
    for (const Sizes& size : sizes) {
      INFO(dtypeName(dtype) << " B=" << size.b << " H=" << size.h << " S=" << size.s << " L=" << size.l
                            << " E=" << size.e);
      double scale = 1 / std::sqrt(static_cast<double>(size.e));
      at::Tensor q = randomTensor(dtype, {size.b, size.h, size.s, size.e}, 18);
      at::Tensor k = randomTensor(dtype, {size.b, size.h, size.l, size.e}, 19);
      at::Tensor v = randomTensor(dtype, {size.b, size.h, size.l, size.e}, 20);
      ScalarMap scalars = {{"scale", f32Scalar(scale)}};
      expectKernelMatches(nn, instance("attention", dtype), {{"q", q}, {"k", k}, {"v", v}},
                          {{"o", roundTo(attention(f32(q), f32(k), f32(v), scale, false), dtype)}}, scalars);
      at::Tensor kSelf = randomTensor(dtype, {size.b, size.h, size.s, size.e}, 21);
      at::Tensor vSelf = randomTensor(dtype, {size.b, size.h, size.s, size.e}, 22);
      expectKernelMatches(nn, instance("causal_attention", dtype), {{"q", q}, {"k", kSelf}, {"v", vSelf}},
                          {{"o", roundTo(attention(f32(q), f32(kSelf), f32(vSelf), scale, true), dtype)}}, scalars);
    }
}

// The convolutions of nn against ATen's, each (rank, integer parameters, sizes) in every dtype; the
// sizes are ragged (odd spatial sizes, strides and paddings that do not divide them).
TEST_CASE("nn.conv1d, conv2d and conv3d: stride, padding, dilation and groups, for every dim or one", "[oracle]") {
  std::string nn = sourceFile("stdlib/nn.emmy");
  struct Case {
    int rank;
    std::string integers;           // the instance's integer parameters, as --kernel writes them
    std::vector<int64_t> stride, padding, dilation;
    int64_t groups, n, c, out;
    std::vector<int64_t> spatial, window;
  };
  const std::vector<Case> cases = {
      {1, "", {1}, {0}, {1}, 1, 2, 3, 5, {17}, {4}},
      {1, ", stride=3, padding=2, dilation=2, groups=3", {3}, {2}, {2}, 3, 1, 6, 9, {11}, {3}},
      {2, "", {1, 1}, {0, 0}, {1, 1}, 1, 2, 3, 4, {7, 9}, {3, 2}},
      {2, ", STRIDE=2, PAD=1", {2, 2}, {1, 1}, {1, 1}, 1, 2, 3, 5, {9, 8}, {3, 3}},
      {2, ", stride=2, padding=1, dilation=2, groups=2, STRIDE_W=1, PAD_H=0", {2, 1}, {0, 1}, {2, 2}, 2, 1, 4, 6,
       {11, 7}, {2, 3}},
      {2, ", groups=4", {1, 1}, {0, 0}, {1, 1}, 4, 1, 4, 4, {1, 5}, {1, 3}},  // depthwise
      {3, ", stride=2, padding=1", {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, 1, 1, 2, 3, {5, 4, 7}, {3, 2, 3}},
      {3, ", DILATION_D=2, PAD_W=2", {1, 1, 1}, {0, 0, 2}, {2, 1, 1}, 1, 2, 2, 2, {5, 3, 4}, {2, 2, 3}},
  };
  for (DType dtype : kFloatTypes)
    for (const Case& c : cases) {
      std::string selector = fmt::format("conv{}d<{}{}>", c.rank, dtypeName(dtype), c.integers);
      INFO(selector);
      std::vector<int64_t> xShape = {c.n, c.c}, wShape = {c.out, c.c / c.groups};
      xShape.insert(xShape.end(), c.spatial.begin(), c.spatial.end());
      wShape.insert(wShape.end(), c.window.begin(), c.window.end());
      at::Tensor x = randomTensor(dtype, xShape, 30), w = randomTensor(dtype, wShape, 31), b = randomTensor(dtype, {c.out}, 32);
      at::Tensor expected = c.rank == 1 ? at::conv1d(f32(x), f32(w), f32(b), c.stride, c.padding, c.dilation, c.groups)
                            : c.rank == 2 ? at::conv2d(f32(x), f32(w), f32(b), c.stride, c.padding, c.dilation, c.groups)
                                          : at::conv3d(f32(x), f32(w), f32(b), c.stride, c.padding, c.dilation, c.groups);
      expectKernelMatches(nn, selector, {{"x", x}, {"w", w}, {"b", b}}, {{"y", roundTo(expected, dtype)}});
    }
}

TEST_CASE("nn.conv_transpose1d, 2d and 3d: stride, padding, output_padding, groups and dilation", "[oracle]") {
  std::string nn = sourceFile("stdlib/nn.emmy");
  struct Case {
    int rank;
    std::string integers;
    std::vector<int64_t> stride, padding, outputPadding, dilation;
    int64_t groups, n, c, out;
    std::vector<int64_t> spatial, window;
  };
  const std::vector<Case> cases = {
      {1, "", {1}, {0}, {0}, {1}, 1, 2, 3, 5, {7}, {3}},
      {1, ", stride=3, padding=1, output_padding=2, groups=2", {3}, {1}, {2}, {1}, 2, 1, 4, 6, {5}, {4}},
      {2, ", stride=2, padding=1, output_padding=1", {2, 2}, {1, 1}, {1, 1}, {1, 1}, 1, 2, 3, 4, {5, 4}, {3, 3}},
      {2, ", STRIDE_H=3, DILATION=2, PAD_W=1, groups=3", {3, 1}, {0, 1}, {0, 0}, {2, 2}, 3, 1, 3, 6, {4, 6}, {2, 3}},
      {3, ", stride=2, padding=1", {2, 2, 2}, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, 1, 1, 2, 3, {3, 4, 2}, {3, 2, 3}},
  };
  for (DType dtype : kFloatTypes)
    for (const Case& c : cases) {
      std::string selector = fmt::format("conv_transpose{}d<{}{}>", c.rank, dtypeName(dtype), c.integers);
      INFO(selector);
      std::vector<int64_t> xShape = {c.n, c.c}, wShape = {c.c, c.out / c.groups};
      xShape.insert(xShape.end(), c.spatial.begin(), c.spatial.end());
      wShape.insert(wShape.end(), c.window.begin(), c.window.end());
      at::Tensor x = randomTensor(dtype, xShape, 40), w = randomTensor(dtype, wShape, 41), b = randomTensor(dtype, {c.out}, 42);
      auto transposed = c.rank == 1 ? at::conv_transpose1d : c.rank == 2 ? at::conv_transpose2d : at::conv_transpose3d;
      at::Tensor expected = transposed(f32(x), f32(w), f32(b), c.stride, c.padding, c.outputPadding, c.groups, c.dilation);
      expectKernelMatches(nn, selector, {{"x", x}, {"w", w}, {"b", b}}, {{"y", roundTo(expected, dtype)}});
    }
}

TEST_CASE("nn.max_pool and nn.avg_pool 1d, 2d and 3d: window, stride, padding, dilation, count_include_pad, ceil_mode",
          "[oracle]") {
  std::string nn = sourceFile("stdlib/nn.emmy");
  struct Case {
    int rank;
    std::string integers;
    std::vector<int64_t> kernel, stride, padding, dilation;
    bool ceil;
    std::vector<int64_t> spatial;
  };
  // ceil_mode: partial last windows, clipped by the padded input in the average's divisor, and (stride 3,
  // window 2, padding 1 over 4 or 7) a last window that would start in the padding, which is dropped.
  const std::vector<Case> cases = {
      {1, "", {2}, {2}, {0}, {1}, false, {9}},
      {1, ", kernel_size=3, stride=2, padding=1", {3}, {2}, {1}, {1}, false, {10}},
      {2, ", kernel_size=3, stride=2, padding=1", {3, 3}, {2, 2}, {1, 1}, {1, 1}, false, {9, 8}},
      {2, ", KERNEL_H=2, KERNEL_W=3, STRIDE=1, PAD_W=1", {2, 3}, {1, 1}, {0, 1}, {1, 1}, false, {5, 4}},
      {3, ", kernel_size=2, padding=1", {2, 2, 2}, {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, false, {5, 4, 3}},
      {1, ", kernel_size=3, stride=2, padding=1, ceil_mode=1", {3}, {2}, {1}, {1}, true, {10}},
      {1, ", kernel_size=2, stride=3, padding=1, ceil_mode=1", {2}, {3}, {1}, {1}, true, {4}},
      {2, ", KERNEL_H=2, KERNEL_W=3, STRIDE=2, PAD_W=1, ceil_mode=1", {2, 3}, {2, 2}, {0, 1}, {1, 1}, true, {6, 7}},
      {2, ", kernel_size=2, stride=3, padding=1, ceil_mode=1", {2, 2}, {3, 3}, {1, 1}, {1, 1}, true, {7, 5}},
      {3, ", kernel_size=3, stride=2, padding=1, ceil_mode=1", {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, true, {4, 5, 6}},
  };
  for (DType dtype : kFloatTypes)
    for (const Case& c : cases) {
      std::vector<int64_t> shape = {2, 3};
      shape.insert(shape.end(), c.spatial.begin(), c.spatial.end());
      at::Tensor x = randomTensor(dtype, shape, 33);
      std::string max = fmt::format("max_pool{}d<{}{}>", c.rank, dtypeName(dtype), c.integers);
      INFO(max);
      at::Tensor maxExpected = c.rank == 1 ? at::max_pool1d(f32(x), c.kernel, c.stride, c.padding, c.dilation, c.ceil)
                               : c.rank == 2 ? at::max_pool2d(f32(x), c.kernel, c.stride, c.padding, c.dilation, c.ceil)
                                             : at::max_pool3d(f32(x), c.kernel, c.stride, c.padding, c.dilation, c.ceil);
      expectKernelMatches(nn, max, {{"x", x}}, {{"y", roundTo(maxExpected, dtype)}});
      for (bool countIncludePad : {true, false}) {
        std::string avg = fmt::format("avg_pool{}d<{}{}{}>", c.rank, dtypeName(dtype), c.integers,
                                      countIncludePad ? "" : ", count_include_pad=0");
        INFO(avg);
        at::Tensor avgExpected =
            c.rank == 1 ? at::avg_pool1d(f32(x), c.kernel, c.stride, c.padding, c.ceil, countIncludePad)
            : c.rank == 2 ? at::avg_pool2d(f32(x), c.kernel, c.stride, c.padding, c.ceil, countIncludePad)
                          : at::avg_pool3d(f32(x), c.kernel, c.stride, c.padding, c.ceil, countIncludePad);
        expectKernelMatches(nn, avg, {{"x", x}}, {{"y", roundTo(avgExpected, dtype)}});
      }
    }
}

TEST_CASE("nn.batchnorm (inference), nn.groupnorm and nn.instancenorm", "[oracle]") {
  std::string nn = sourceFile("stdlib/nn.emmy");
  const std::vector<std::vector<int64_t>> shapes = {{1, 1, 1, 1}, {2, 6, 5, 3}, {3, 4, 1, 7}};
  for (DType dtype : kFloatTypes)
    for (const auto& shape : shapes) {
      INFO(dtypeName(dtype) << shapeName(shape));
      int64_t channels = shape[1];
      at::Tensor x = randomTensor(dtype, shape, 34), w = randomTensor(dtype, {channels}, 35);
      at::Tensor b = randomTensor(dtype, {channels}, 36), mean = randomTensor(dtype, {channels}, 37);
      at::Tensor var = randomTensor(dtype, {channels}, 38, Range::Positive);
      expectKernelMatches(nn, instance("batchnorm", dtype), {{"x", x}, {"mean", mean}, {"var", var}, {"w", w}, {"b", b}},
                          {{"y", roundTo(at::batch_norm(f32(x), f32(w), f32(b), f32(mean), f32(var), false, 0.1, 1e-5,
                                                        false),
                                         dtype)}});
      expectKernelMatches(nn, instance("instancenorm", dtype), {{"x", x}},
                          {{"y", roundTo(at::instance_norm(f32(x), {}, {}, {}, {}, true, 0.1, 1e-5, false), dtype)}});
      for (int64_t groups : {int64_t{1}, channels}) {
        std::string selector = fmt::format("groupnorm<{}, num_groups={}>", dtypeName(dtype), groups);
        INFO(selector);
        expectKernelMatches(nn, selector, {{"x", x}, {"w", w}, {"b", b}},
                            {{"y", roundTo(at::group_norm(f32(x), groups, f32(w), f32(b), 1e-5, false), dtype)}});
      }
      if (channels % 2 == 0)
        expectKernelMatches(nn, fmt::format("groupnorm<{}, GROUPS=2>", dtypeName(dtype)), {{"x", x}, {"w", w}, {"b", b}},
                            {{"y", roundTo(at::group_norm(f32(x), 2, f32(w), f32(b), 1e-5, false), dtype)}});
    }
}

TEST_CASE("linalg.matmul, linalg.bmm and linalg.transpose", "[oracle]") {
  std::string linalg = sourceFile("stdlib/linalg.emmy");
  const std::vector<std::vector<int64_t>> sizes = {{1, 1, 1}, {3, 17, 5}, {7, 1, 3}, {1, 5, 1}};  // M, K, N
  for (DType dtype : kFloatTypes)
    for (const auto& size : sizes) {
      int64_t m = size[0], k = size[1], n = size[2];
      INFO(dtypeName(dtype) << " M=" << m << " K=" << k << " N=" << n);
      at::Tensor a = randomTensor(dtype, {m, k}, 23), b = randomTensor(dtype, {k, n}, 24);
      at::Tensor batchA = randomTensor(dtype, {3, m, k}, 25), batchB = randomTensor(dtype, {3, k, n}, 26);
      expectKernelMatches(linalg, instance("matmul", dtype), {{"a", a}, {"b", b}},
                          {{"c", roundTo(at::mm(f32(a), f32(b)), dtype)}});
      expectKernelMatches(linalg, instance("bmm", dtype), {{"a", batchA}, {"b", batchB}},
                          {{"c", roundTo(at::bmm(f32(batchA), f32(batchB)), dtype)}});
      expectKernelMatches(linalg, instance("transpose", dtype), {{"x", a}}, {{"y", a.t()}});
    }
}

// ---------------------------------------------------------------------------------------------------
// The examples, each kernel against its ATen equivalent.

const std::set<std::string> kCheckedExamples = {"attention_variants.emmy", "gelu.emmy", "layernorm.emmy",
                                                "linear_relu.emmy", "matmul.emmy", "residual_mlp.emmy",
                                                "softmax.emmy", "standardize.emmy", "stencil.emmy", "swiglu.emmy"};

TEST_CASE("every example has an oracle test below", "[oracle]") {
  std::set<std::string> examples;
  for (const auto& entry : std::filesystem::directory_iterator(EMMY_SOURCE_DIR "/examples"))
    if (entry.path().extension() == ".emmy") examples.insert(entry.path().filename().string());
  CHECK(examples == kCheckedExamples);
}

TEST_CASE("examples: elementwise, softmax, layernorm, standardize", "[oracle]") {
  for (const auto& shape : kMatrixShapes) {
    INFO(shapeName(shape));
    int64_t d = shape[1];
    at::Tensor x = randomTensor(DType::F32, shape, 27), b = randomTensor(DType::F32, {d}, 28);
    at::Tensor w = randomTensor(DType::F32, {d}, 29);
    expectKernelMatches(sourceFile("examples/gelu.emmy"), "bias_gelu", {{"x", x}, {"b", b}},
                        {{"exact", at::gelu(x + b)}, {"approx", at::gelu(x + b, "tanh")}});
    expectKernelMatches(sourceFile("examples/softmax.emmy"), "softmax", {{"x", x}}, {{"y", at::softmax(x, -1)}});
    expectKernelMatches(sourceFile("examples/layernorm.emmy"), "layernorm", {{"x", x}, {"w", w}, {"b", b}},
                        {{"y", at::layer_norm(x, {d}, w, b, 1e-5)}});
    expectKernelMatches(sourceFile("examples/layernorm.emmy"), "layernorm", {{"x", x}, {"w", w}, {"b", b}},
                        {{"y", at::layer_norm(x, {d}, w, b, 0.25)}}, {{"eps", f32Scalar(0.25)}});
    at::Tensor batch = randomTensor(DType::F32, {2, shape[0], d}, 30);
    at::Tensor centred = batch - batch.mean(-1, true);
    expectKernelMatches(sourceFile("examples/standardize.emmy"), "standardize", {{"x", batch}},
                        {{"y", centred / (centred * centred).mean(-1, true).add(1e-5).sqrt()}});
  }
}

TEST_CASE("examples: matmul, linear_relu, residual_mlp", "[oracle]") {
  const std::vector<std::vector<int64_t>> sizes = {{1, 1, 1}, {3, 17, 5}, {7, 1, 3}, {2, 5, 7}};
  for (const auto& size : sizes) {
    int64_t m = size[0], k = size[1], n = size[2];
    INFO("sizes " << shapeName(size));
    at::Tensor a = randomTensor(DType::F32, {m, k}, 31), b = randomTensor(DType::F32, {k, n}, 32);
    expectKernelMatches(sourceFile("examples/matmul.emmy"), "matmul", {{"A", a}, {"B", b}}, {{"C", at::mm(a, b)}});

    at::Tensor w = randomTensor(DType::F32, {n, k}, 33), bias = randomTensor(DType::F32, {n}, 34);
    expectKernelMatches(sourceFile("examples/linear_relu.emmy"), "linear_relu", {{"x", a}, {"w", w}, {"b", bias}},
                        {{"y", at::relu(at::linear(a, w, bias))}});

    at::Tensor g = randomTensor(DType::F32, {k}, 35);
    at::Tensor w1 = randomTensor(DType::F32, {n, k}, 36), b1 = randomTensor(DType::F32, {n}, 37);
    at::Tensor w2 = randomTensor(DType::F32, {k, n}, 38), b2 = randomTensor(DType::F32, {k}, 39);
    at::Tensor h = rmsNorm(a, g, 1e-6);
    expectKernelMatches(sourceFile("examples/residual_mlp.emmy"), "residual_mlp",
                        {{"x", a}, {"g", g}, {"w1", w1}, {"b1", b1}, {"w2", w2}, {"b2", b2}},
                        {{"y", a + at::linear(at::gelu(at::linear(h, w1, b1)), w2, b2)}});
  }
}

TEST_CASE("examples: stencil and swiglu", "[oracle]") {
  std::string stencil = sourceFile("examples/stencil.emmy");
  for (const auto& shape : kMatrixShapes) {
    INFO(shapeName(shape));
    at::Tensor image = randomTensor(DType::F32, shape, 40), filter = randomTensor(DType::F32, {3, 3}, 41);
    // conv2d is a cross-correlation: out[i, j] = sum img[i + di - 1, j + dj - 1] * k[di, dj].
    at::Tensor convolved = at::conv2d(image.view({1, 1, shape[0], shape[1]}), filter.view({1, 1, 3, 3}), {}, 1, 1);
    expectKernelMatches(stencil, "conv3x3", {{"img", image}, {"k", filter}}, {{"out", convolved.view(shape)}});

    at::Tensor x = image.flatten();
    int64_t n = x.size(0);
    at::Tensor difference = at::zeros_like(x);
    if (n > 2) difference.slice(0, 1, n - 1).copy_((x.slice(0, 2, n) - x.slice(0, 0, n - 2)) * 0.5);
    expectKernelMatches(stencil, "central_difference", {{"x", x}}, {{"dx", difference}});

    for (DType dtype : kFloatTypes) {
      INFO(dtypeName(dtype));
      at::Tensor gate = randomTensor(dtype, shape, 42), up = randomTensor(dtype, shape, 43);
      expectKernelMatches(sourceFile("examples/swiglu.emmy"), instance("swiglu", dtype), {{"gate", gate}, {"up", up}},
                          {{"y", roundTo(at::silu(f32(gate)) * f32(up), dtype)}});
    }
  }
}

TEST_CASE("examples: attention variants (an additive bias, ALiBi, grouped-query heads)", "[oracle]") {
  std::string variants = sourceFile("examples/attention_variants.emmy");
  struct Sizes { int64_t b, h, s, l, e; };
  const std::vector<Sizes> sizes = {{1, 1, 1, 1, 1}, {2, 3, 5, 7, 4}, {1, 2, 37, 3, 17}, {2, 1, 3, 40, 5}};
  auto softmaxTimes = [](const at::Tensor& logits, const at::Tensor& v) { return at::matmul(at::softmax(logits, -1), v); };
  for (const Sizes& size : sizes) {
    INFO("B=" << size.b << " H=" << size.h << " S=" << size.s << " L=" << size.l << " E=" << size.e);
    at::Tensor q = randomTensor(DType::F16, {size.b, size.h, size.s, size.e}, 50);
    at::Tensor k = randomTensor(DType::F16, {size.b, size.h, size.l, size.e}, 51);
    at::Tensor v = randomTensor(DType::F16, {size.b, size.h, size.l, size.e}, 52);
    at::Tensor bias = randomTensor(DType::F32, {size.s, size.l}, 53);
    at::Tensor logits = at::matmul(f32(q), f32(k).transpose(-1, -2)) * 0.125 + bias;
    expectKernelMatches(variants, "biased", {{"q", q}, {"k", k}, {"v", v}, {"bias", bias}},
                        {{"o", roundTo(softmaxTimes(logits, f32(v)), DType::F16)}});
    // ALiBi: slope[h] * (s - l) off each logit, keys l <= s.
    at::Tensor kSelf = randomTensor(DType::F16, {size.b, size.h, size.s, size.e}, 54);
    at::Tensor vSelf = randomTensor(DType::F16, {size.b, size.h, size.s, size.e}, 55);
    at::Tensor slope = randomTensor(DType::F32, {size.h}, 56).abs();
    at::Tensor position = at::arange(size.s, at::kFloat);
    at::Tensor distance = position.unsqueeze(1) - position.unsqueeze(0);
    at::Tensor alibi = at::matmul(f32(q), f32(kSelf).transpose(-1, -2)) * 0.125 - slope.view({size.h, 1, 1}) * distance;
    alibi = alibi.masked_fill(at::ones({size.s, size.s}, at::kBool).triu(1), -INFINITY);
    expectKernelMatches(variants, "alibi", {{"q", q}, {"k", kSelf}, {"v", vSelf}, {"slope", slope}},
                        {{"o", roundTo(softmaxTimes(alibi, f32(vSelf)), DType::F16)}});
    // Grouped-query: 2 query heads on each head of k and v.
    at::Tensor grouped = randomTensor(DType::F16, {size.b, size.h, 2, size.s, size.e}, 57);
    at::Tensor shared = at::matmul(f32(grouped), f32(k).unsqueeze(2).transpose(-1, -2)) * 0.125;
    expectKernelMatches(variants, "grouped", {{"q", grouped}, {"k", k}, {"v", v}},
                        {{"o", roundTo(softmaxTimes(shared, f32(v).unsqueeze(2)), DType::F16)}});
  }
}

}  // namespace
}  // namespace emmy::oracle
