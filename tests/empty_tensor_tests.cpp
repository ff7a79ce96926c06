// Empty tensors (section 2 of the language): a size may be 0. A reduction over an empty range gives its
// identity in the evaluator and in the generated code; a host function whose outputs are all empty
// returns 0 and launches nothing, and one with an empty output among others still computes the rest;
// `emmy check` takes 0-length .npy inputs and saves 0-length outputs. The sweep of every example and
// stdlib kernel with each size 0 in turn is in loop_ir_tests.cpp and lowering_tests.cpp.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "backend/sim/simulator.h"
#include "check/check.h"
#include "compiler/pipeline.h"
#include "ir/tensor/evaluator.h"
#include "support/npy.h"
#include "support/process.h"
#include "golden_files.h"
#include "test_kernels.h"

namespace {

namespace fs = std::filesystem;
using namespace emmy;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Every reduction, each into an output of its own, over the columns of x (floats) and k (integers).
const char* const kReductions = R"(
kernel reductions(x: f32[N, D], k: i32[N, D]) -> (total: f32[N], product: f32[N], highest: f32[N], lowest: f32[N],
                                                  average: f32[N], ihighest: i32[N], ilowest: i32[N]) {
    total[n]    = sum[d](x[n, d])
    product[n]  = prod[d](x[n, d])
    highest[n]  = max[d](x[n, d])
    lowest[n]   = min[d](x[n, d])
    average[n]  = mean[d](x[n, d])
    ihighest[n] = max[d](k[n, d])
    ilowest[n]  = min[d](k[n, d])
}
)";

// Two outputs of unrelated sizes, computed by two CUDA kernels.
const char* const kTwoOutputs = R"(
kernel two(x: f32[N], w: f32[M]) -> (y: f32[N], z: f32[M]) {
    y[i] = x[i] * 2.0
    z[j] = w[j] + 1.0
}
)";

tensor::Kernel onlyKernel(const std::string& source) {
  std::vector<tensor::Kernel> kernels = testing::kernelsOfText(source);
  REQUIRE(kernels.size() == 1);
  return kernels[0];
}

sim::CudaSource cudaOf(const tensor::Kernel& kernel) { return emitCudaFiles({lower(kernel, PipelineOptions{})}, "test.emmy"); }

// Every output of `outputs` holds `rows` times the identity of its reduction.
void requireIdentities(const std::map<std::string, Buffer>& outputs, int64_t rows) {
  auto everyElement = [&](const std::string& name, const std::function<bool(const Value&)>& isIdentity) {
    const Buffer& buffer = outputs.at(name);
    REQUIRE(buffer.numel() == rows);
    for (int64_t i = 0; i < rows; ++i) {
      INFO(name << "[" << i << "] = " << buffer.get(i).toString());
      CHECK(isIdentity(buffer.get(i)));
    }
  };
  everyElement("total", [](const Value& v) { return v.f == 0; });
  everyElement("product", [](const Value& v) { return v.f == 1; });
  everyElement("highest", [](const Value& v) { return v.f == -kInf; });
  everyElement("lowest", [](const Value& v) { return v.f == kInf; });
  everyElement("average", [](const Value& v) { return std::isnan(v.f); });  // mean of nothing, as PyTorch
  everyElement("ihighest", [](const Value& v) { return v.i == std::numeric_limits<int32_t>::min(); });
  everyElement("ilowest", [](const Value& v) { return v.i == std::numeric_limits<int32_t>::max(); });
}

// The generated code of `kernel`, with a check run after the harness's main: the program fails unless
// the host function launched exactly `launches` kernels (the simulation counts them).
std::unique_ptr<sim::SimulatedKernel> countingLaunches(const tensor::Kernel& kernel, unsigned long long launches) {
  sim::CudaSource source = cudaOf(kernel);
  source.source += fmt::format(R"(
static struct LaunchesExpected {{
  ~LaunchesExpected() {{
    if (emmy_sim::launchCount() == {0}ull) return;
    std::printf("launched %llu kernels, expected {0}\n", emmy_sim::launchCount());
    std::fflush(stdout);
    std::_Exit(9);
  }}
}} launchesExpected;
)",
                               launches);
  return std::make_unique<sim::SimulatedKernel>(kernel, source);
}

KernelRun runAt(const tensor::Kernel& kernel, const CompiledKernel& program, const std::map<std::string, int64_t>& sizes) {
  KernelRun ran = program.run(testing::randomInputs(kernel, sizes, 3));
  INFO(kernel.instanceName() << " with" << testing::describeSizes(sizes) << ": " << ran.failure.value_or("ok"));
  return ran;
}

}  // namespace

