// Whole-tensor form against ATen: broadcasting, `@`, reductions with axis= and keepdim=, views,
// softmax and log_softmax, elementwise functions, `where` and literals on whole tensors.
#include <functional>
#include <limits>

#include <fmt/ranges.h>

#include "tests/oracle/oracle.h"

namespace emmy::oracle {
namespace {

using Dims = std::vector<int64_t>;  // spelled out where ATen would also accept dimension names

const std::vector<std::vector<int64_t>> kCubeShapes = {{1, 1, 1}, {2, 1, 7}, {3, 5, 1}, {3, 7, 5}};

// A float function ATen's CPU kernels lack for f16: computed in f32 and rounded once, as Emmy does.
at::Tensor inF32(const at::Tensor& x, const std::function<at::Tensor(const at::Tensor&)>& function) {
  return roundTo(function(f32(x)), emmyType(x.scalar_type()));
}

struct BinaryShapes {
  std::string left, right, result;  // declared shapes
  std::vector<int64_t> leftShape, rightShape;
};

TEST_CASE("elementwise operators broadcast as in NumPy", "[oracle]") {
  const std::string source = R"(
kernel b(x: $T$X, y: $T$Y) -> (z: $T$Z, w: $T$Z) {
    z = x * y - x
    w = where(x > y, exp(x), y + 0.5)
}
)";
  const std::vector<BinaryShapes> cases = {
      {"[M, 1]", "[1, N]", "[M, N]", {3, 1}, {1, 7}},    {"[M, 1]", "[1, N]", "[M, N]", {1, 1}, {1, 1}},
      {"[M, 1]", "[1, N]", "[M, N]", {7, 1}, {1, 17}},   {"[N]", "[M, N]", "[M, N]", {7}, {3, 7}},
      {"[N]", "[M, N]", "[M, N]", {1}, {1, 1}},          {"[B, 1, N]", "[M, 1]", "[B, M, N]", {2, 1, 5}, {3, 1}},
      {"[1]", "[N]", "[N]", {1}, {17}},                  {"[M, N]", "[M, N]", "[M, N]", {3, 5}, {3, 5}},
      {"[M, N]", "[1]", "[M, N]", {7, 3}, {1}},         {"[]", "[M, N]", "[M, N]", {}, {3, 5}},
      {"[N]", "[]", "[N]", {7}, {}},                     {"[]", "[]", "[]", {}, {}},
  };
  for (const BinaryShapes& shapes : cases)
    for (DType dtype : kFloatTypes) {
      INFO(dtypeName(dtype) << shapeName(shapes.leftShape) << " with " << shapeName(shapes.rightShape));
      at::Tensor x = randomTensor(dtype, shapes.leftShape, 1), y = randomTensor(dtype, shapes.rightShape, 2);
      std::string kernel = substitute(source, {{"$T", dtypeName(dtype)}, {"$X", shapes.left}, {"$Y", shapes.right},
                                               {"$Z", shapes.result}});
      at::Tensor exponential = inF32(x, [](const at::Tensor& t) { return t.exp(); });
      expectKernelMatches(kernel, "b", {{"x", x}, {"y", y}},
                          {{"z", x * y - x}, {"w", at::where(x > y, exponential, y + 0.5)}});
    }
}

TEST_CASE("@ is the matrix product of the last two axes, batched and broadcast", "[oracle]") {
  const std::string source = R"(
kernel mm(a: $T$A, b: $T$B) -> (c: $T$C) {
    c = a @ b
}
)";
  const std::vector<BinaryShapes> cases = {
      {"[M, K]", "[K, N]", "[M, N]", {1, 1}, {1, 1}},
      {"[M, K]", "[K, N]", "[M, N]", {3, 17}, {17, 5}},
      {"[M, K]", "[K, N]", "[M, N]", {7, 1}, {1, 3}},
      {"[M, K]", "[K, N]", "[M, N]", {1, 5}, {5, 1}},
      {"[B, M, K]", "[B, K, N]", "[B, M, N]", {2, 3, 5}, {2, 5, 7}},
      {"[B, M, K]", "[B, K, N]", "[B, M, N]", {1, 1, 1}, {1, 1, 1}},
      {"[B, M, K]", "[K, N]", "[B, M, N]", {3, 7, 5}, {5, 1}},
      {"[M, K]", "[B, K, N]", "[B, M, N]", {3, 5}, {2, 5, 7}},
      {"[B, 1, M, K]", "[C, K, N]", "[B, C, M, N]", {2, 1, 3, 5}, {3, 5, 7}},
  };
  for (const BinaryShapes& shapes : cases)
    for (DType dtype : kFloatTypes) {
      INFO(dtypeName(dtype) << shapeName(shapes.leftShape) << " @ " << shapeName(shapes.rightShape));
      at::Tensor a = randomTensor(dtype, shapes.leftShape, 3), b = randomTensor(dtype, shapes.rightShape, 4);
      std::string kernel = substitute(source, {{"$T", dtypeName(dtype)}, {"$A", shapes.left}, {"$B", shapes.right},
                                               {"$C", shapes.result}});
      expectKernelMatches(kernel, "mm", {{"a", a}, {"b", b}}, {{"c", roundTo(at::matmul(f32(a), f32(b)), dtype)}});
    }
}

