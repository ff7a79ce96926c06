// Dimensions written as expressions and integer parameters (LANGUAGE.md section 2). A generator draws
// expressions of two sizes, an integer parameter and literals with + - * / (floor division), min and max
// (docs/language_extensions.md); each becomes
// the output dimension of a kernel, alone and behind a call that sets the parameter. A reference here
// evaluates the expression directly: the compiler must refuse exactly the constant expressions below 1
// or dividing by zero, and at every size the evaluator and the simulated launcher must give the
// reference's dimension, or the error it calls for (a division by zero, a negative dimension).
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <set>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "backend/sim/simulator.h"
#include "compiler/pipeline.h"
#include "frontend/frontend.h"
#include "ir/tensor/build.h"
#include "ir/tensor/evaluator.h"
#include "support/diagnostics.h"
#include "test_kernels.h"

namespace {

using namespace emmy;

struct DimTree {
  char op = 0;  // 0: a leaf; 'm' and 'M': min and max
  std::string leaf;  // "A", "B", "P" or a literal
  std::shared_ptr<DimTree> lhs, rhs;

  std::string text() const {
    if (!op) return leaf;
    if (op == 'm' || op == 'M') return fmt::format("{}({}, {})", op == 'm' ? "min" : "max", lhs->text(), rhs->text());
    return fmt::format("({} {} {})", lhs->text(), op, rhs->text());
  }
  bool hasSizes() const { return op ? lhs->hasSizes() || rhs->hasSizes() : leaf == "A" || leaf == "B"; }
  // The value, or nullopt for a division by zero.
  std::optional<int64_t> value(int64_t a, int64_t b, int64_t p) const {
    if (!op) return leaf == "A" ? a : leaf == "B" ? b : leaf == "P" ? p : std::stoll(leaf);
    std::optional<int64_t> l = lhs->value(a, b, p), r = rhs->value(a, b, p);
    if (!l || !r) return std::nullopt;
    switch (op) {
      case '+': return *l + *r;
      case '-': return *l - *r;
      case '*': return *l * *r;
      case 'm': return std::min(*l, *r);
      case 'M': return std::max(*l, *r);
      default: return *r == 0 ? std::nullopt : std::optional(tensor::floorDivide(*l, *r));
    }
  }
};

std::shared_ptr<DimTree> randomTree(std::mt19937_64& random, int depth) {
  auto tree = std::make_shared<DimTree>();
  if (depth == 0 || random() % 3 == 0) {
    const char* leaves[] = {"A", "B", "P", "1", "2", "3", "5"};
    tree->leaf = leaves[random() % 7];
    return tree;
  }
  tree->op = "+-*/mM"[random() % 6];
  tree->lhs = randomTree(random, depth - 1);
  tree->rhs = randomTree(random, depth - 1);
  // Mostly by a number or the parameter, as strides and groups are, sometimes by sizes; often of a
  // numerator that may be negative, as a window larger than its input makes.
  if (tree->op == '/' && random() % 4 != 0) {
    tree->rhs = std::make_shared<DimTree>();
    tree->rhs->leaf = random() % 3 == 0 ? "P" : std::to_string(2 + random() % 3);
  }
  if (tree->op == '/' && random() % 2 == 0) {
    auto window = std::make_shared<DimTree>();
    window->leaf = "5";
    tree->lhs = std::make_shared<DimTree>(DimTree{'-', "", tree->lhs, window});
  }
  return tree;
}

// The kernels of `source`, or nullopt with the diagnostics in `errors`.
std::optional<std::vector<tensor::Kernel>> elaborate(const std::string& source, std::string& errors) {
  Diagnostics diagnostics;
  Frontend frontend(diagnostics, {Frontend::defaultStdlibDir()});
  std::vector<tensor::Kernel> kernels;
  if (const ast::Module* module = frontend.loadText("dims.emmy", source, ".")) kernels = frontend.elaborateAll(*module);
  errors = diagnostics.render();
  if (diagnostics.hasErrors()) return std::nullopt;
  return kernels;
}

}  // namespace

