// Kernels with 32-bit indices (ir/kernel/index_widths.h): the bounds of index arithmetic hold for every
// value a thread computes, and the launcher runs the 32-bit kernel exactly where the bound is below 2^31.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>

#include <fmt/format.h>

#include "backend/nvrtc.h"
#include "backend/sim/simulator.h"
#include "compiler/pipeline.h"
#include "ir/kernel/index_widths.h"
#include "ir/kernel/printer.h"
#include "ir/tensor/printer.h"
#include "ir/tensor/scalar_ops.h"
#include "performance/performance.h"
#include "test_kernels.h"

namespace emmy {

namespace {

using namespace tensor;
using kernel::IndexBound;

ExprPtr constant(int64_t value) { return std::make_shared<IntImm>(DType::I64, value); }
ExprPtr variable(const std::string& name) { return std::make_shared<AxisVar>(name); }
ExprPtr binary(BinaryOp op, ExprPtr a, ExprPtr b) {
  return std::make_shared<Binary>(isComparison(op) ? DType::Bool : DType::I64, op, std::move(a), std::move(b));
}

const char* const kDerived = "N - D";  // a derived size: negative where D > N

// Random index arithmetic over the sizes, the hardware indices and the variables in scope.
struct ExprGenerator {
  std::mt19937& random;
  std::vector<std::string> variables;