struct WholeTensorCase {
  std::string call;    // over x: T[A, B, C] (and s: T[A, 1, C] for the views)
  std::string shape;   // of the result
  std::function<at::Tensor(const at::Tensor& x, const at::Tensor& s)> torch;
  Range range = Range::Signed;
};

TEST_CASE("reductions with axis, negative axes, several axes and keepdim", "[oracle]") {
  const std::vector<WholeTensorCase> cases = {
      {"sum(x, axis=1)", "[A, C]", [](auto& x, auto&) { return x.sum(1); }},
      {"max(x, axis=-1)", "[A, B]", [](auto& x, auto&) { return x.amax(-1); }},
      {"min(x, axis=[0, 2])", "[B]", [](auto& x, auto&) { return x.amin(Dims{0, 2}); }},
      {"prod(x, axis=-3)", "[B, C]", [](auto& x, auto&) { return x.prod(0); }, Range::NearOne},
      {"prod(x, axis=[2, 1])", "[A]", [](auto& x, auto&) { return x.prod(2).prod(1); }, Range::NearOne},
      {"mean(x, axis=[-1, 0], keepdim=true)", "[1, B, 1]", [](auto& x, auto&) { return x.mean(Dims{0, 2}, true); }},
      {"sum(x, axis=[0, 1, 2], keepdim=true)", "[1, 1, 1]", [](auto& x, auto&) { return x.sum(Dims{0, 1, 2}, true); }},
      {"max(x, axis=1, keepdim=true)", "[A, 1, C]", [](auto& x, auto&) { return x.amax(1, true); }},
      {"mean(x, axis=-2)", "[A, C]", [](auto& x, auto&) { return x.mean(-2); }},
      {"min(x, axis=0, keepdim=false)", "[B, C]", [](auto& x, auto&) { return x.amin(0); }},
  };
  const std::string source = R"(
kernel r(x: $T[A, B, C]) -> (y: $T$SHAPE) {
    y = $CALL
}
)";
  for (const WholeTensorCase& reduction : cases)
    for (DType dtype : kFloatTypes)
      for (const auto& shape : kCubeShapes) {
        INFO(reduction.call << " of " << dtypeName(dtype) << shapeName(shape));
        at::Tensor x = randomTensor(dtype, shape, 5, reduction.range);
        std::string kernel =
            substitute(source, {{"$T", dtypeName(dtype)}, {"$SHAPE", reduction.shape}, {"$CALL", reduction.call}});
        expectKernelMatches(kernel, "r", {{"x", x}}, {{"y", roundTo(reduction.torch(f32(x), x), dtype)}});
      }
}

