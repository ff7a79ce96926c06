// The CPU simulation of generated CUDA (backend/sim/simulator.h), the comparison `emmy check` makes
// (check/compare.h) and `emmy check` itself (check/check.h), on hand-written .cu files that follow the
// contract of generated code: each is simulated and compared with the reference evaluator of the same
// kernel elaborated from .emmy text.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "backend/harness.h"
#include "backend/sim/simulator.h"
#include "check/check.h"
#include "check/compare.h"
#include "compiler/pipeline.h"
#include "frontend/frontend.h"
#include "ir/tensor/evaluator.h"
#include "support/diagnostics.h"
#include "support/npy.h"
#include "support/process.h"
#include "test_kernels.h"

using namespace emmy;
namespace fs = std::filesystem;

namespace {

tensor::Kernel elaborate(const std::string& source) {
  Diagnostics diagnostics;
  Frontend frontend(diagnostics, {Frontend::defaultStdlibDir()});
  const ast::Module* module = frontend.loadText("test.emmy", source);
  std::vector<tensor::Kernel> kernels;
  if (module) kernels = frontend.elaborateAll(*module);
  INFO(diagnostics.render());
  REQUIRE(!diagnostics.hasErrors());
  REQUIRE(kernels.size() == 1);
  return kernels[0];
}

std::string replaced(std::string text, const std::string& placeholder, const std::string& replacement) {
  size_t at = text.find(placeholder);
  REQUIRE(at != std::string::npos);
  return text.replace(at, placeholder.size(), replacement);
}

// The parts every generated .cu shares: includes, EMMY_LAUNCH and EMMY_SHARED for nvcc, emmy_last_error, and a host
// function that turns a failed launch (a deadlock, in the simulation) into its return code.
constexpr const char* kCuPrologue = R"cpp(// Written by hand after the contract of generated code (tests/simulator_tests.cpp).
#ifndef __CUDACC_RTC__
#include "test.h"
#endif
#ifndef EMMY_SIMULATE
#include <cuda_runtime.h>
#define EMMY_LAUNCH(kernel, grid, block, stream, ...) kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#endif
#ifndef EMMY_SHARED
#define EMMY_SHARED(type, name, count) __shared__ type name[count]
#endif
#include <stdint.h>

#ifndef __CUDACC_RTC__
static const char* emmy_error_message = "no error";
extern "C" __attribute__((weak)) const char* emmy_last_error(void) { return emmy_error_message; }

static int emmy_launch_status(void) {
  cudaError_t error = cudaGetLastError();
  if (error == cudaSuccess) return 0;
  emmy_error_message = cudaGetErrorString(error);
  return 1;
}
#endif
)cpp";

std::string headerDeclaring(const std::string& hostFunction) {
  return R"cpp(#pragma once
#include <stdint.h>
#ifndef EMMY_SIMULATE
#include <cuda_runtime.h>
#endif
#ifdef __cplusplus
extern "C" {
#endif
)cpp" + hostFunction +
         R"cpp(;
const char* emmy_last_error(void);
#ifdef __cplusplus
}
#endif
)cpp";
}

// y[i] = x[i] * s + 1: one thread per element, a ragged last block. BODY is the kernel's statement.
const char* kScaleEmmy = "kernel scale(x: f32[N], s: f32 = 2.0) -> (y: f32[N]) {\n  y[i] = x[i] * s + 1.0\n}\n";
const char* kScaleSignature = "int scale(const float* x, float* y, float s, int64_t N, cudaStream_t stream)";
const char* kScaleKernel = R"cpp(
__global__ void scale_k0(const float* __restrict__ x, float* __restrict__ y, float s, int64_t N) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  BODY
}

#ifndef __CUDACC_RTC__
int scale(const float* x, float* y, float s, int64_t N, cudaStream_t stream) {
  if (N == 0) return 0;
  EMMY_LAUNCH(scale_k0, dim3((unsigned)((N + 127) / 128)), dim3(128), stream, x, y, s, N);
  return emmy_launch_status();
}
#endif
)cpp";

sim::CudaSource scaleCuda(const std::string& body) {
  return {"test", kCuPrologue + replaced(kScaleKernel, "BODY", body), headerDeclaring(kScaleSignature)};
}

const std::string kScaleBody = "if (i < N) y[i] = x[i] * s + 1.0f;";

// y[n] = sum over d of x[n, d]: a block of two warps per row, strided partial sums, a shuffle reduction
// in each warp and the two warp sums combined through shared memory.
const char* kRowSumEmmy = "kernel rowsum(x: f32[N, D]) -> (y: f32[N]) {\n  y[n] = sum[d](x[n, d])\n}\n";
const char* kRowSumCu = R"cpp(
__global__ void rowsum_k0(const float* __restrict__ x, float* __restrict__ y, int64_t N, int64_t D) {
  __shared__ float warp_sums[2];
  int64_t row = blockIdx.x;
  float partial = 0.0f;
  for (int64_t d = threadIdx.x; d < D; d += 64) partial += x[row * D + d];
  for (int offset = 16; offset > 0; offset /= 2) partial += __shfl_xor_sync(0xffffffffu, partial, offset);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = partial;
  __syncthreads();
  if (threadIdx.x == 0) y[row] = warp_sums[0] + warp_sums[1];
}