  int pick(int least, int most) { return std::uniform_int_distribution<int>(least, most)(random); }
  ExprPtr leaf() {
    switch (pick(0, 6)) {
      case 0: return constant(pick(-6, 300));
      case 1: return std::make_shared<SizeVar>("N");
      case 2: return std::make_shared<SizeVar>("D");
      case 3: return std::make_shared<SizeVar>(kDerived);
      case 4: return variable(pick(0, 1) ? "threadIdx.x" : "blockIdx.x");
      case 5: return variable(pick(0, 1) ? "blockDim.x" : "gridDim.x");
      default: return variables.empty() ? constant(pick(0, 9)) : variable(variables[pick(0, variables.size() - 1)]);
    }
  }
  // A constant, a size, a product of sizes and constants (the extents a flat index is divided by), or any.
  ExprPtr divisor(ExprPtr any) {
    switch (pick(0, 3)) {
      case 0: return constant(pick(-4, 300));
      case 1: return leaf();
      case 2:
        return binary(BinaryOp::Mul, std::make_shared<SizeVar>(pick(0, 1) ? "N" : kDerived),
                      pick(0, 1) ? constant(pick(1, 8)) : std::make_shared<SizeVar>("D"));
      default: return any;
    }
  }
  ExprPtr expression(int depth) {
    if (depth == 0 || pick(0, 3) == 0) return leaf();
    ExprPtr a = expression(depth - 1), b = expression(depth - 1);
    switch (pick(0, 12)) {
      case 0: case 1: return binary(BinaryOp::Add, a, b);
      case 2: return binary(BinaryOp::Sub, a, b);
      case 3: case 4: return binary(BinaryOp::Mul, a, b);
      case 5: return binary(BinaryOp::Div, a, divisor(b));
      case 6: return binary(BinaryOp::Mod, a, pick(0, 1) ? constant(pick(-4, 300)) : b);
      case 7: return binary(BinaryOp::Min, a, b);
      case 8: return binary(BinaryOp::Max, a, b);
      case 9: return std::make_shared<Unary>(DType::I64, pick(0, 1) ? UnaryOp::Neg : UnaryOp::Abs, a);
      case 10: return std::make_shared<Select>(binary(BinaryOp::Lt, a, b), b, expression(depth - 1));
      case 11: return std::make_shared<Select>(binary(BinaryOp::Ge, a, constant(0)), a, constant(0));
      // One value spelled twice, which cancels: a copy's step is such a difference.
      default: return binary(BinaryOp::Sub, binary(BinaryOp::Add, a, b), pick(0, 1) ? a : variables.empty() ? b : variable(variables.back()));
    }
  }
};

int64_t evaluate(const Expr& e, const std::map<std::string, int64_t>& values) {
  if (const auto* immediate = e.as<IntImm>()) return immediate->value;
  if (const auto* size = e.as<SizeVar>()) return values.at(size->name);
  if (const auto* var = e.as<AxisVar>()) return values.at(var->name);
  if (const auto* unary = e.as<Unary>())
    return applyUnary(unary->op, DType::I64, Value::ofInt(DType::I64, evaluate(*unary->operand, values))).asInt();
  if (const auto* select = e.as<Select>())
    return evaluate(*select->condition, values) ? evaluate(*select->ifTrue, values) : evaluate(*select->ifFalse, values);
  const auto& node = *e.as<Binary>();
  return applyBinary(node.op, DType::I64, Value::ofInt(DType::I64, evaluate(*node.lhs, values)),
                     Value::ofInt(DType::I64, evaluate(*node.rhs, values)))
      .asInt();
}

// A bound at the sizes: each size at its magnitude.
double at(const IndexBound& bound, const std::map<std::string, int64_t>& sizes) {
  double total = 0;
  for (const auto& [monomial, coefficient] : bound.terms) {
    double term = coefficient;
    for (const std::string& size : monomial) term *= std::fabs(static_cast<double>(sizes.at(size)));
    total += term;
  }
  return total;
}

}  // namespace

TEST_CASE("index bounds hold for every value each thread computes, at every size, and the kernel's bound above them all",
          "[index]") {
  std::mt19937 random(20261206);
  int checked = 0;
  for (int trial = 0; trial < 250; ++trial) {
    ExprGenerator generate{random, {}};
    // A nest of up to three loops (begins that may be negative, ends of any sign, steps of 1 to 3 or the
    // grid's size), a let, and a store whose index and value are index arithmetic.
    int depth = generate.pick(1, 3);
    struct Loop {
      std::string var;
      ExprPtr begin, end, step;
    };
    std::vector<Loop> loops;
    for (int d = 0; d < depth; ++d) {
      Loop loop{fmt::format("v{}", d), generate.expression(2), generate.expression(2),
                generate.pick(0, 3) == 0 ? variable("gridDim.x") : constant(generate.pick(1, 3))};
      generate.variables.push_back(loop.var);
      loops.push_back(loop);
    }
    ExprPtr letValue = generate.expression(3);
    generate.variables.push_back("l");
    ExprPtr index = generate.expression(4), value = generate.expression(4);
    kernel::StmtPtr body = std::make_shared<kernel::Block>(std::vector<kernel::StmtPtr>{
        std::make_shared<kernel::Let>("l", letValue),
        std::make_shared<kernel::Store>("y", index, std::make_shared<Cast>(DType::F32, value))});
    for (int d = depth - 1; d >= 0; --d)
      body = std::make_shared<kernel::For>(loops[d].var, loops[d].begin, loops[d].end, loops[d].step,
                                           std::make_shared<kernel::Block>(std::vector<kernel::StmtPtr>{body}));
    kernel::Function function;
    function.name = "k";
    function.blockThreads = {generate.pick(0, 1) ? 32 : 64, 1, 1};
    function.gridBlocks = {binary(BinaryOp::Min, binary(BinaryOp::Max, std::make_shared<SizeVar>("N"), constant(1)), constant(5)),
                           constant(1), constant(1)};
    function.body = body;
    INFO(kernel::printProgram(kernel::Program{{}, {}, {function}}));
    IndexBound most = kernel::indexBoundOf(function);

    for (int sizesTrial = 0; sizesTrial < 4; ++sizesTrial) {
      std::map<std::string, int64_t> values{{"N", generate.pick(0, 40)}, {"D", generate.pick(0, 40)}};
      values[kDerived] = values["N"] - values["D"];
      int64_t grid = std::min<int64_t>(std::max<int64_t>(values["N"], 1), 5);
      values["blockDim.x"] = function.blockThreads[0];
      values["gridDim.x"] = grid;
      values["threadIdx.x"] = generate.pick(0, function.blockThreads[0] - 1);
      values["blockIdx.x"] = generate.pick(0, static_cast<int>(grid) - 1);
      INFO(fmt::format("N={} D={} thread {} block {}", values["N"], values["D"], values["threadIdx.x"], values["blockIdx.x"]));
      // Each index value against its own bound (as the analysis sees it there) and the kernel's.
      kernel::IndexArithmetic indices(function);
      auto within = [&](const ExprPtr& e) {
        std::function<void(const Expr&)> each = [&](const Expr& node) {
          // Values whose bound would pass 2^62 are no index arithmetic: they stay in 64 bits.
          std::optional<IndexBound> bound = indices.boundOf(node);
          if (node.dtype == DType::I64 && bound) {
            double magnitude = std::fabs(static_cast<double>(evaluate(node, values)));
            INFO(printExpr(node));
            REQUIRE(magnitude <= at(*bound, values));
            REQUIRE(magnitude <= at(most, values));
            if (bound->nonnegative) REQUIRE(evaluate(node, values) >= 0);
            ++checked;
          }
          if (const auto* b = node.as<Binary>()) each(*b->lhs), each(*b->rhs);
          if (const auto* u = node.as<Unary>()) each(*u->operand);
          if (const auto* s = node.as<Select>()) each(*s->condition), each(*s->ifTrue), each(*s->ifFalse);
        };
        each(*e);
      };
      int iterations = 0;
      std::function<void(int)> run = [&](int d) {
        if (d == depth) {
          within(letValue);
          values["l"] = evaluate(*letValue, values);
          kernel::Let let("l", letValue);
          indices.openScope();
          indices.define(let);
          within(index), within(value);
          indices.closeScope();
          values.erase("l");
          return;
        }
        const Loop& loop = loops[d];
        within(loop.begin), within(loop.end), within(loop.step);
        kernel::For header(loop.var, loop.begin, loop.end, loop.step, nullptr);
        indices.openScope();
        std::optional<IndexBound> increment = indices.define(header);
        for (int64_t v = evaluate(*loop.begin, values); v < evaluate(*loop.end, values) && iterations < 500;
             v += evaluate(*loop.step, values), ++iterations) {
          values[loop.var] = v;
          if (increment) {
            REQUIRE(std::fabs(static_cast<double>(v + evaluate(*loop.step, values))) <= at(*increment, values));
            REQUIRE(std::fabs(static_cast<double>(v + evaluate(*loop.step, values))) <= at(most, values));
          }
          run(d + 1);
        }
        values.erase(loop.var);
        indices.closeScope();
      };
      run(0);
    }
  }
  CHECK(checked > 100000);
}

TEST_CASE("a difference bounds through its exact form: a copy's step cancels, and a shadowing name is another value",
          "[index]") {
  // for a < N: for k < D: let source = a * D + k; let step = a * D + (k + 8) - source (8), and inside a
  // loop that shadows `k` (to N * N), `step2 = a * D + k + 8 - source` (not 8: this k is another).
  auto loop = [](const std::string& var, ExprPtr end, kernel::StmtPtr body) {
    return std::make_shared<kernel::For>(var, constant(0), std::move(end), constant(1), std::move(body));
  };
  ExprPtr rowStart = binary(BinaryOp::Mul, variable("a"), std::make_shared<SizeVar>("D"));
  ExprPtr source = binary(BinaryOp::Add, rowStart, variable("k"));
  ExprPtr step = binary(BinaryOp::Sub, binary(BinaryOp::Add, rowStart, binary(BinaryOp::Add, variable("k"), constant(8))),
                        variable("source"));
  kernel::Function function;
  function.name = "k";
  function.blockThreads = {32, 1, 1};
  function.gridBlocks = {constant(1), constant(1), constant(1)};
  kernel::IndexArithmetic indices(function);
  indices.openScope();
  indices.define(*loop("a", std::make_shared<SizeVar>("N"), nullptr));
  indices.openScope();
  indices.define(*loop("k", std::make_shared<SizeVar>("D"), nullptr));
  indices.define(kernel::Let("source", source));
  std::optional<IndexBound> bound = indices.boundOf(*step);
  REQUIRE(bound);
  CHECK(bound->terms == std::map<std::vector<std::string>, double>{{{}, 8.0}});
  indices.openScope();
  ExprPtr square = binary(BinaryOp::Mul, std::make_shared<SizeVar>("N"), std::make_shared<SizeVar>("N"));
  indices.define(*loop("k", square, nullptr));
  std::optional<IndexBound> shadowed = indices.boundOf(*step);
  REQUIRE(shadowed);
  CHECK(shadowed->terms.count({"N", "N"}) == 1);
}

TEST_CASE("matmul<f32>'s copy steps cancel, so that its 32-bit kernel runs at 4096 cubed", "[index]") {
  for (const Kernel& kernel : testing::kernelsOf(std::filesystem::path(EMMY_SOURCE_DIR) / "stdlib" / "linalg.emmy")) {
    if (kernel.instanceName() != "matmul_f32") continue;
    Lowered lowered = lower(kernel, PipelineOptions{});
    std::map<std::string, int64_t> sizes{{"M", 4096}, {"N", 4096}, {"K", 4096}};
    for (const kernel::Function& function : lowered.kernel.functions) {
      if (function.indexBits != 32) continue;
      IndexBound bound = kernel::indexBoundOf(function);
      INFO(function.name);
      for (const auto& [monomial, coefficient] : bound.terms) CHECK(monomial.size() <= 2);
      CHECK(at(bound, sizes) <= kernel::kIndexLimit);
    }
  }
}

TEST_CASE("the launcher runs a kernel's 32-bit indices exactly where its bound is at most the limit, and the 64-bit "
          "twin elsewhere",
          "[index]") {
  // A row kernel (two passes over a row, a copy in shared memory) and a window whose output size is
  // derived (`H - K + 1`); the simulation's limit set at the bound at these sizes, and one below it.
  const std::string source = R"(
kernel rows(x: f32[N, D]) -> (y: f32[N, D]) {
    m[n] = max[d](x[n, d])
    y[n, d] = x[n, d] - m[n]
}
kernel window(x: f32[N, H], w: f32[K]) -> (y: f32[N, H - K + 1]) {
    y[n, i] = sum[k](x[n, i + k] * w[k])
}
)";
  for (const Kernel& kernel : testing::kernelsOfText(source)) {
    Lowered lowered = lower(kernel, PipelineOptions{});
    sim::SimulationOptions options;
    options.profile = true;
    sim::CudaSource cuda = emitCudaFiles({lowered}, "widths.emmy");
    // The two kernels of each pair share one body, printed once, over the index type.
    for (const kernel::Function& function : lowered.kernel.functions) {
      if (!function.isWideTwin()) continue;
      std::string narrow = function.name.substr(0, function.name.size() - std::string_view(kernel::kWideTwinSuffix).size());
      auto count = [&](const std::string& text) {
        size_t found = 0;
        for (size_t at = cuda.source.find(text); at != std::string::npos; at = cuda.source.find(text, at + 1)) ++found;
        return found;
      };
      CHECK(count("void " + narrow + "__body(") == 1);
      CHECK(count(narrow + "__body<int32_t>(") == 1);
      CHECK(count(narrow + "__body<int64_t>(") == 1);
    }
    sim::SimulatedKernel program(kernel, cuda, options);
    std::map<std::string, int64_t> sizes = kernel.name == "rows" ? std::map<std::string, int64_t>{{"N", 5}, {"D", 37}}
                                                                 : std::map<std::string, int64_t>{{"N", 3}, {"H", 29}, {"K", 4}};
    std::map<std::string, int64_t> boundSizes = sizes;
    for (const DerivedSize& derived : kernel.derivedSizes) boundSizes[derived.name] = sizes["H"] - sizes["K"] + 1;
    for (const kernel::Function& function : lowered.kernel.functions) {
      if (function.indexBits != 32) continue;
      INFO(function.name);
      double bound = at(kernel::indexBoundOf(function), boundSizes);
      for (double limit : {std::floor(bound), std::floor(bound) - 1}) {
        testing::ScopedEnvironment environment("EMMY_SIM_INDEX_LIMIT", std::to_string(static_cast<int64_t>(limit)));
        KernelRun run = program.run(testing::randomInputs(kernel, sizes, 7));
        REQUIRE_FALSE(run.failure);
        std::vector<std::string> ran;
        for (const sim::KernelProfile& profiled : run.profile->kernels) ran.push_back(profiled.name);
        std::string expected = limit >= bound ? function.name : function.name + "__i64";
        CHECK(std::count(ran.begin(), ran.end(), expected) == 1);
      }
    }
  }
}
TEST_CASE("index_bits ROOT 64, or -D ROOT_index_bits=64 of the default policy's param, keeps a kernel's indices "
          "64-bit at every size",
          "[index][schedule]") {
  const std::string source = R"(
kernel rows(x: f32[N, D]) -> (y: f32[N, D]) {
    m[n] = max[d](x[n, d])
    y[n, d] = x[n, d] - m[n]
}
schedule rows {
    index_bits y 64
}
kernel scaled(x: f32[N, D]) -> (y: f32[N, D]) {
    y[n, d] = x[n, d] * 2.0
}
)";
  for (Kernel kernel : testing::kernelsOfText(source)) {
    bool scheduled = kernel.name == "rows";
    for (int64_t bits : {32, 64}) {
      if (scheduled && bits == 32) continue;
      if (!scheduled) kernel.paramValues["y_index_bits"] = bits;
      INFO(kernel.name << " with " << bits << "-bit indices");
      Lowered lowered = lower(kernel, PipelineOptions{});
      const std::vector<std::string>& schedule = lowered.tile.schedule;
      CHECK(std::count(schedule.begin(), schedule.end(), scheduled ? "index_bits y 64" : "index_bits y y_index_bits") == 1);
      if (!scheduled) {
        REQUIRE(lowered.tile.params.size() >= 1);
        CHECK(printParam(lowered.tile.params.back()) == "param y_index_bits in [32, 64] = 32");
      }
      // 64: one kernel each, 64-bit; 32: a 32-bit kernel and its twin each.
      for (const kernel::Function& function : lowered.kernel.functions) {
        if (bits == 64) CHECK(function.indexBits == 64);
        CHECK((function.indicesFit == nullptr) == (bits == 64));
      }
      sim::CudaSource cuda = emitCudaFiles({lowered}, "bits.emmy");
      CHECK((cuda.source.find("emmy_index_t") != std::string::npos) == (bits == 32));
      sim::SimulatedKernel program(kernel, cuda);
      int seed = 0;
      for (const std::map<std::string, int64_t>& sizes : std::vector<std::map<std::string, int64_t>>{
               {{"N", 3}, {"D", 37}}, {{"N", 1}, {"D", 1}}, {{"N", 0}, {"D", 5}}, {{"N", 70}, {"D", 9}}})
        testing::checkAgainstEvaluator(kernel, program, sizes, ++seed);
    }
  }
}

