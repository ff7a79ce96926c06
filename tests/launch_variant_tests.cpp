// Params chosen at launch by sizes (docs/schedules.md): the variants a schedule builds, the launcher's
// choice between them, and what each variant's lowering knows of its sizes.
#include <catch2/catch.hpp>

#include <functional>
#include <random>

#include "backend/sim/simulator.h"
#include "compiler/pipeline.h"
#include "frontend/frontend.h"
#include "ir/tensor/launch_variants.h"
#include "ir/tile/printer.h"
#include "support/diagnostics.h"
#include "schedule_round_trip.h"
#include "test_kernels.h"

namespace emmy {

namespace {

using namespace tensor;

bool holds(const Expr& e, const std::map<std::string, int64_t>& sizes) {
  if (const auto* constant = e.as<BoolImm>()) return constant->value;
  const auto& binary = *e.as<Binary>();
  if (binary.op == BinaryOp::And) return holds(*binary.lhs, sizes) && holds(*binary.rhs, sizes);
  if (binary.op == BinaryOp::Or) return holds(*binary.lhs, sizes) || holds(*binary.rhs, sizes);
  int64_t size = sizes.at(binary.lhs->as<SizeVar>()->name), bound = binary.rhs->as<IntImm>()->value;
  REQUIRE((binary.op == BinaryOp::Ge || binary.op == BinaryOp::Le));
  return binary.op == BinaryOp::Ge ? size >= bound : size <= bound;
}

}  // namespace

TEST_CASE("launch variants: at every size exactly one variant runs, with each param's value there", "[schedule][launch]") {
  std::mt19937 random(20261203);
  auto pick = [&](int least, int most) { return std::uniform_int_distribution<int>(least, most)(random); };
  const std::vector<std::string> sizeNames{"M", "N"};
  int built = 0, refused = 0;
  for (int trial = 0; trial < 300; ++trial) {
    Kernel kernel;
    kernel.name = "k";
    kernel.sizes = sizeNames;
    std::vector<std::shared_ptr<const LaunchParam>> params;
    for (int p = pick(1, 3); p-- > 0;) {
      auto param = std::make_shared<LaunchParam>();
      param->name = "P" + std::to_string(params.size());
      param->candidates = {1, 2, 3, 4, 5};
      param->otherwise = pick(1, 5);
      for (int c = pick(1, 3); c-- > 0;)
        param->cases.push_back({Name{sizeNames[pick(0, 1)], {}}, static_cast<SizeComparison>(pick(0, 3)), pick(0, 12),
                                pick(1, 5), {}, ""});
      params.push_back(param);
      Directive split;
      split.factors = {Number{param->otherwise, {}, param->name, param}};
      kernel.schedule.push_back(split);
    }
    std::vector<LaunchVariant> variants;
    try {
      variants = launchVariants(kernel);
    } catch (const CompilationFailed&) {
      ++refused;  // more than 16 variants
      continue;
    }
    ++built;
    REQUIRE(!variants.empty());
    REQUIRE(variants.size() <= 16);
    for (int64_t m = 0; m <= 14; ++m)
      for (int64_t n = 0; n <= 14; ++n) {
        std::map<std::string, int64_t> sizes{{"M", m}, {"N", n}};
        INFO("trial " << trial << " at M=" << m << " N=" << n);
        const LaunchVariant* chosen = nullptr;
        for (const LaunchVariant& variant : variants) {
          CHECK((variant.when == nullptr) == (variants.size() == 1));
          if (!variant.when || holds(*variant.when, sizes)) {
            CHECK(chosen == nullptr);
            chosen = &variant;
          }
        }
        REQUIRE(chosen != nullptr);
        for (size_t p = 0; p < params.size(); ++p)
          CHECK(chosen->kernel.schedule[p].factors[0].value == params[p]->valueAt(sizes));
        for (const auto& [size, most] : chosen->kernel.sizeAtMost) CHECK(sizes.at(size) <= most);
      }
  }
  CHECK(built > 250);
  WARN(built << " random schedules built, " << refused << " refused for too many variants");
}

TEST_CASE("a user's row kernel with two params chosen by two sizes: each variant runs where it should",
          "[schedule][launch]") {
  const char* const source = R"(
kernel rownorm(x: f32[N, D]) -> (y: f32[N, D]) {
    s[n]    = sum[d](x[n, d] * x[n, d])
    y[n, d] = x[n, d] / sqrt(s[n] + 1)
}

schedule rownorm {
    param LANES in [32, 64, 128] = 32 if D <= 100 else 64 if D < 300 else 128
    param VEC in [1, 2, 4] = 4 if N >= 3 else 2
    bind y.n to block.x
    split y.d by VEC -> (d_vector, d_element)
    split y.d_vector by LANES -> (d_step, d_lane)
    reorder y (n, d_lane, d_step, d_element)
    bind y.d_lane to thread.x
    vectorize y.d_element
    split s.d by VEC -> (d_vector, d_element)
    split s.d_vector by LANES -> (d_step, d_lane)
    reorder s (d_lane, d_step, d_element)
    bind s.d_lane to thread.x
    vectorize s.d_element
    cache x in shared at y.n -> x_row
}
)";
  Kernel kernel = testing::kernelsOfText(source).at(0);
  Lowered lowered = lower(kernel, PipelineOptions{});
  std::vector<std::string> names;
  for (const kernel::Function* function : testing::withoutWideTwins(lowered.kernel)) names.push_back(function->name);
  // Named by the params in the order they are first used, ordered by the sizes (N, then D).
  CHECK(names == std::vector<std::string>{"rownorm__VEC2_LANES32__k0", "rownorm__VEC2_LANES64__k0",
                                          "rownorm__VEC2_LANES128__k0", "rownorm__VEC4_LANES32__k0",
                                          "rownorm__VEC4_LANES64__k0", "rownorm__VEC4_LANES128__k0"});
  std::string printed = tile::printSchedule(lowered.tile);
  CHECK(printed.find("param LANES in [32, 64, 128] = 32 if D <= 100 else 64 if D < 300 else 128\n") != std::string::npos);
  CHECK(printed.find("param VEC in [1, 2, 4] = 4 if N >= 3 else 2\n") != std::string::npos);
  cuda::GeneratedCuda files = emitCudaFiles({lowered}, "rownorm.emmy");
  // Copies sized at launch to the row: of at most the longest row of a variant for short rows, 100 floats
  // (in whole vectors), 300 floats; of 227 KiB at most for longer rows.
  CHECK(files.source.find("EMMY_SHARED_SIZED_AT_LAUNCH(float, x_row, 100, ") != std::string::npos);
  CHECK(files.source.find("EMMY_SHARED_SIZED_AT_LAUNCH(float, x_row, 300, ") != std::string::npos);
  CHECK(files.source.find("EMMY_SHARED_SIZED_AT_LAUNCH(float, x_row, 58112, ") != std::string::npos);
  // The simulation runs the host function, which picks the variant: at each side of every bound, and
  // for long rows on a device that holds them and on one that does not.
  sim::SimulatedKernel program(kernel, files);
  uint64_t seed = 3;
  for (int64_t n : {1, 2, 3, 4})
    for (int64_t d : {1, 100, 101, 299, 300, 301})
      testing::checkAgainstEvaluator(kernel, program, {{"N", n}, {"D", d}}, seed++);
  testing::checkAgainstEvaluator(kernel, program, {{"N", 2}, {"D", 8200}}, seed++);
  testing::ScopedEnvironment smallDevice("EMMY_SIM_SHARED_BYTES", "4096");
  testing::checkAgainstEvaluator(kernel, program, {{"N", 2}, {"D", 1025}}, seed++);
}