#ifndef __CUDACC_RTC__
int rowsum(const float* x, float* y, int64_t N, int64_t D, cudaStream_t stream) {
  if (N == 0) return 0;
  EMMY_LAUNCH(rowsum_k0, dim3((unsigned)N), dim3(64), stream, x, y, N, D);
  return emmy_launch_status();
}
#endif
)cpp";

sim::CudaSource rowSumCuda(const std::string& kernelText = kRowSumCu) {
  return {"test", kCuPrologue + kernelText,
          headerDeclaring("int rowsum(const float* x, float* y, int64_t N, int64_t D, cudaStream_t stream)")};
}

Buffer wavy(std::vector<int64_t> shape) {
  Buffer buffer(DType::F32, std::move(shape));
  for (int64_t k = 0; k < buffer.numel(); ++k) buffer.set(k, Value::ofFloat(DType::F32, std::sin(0.7 * k)));
  return buffer;
}

// Runs `program` and compares its single output `y` with the evaluator.
OutputComparison runAndCompare(const tensor::Kernel& kernel, const sim::SimulatedKernel& program,
                               const tensor::EvaluationInputs& inputs) {
  sim::SimulationResult result = program.run(inputs);
  INFO(result.failure.value_or(""));
  REQUIRE(!result.failure);
  return compareOutput("y", result.outputs.at("y"), tensor::evaluate(kernel, inputs).at("y"));
}

tensor::EvaluationInputs inputsWithX(std::vector<int64_t> shape) {
  tensor::EvaluationInputs inputs;
  inputs.tensors.emplace("x", wavy(std::move(shape)));
  return inputs;
}

}  // namespace

TEST_CASE("simulated elementwise kernel matches the evaluator", "[check]") {
  tensor::Kernel kernel = elaborate(kScaleEmmy);
  sim::SimulatedKernel program(kernel, scaleCuda(kScaleBody));
  for (int64_t n : {1, 127, 300}) {
    CAPTURE(n);
    OutputComparison comparison = runAndCompare(kernel, program, inputsWithX({n}));
    CHECK(comparison.ok());
    CHECK(comparison.maxAbsError == 0);
  }
  // A scalar given explicitly reaches the host function as a value of its type.
  tensor::EvaluationInputs inputs = inputsWithX({5});
  inputs.scalars.emplace("s", Value::ofFloat(DType::F32, -3.25));
  CHECK(runAndCompare(kernel, program, inputs).ok());
}

TEST_CASE("simulated row reduction matches the evaluator", "[check]") {
  tensor::Kernel kernel = elaborate(kRowSumEmmy);
  sim::SimulatedKernel program(kernel, rowSumCuda());
  for (auto [rows, columns] : {std::pair<int64_t, int64_t>{1, 1}, {5, 37}, {3, 1000}, {2, 0}}) {
    CAPTURE(rows, columns);
    OutputComparison comparison = runAndCompare(kernel, program, inputsWithX({rows, columns}));
    CHECK(comparison.ok());
    CHECK(comparison.maxRelError < 1e-5);
  }
}

// Every kind of parameter crosses the harness with its CUDA type: f16 in and out, a bool output, an
// i64 scalar and a bf16 scalar.
const char* kMixedEmmy = R"emmy(kernel mixed(x: f16[N], k: i64 = 3, b: bf16 = 0.5) -> (y: f16[N], p: bool[N]) {
  y[i] = x[i] * f16(k) + f16(b)
  p[i] = x[i] > f16(0.0)
}
)emmy";
const char* kMixedCu = R"cpp(
__global__ void mixed_k0(const __half* __restrict__ x, __half* __restrict__ y, bool* __restrict__ p, int64_t k,
                         __nv_bfloat16 b, int64_t N) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= N) return;
  float xi = __half2float(x[i]);
  y[i] = __float2half_rn(__half2float(__float2half_rn(xi * (float)k)) + __half2float(__float2half_rn(__bfloat162float(b))));
  p[i] = xi > 0.0f;
}

#ifndef __CUDACC_RTC__
int mixed(const __half* x, __half* y, bool* p, int64_t k, __nv_bfloat16 b, int64_t N, cudaStream_t stream) {
  if (N == 0) return 0;
  EMMY_LAUNCH(mixed_k0, dim3((unsigned)((N + 31) / 32)), dim3(32), stream, x, y, p, k, b, N);
  return emmy_launch_status();
}
#endif
)cpp";

TEST_CASE("parameters of every kind reach the host function with their CUDA types", "[check]") {
  tensor::Kernel kernel = elaborate(kMixedEmmy);
  sim::CudaSource source{"test", std::string(kCuPrologue) + kMixedCu,
                         headerDeclaring("int mixed(const __half* x, __half* y, bool* p, int64_t k, __nv_bfloat16 b, "
                                         "int64_t N, cudaStream_t stream)")};
  sim::SimulatedKernel program(kernel, source);
  tensor::EvaluationInputs inputs;
  Buffer x(DType::F16, {45});
  for (int64_t k = 0; k < x.numel(); ++k) x.set(k, Value::ofFloat(DType::F16, (k - 20) * 0.125));
  inputs.tensors.emplace("x", x);
  inputs.scalars.emplace("k", Value::ofInt(DType::I64, -7));
  inputs.scalars.emplace("b", Value::ofFloat(DType::BF16, 0.25));
  sim::SimulationResult result = program.run(inputs);
  INFO(result.failure.value_or(""));
  REQUIRE(!result.failure);
  std::map<std::string, Buffer> reference = tensor::evaluate(kernel, inputs);
  for (const char* output : {"y", "p"}) {
    OutputComparison comparison = compareOutput(output, result.outputs.at(output), reference.at(output));
    INFO(formatComparison(comparison));
    CHECK(comparison.ok());
    CHECK(comparison.maxAbsError == 0);
  }
}