TEST_CASE("views: transpose, permute, reshape, broadcast_to, unsqueeze, squeeze", "[oracle]") {
  const std::vector<WholeTensorCase> cases = {
      {"transpose(x, 0, 1)", "[B, A, C]", [](auto& x, auto&) { return x.transpose(0, 1); }},
      {"transpose(x, -1, 0)", "[C, B, A]", [](auto& x, auto&) { return x.transpose(-1, 0); }},
      {"permute(x, [2, 0, 1])", "[C, A, B]", [](auto& x, auto&) { return x.permute({2, 0, 1}); }},
      {"permute(x, [-2, -1, -3])", "[B, C, A]", [](auto& x, auto&) { return x.permute({1, 2, 0}); }},
      {"reshape(x, [B, -1, C])", "[B, A, C]",
       [](auto& x, auto&) { return x.reshape({x.size(1), x.size(0), x.size(2)}); }},
      {"reshape(reshape(x, [-1]), [C, B, A])", "[C, B, A]",
       [](auto& x, auto&) { return x.reshape({x.size(2), x.size(1), x.size(0)}); }},
      {"reshape(x, [A, B, C])", "[A, B, C]", [](auto& x, auto&) { return x; }},
      {"unsqueeze(x, 0)", "[1, A, B, C]", [](auto& x, auto&) { return x.unsqueeze(0); }},
      {"unsqueeze(x, 2)", "[A, B, 1, C]", [](auto& x, auto&) { return x.unsqueeze(2); }},
      {"unsqueeze(x, -1)", "[A, B, C, 1]", [](auto& x, auto&) { return x.unsqueeze(-1); }},
      {"squeeze(s, 1)", "[A, C]", [](auto&, auto& s) { return s.squeeze(1); }},
      {"squeeze(s, -2)", "[A, C]", [](auto&, auto& s) { return s.squeeze(-2); }},
      {"broadcast_to(x, [2, A, B, C])", "[2, A, B, C]", [](auto& x, auto&) { return x.expand({2, -1, -1, -1}); }},
      {"broadcast_to(s, [A, B, C])", "[A, B, C]",
       [](auto& x, auto& s) { return s.expand({-1, x.size(1), -1}); }},
      {"x @ unsqueeze(squeeze(s, 1), -1)", "[A, B, 1]",
       [](auto& x, auto& s) { return at::matmul(f32(x), f32(s.squeeze(1).unsqueeze(-1))); }},
  };
  const std::string source = R"(
kernel v(x: $T[A, B, C], s: $T[A, 1, C]) -> (y: $T$SHAPE) {
    y = $CALL
}
)";
  for (const WholeTensorCase& view : cases)
    for (DType dtype : kFloatTypes)
      for (const auto& shape : kCubeShapes) {
        INFO(view.call << " of " << dtypeName(dtype) << shapeName(shape));
        at::Tensor x = randomTensor(dtype, shape, 6), s = randomTensor(dtype, {shape[0], 1, shape[2]}, 7);
        std::string kernel =
            substitute(source, {{"$T", dtypeName(dtype)}, {"$SHAPE", view.shape}, {"$CALL", view.call}});
        expectKernelMatches(kernel, "v", {{"x", x}, {"s", s}}, {{"y", roundTo(view.torch(x, s), dtype)}});
      }
}

TEST_CASE("softmax and log_softmax over any axis", "[oracle]") {
  const std::string source = R"(
kernel s(x: $T[A, B, C]) -> (p: $T[A, B, C], logp: $T[A, B, C]) {
    p    = softmax(x, axis=$AXIS)
    logp = log_softmax(x, axis=$AXIS)
}
)";
  for (int axis : {0, 1, 2, -1, -2})
    for (DType dtype : kFloatTypes)
      for (const auto& shape : kCubeShapes) {
        INFO("axis " << axis << " of " << dtypeName(dtype) << shapeName(shape));
        at::Tensor x = randomTensor(dtype, shape, 8);
        std::string kernel = substitute(source, {{"$T", dtypeName(dtype)}, {"$AXIS", std::to_string(axis)}});
        expectKernelMatches(kernel, "s", {{"x", x}},
                            {{"p", roundTo(at::softmax(f32(x), axis), dtype)},
                             {"logp", roundTo(at::log_softmax(f32(x), axis), dtype)}});
      }
}