TEST_CASE("a dimension expression has the value of floor-division arithmetic at every size, alone and through a call",
          "[dims][sweep]") {
  std::mt19937_64 random(7);
  int simulated = 0;
  for (int program = 0; program < 60; ++program) {
    std::shared_ptr<DimTree> tree = randomTree(random, 3);
    int64_t p = static_cast<int64_t>(random() % 4);
    std::string text = tree->text();
    // The caller writes the callee's dimension with the parameter's value in its place.
    std::string callerText = text;
    for (size_t at = callerText.find('P'); at != std::string::npos; at = callerText.find('P', at))
      callerText.replace(at, 1, std::to_string(p + 1));
    std::string source = fmt::format(
        "kernel k<P: i64 = {}>(a: f32[A], b: f32[B]) -> (y: f32[{}]) {{\n  y[i] = f32(i)\n}}\n"
        "kernel caller(a: f32[A], b: f32[B]) -> (y: f32[{}]) {{\n  y = k(a, b, P={})\n}}\n",
        p, text, callerText, p + 1);
    INFO(source);
    std::string errors;
    std::optional<std::vector<tensor::Kernel>> kernels = elaborate(source, errors);
    INFO(errors);
    if (!tree->hasSizes()) {
      // A constant: refused below 1 or where it divides by zero, with the reason.
      std::optional<int64_t> alone = tree->value(0, 0, p), called = tree->value(0, 0, p + 1);
      bool fine = alone && *alone >= 1 && called && *called >= 1;
      CHECK(kernels.has_value() == fine);
      if (!fine)
        CHECK((errors.find("a dimension must be at least 1") != std::string::npos ||
               errors.find("divides by zero") != std::string::npos));
      continue;
    }
    if (!kernels) {
      // Refused: a division by what is zero at every size, or what is a constant below 1 at every size
      // once the algebra is done (A - A, (A/2)*0).
      bool belowOne = false;  // in one of the two instances
      for (int64_t parameter : {p, p + 1}) {
        std::set<std::optional<int64_t>> values;
        for (int64_t a = 0; a < 10; ++a)
          for (int64_t b = 0; b < 10; ++b) values.insert(tree->value(a, b, parameter));
        belowOne = belowOne || std::all_of(values.begin(), values.end(), [](const auto& v) { return !v || *v < 1; });
      }
      CHECK((errors.find("divides by zero") != std::string::npos ||
             (belowOne && errors.find("a dimension must be at least 1") != std::string::npos)));
      continue;
    }
    REQUIRE(kernels->size() == 2);
    // The launcher's own arithmetic runs in the simulation: for programs with quotients, which round, or
    // with min and max.
    bool simulate = simulated < 10 && text.find_first_of("/m") != std::string::npos;
    simulated += simulate;
    for (const tensor::Kernel& kernel : *kernels) {
      int64_t parameter = kernel.name == "k" ? p : p + 1;
      std::unique_ptr<sim::SimulatedKernel> program;
      if (simulate) program = std::make_unique<sim::SimulatedKernel>(kernel, emitCudaFiles({lower(kernel, PipelineOptions{})}, "dims.emmy"));
      for (int64_t a : {1, 2, 5, 9})
        for (int64_t b : {0, 1, 3, 8}) {
          INFO(kernel.name << " at A=" << a << " B=" << b);
          tensor::EvaluationInputs inputs;
          inputs.tensors.emplace("a", Buffer(DType::F32, {a}));
          inputs.tensors.emplace("b", Buffer(DType::F32, {b}));
          std::optional<int64_t> expected = tree->value(a, b, parameter);
          if (expected && *expected < 0) {
            CHECK_THROWS_WITH(tensor::evaluate(kernel, inputs), Catch::Contains("which is negative"));
            continue;
          }
          if (!expected) {
            // The reference divides by zero; the compiler may have cancelled that quotient ((A/(B-1))*0 + A).
            try {
              tensor::evaluate(kernel, inputs);
            } catch (const tensor::EvaluationError& error) {
              CHECK_THAT(error.what(), Catch::Contains("divides by zero") || Catch::Contains("which is negative"));
            }
            continue;
          }
          std::map<std::string, Buffer> outputs = tensor::evaluate(kernel, inputs);
          REQUIRE(outputs.at("y").shape() == std::vector<int64_t>{*expected});
          for (int64_t i = 0; i < *expected; ++i) CHECK(outputs.at("y").get(i).f == static_cast<double>(i));
          if (program) testing::checkAgainstEvaluator(kernel, *program, inputs);
        }
    }
  }
  CHECK(simulated == 10);
}