TEST_CASE("a wrong value in generated code is detected by the comparison", "[check]") {
  tensor::Kernel kernel = elaborate(kScaleEmmy);
  tensor::EvaluationInputs inputs = inputsWithX({40});
  sim::SimulatedKernel wrongProgram(kernel, scaleCuda("if (i < N) y[i] = x[i] * s + (i == 33 ? 1.5f : 1.0f);"));
  OutputComparison wrong = runAndCompare(kernel, wrongProgram, inputs);
  CHECK(wrong.mismatches == 1);
  CHECK(wrong.worstIndex == 33);
  CHECK(wrong.maxAbsError == Approx(0.5));
  CHECK_THAT(formatComparison(wrong), Catch::Contains("tolerance 1e-04 (f32): FAILED, 1 of 40 elements differ; worst at [33]"));

  // An element never written keeps the poison the outputs start with.
  sim::SimulatedKernel unwrittenProgram(kernel, scaleCuda("if (i < N - 1) y[i] = x[i] * s + 1.0f;"));
  OutputComparison unwritten = runAndCompare(kernel, unwrittenProgram, inputs);
  CHECK(unwritten.mismatches == 1);
  CHECK(unwritten.worstIndex == 39);
}

TEST_CASE("a failing host function reports its message", "[check]") {
  tensor::Kernel kernel = elaborate(kScaleEmmy);
  sim::CudaSource deadlock = scaleCuda("if (threadIdx.x == 5) return;\n  __syncthreads();\n  if (i < N) y[i] = 0;");
  sim::SimulationResult result = sim::SimulatedKernel(kernel, deadlock).run(inputsWithX({64}));
  REQUIRE(result.failure);
  CHECK_THAT(*result.failure, Catch::Contains("deadlock in kernel scale_k0"));
  CHECK(result.outputs.empty());
}

TEST_CASE("a simulated kernel that never returns hits the timeout", "[check]") {
  tensor::Kernel kernel = elaborate(kScaleEmmy);
  sim::SimulationOptions options;
  options.runTimeout = std::chrono::seconds(1);
  sim::SimulatedKernel program(kernel, scaleCuda("volatile int spin = 1;\n  while (spin) {}"), options);
  sim::SimulationResult result = program.run(inputsWithX({3}));
  REQUIRE(result.failure);
  CHECK(*result.failure == "the simulated kernel did not finish in 1 s");
  CHECK(result.runSeconds < 10);
}

TEST_CASE("a crash of the simulated kernel is reported, not shared", "[check]") {
  tensor::Kernel kernel = elaborate(kScaleEmmy);
  sim::SimulationResult result = sim::SimulatedKernel(kernel, scaleCuda("if (i == 0) __builtin_trap();")).run(inputsWithX({3}));
  REQUIRE(result.failure);
  CHECK_THAT(*result.failure, Catch::StartsWith("the simulated kernel crashed"));
}

TEST_CASE("generated code that does not compile is an internal error that keeps the files", "[check]") {
  tensor::Kernel kernel = elaborate(kScaleEmmy);
  std::string message;
  try {
    sim::SimulatedKernel(kernel, scaleCuda("y[i] = undeclared_name;"));
  } catch (const InternalError& error) {
    message = error.what();
  }
  CHECK_THAT(message, Catch::Contains("the generated CUDA for scale does not compile"));
  CHECK_THAT(message, Catch::Contains("undeclared_name"));
  std::smatch kept;
  REQUIRE(std::regex_search(message, kept, std::regex("the files are kept in ([^)]+)\\)")));
  CHECK(fs::exists(fs::path(kept[1].str()) / "test.cu"));
  fs::remove_all(kept[1].str());
}

TEST_CASE("simulation inputs are checked like the evaluator's", "[check]") {
  tensor::Kernel kernel = elaborate(kRowSumEmmy);
  sim::SimulatedKernel program(kernel, rowSumCuda());
  tensor::EvaluationInputs inputs = inputsWithX({2, 3});
  inputs.sizes["D"] = 4;
  CHECK_THROWS_WITH(program.run(inputs),
                    "size D is 3 in x (dimension 1) but is given as 4");
}

TEST_CASE("comparison tolerances: NaN, infinities, integers", "[check]") {
  auto compare = [](DType dtype, std::vector<double> generated, std::vector<double> reference) {
    Buffer a(dtype, {static_cast<int64_t>(generated.size())}), b(dtype, {static_cast<int64_t>(reference.size())});
    for (size_t k = 0; k < generated.size(); ++k) {
      a.set(k, Value::ofFloat(dtype, generated[k]));
      b.set(k, Value::ofFloat(dtype, reference[k]));
    }
    return compareOutput("y", a, b);
  };
  double inf = INFINITY, nan = NAN;
  CHECK(compare(DType::F32, {nan, inf, -inf, 1.0001}, {nan, inf, -inf, 1.0}).ok());
  CHECK(compare(DType::F32, {1.0003}, {1.0}).mismatches == 1);  // beyond 1e-4 + 1e-4 * 1
  CHECK(compare(DType::F32, {nan}, {1.0}).mismatches == 1);
  CHECK(compare(DType::F32, {1.0}, {inf}).mismatches == 1);
  CHECK(compare(DType::F32, {-inf}, {inf}).mismatches == 1);
  CHECK(compare(DType::F16, {1.0078125}, {1.0}).ok());
  CHECK(compare(DType::BF16, {1.015625}, {1.0}).ok());
  CHECK(compare(DType::F64, {1.0 + 1e-9}, {1.0}).mismatches == 1);
  OutputComparison integers = compare(DType::I32, {7, 8, -3}, {7, 9, -3});
  CHECK(integers.mismatches == 1);
  CHECK(formatComparison(integers) ==
        "y: max abs err 1.0e+00, max rel err 1.1e-01, tolerance exact (i32): FAILED, 1 of 3 elements differ; worst at "
        "[1]: generated 8, reference 9");
  CHECK(formatComparison(compare(DType::F32, {2.0}, {2.0})) ==
        "y: max abs err 0.0e+00, max rel err 0.0e+00, tolerance 1e-04 (f32): ok");
}