TEST_CASE("the evaluator computes empty stages and gives each reduction's identity over an empty axis", "[empty]") {
  tensor::Kernel kernel = onlyKernel(kReductions);
  requireIdentities(tensor::evaluate(kernel, testing::randomInputs(kernel, {{"N", 3}, {"D", 0}}, 1)), 3);
  std::map<std::string, Buffer> none = tensor::evaluate(kernel, testing::randomInputs(kernel, {{"N", 0}, {"D", 4}}, 1));
  for (const auto& [name, buffer] : none) CHECK(buffer.shape() == std::vector<int64_t>{0});
  // Enough rows for the evaluator to split them over cores, each an empty sum.
  tensor::Kernel rows = onlyKernel("kernel rows(x: f32[N, D]) -> (y: f32[N]) { y[n] = sum[d](x[n, d]) }");
  Buffer sums = tensor::evaluate(rows, testing::randomInputs(rows, {{"N", 1 << 21}, {"D", 0}}, 1)).at("y");
  REQUIRE(sums.numel() == 1 << 21);
  CHECK((sums.get(0).f == 0 && sums.get(sums.numel() - 1).f == 0));
}

TEST_CASE("the generated code gives each reduction's identity over an empty axis", "[empty]") {
  tensor::Kernel kernel = onlyKernel(kReductions);
  sim::SimulatedKernel program(kernel, cudaOf(kernel));
  for (int64_t rows : {1, 5, 300}) {
    KernelRun ran = runAt(kernel, program, {{"N", rows}, {"D", 0}});
    REQUIRE_FALSE(ran.failure);
    requireIdentities(ran.outputs, rows);
  }
}

TEST_CASE("a host function whose outputs are all empty returns 0 and launches nothing", "[empty]") {
  tensor::Kernel softmax = testing::kernelsOf(fs::path(EMMY_SOURCE_DIR) / "examples/softmax.emmy").at(0);
  std::unique_ptr<sim::SimulatedKernel> none = countingLaunches(softmax, 0);
  for (const auto& sizes : testing::sizesWithOneEmpty(softmax)) CHECK_FALSE(runAt(softmax, *none, sizes).failure);
  // The count is seen: with rows and columns the kernel is launched.
  KernelRun launched = runAt(softmax, *none, {{"N", 2}, {"D", 3}});
  REQUIRE(launched.failure);
  CHECK_THAT(*launched.failure, Catch::Contains("launched 1 kernels, expected 0"));

  // An empty output beside another: only the other's kernel runs, and computes it.
  tensor::Kernel two = onlyKernel(kTwoOutputs);
  REQUIRE(testing::withoutWideTwins(lower(two, PipelineOptions{}).kernel).size() == 2);
  std::unique_ptr<sim::SimulatedKernel> one = countingLaunches(two, 1);
  for (const auto& sizes : testing::sizesWithOneEmpty(two)) {
    REQUIRE_FALSE(runAt(two, *one, sizes).failure);
    testing::checkAgainstEvaluator(two, *one, sizes, 5);
  }
  CHECK(runAt(two, *one, {{"N", 0}, {"M", 0}}).failure);  // launches nothing, not one
}

TEST_CASE("emmy check reads 0-length .npy inputs and saves 0-length outputs", "[empty]") {
  TemporaryFolder scratch;
  const fs::path source = scratch.path() / "two.emmy", inputs = scratch.path() / "in", saved = scratch.path() / "out";
  std::ofstream(source) << kTwoOutputs;
  fs::create_directories(inputs);
  writeNpy(inputs / "x.npy", Buffer(DType::F32, {0}));
  Buffer w(DType::F32, {3});
  for (int64_t j = 0; j < 3; ++j) w.set(j, Value::ofFloat(DType::F32, 0.5 * static_cast<double>(j)));
  writeNpy(inputs / "w.npy", w);

  CheckOptions options;
  options.file = source.string();
  options.inputsDir = inputs.string();
  options.saveDir = saved.string();
  const fs::path reportFile = scratch.path() / "report.txt";
  std::FILE* report = std::fopen(reportFile.c_str(), "w");
  REQUIRE(report != nullptr);
  int exitCode = runCheck(
      options, [&](const tensor::Kernel& kernel) { return cudaOf(kernel); }, simulationCompiler(), report);
  std::fclose(report);
  std::string printed = testing::readFile(reportFile);
  INFO(printed);
  CHECK(exitCode == 0);
  CHECK_THAT(printed, Catch::StartsWith("two (N=0, M=3)\n  y: empty (shape [0]), nothing to compare: ok\n  z: max abs err "));
  CHECK(readNpy(saved / "y.npy", DType::F32).shape() == std::vector<int64_t>{0});
  Buffer z = readNpy(saved / "z.npy", DType::F32);
  REQUIRE(z.numel() == 3);
  for (int64_t j = 0; j < 3; ++j) CHECK(z.get(j).f == 0.5 * static_cast<double>(j) + 1.0);
}