TEST_CASE("a param chosen at launch that -D sets is one variant at every size", "[schedule][launch]") {
  const char* const source = R"(
kernel rowsum(x: f32[N, D]) -> (y: f32[N]) {
    y[n] = sum[d](x[n, d])
}

schedule rowsum {
    param LANES in [32, 256] = 32 if D <= 1024 else 256
    bind y.n to block.x
    split y.d by LANES -> (d_step, d_lane)
    reorder y (n, d_lane, d_step)
    bind y.d_lane to thread.x
}
)";
  Kernel chosen = testing::kernelsOfText(source).at(0);
  CHECK(testing::withoutWideTwins(lower(chosen, PipelineOptions{}).kernel).size() == 2);
  Diagnostics diagnostics;
  Frontend frontend(diagnostics, {Frontend::defaultStdlibDir()});
  frontend.setParamValues({{"LANES", 256}});
  const ast::Module* module = frontend.loadText("rowsum.emmy", source, ".");
  REQUIRE(module);
  std::vector<Kernel> kernels = frontend.elaborateAll(*module);
  REQUIRE(kernels.size() == 1);
  Lowered lowered = lower(kernels[0], PipelineOptions{});
  std::vector<const kernel::Function*> functions = testing::withoutWideTwins(lowered.kernel);
  REQUIRE(functions.size() == 1);
  CHECK(functions[0]->name == "rowsum__k0");
  CHECK(functions[0]->blockThreads[0] == 256);
  CHECK(tile::printSchedule(lowered.tile).find("param LANES") == std::string::npos);
}

}  // namespace emmy