// ---------------------------------------------------------------------------------------------------
// `emmy check` end to end (check/check.h), with the hand-written CUDA standing in for the lowering.

namespace {

struct CheckRun {
  int exitCode;
  std::string report;
};

// Writes the row-sum kernel (and `extraSource`) to FOLDER/rowsum.emmy and checks it with `options`.
// A FILE* that writes into memory, closed and freed even when the check throws.
struct MemoryStream {
  char* text = nullptr;
  size_t length = 0;
  std::FILE* file = open_memstream(&text, &length);

  MemoryStream() = default;
  MemoryStream(const MemoryStream&) = delete;
  MemoryStream& operator=(const MemoryStream&) = delete;
  ~MemoryStream() {
    if (file) std::fclose(file);
    std::free(text);
  }
  std::string take() {
    std::fclose(file);
    file = nullptr;
    return std::string(text, length);
  }
};

CheckRun checkRowSum(const fs::path& folder, CheckOptions options, const std::string& kernelText = kRowSumCu,
                     const std::string& extraSource = "") {
  std::ofstream(folder / "rowsum.emmy") << kRowSumEmmy << extraSource;
  options.file = (folder / "rowsum.emmy").string();
  MemoryStream report;
  int exitCode = runCheck(options, [&](const tensor::Kernel&) { return rowSumCuda(kernelText); }, simulationCompiler(), report.file);
  return CheckRun{exitCode, report.take()};
}

}  // namespace

TEST_CASE("emmy check passes correct generated code on random inputs", "[check]") {
  TemporaryFolder scratch;
  CheckOptions options;
  options.sizes = {"N=5", "D=37"};
  CheckRun run = checkRowSum(scratch.path(), options);
  CHECK(run.exitCode == 0);
  CHECK_THAT(run.report, Catch::StartsWith("rowsum (N=5, D=37)\n  y: max abs err "));
  CHECK_THAT(run.report, Catch::EndsWith(", tolerance 1e-04 (f32): ok\n"));

  options.verbose = true;
  CheckRun verbose = checkRowSum(scratch.path(), options);
  UNSCOPED_INFO(verbose.report);
  CHECK_THAT(verbose.report, Catch::Matches("rowsum \\(N=5, D=37\\)\n  compiled in [0-9.]+ s: c.* -std=c\\+\\+17 .*\n"
                                            "  ran in [0-9.]+ s\n  y: .*ok\n"));
}

TEST_CASE("emmy check reads inputs from .npy files and saves the outputs", "[check]") {
  TemporaryFolder scratch;
  fs::path inputs = scratch.path() / "in", saved = scratch.path() / "out";
  fs::create_directories(inputs);
  Buffer x = wavy({3, 70});
  writeNpy(inputs / "x.npy", x);
  CheckOptions options;
  options.inputsDir = inputs.string();
  options.saveDir = saved.string();
  CheckRun run = checkRowSum(scratch.path(), options);
  CHECK(run.exitCode == 0);
  CHECK_THAT(run.report, Catch::StartsWith("rowsum (N=3, D=70)\n"));

  tensor::EvaluationInputs evaluationInputs;
  evaluationInputs.tensors.emplace("x", x);
  Buffer expected = tensor::evaluate(elaborate(kRowSumEmmy), evaluationInputs).at("y");
  CHECK(compareOutput("y", readNpy(saved / "y.npy", DType::F32), expected).ok());

  // A size given on the command line must agree with the files.
  options.sizes = {"D=71"};
  CHECK_THROWS_WITH(checkRowSum(scratch.path(), options),
                    "kernel rowsum: size D is 70 in x (dimension 1) but is given as 71");
}

TEST_CASE("emmy check fails wrong generated code and prints the worst element", "[check]") {
  TemporaryFolder scratch;
  CheckOptions options;
  options.sizes = {"N=4", "D=40"};
  CheckRun run = checkRowSum(scratch.path(), options, replaced(kRowSumCu, "warp_sums[0] + warp_sums[1]", "warp_sums[0]"));
  CHECK(run.exitCode == 1);
  CHECK_THAT(run.report, Catch::Contains("(f32): FAILED, "));

  CheckRun deadlock = checkRowSum(scratch.path(), options, replaced(kRowSumCu, "  __syncthreads();", "  if (threadIdx.x != 3) __syncthreads();"));
  CHECK(deadlock.exitCode == 1);
  CHECK_THAT(deadlock.report, Catch::Contains("  FAILED: deadlock in kernel rowsum_k0"));
}