TEST_CASE("the static model of --stats counts the 32-bit kernel where the indices fit and the 64-bit twin beyond",
          "[index][stats]") {
  // softmax<f32>'s rows of 65536: 2^30 elements fit 32-bit indices, 40000 rows (2.6 * 10^9) do not.
  tensor::Kernel softmax;
  for (const tensor::Kernel& kernel : testing::kernelsOf(std::filesystem::path(EMMY_SOURCE_DIR) / "stdlib" / "nn.emmy"))
    if (kernel.instanceName() == "softmax_f32") softmax = kernel;
  std::vector<Lowered> lowered{lower(softmax, PipelineOptions{})};
  CudaCompileResult compiled = compileCuda(emitCudaFiles(lowered, "nn.emmy").source, "nn.cu", "sm_90", true);
  REQUIRE(compiled.ok);
  for (int64_t rows : {16384, 40000}) {
    std::vector<std::string> report =
        performanceReport(lowered, resourceUsage(compiled), compiled.ptx, "sm_90", {{"N", rows}, {"D", 65536}});
    bool fits = rows == 16384;
    REQUIRE(report.size() == lowered[0].kernel.functions.size());
    for (size_t k = 0; k < report.size(); ++k) {
      const kernel::Function& function = lowered[0].kernel.functions[k];
      if (function.name.find("LANES256") == std::string::npos) continue;
      const std::string& kernel = report[k];
      INFO(function.name << ": " << kernel);
      bool launched = kernel.find("not launched") == std::string::npos;
      CHECK(launched == (fits != function.isWideTwin()));
      if (launched) continue;
      CHECK(kernel.find(fits ? "(it runs where not " : "(it runs where ") != std::string::npos);
      CHECK((kernel.find("(it runs where not ") != std::string::npos) == fits);
    }
  }
}

}  // namespace emmy