namespace emmy {

TEST_CASE("a param's cases on a type parameter are decided per instance, those on sizes at launch", "[schedule][launch]") {
  const char* const source = R"(
kernel rowsum<T: f16 | bf16 | f32>(x: T[N, D]) -> (y: T[N]) {
    y[n] = T(sum[d](f32(x[n, d])))
}

schedule rowsum {
    param LANES in [32, 64, 256] = 32 if T != f32 else 64 if D == 1 else 256 if D > 1000 else 64
    bind y.n to block.x
    split y.d by LANES -> (d_step, d_lane)
    reorder y (n, d_lane, d_step)
    bind y.d_lane to thread.x
}
)";
  for (const tensor::Kernel& kernel : testing::kernelsOfText(source)) {
    INFO(kernel.instanceName());
    Lowered lowered = lower(kernel, PipelineOptions{});
    std::string printed = tile::printSchedule(lowered.tile);
    std::vector<std::string> names;
    for (const kernel::Function* function : testing::withoutWideTwins(lowered.kernel)) names.push_back(function->name);
    if (kernel.typeArguments.at(0).second != DType::F32) {
      // The first case holds: a number, one kernel.
      CHECK(names == std::vector<std::string>{kernel.instanceName() + "__k0"});
      CHECK(printed.find("split y.d by 32 -> (d_step, d_lane)") != std::string::npos);
      CHECK(printed.find("param LANES") == std::string::npos);
    } else {
      // The type case is dropped; D == 1 and D > 1000 split the sizes into 1, 2..1000, 1001.. (64, 64, 256).
      CHECK(names == std::vector<std::string>{"rowsum_f32__LANES64__k0", "rowsum_f32__LANES256__k0"});
      CHECK(printed.find("param LANES in [32, 64, 256] = 64 if D == 1 else 256 if D > 1000 else 64\n") != std::string::npos);
      CHECK(emitCudaFiles({lowered}, "rowsum.emmy").source.find("  if ((D <= (int64_t)1000)) {") != std::string::npos);
    }
    sim::SimulatedKernel program(kernel, emitCudaFiles({lowered}, "rowsum.emmy"));
    uint64_t seed = 5;
    for (int64_t d : {1, 2, 1000, 1001, 3000}) testing::checkAgainstEvaluator(kernel, program, {{"N", 3}, {"D", d}}, seed++);
  }
}

}  // namespace emmy

namespace emmy {

TEST_CASE("the default policy's lanes follow a param chosen at launch, so that the printed schedule builds every variant",
          "[schedule][launch]") {
  const std::string source = R"(
kernel centered(x: f32[N, D]) -> (y: f32[N, D]) {
    mu[n]   = mean[d](x[n, d])
    y[n, d] = x[n, d] - mu[n]
}

schedule centered {
    param LANES in [8, 256] = 256 if D <= 3 else 8
    bind y.n to block.x
    split y.d by LANES -> (d_step, d_lane)
    reorder y (n, d_lane, d_step)
    bind y.d_lane to thread.x
}
)";
  Lowered lowered = lower(testing::kernelsOfText(source).at(0), PipelineOptions{});
  // mu's lanes, which the schedule leaves to the policy, are y's in each variant: 256, then 8.
  CHECK(tile::printSchedule(lowered.tile).find("split mu.d by LANES -> ") != std::string::npos);
  CHECK(testing::withoutWideTwins(lowered.kernel).size() == 2);
  CHECK(testing::checkScheduleRoundTrip(source, "centered.emmy") == 1);
}

}  // namespace emmy