TEST_CASE("emmy check usage errors", "[check]") {
  TemporaryFolder scratch;
  auto usageError = [&](CheckOptions options, const std::string& extraSource = "") {
    try {
      checkRowSum(scratch.path(), options, kRowSumCu, extraSource);
    } catch (const UsageError& error) {
      return std::string(error.what());
    }
    return std::string("no usage error");
  };
  CheckOptions options;
  options.sizes = {"N=4"};
  CHECK(usageError(options) ==
        "kernel rowsum: size D is not given: add --size D=VALUE, or read the inputs from files with --inputs DIR");
  options.sizes = {"N=4", "D=3", "E=2"};
  CHECK(usageError(options) == "--size E: no kernel checked has a size named E (sizes: D, N); did you mean 'D'?");
  options.sizes = {"N=four"};
  CHECK(usageError(options) == "--size 'N=four': expected NAME=VALUE with a non-negative integer VALUE");
  options.sizes = {"N=-1"};
  CHECK_THAT(usageError(options), Catch::Contains("expected NAME=VALUE with a non-negative integer VALUE"));

  options.sizes = {};
  options.inputsDir = (scratch.path() / "nowhere").string();
  CHECK_THAT(usageError(options), Catch::EndsWith("nowhere/x.npy: cannot read the file: No such file or directory"));

  options.inputsDir = scratch.path().string();
  writeNpy(scratch.path() / "x.npy", Buffer(DType::F64, {2, 2}));
  CHECK_THAT(usageError(options), Catch::EndsWith("x.npy: holds '<f8' (f64) data, but f32 ('<f4') is expected"));

  options = {};
  options.kernel = "generic";
  CHECK(usageError(options, "kernel generic<T: f32 | f16>(x: T[N]) -> (y: T[N]) {\n  y[i] = x[i]\n}\n") ==
        "--kernel: 'generic' is generic; name its types, e.g. --kernel 'generic<f32>'");
  options.kernel = "";
  options.saveDir = scratch.path().string();
  CHECK_THAT(usageError(options, "kernel generic<T: f32 | f16>(x: T[N]) -> (y: T[N]) {\n  y[i] = x[i]\n}\n"),
             Catch::StartsWith("--save needs --kernel here"));
}

TEST_CASE("emmy check takes scalars from 0-d arrays and reports errors in the source", "[check]") {
  TemporaryFolder scratch;
  const fs::path& folder = scratch.path();
  std::ofstream(folder / "scale.emmy") << kScaleEmmy;
  writeNpy(folder / "x.npy", wavy({9}));
  Buffer s(DType::F32, {});
  s.set(0, Value::ofFloat(DType::F32, 0.5));
  writeNpy(folder / "s.npy", s);

  CheckOptions options;
  options.file = (folder / "scale.emmy").string();
  options.inputsDir = folder.string();
  // The generated code ignores s and uses its default (2) instead: only a 0.5 read from s.npy shows it.
  auto generate = [](const std::string& body) {
    return [body](const tensor::Kernel&) { return scaleCuda(body); };
  };
  std::FILE* quiet = std::fopen("/dev/null", "w");
  CHECK(runCheck(options, generate(kScaleBody), simulationCompiler(), quiet) == 0);
  CHECK(runCheck(options, generate("if (i < N) y[i] = x[i] * 2.0f + 1.0f;"), simulationCompiler(), quiet) == 1);

  writeNpy(folder / "s.npy", Buffer(DType::F32, {1}));
  CHECK_THROWS_WITH(runCheck(options, generate(kScaleBody), simulationCompiler(), quiet),
                    Catch::EndsWith("s.npy: scalar s needs a 0-d array, but the file holds one of 1 dimension(s)"));

  std::ofstream(folder / "scale.emmy") << "kernel broken(x: f32[N]) -> (y: f32[N]) {\n  y[i] = x[j]\n}\n";
  CHECK(runCheck(options, generate(kScaleBody), simulationCompiler(), quiet) == 1);
  std::fclose(quiet);
}

