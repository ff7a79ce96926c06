// Loop IR: the fusion and kernel boundaries keep the meaning (the interpreted loops agree bit for bit
// with the Tensor IR evaluator, since both reduce in the same order), and the default policy fuses
// what it should.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "compiler/pipeline.h"
#include "ir/loop/interpreter.h"
#include "ir/tensor/evaluator.h"
#include "test_kernels.h"

namespace {

namespace fs = std::filesystem;
using namespace emmy;

const fs::path kSourceDir = EMMY_SOURCE_DIR;
using testing::kernelsOf;

void requireIdentical(const Buffer& expected, const Buffer& actual) {
  REQUIRE(expected.dtype() == actual.dtype());
  REQUIRE(expected.shape() == actual.shape());
  for (int64_t i = 0; i < expected.numel(); ++i) {
    Value e = expected.get(i), a = actual.get(i);
    bool same = isFloat(e.dtype) ? (e.f == a.f || (std::isnan(e.f) && std::isnan(a.f))) : e.i == a.i;
    if (!same) FAIL("element " << i << ": evaluator " << e.toString() << ", loops " << a.toString());
  }
}

}  // namespace

TEST_CASE("interpreted Loop IR agrees with the Tensor IR evaluator on every example and stdlib kernel", "[loop-ir]") {
  PipelineOptions options;
  for (const fs::path& source : testing::loweringSources()) {
    for (const tensor::Kernel& kernel : kernelsOf(source)) {
      Lowered lowered = lower(kernel, options);
      for (int64_t size : {1, 3, 7}) {
        INFO(kernel.instanceName() << " with every size " << size);
        tensor::EvaluationInputs inputs = testing::randomInputs(kernel, testing::everySize(kernel, size, 2e5), 42 + size);
        std::map<std::string, Buffer> expected = tensor::evaluate(kernel, inputs);
        std::map<std::string, Buffer> actual = loop::interpret(lowered.loop, inputs);
        for (const auto& [name, buffer] : expected) requireIdentical(buffer, actual.at(name));
      }
    }
  }
}

TEST_CASE("interpreted Loop IR agrees with the evaluator with each size 0 in turn", "[loop-ir][empty]") {
  for (const fs::path& source : testing::loweringSources()) {
    for (const tensor::Kernel& kernel : kernelsOf(source)) {
      Lowered lowered = lower(kernel, PipelineOptions{});
      for (const std::map<std::string, int64_t>& sizes : testing::sizesWithOneEmpty(kernel)) {
        INFO(kernel.instanceName() << " with" << testing::describeSizes(sizes));
        tensor::EvaluationInputs inputs = testing::randomInputs(kernel, sizes, 7);
        std::map<std::string, Buffer> expected = tensor::evaluate(kernel, inputs);
        std::map<std::string, Buffer> actual = loop::interpret(lowered.loop, inputs);
        for (const auto& [name, buffer] : expected) requireIdentical(buffer, actual.at(name));
      }
    }
  }
}

TEST_CASE("softmax, layernorm and rmsnorm lower to one kernel each, and a matmul's epilogue joins it", "[loop-ir]") {
  auto kernelCount = [](const fs::path& file, const std::string& instance) {
    for (const tensor::Kernel& kernel : kernelsOf(file))
      if (kernel.instanceName() == instance) return lower(kernel, PipelineOptions{}).loop.kernels.size();
    FAIL("no kernel " << instance);
    return size_t{0};
  };
  for (const char* name : {"softmax_f32", "log_softmax_f16", "layernorm_bf16", "rmsnorm_f32"})
    CHECK(kernelCount(kSourceDir / "stdlib/nn.emmy", name) == 1);
  CHECK(kernelCount(kSourceDir / "examples/softmax.emmy", "softmax") == 1);
  CHECK(kernelCount(kSourceDir / "examples/layernorm.emmy", "layernorm") == 1);
  CHECK(kernelCount(kSourceDir / "examples/linear_relu.emmy", "linear_relu") == 1);
  CHECK(kernelCount(kSourceDir / "stdlib/linalg.emmy", "matmul_f16") == 1);
  // mlp: each linear layer (contraction + bias + gelu) is one kernel.
  CHECK(kernelCount(kSourceDir / "stdlib/nn.emmy", "mlp_f32") == 2);
}

TEST_CASE("elementwise outputs over the same extents are stored by one kernel, unless the schedule keeps them apart", "[loop-ir]") {
  // The kernels of a program of outputs y and z (and `extra` stages), with `schedule` as its schedule
  // block's directives, each as the stages it computes.
  auto nests = [](const std::string& stages, const std::string& outputs, const std::string& schedule) {
    std::string source = fmt::format("kernel k(x: f32[N, D], b: f32[D]) -> ({}) {{\n{}}}\n", outputs, stages);
    if (!schedule.empty()) source += fmt::format("schedule k {{\n{}}}\n", schedule);
    std::vector<tensor::Kernel> kernels = testing::kernelsOfText(source);
    REQUIRE(kernels.size() == 1);
    std::vector<std::vector<std::string>> found;
    for (const loop::LoopNest& nest : lower(kernels[0], PipelineOptions{}).loop.kernels) found.push_back(nest.stages);
    return found;
  };
  using Nests = std::vector<std::vector<std::string>>;
  const std::string pair = "    y[n, d] = gelu(x[n, d] + b[d])\n    z[n, d] = tanh(x[n, d] + b[d])\n";
  const std::string two = "y: f32[N, D], z: f32[N, D]";
  CHECK(nests(pair, two, "") == Nests{{"y", "z"}});
  CHECK(nests(pair + "    w[n, d] = x[n, d] * 2\n", two + ", w: f32[N, D]", "") == Nests{{"y", "z", "w"}});
  CHECK(nests(pair, two, "    compute y at z.d\n") == Nests{{"y", "z"}});
  CHECK(nests(pair, two, "    compute z at y.d\n") == Nests{{"z", "y"}});
  // The schedule keeps them apart: y as a root, or y's loops scheduled (then y keeps them).
  CHECK(nests(pair, two, "    root y\n") == Nests{{"y"}, {"z"}});
  CHECK(nests(pair, two, "    fuse y (n, d) -> nd\n") == Nests{{"y"}, {"z"}});
  // What cannot be stored beside: an output another stage reads, other extents, a reduction, and an
  // output whose kernel computes a row value. A row value of a kernel before both can be read.
  CHECK(nests("    y[n, d] = x[n, d] * 2\n    z[n, d] = y[n, d] + 1\n", two, "") == Nests{{"y"}, {"z"}});
  CHECK(nests("    y[n, d] = x[n, d] * 2\n    z[d, n] = x[n, d] + 1\n", "y: f32[N, D], z: f32[D, N]", "") ==
        Nests{{"y"}, {"z"}});
  CHECK(nests("    y[n, d] = x[n, d] * 2\n    z[n] = sum[d](x[n, d])\n", "y: f32[N, D], z: f32[N]", "") == Nests{{"y"}, {"z"}});
  CHECK(nests("    y[n, d] = x[n, d] * 2\n    m[n] = max[d](x[n, d])\n    z[n, d] = x[n, d] - m[n]\n", two, "") ==
        Nests{{"y"}, {"m", "z"}});
  CHECK(nests("    t[n] = sum[d](x[n, d])\n    y[n, d] = x[n, d] * 2\n    z[n, d] = x[n, d] / t[n]\n", two,
              "    root t\n") == Nests{{"t"}, {"y", "z"}});
}
