// The hoist-row-values pass (ir/kernel/hoist_row_values.cpp): a division by a divisor that a loop does
// not change multiplies by its reciprocal, and a divisor whose reciprocal is not a normal number (zero,
// subnormal, huge, infinite, NaN) still divides, in f32 and f64 alike; a function of such a value is
// computed once.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "backend/sim/simulator.h"
#include "compiler/pipeline.h"
#include "test_kernels.h"

namespace {

using namespace emmy;

TEST_CASE("reciprocals: a row divided by its sum multiplies by the reciprocal, and divides where that is not normal",
          "[row-values]") {
  const double inf = std::numeric_limits<double>::infinity();
  for (const char* dtype : {"f32", "f64"}) {
    INFO(dtype);
    bool f32 = std::string(dtype) == "f32";
    tensor::Kernel kernel = testing::kernelsOfText(fmt::format(
        "kernel normalize(x: {0}[N, D]) -> (y: {0}[N, D]) {{\n    t[n] = sum[d](x[n, d])\n    y[n, d] = x[n, d] / t[n]\n}}\n",
        dtype))[0];
    cuda::GeneratedCuda cuda = emitCudaFiles({lower(kernel, PipelineOptions{})}, "normalize.emmy");
    CHECK(cuda.source.find("__reciprocal_0 = (1.0") != std::string::npos);
    // Each row's sum, by row: subnormal, zero, beyond 2^126 (2^1022), ordinary, infinite, NaN, the
    // smallest and largest with a normal reciprocal.
    double tiny = f32 ? 1e-40 : 1e-310, huge = f32 ? 3e38 : 1.5e308, edge = std::ldexp(1.0, f32 ? 126 : 1022);
    std::vector<std::vector<double>> rows = {{tiny, 0, 0},      {0, 0, 0},           {huge, -huge / 3, 0}, {1, 2, 3},
                                             {inf, 1, 0},       {std::nan(""), 1, 2}, {1 / edge, 0, 0},     {edge, 0, 0}};
    DType type = f32 ? DType::F32 : DType::F64;
    Buffer x(type, {static_cast<int64_t>(rows.size()), 3});
    for (size_t r = 0; r < rows.size(); ++r)
      for (size_t d = 0; d < 3; ++d) x.set(static_cast<int64_t>(r * 3 + d), Value::ofFloat(type, rows[r][d]));
    sim::SimulatedKernel program(kernel, cuda);
    testing::checkAgainstEvaluator(kernel, program, tensor::EvaluationInputs{{{"x", x}}, {}, {}});
  }
}

TEST_CASE("row values: a function of a row's value is computed once per row, with the same results", "[row-values]") {
  for (const char* dtype : {"f32", "f16"}) {
    INFO(dtype);
    tensor::Kernel kernel = testing::kernelsOfText(fmt::format(
        "kernel scale(x: {0}[N, D]) -> (y: {0}[N, D]) {{\n    t[n] = sum[d](f32(x[n, d]) * f32(x[n, d]))\n"
        "    y[n, d] = {0}(f32(x[n, d]) * rsqrt(t[n] + 1.0) - log(t[n] + 2.0))\n}}\n",
        dtype))[0];
    cuda::GeneratedCuda cuda = emitCudaFiles({lower(kernel, PipelineOptions{})}, "scale.emmy");
    CHECK(cuda.source.find("__invariant_0 = rsqrtf(") != std::string::npos);
    CHECK(cuda.source.find("__invariant_1 = logf(") != std::string::npos);
    sim::SimulatedKernel program(kernel, cuda);
    for (int64_t d : {1, 7, 1000}) testing::checkAgainstEvaluator(kernel, program, {{"N", 3}, {"D", d}}, 7);
  }
}

TEST_CASE("row values: a 16-bit row value is widened to f32 once per row, not once per element", "[row-values]") {
  for (const char* dtype : {"f16", "bf16"}) {
    INFO(dtype);
    tensor::Kernel kernel = testing::kernelsOfText(fmt::format(
        "kernel shift(x: {0}[N, D]) -> (y: {0}[N, D]) {{\n    m[n] = max[d](x[n, d])\n"
        "    y[n, d] = {0}(exp(f32(x[n, d]) - m[n]))\n}}\n",
        dtype))[0];
    cuda::GeneratedCuda cuda = emitCudaFiles({lower(kernel, PipelineOptions{})}, "shift.emmy");
    INFO(cuda.source);
    CHECK(cuda.source.find("__invariant_0 = (float)emmy_f32(m);") != std::string::npos);
    CHECK(cuda.source.find("- (float)emmy_f32(m)") == std::string::npos);
    sim::SimulatedKernel program(kernel, cuda);
    for (int64_t d : {1, 7, 1000}) testing::checkAgainstEvaluator(kernel, program, {{"N", 3}, {"D", d}}, 7);
  }
}

}  // namespace