TEST_CASE("emmy check's scalars: --scalar, else the file, else the default", "[check]") {
  tensor::Kernel kernel = elaborate(
      "kernel k(x: f32[N], s: f32 = 2.0, n: i32, b: bool, h: f16 = 1) -> (y: f32[N]) {\n"
      "  y[i] = x[i] * s + f32(n) + where(b, 1.0, 0.0) + f32(h)\n}\n");
  TemporaryFolder scratch;
  const std::string folder = scratch.path().string();
  writeNpy(scratch.path() / "x.npy", wavy({4}));
  Buffer s(DType::F32, {}), n(DType::I32, {});
  s.set(0, Value::ofFloat(DType::F32, 0.5));
  n.set(0, Value::ofInt(DType::I32, 3));
  writeNpy(scratch.path() / "s.npy", s);
  writeNpy(scratch.path() / "n.npy", n);
  auto value = [](const tensor::EvaluationInputs& inputs, const std::string& name) {
    return inputs.scalars.count(name) ? inputs.scalars.at(name).asDouble() : -99.0;  // -99: its default, later
  };

  tensor::EvaluationInputs random = prepareInputs(kernel, "", 0, {{"N", 4}}, {{"n", "7"}, {"b", "true"}});
  CHECK(value(random, "s") == -99.0);
  CHECK(value(random, "n") == 7);
  CHECK(value(random, "b") == 1);
  tensor::EvaluationInputs files = prepareInputs(kernel, folder, 0, {}, {{"b", "false"}});
  CHECK(value(files, "s") == 0.5);
  CHECK(value(files, "n") == 3);
  CHECK(value(files, "b") == 0);
  tensor::EvaluationInputs both = prepareInputs(kernel, folder, 0, {}, {{"s", "-4e3"}, {"b", "0"}, {"h", "inf"}});
  CHECK(value(both, "s") == -4000);
  CHECK(value(both, "n") == 3);
  CHECK(std::isinf(value(both, "h")));
  // The reference run uses them: y = x * s + n + b + h.
  ReferenceRun run = referenceRun(kernel, folder, 0, {}, {{"b", "true"}, {"h", "0.25"}});
  CHECK(run.outputs.at("y").get(1).asDouble() == Approx(wavy({4}).get(1).asDouble() * 0.5 + 3 + 1 + 0.25));

  CHECK_THROWS_WITH(prepareInputs(kernel, "", 0, {{"N", 4}}, {{"b", "1"}}),
                    "kernel k: scalar n has no default: give it with --scalar n=VALUE");
  CHECK_THROWS_WITH(prepareInputs(kernel, folder, 0, {}, {}),
                    fmt::format("kernel k: scalar b has no default: give it with --scalar b=VALUE or in {}/b.npy", folder));
  CHECK_THROWS_WITH(prepareInputs(kernel, folder, 0, {}, {{"b", "1"}, {"h", "70000"}}),
                    "--scalar h=70000: does not fit f16 (the largest is 65504)");
  CHECK_NOTHROW(prepareInputs(kernel, folder, 0, {}, {{"b", "1"}, {"h", "1e-9"}}));  // an underflow fits
}

// ---------------------------------------------------------------------------------------------------
// The safety net of the simulation: data races on shared memory and out-of-bounds accesses stop the run
// with a report that names the kernel, the buffer, the thread and the block.

namespace {

const char* kMatmulEmmy = "kernel matmul(A: f32[M, K], B: f32[K, N]) -> (C: f32[M, N]) {\n"
                          "  C[i, j] = sum[k](A[i, k] * B[k, j])\n}\n";

// A running sum: a block-level scan (ir/tile/prefix_scan.h).
const char* kRunningSumEmmy = "kernel running(x: f32[N, T]) -> (y: f32[N, T]) {\n"
                              "  y[n, t] = sum[k < t + 1](abs(x[n, k]))\n}\n";

std::vector<tensor::Kernel> safetyKernels() {
  std::vector<tensor::Kernel> kernels = testing::kernelsOf(fs::path(EMMY_SOURCE_DIR) / "examples" / "softmax.emmy");
  kernels.push_back(elaborate(kMatmulEmmy));
  kernels.push_back(elaborate(kRunningSumEmmy));
  return kernels;
}

sim::CudaSource loweredCuda(const tensor::Kernel& kernel, std::optional<int> dropBarrier = std::nullopt) {
  PipelineOptions options;
  options.dropBarrier = dropBarrier;
  return emitCudaFiles({lower(kernel, options)}, kernel.name + ".emmy");
}

}  // namespace

TEST_CASE("the lowered softmax, matmul and running sum pass the race detector, and fail it with any barrier dropped",
          "[safety]") {
  // Ragged sizes, more than one slice of k for the matmul, and each block given two rows (softmax) or
  // four tiles of 128 x 128 (matmul), or three tiles of a scan, by a grid capped at one block a dimension: the barriers between a
  // block's iterations have something to keep apart. The matmul's ring of three stages ends its tiles in
  // stage 0 (16 slices of 8) or 1 (17): the barrier before the next tile's first copies into that stage
  // is needed in one of the two.
  // The softmax runs with the row copied into shared memory and, on a device with too little for it, without.
  testing::ScopedEnvironment oneBlock("EMMY_SIM_MAX_BLOCKS", "1");
  for (const tensor::Kernel& kernel : safetyKernels()) {
    CAPTURE(kernel.name);
    std::vector<tensor::EvaluationInputs> inputs;
    auto runs = [&](const sim::SimulatedKernel& program, const tensor::EvaluationInputs& input, bool copied) {
      testing::ScopedEnvironment device("EMMY_SIM_SHARED_BYTES", copied ? "232448" : "64");
      return program.run(input);
    };
    if (kernel.name == "matmul") {
      for (int64_t k : {125, 131}) inputs.push_back(testing::randomInputs(kernel, {{"M", 131}, {"N", 131}, {"K", k}}, 7));
    } else if (kernel.name == "running") {
      inputs.push_back(testing::randomInputs(kernel, {{"N", 2}, {"T", 2 * 2048 + 37}}, 7));  // three tiles a row
    } else {
      inputs.push_back(testing::randomInputs(kernel, 37, 7));
    }
    sim::SimulatedKernel intactProgram(kernel, loweredCuda(kernel));
    for (const tensor::EvaluationInputs& input : inputs)
      for (bool copied : {true, false}) {
        sim::SimulationResult intact = runs(intactProgram, input, copied);
        INFO(intact.failure.value_or(""));
        REQUIRE_FALSE(intact.failure);
        for (const auto& [name, expected] : tensor::evaluate(kernel, input))
          CHECK(compareOutput(name, intact.outputs.at(name), expected).ok());
      }

    int barriers = 0;
    for (;; ++barriers) {
      CAPTURE(barriers);
      sim::CudaSource source;
      try {
        source = loweredCuda(kernel, barriers);
      } catch (const UsageError& error) {
        CHECK_THAT(error.what(), Catch::StartsWith(fmt::format("cannot drop barrier {} of {}: its kernels have {} "
                                                               "barrier(s)", barriers, kernel.name, barriers)));
        break;
      }
      sim::SimulatedKernel dropped(kernel, source);
      std::optional<std::string> failure;
      for (size_t i = 0; i < inputs.size() && !failure; ++i)
        for (bool copied : {true, false})
          if (!failure) failure = runs(dropped, inputs[i], copied).failure;
      REQUIRE(failure);
      std::smatch report;
      REQUIRE(std::regex_search(*failure, report,
                                std::regex("data race on shared buffer (\\w+) in kernel " + kernel.name +
                                           "__k\\d+: thread \\(\\d+,\\d+,\\d+\\) of block \\(\\d+,0,0\\) (reads|writes) "
                                           "\\1\\[\\d+\\], which thread \\(\\d+,\\d+,\\d+\\) (read|wrote), with no "
                                           "__syncthreads\\(\\) between$")));
      CHECK(std::regex_search(source.source, std::regex("EMMY_SHARED(_SIZED_AT_LAUNCH)?\\(float, " + report[1].str() + ", ")));
    }
    CHECK(barriers >= 2);
  }
}