TEST_CASE("cumsum, cumprod and logsumexp over any axis", "[oracle]") {
  const std::string source = R"(
kernel s(x: $T[A, B, C]) -> (c: $T[A, B, C], p: $T[A, B, C], l: $T[$KEPT], k: $T[$ONE]) {
    c = cumsum(x, axis=$AXIS)
    p = cumprod(x, axis=$AXIS)
    l = logsumexp(x, axis=$AXIS)
    k = logsumexp(x, axis=$AXIS, keepdim=true)
}
)";
  const std::vector<std::string> names = {"A", "B", "C"};
  for (int axis : {0, 1, 2, -1})
    for (DType dtype : kFloatTypes)
      for (const auto& shape : kCubeShapes) {
        INFO("axis " << axis << " of " << dtypeName(dtype) << shapeName(shape));
        int positive = axis < 0 ? axis + 3 : axis;
        std::vector<std::string> kept, one;
        for (int d = 0; d < 3; ++d) {
          if (d != positive) kept.push_back(names[d]);
          one.push_back(d == positive ? "1" : names[d]);
        }
        at::Tensor x = randomTensor(dtype, shape, 9, Range::NearOne);
        std::string kernel = substitute(source, {{"$T", dtypeName(dtype)}, {"$AXIS", std::to_string(axis)},
                                                 {"$KEPT", fmt::format("{}", fmt::join(kept, ", "))},
                                                 {"$ONE", fmt::format("{}", fmt::join(one, ", "))}});
        expectKernelMatches(kernel, "s", {{"x", x}},
                            {{"c", roundTo(at::cumsum(f32(x), axis), dtype)},
                             {"p", roundTo(at::cumprod(f32(x), axis), dtype)},
                             {"l", roundTo(at::logsumexp(f32(x), {axis}), dtype)},
                             {"k", roundTo(at::logsumexp(f32(x), {axis}, true), dtype)}});
      }
}

TEST_CASE("logsumexp of infinities, as PyTorch: all -inf gives -inf, a +inf gives +inf", "[oracle]") {
  const std::string source = R"(
kernel s(x: f32[N, D]) -> (l: f32[N]) {
    l = logsumexp(x, axis=1)
}
)";
  float inf = std::numeric_limits<float>::infinity();
  at::Tensor x = at::tensor({-inf, -inf, -inf, 1.0f, inf, 2.0f, 3.0f, -inf, 0.5f}).reshape({3, 3});
  expectKernelMatches(source, "s", {{"x", x}}, {{"l", at::logsumexp(x, {1})}});
}

TEST_CASE("elementwise functions, where and literals on whole tensors", "[oracle]") {
  const std::string source = R"(
kernel e(x: $T[A, B, C], y: $T[C]) -> (a: $T[A, B, C], b: $T[A, B, C], c: $T[A, B, C], d: $T[A, B, C],
                                      filled: $T[A, B, C], e: f32[A, B, C]) {
    a      = exp(x) * 2
    b      = where(x > 0, x, 0.5)
    c      = max(x, y) + min(x, 1)
    d      = 1 - x / 2
    filled = 2.5
    e      = relu(f32(x)) + pow(y, 2)
}
)";
  for (DType dtype : kFloatTypes)
    for (const auto& shape : kCubeShapes) {
      INFO(dtypeName(dtype) << shapeName(shape));
      at::Tensor x = randomTensor(dtype, shape, 9), y = randomTensor(dtype, {shape[2]}, 10);
      at::Tensor one = at::ones_like(x), half = at::full_like(x, 0.5);
      expectKernelMatches(substitute(source, {{"$T", dtypeName(dtype)}}), "e", {{"x", x}, {"y", y}},
                          {{"a", inF32(x, [](const at::Tensor& t) { return t.exp(); }) * 2},
                           {"b", at::where(x > 0, x, half)},
                           {"c", at::maximum(x, y) + at::minimum(x, one)},
                           {"d", 1 - x / 2},
                           {"filled", at::full_like(x, 2.5)},
                           {"e", f32(x).relu() + f32(y * y)}});
    }
}

}  // namespace
}  // namespace emmy::oracle