TEST_CASE("emmy check fails a kernel whose schedule races and prints the report", "[safety]") {
  CheckOptions options;
  options.file = (fs::path(EMMY_SOURCE_DIR) / "examples" / "softmax.emmy").string();
  options.sizes = {"N=3", "D=37"};
  MemoryStream report;
  // Its barrier 1: between the maximum's partial results, written by a lane of each warp, and their reads.
  int exitCode = runCheck(options, [](const tensor::Kernel& kernel) { return loweredCuda(kernel, 1); }, simulationCompiler(), report.file);
  std::string text = report.take();
  CHECK(exitCode == 1);
  CHECK_THAT(text, Catch::StartsWith("softmax (N=3, D=37)\n  FAILED: softmax: kernel softmax__k0 failed: data race on "
                                     "shared buffer "));
}

TEST_CASE("out-of-bounds accesses of generated code name the buffer, the thread and the block", "[safety]") {
  tensor::Kernel kernel = elaborate(kScaleEmmy);
  // 64 floats end exactly at a guard page.
  sim::SimulationResult global =
      sim::SimulatedKernel(kernel, scaleCuda("if (i < N) y[i] = x[i + 1] * s + 1.0f;")).run(inputsWithX({64}));
  REQUIRE(global.failure);
  CHECK(*global.failure ==
        "out-of-bounds access in kernel scale_k0: thread (63,0,0) of block (0,0,0) reads x[64] but global buffer x has "
        "64 elements");

  sim::SimulationResult shared =
      sim::SimulatedKernel(kernel, scaleCuda("EMMY_SHARED(float, staged, 100);\n  staged[threadIdx.x] = 1.0f;\n"
                                             "  if (i < N) y[i] = x[i] * s + 1.0f;"))
          .run(inputsWithX({300}));
  REQUIRE(shared.failure);
  CHECK(*shared.failure ==
        "out-of-bounds access in kernel scale_k0: thread (100,0,0) of block (0,0,0) writes staged[100] but shared "
        "buffer staged has 100 elements");
}

// The tensors emmy check allocates are checked against the memory before any is allocated.
TEST_CASE("emmy check refuses sizes whose tensors do not fit in memory, naming the tensor", "[check]") {
  tensor::Kernel kernel = elaborate(
      "kernel k(x: f32[N, M], w: f64[M]) -> (y: f64[N]) {\n  t[i, j] = f64(x[i, j]) * w[j]\n  y[i] = sum[j](t[i, j])\n}\n");
  std::map<std::string, int64_t> sizes = {{"N", 1000}, {"M", 1000}};
  uint64_t needed = 1000 * 1000 * 4 + 1000 * 8 + 1000 * 1000 * 8 + 1000 * 8;  // x, w, t, y
  CHECK_NOTHROW(checkTensorsFit(kernel, sizes, needed));
  CHECK_THROWS_WITH(checkTensorsFit(kernel, sizes, needed - 1),
                    "kernel k with N=1000, M=1000: output y and the tensors before it would need 12016000 bytes "
                    "together, more than this machine's memory (12015999 bytes); give smaller sizes");
  CHECK_THROWS_WITH(checkTensorsFit(kernel, sizes, 7000000), Catch::StartsWith("kernel k with N=1000, M=1000: stage t "
                                                                                "would need 8000000 bytes, more than"));
  CHECK_THROWS_WITH(checkTensorsFit(kernel, {{"N", 1}, {"M", int64_t{1} << 62}}, UINT64_MAX),
                    Catch::Contains("input x would need more than 2^64 bytes"));
  CHECK_NOTHROW(checkTensorsFit(kernel, {{"N", 0}, {"M", 0}}, 0));
}

// An output is held to the tolerance of the precision it was computed in, not only of its dtype.
TEST_CASE("computedPrecision: the lowest-precision float an output's value flows through", "[check]") {
  auto precisionOf = [](const std::string& source) {
    tensor::Kernel kernel = elaborate(source);
    return computedPrecision(kernel, kernel.outputs.front().name);
  };
  CHECK(precisionOf("kernel k(x: f32[N]) -> (y: f64[N]) {\n  y[i] = f64(exp(x[i]) * 3.0)\n}\n") == DType::F32);
  CHECK(precisionOf("kernel k(x: f64[N]) -> (y: f64[N]) {\n  y[i] = exp(x[i]) * 3.0\n}\n") == DType::F64);
  // The input's data is read exactly by both, so an f16 input cast to f32 is f32 work.
  CHECK(precisionOf("kernel k(h: f16[N]) -> (y: f32[N]) {\n  y[i] = f32(h[i]) * 2.0\n}\n") == DType::F32);
  // Through a stage stored in f16, and a narrowing cast inside f64 work.
  CHECK(precisionOf("kernel k(x: f32[N]) -> (y: f64[N]) {\n  t[i] = f16(x[i] * 2.0)\n  y[i] = f64(t[i]) + 1.0\n}\n") ==
        DType::F16);
  CHECK(precisionOf("kernel k(x: f64[N]) -> (y: f64[N]) {\n  y[i] = f64(bf16(x[i])) + f64(f16(x[i]))\n}\n") == DType::BF16);
  // A reduction accumulating in f32 for an f64 output.
  CHECK(precisionOf("kernel k(x: f32[N, D]) -> (y: f64[N]) {\n  s[n] = sum[d](x[n, d])\n  y[n] = f64(s[n])\n}\n") ==
        DType::F32);
  CHECK(precisionOf("kernel k(x: i32[N]) -> (y: i32[N]) {\n  y[i] = x[i] * 3\n}\n") == DType::I32);

  // Through emmy check: the f32 work's rounding passes at f32's tolerance, and the line says so.
  tensor::Kernel kernel = elaborate("kernel k(x: f32[N]) -> (y: f64[N]) {\n  y[i] = f64(exp(x[i]) * 3.0 + sin(x[i]))\n}\n");
  Buffer reference(DType::F64, {1}), generated(DType::F64, {1});
  reference.set(0, Value::ofFloat(DType::F64, 0.2929151654243469));
  generated.set(0, Value::ofFloat(DType::F64, 0.2929152846336365));
  std::vector<OutputComparison> comparisons = compareOutputs(kernel, {{"y", generated}}, {{"y", reference}});
  REQUIRE(comparisons.size() == 1);
  CHECK(comparisons[0].ok());
  CHECK(formatComparison(comparisons[0]) ==
        "y: max abs err 1.2e-07, max rel err 4.1e-07, tolerance 1e-04 (f64 computed in f32): ok");
}

TEST_CASE("the simulation header is precompiled and its scheduler compiled once per header and reused; without a cache "
          "the program compiles both",
          "[check]") {
  tensor::Kernel kernel = elaborate(kScaleEmmy);
  TemporaryFolder cache;
  const char* before = std::getenv("XDG_CACHE_HOME");
  std::string saved = before ? before : "";
  auto restore = [&] { before ? setenv("XDG_CACHE_HOME", saved.c_str(), 1) : unsetenv("XDG_CACHE_HOME"); };
  setenv("XDG_CACHE_HOME", cache.path().c_str(), 1);
  auto precompiled = [&](const char* extension) {
    std::vector<fs::path> found;
    std::error_code error;
    for (auto entry = fs::recursive_directory_iterator(cache.path() / "emmy" / "sim-header", error);
         !error && entry != fs::recursive_directory_iterator(); entry.increment(error))
      if (entry->path().extension() == extension) found.push_back(entry->path());
    return found;
  };
  for (int run = 0; run < 2; ++run) {
    sim::SimulatedKernel program(kernel, scaleCuda(kScaleBody));
    CHECK(runAndCompare(kernel, program, inputsWithX({33})).ok());
    if (harness::isClang(harness::hostCompiler())) continue;  // clang: never precompiled
    std::vector<fs::path> header = precompiled(".gch"), runtime = precompiled(".o");
    REQUIRE(header.size() == 1);
    REQUIRE(runtime.size() == 1);
    CHECK(header[0].parent_path() == runtime[0].parent_path());
    CHECK(program.compileCommand().find("-DEMMY_SIM_LINKED_RUNTIME -include " +
                                        (header[0].parent_path() / "emmy_cuda_sim.h").string()) != std::string::npos);
    CHECK(program.compileCommand().find(runtime[0].string()) != std::string::npos);
    // The faster linker where it links the runtime object (a machine with binutils has gold), none elsewhere.
    std::ifstream linkFlags(header[0].parent_path() / "link_flags");
    REQUIRE(linkFlags);
    std::string flag;
    std::getline(linkFlags, flag);
    CHECK((flag.empty() || flag == "-fuse-ld=gold"));
    if (!flag.empty()) CHECK(program.compileCommand().find(" " + flag) != std::string::npos);
  }
  // A cache that cannot be written: the header is compiled with the program, to the same result.
  setenv("XDG_CACHE_HOME", (cache.path() / "file").c_str(), 1);
  std::ofstream(cache.path() / "file") << "not a folder";
  sim::SimulatedKernel program(kernel, scaleCuda(kScaleBody));
  CHECK(runAndCompare(kernel, program, inputsWithX({33})).ok());
  CHECK(program.compileCommand().find("sim-header") == std::string::npos);
  CHECK(program.compileCommand().find("EMMY_SIM_LINKED_RUNTIME") == std::string::npos);
  restore();
}
