// The Tensor IR printer and verifier on kernels built by hand.
#include <functional>
#include <limits>
#include <random>

#include <catch2/catch.hpp>

#include "ir/tensor/approximate_exponentials.h"
#include "ir/tensor/build.h"
#include "ir/tensor/evaluator.h"
#include "ir/tensor/printer.h"
#include "ir/tensor/rewrite.h"
#include "ir/tensor/simplify.h"
#include "ir/tensor/verifier.h"
#include "support/diagnostics.h"
#include "tests/tensor_ir_builder.h"
#include "tests/test_kernels.h"

using namespace emmy;
using namespace emmy::tensor;
using namespace emmy::tensor::build;

namespace {

const Dim N = Dim::size("N");
const Dim D = Dim::size("D");

ExprPtr x(const char* i, const char* j) { return load(DType::F32, "x", {axis(i), axis(j)}); }

// softmax<T = f32>(x: f32[N, D], eps: f32 = 1e-5) -> (y: f32[N, D]), eps added to the denominator.
Kernel softmaxKernel() {
  Kernel kernel;
  kernel.name = "softmax";
  kernel.typeArguments = {{"T", DType::F32}};
  kernel.inputs = {tensorParam("x", DType::F32, {N, D})};
  kernel.outputs = {tensorParam("y", DType::F32, {N, D})};
  kernel.scalars = {{"eps", DType::F32, f32(1e-5), {}}};
  kernel.sizes = {"N", "D"};
  kernel.stages = {
      reductionStage("m", DType::F32, {axisOf("n", "N")}, ReduceOp::Max, {axisOf("d", "D")}, x("n", "d")),
      stage("e", DType::F32, {axisOf("n", "N"), axisOf("d", "D")},
            unary(UnaryOp::Exp, sub(x("n", "d"), load(DType::F32, "m", {axis("n")})))),
      reductionStage("s", DType::F32, {axisOf("n", "N")}, ReduceOp::Sum, {axisOf("d", "D")},
                     load(DType::F32, "e", {axis("n"), axis("d")})),
      stage("y", DType::F32, {axisOf("n", "N"), axisOf("d", "D")},
            div(load(DType::F32, "e", {axis("n"), axis("d")}),
                add(load(DType::F32, "s", {axis("n")}), scalar(DType::F32, "eps")))),
  };
  return kernel;
}

ExprPtr var(const char* name, DType dtype = DType::F32) { return scalar(dtype, name); }

}  // namespace

TEST_CASE("printKernel prints a generic instance with its signature and stages", "[tensor-ir]") {
  CHECK(printKernel(softmaxKernel()) ==
        "kernel softmax_f32 = softmax<T = f32>\n"
        "  input x: f32[N, D]\n"
        "  scalar eps: f32 = 1e-05\n"
        "  output y: f32[N, D]\n"
        "  sizes N, D\n"
        "  m: f32[N] (n: N) = max over (d: D) of x[n, d]\n"
        "  e: f32[N, D] (n: N, d: D) = exp(x[n, d] - m[n])\n"
        "  s: f32[N] (n: N) = sum over (d: D) of e[n, d]\n"
        "  y: f32[N, D] (n: N, d: D) = e[n, d] / (s[n] + eps)\n");
}

TEST_CASE("printKernel shows an accumulator that differs, and stages without axes", "[tensor-ir]") {
  Kernel kernel;
  kernel.name = "total";
  kernel.inputs = {tensorParam("h", DType::F16, {Dim::constant(2) * N})};
  kernel.outputs = {tensorParam("t", DType::F16, {})};
  kernel.sizes = {"N"};
  kernel.stages = {reductionStage("t", DType::F16, {}, ReduceOp::Sum, {Axis{"i", Dim::constant(2) * N}},
                                  cast(DType::F32, load(DType::F16, "h", {axis("i")})))};
  CHECK(printKernel(kernel) ==
        "kernel total\n"
        "  input h: f16[2*N]\n"
        "  output t: f16[]\n"
        "  sizes N\n"
        "  t: f16[] = sum over (i: 2*N) in f32 of f32(h[i])\n");
}

TEST_CASE("printExpr uses the language's precedence and only the parentheses it needs", "[tensor-ir]") {
  ExprPtr a = var("a"), b = var("b"), c = var("c");
  CHECK(printExpr(*mul(add(a, b), c)) == "(a + b) * c");
  CHECK(printExpr(*add(a, mul(b, c))) == "a + b * c");
  CHECK(printExpr(*sub(sub(a, b), c)) == "a - b - c");
  CHECK(printExpr(*sub(a, sub(b, c))) == "a - (b - c)");
  CHECK(printExpr(*div(a, mul(b, c))) == "a / (b * c)");
  CHECK(printExpr(*binary(BinaryOp::Mod, mul(a, b), c)) == "a * b % c");
  CHECK(printExpr(*unary(UnaryOp::Neg, add(a, b))) == "-(a + b)");
  CHECK(printExpr(*unary(UnaryOp::Neg, unary(UnaryOp::Neg, a))) == "-(-a)");
  CHECK(printExpr(*mul(unary(UnaryOp::Neg, a), b)) == "-a * b");
  CHECK(printExpr(*binary(BinaryOp::Pow, add(a, b), unary(UnaryOp::Sqrt, c))) == "pow(a + b, sqrt(c))");
  CHECK(printExpr(*binary(BinaryOp::Max, a, binary(BinaryOp::Min, b, c))) == "max(a, min(b, c))");

  ExprPtr less = binary(BinaryOp::Lt, a, add(b, c));
  CHECK(printExpr(*less) == "a < b + c");
  CHECK(printExpr(*binary(BinaryOp::Eq, less, boolImm(false))) == "(a < b + c) == false");
  CHECK(printExpr(*unary(UnaryOp::Not, less)) == "not a < b + c");
  ExprPtr p = var("p", DType::Bool), q = var("q", DType::Bool), r = var("r", DType::Bool);
  CHECK(printExpr(*binary(BinaryOp::Or, binary(BinaryOp::And, p, q), r)) == "p and q or r");
  CHECK(printExpr(*binary(BinaryOp::And, p, binary(BinaryOp::Or, q, r))) == "p and (q or r)");
  CHECK(printExpr(*unary(UnaryOp::Not, binary(BinaryOp::And, p, q))) == "not (p and q)");
  CHECK(printExpr(*binary(BinaryOp::And, unary(UnaryOp::Not, p), q)) == "not p and q");
}

TEST_CASE("printExpr prints loads, padded loads, where and casts", "[tensor-ir]") {
  ExprPtr shifted = load(DType::F32, "x", {sub(axis("i"), i64(1)), mul(i64(2), axis("j"))}, f32(0));
  CHECK(printExpr(*shifted) == "pad(x, 0.0)[i - 1, 2 * j]");
  CHECK(printExpr(*load(DType::F32, "z", {})) == "z[]");
  ExprPtr guarded =
      select(binary(BinaryOp::Gt, axis("i"), i64(0)), load(DType::F32, "x", {sub(axis("i"), i64(1))}), f32(0));
  CHECK(printExpr(*guarded) == "where(i > 0, x[i - 1], 0.0)");
  CHECK(printExpr(*cast(DType::F16, mul(var("a"), size("N")))) == "f16(a * N)");
}

TEST_CASE("printExpr marks an immediate's dtype only where its place does not tell it", "[tensor-ir]") {
  ExprPtr h = load(DType::F16, "h", {axis("i")});
  // Beside an operand of the same dtype, bare.
  CHECK(printExpr(*mul(h, floatImm(DType::F16, 0.5))) == "h[i] * 0.5");
  CHECK(printExpr(*add(load(DType::I32, "k", {axis("i")}), intImm(DType::I32, 3))) == "k[i] + 3");
  // Both operands immediates: nothing tells, so non-default dtypes get a suffix.
  CHECK(printExpr(*add(intImm(DType::I32, 2), intImm(DType::I32, 3))) == "2_i32 + 3_i32");
  CHECK(printExpr(*add(i64(2), i64(-3))) == "2 + -3");
  CHECK(printExpr(*cast(DType::F16, floatImm(DType::F64, 0.5))) == "f16(0.5_f64)");
  CHECK(printExpr(*cast(DType::F16, f32(2))) == "f16(2.0)");
  // An arithmetic parent passes down the dtype its sibling implies.
  CHECK(printExpr(*mul(add(floatImm(DType::F16, 1), floatImm(DType::F16, 2)), h)) == "(1.0 + 2.0) * h[i]");
  CHECK(printExpr(*select(boolImm(true), floatImm(DType::F16, 1), h)) == "where(true, 1.0, h[i])");
  // Floats print as the shortest decimal of their dtype's value.
  CHECK(printExpr(*mul(h, floatImm(DType::F16, 0.1))) == "h[i] * 0.1");
  CHECK(printExpr(*floatImm(DType::BF16, 3.14159)) == "3.14_bf16");
  CHECK(printExpr(*f32(0.1)) == "0.1");
  CHECK(printExpr(*floatImm(DType::F64, 0.1)) == "0.1_f64");
  CHECK(printExpr(*f32(std::numeric_limits<double>::infinity())) == "inf");
  CHECK(printExpr(*sub(var("a"), f32(-std::numeric_limits<double>::infinity()))) == "a - -inf");
  CHECK(printExpr(*mul(f32(1e20), var("a"))) == "1e+20 * a");
}

// ---------------------------------------------------------------------------------------------------
// Verifier: each test breaks one invariant of a valid kernel.

namespace {

void requireRejected(const Kernel& kernel, const std::string& message) {
  REQUIRE_THROWS_AS(verifyKernel(kernel), InternalError);
  REQUIRE_THROWS_WITH(verifyKernel(kernel), Catch::Matchers::EndsWith(message));
}

Stage& stageNamed(Kernel& kernel, const std::string& name) {
  for (Stage& stage : kernel.stages)
    if (stage.name == name) return stage;
  FAIL("no stage " << name);
  throw;
}

}  // namespace

TEST_CASE("verifyKernel accepts a well-formed kernel", "[tensor-ir]") { CHECK_NOTHROW(verifyKernel(softmaxKernel())); }

TEST_CASE("verifyKernel rejects loads that do not resolve", "[tensor-ir]") {
  Kernel kernel = softmaxKernel();
  SECTION("unknown tensor") {
    stageNamed(kernel, "e").body = load(DType::F32, "w", {axis("n"), axis("d")});
    requireRejected(kernel, "stage e: w[n, d] reads w, which is neither an input nor a stage");
  }
  SECTION("a later stage") {
    stageNamed(kernel, "e").body = load(DType::F32, "y", {axis("n"), axis("d")});
    requireRejected(kernel, "stage e: y[n, d] reads stage y, which is not defined before it");
  }
  SECTION("the stage itself") {
    stageNamed(kernel, "e").body = load(DType::F32, "e", {axis("n"), axis("d")});
    requireRejected(kernel, "reads stage e, which is not defined before it");
  }
  SECTION("wrong rank") {
    stageNamed(kernel, "e").body = load(DType::F32, "m", {axis("n"), axis("d")});
    requireRejected(kernel, "m[n, d] has 2 subscripts but m has rank 1");
  }
  SECTION("wrong dtype") {
    stageNamed(kernel, "e").body = cast(DType::F32, load(DType::F16, "x", {axis("n"), axis("d")}));
    requireRejected(kernel, "x[n, d] has dtype f16 but x is f32");
  }
  SECTION("pad value of another dtype") {
    stageNamed(kernel, "e").body = load(DType::F32, "x", {axis("n"), axis("d")}, floatImm(DType::F16, 0));
    requireRejected(kernel, "pad value 0.0_f16 is f16, not f32, in pad(x, 0.0_f16)[n, d]");
  }
  SECTION("subscript not i64") {
    stageNamed(kernel, "e").body = load(DType::F32, "x", {axis("n"), intImm(DType::I32, 0)});
    requireRejected(kernel, "subscript 0_i32 is i32, not i64, in x[n, 0_i32]");
  }
}

TEST_CASE("verifyKernel rejects names that do not resolve", "[tensor-ir]") {
  Kernel kernel = softmaxKernel();
  SECTION("axis of another stage's reduction") {
    stageNamed(kernel, "e").body = load(DType::F32, "m", {axis("d")});
    CHECK_NOTHROW(verifyKernel(kernel));  // d is an axis of e
    stageNamed(kernel, "e").body = load(DType::F32, "m", {axis("k")});
    requireRejected(kernel, "stage e: axis k is not an axis of the stage or of its reduction");
  }
  SECTION("unknown size") {
    stageNamed(kernel, "y").body = cast(DType::F32, size("M"));
    requireRejected(kernel, "size M is not a size of the kernel");
  }
  SECTION("unknown scalar") {
    stageNamed(kernel, "y").body = var("epsilon");
    requireRejected(kernel, "scalar epsilon is not a scalar parameter of the kernel");
  }
  SECTION("scalar of another dtype") {
    stageNamed(kernel, "y").body = cast(DType::F32, var("eps", DType::F64));
    requireRejected(kernel, "scalar eps is used as f64 but declared f32");
  }
  SECTION("dimension with an unknown size") {
    kernel.inputs[0].shape[1] = Dim::size("E");
    requireRejected(kernel, "input x uses size E, which is not a size of the kernel");
  }
  SECTION("axis extent with an unknown size") {
    stageNamed(kernel, "m").reduction->axes[0].extent = Dim::size("E");
    requireRejected(kernel, "stage m: reduction axis d uses size E, which is not a size of the kernel");
  }
  SECTION("repeated axis name") {
    stageNamed(kernel, "m").reduction->axes[0].name = "n";
    requireRejected(kernel, "reduction axis n repeats the name of another axis");
  }
}

TEST_CASE("verifyKernel rejects operand dtypes that disagree", "[tensor-ir]") {
  Kernel kernel = softmaxKernel();
  Stage& y = stageNamed(kernel, "y");
  ExprPtr xf = x("n", "d");
  SECTION("arithmetic") {
    y.body = add(xf, floatImm(DType::F64, 1));
    requireRejected(kernel, "right operand 1.0_f64 is f64, not f32, in x[n, d] + 1.0_f64");
  }
  SECTION("min") {
    y.body = binary(BinaryOp::Min, xf, cast(DType::F16, xf));
    requireRejected(kernel, "right operand f16(x[n, d]) is f16, not f32, in min(x[n, d], f16(x[n, d]))");
  }
  SECTION("comparison operands") {
    y.body = cast(DType::F32, binary(BinaryOp::Lt, xf, i64(0)));
    requireRejected(kernel, "right operand 0 is i64, not f32, in x[n, d] < 0_i64");
  }
  SECTION("comparison result") {
    y.body = std::make_shared<Binary>(DType::F32, BinaryOp::Lt, xf, f32(0));
    requireRejected(kernel, "x[n, d] < 0.0 has dtype f32, not bool");
  }
  SECTION("logic on non-bool") {
    y.body = cast(DType::F32, binary(BinaryOp::And, binary(BinaryOp::Lt, xf, f32(0)), xf));
    requireRejected(kernel, "operand x[n, d] is f32, not bool, in x[n, d] < 0.0 and x[n, d]");
  }
  SECTION("not of non-bool") {
    y.body = cast(DType::F32, std::make_shared<Unary>(DType::Bool, UnaryOp::Not, xf));
    requireRejected(kernel, "operand x[n, d] is f32, not bool, in not x[n, d]");
  }
  SECTION("float function of an integer") {
    y.body = cast(DType::F32, unary(UnaryOp::Exp, cast(DType::I64, xf)));
    requireRejected(kernel, "exp takes float operands, not i64, in exp(i64(x[n, d]))");
  }
  SECTION("arithmetic on bool") {
    ExprPtr flag = binary(BinaryOp::Lt, xf, f32(0));
    y.body = cast(DType::F32, add(flag, flag));
    requireRejected(kernel, "arithmetic on bool operands in (x[n, d] < 0.0) + (x[n, d] < 0.0)");
  }
  SECTION("select condition") {
    y.body = select(xf, xf, f32(0));
    requireRejected(kernel, "condition x[n, d] is f32, not bool, in where(x[n, d], x[n, d], 0.0)");
  }
  SECTION("select branches") {
    y.body = cast(DType::F32, select(boolImm(true), xf, floatImm(DType::F16, 0)));
    requireRejected(kernel, "false branch 0.0_f16 is f16, not f32, in where(true, x[n, d], 0.0_f16)");
  }
  SECTION("stage body") {
    y.body = cast(DType::F16, xf);
    requireRejected(kernel, "stage y: the body is f16 but must be f32 (the stage's dtype): f16(x[n, d])");
  }
  SECTION("reduction body") {
    stageNamed(kernel, "s").reduction->accumulator = DType::F64;
    requireRejected(kernel, "stage s: the body is f32 but must be f64 (the accumulator's dtype): e[n, d]");
  }
  SECTION("integer mean") {
    Stage& s = stageNamed(kernel, "s");
    s.reduction = Reduction{ReduceOp::Mean, s.reduction->axes, DType::I64};
    s.body = cast(DType::I64, load(DType::F32, "e", {axis("n"), axis("d")}));
    requireRejected(kernel, "mean accumulates in i64, which is not a float type");
  }
  SECTION("immediates of the wrong kind") {
    y.body = add(xf, cast(DType::F32, intImm(DType::I8, 300)));
    requireRejected(kernel, "integer immediate 300 does not fit i8");
    y.body = add(xf, floatImm(DType::I32, 1));
    requireRejected(kernel, "float immediate 1 has dtype i32");
  }
  SECTION("null operand") {
    y.body = std::make_shared<Unary>(DType::F32, UnaryOp::Exp, nullptr);
    requireRejected(kernel, "null operand in exp(<null>)");
  }
}

TEST_CASE("verifyKernel rejects a signature that does not fit the stages", "[tensor-ir]") {
  Kernel kernel = softmaxKernel();
  SECTION("a stage named like an input") {
    stageNamed(kernel, "e").name = "x";
    requireRejected(kernel, "stage name x is already used");
  }
  SECTION("a scalar named like a size") {
    kernel.scalars[0].name = "N";
    requireRejected(kernel, "scalar name N is already used");
  }
  SECTION("two stages of one name") {
    stageNamed(kernel, "s").name = "m";
    requireRejected(kernel, "stage name m is already used");
  }
  SECTION("output without a stage") {
    kernel.outputs.push_back(tensorParam("z", DType::F32, {N}));
    requireRejected(kernel, "output z has no stage of that name");
  }
  SECTION("output of another shape") {
    kernel.outputs[0].shape = {D, N};
    requireRejected(kernel, "output y is declared f32[D, N] but its stage is f32[N, D]");
  }
  SECTION("output of another dtype") {
    kernel.outputs[0].dtype = DType::F16;
    requireRejected(kernel, "output y is declared f16[N, D] but its stage is f32[N, D]");
  }
  SECTION("scalar default of another dtype") {
    kernel.scalars[0].defaultValue = floatImm(DType::F64, 1e-5);
    requireRejected(kernel, "the default of scalar eps is f64, not f32");
  }
  SECTION("a reduction without axes") {
    stageNamed(kernel, "s").reduction->axes.clear();
    requireRejected(kernel, "stage s: the reduction has no axes");
  }
  SECTION("unsorted product dimension") {
    kernel.inputs[0].shape[0] = Dim{1, {"N", "D"}};
    requireRejected(kernel, "input x has a dimension whose size names are not sorted: N*D");
  }
}

TEST_CASE("simplifyIndex keeps the value of remainders of remainders, and drops the outer divisor's multiple",
          "[tensor-ir]") {
  using namespace emmy::tensor;
  auto integer = [](int64_t v) { return std::make_shared<IntImm>(DType::I64, v); };
  auto mod = [](ExprPtr a, ExprPtr b) { return std::make_shared<Binary>(DType::I64, BinaryOp::Mod, a, b); };
  auto value = [&](const ExprPtr& e, int64_t x) {
    ExprPtr bound = rewrite(e, [&](const Expr& node) -> ExprPtr { return node.as<AxisVar>() ? integer(x) : nullptr; });
    return simplifyIndex(bound)->as<IntImm>()->value;
  };
  ExprPtr x = std::make_shared<AxisVar>("x");
  CHECK(printExpr(*simplifyIndex(mod(mod(x, integer(8)), integer(4)))) == "x % 4");
  CHECK(printExpr(*simplifyIndex(mod(mod(x, integer(6)), integer(4)))) == "x % 6 % 4");
  for (int64_t a : {1, 2, 4, 6, 8})
    for (int64_t b : {1, 2, 3, 4})
      for (int64_t v = -20; v <= 20; ++v) {
        ExprPtr e = mod(mod(x, integer(a)), integer(b));
        INFO(a << " " << b << " " << v);
        CHECK(value(simplifyIndex(e), v) == value(e, v));
      }
}

TEST_CASE("simplifyIndex rejoins a quotient and its remainder: the flat index of fused axes is the fused loop",
          "[tensor-ir]") {
  using namespace emmy::tensor;
  auto integer = [](int64_t v) { return std::make_shared<IntImm>(DType::I64, v); };
  auto binary = [](BinaryOp op, ExprPtr a, ExprPtr b) { return std::make_shared<Binary>(DType::I64, op, a, b); };
  ExprPtr q = std::make_shared<AxisVar>("q"), p = std::make_shared<AxisVar>("p");
  ExprPtr a = std::make_shared<AxisVar>("A"), b = std::make_shared<AxisVar>("B");
  // Row-major [C, A, B] read at (q / B / A, q / B % A, q % B), as Horner's rule builds it: q.
  ExprPtr fused = binary(BinaryOp::Add,
                         binary(BinaryOp::Mul,
                                binary(BinaryOp::Add, binary(BinaryOp::Mul, binary(BinaryOp::Div, binary(BinaryOp::Div, q, b), a), a),
                                       binary(BinaryOp::Mod, binary(BinaryOp::Div, q, b), a)),
                                b),
                         binary(BinaryOp::Mod, q, b));
  CHECK(printExpr(*simplifyIndex(fused)) == "q");
  // With an index before them: p * A * B + q.
  ExprPtr leading = binary(BinaryOp::Add, binary(BinaryOp::Mul, binary(BinaryOp::Add, p, binary(BinaryOp::Div, q, b)), b),
                           binary(BinaryOp::Mod, q, b));
  CHECK(printExpr(*simplifyIndex(leading)) == "p * B + q");
  // Not when the divisors differ.
  ExprPtr other = binary(BinaryOp::Add, binary(BinaryOp::Mul, binary(BinaryOp::Div, q, a), a), binary(BinaryOp::Mod, q, b));
  CHECK(printExpr(*simplifyIndex(other)) == printExpr(*other));
  // The same value for every q of either sign, every p and every divisor but 0.
  for (int64_t divisor : {-3, -1, 1, 2, 3, 7})
    for (int64_t pv : {-2, 0, 5})
      for (int64_t qv = -30; qv <= 30; ++qv) {
        std::map<std::string, ExprPtr> values{{"q", integer(qv)}, {"p", integer(pv)}, {"A", integer(divisor)}, {"B", integer(divisor + 5)}};
        auto value = [&](const ExprPtr& e) {
          ExprPtr bound = rewrite(e, [&](const Expr& node) -> ExprPtr {
            const auto* axis = node.as<AxisVar>();
            return axis ? values.at(axis->name) : nullptr;
          });
          return simplifyIndex(bound)->as<IntImm>()->value;
        };
        INFO(divisor << " " << pv << " " << qv);
        CHECK(value(simplifyIndex(fused)) == value(fused));
        CHECK(value(simplifyIndex(leading)) == value(leading));
      }
}

TEST_CASE("simplifyCondition folds the comparisons of constant indices and the ands and ors of constants, and keeps every "
          "condition's value", "[tensor-ir]") {
  using namespace emmy::tensor;
  auto integer = [](int64_t v) { return std::make_shared<IntImm>(DType::I64, v); };
  auto index = [](BinaryOp op, ExprPtr a, ExprPtr b) { return std::make_shared<Binary>(DType::I64, op, a, b); };
  auto condition = [](BinaryOp op, ExprPtr a, ExprPtr b) { return std::make_shared<Binary>(DType::Bool, op, a, b); };
  ExprPtr i = std::make_shared<AxisVar>("i"), k = std::make_shared<AxisVar>("k");
  // A transposed convolution's tap test, (i + padding - k * dilation) % stride == 0.
  auto tap = [&](int64_t padding, int64_t dilation, int64_t stride) {
    ExprPtr spread = index(BinaryOp::Sub, index(BinaryOp::Add, i, integer(padding)), index(BinaryOp::Mul, k, integer(dilation)));
    return condition(BinaryOp::Eq, index(BinaryOp::Mod, spread, integer(stride)), integer(0));
  };
  CHECK(printExpr(*simplifyCondition(condition(BinaryOp::And, tap(0, 1, 1), tap(2, 3, 1)))) == "true");
  CHECK(printExpr(*simplifyCondition(condition(BinaryOp::And, tap(1, 1, 1), tap(1, 1, 2)))) == "(i + 1 - k) % 2 == 0");
  CHECK(printExpr(*simplifyCondition(condition(BinaryOp::Or, tap(0, 1, 2), tap(0, 1, 1)))) == "true");
  CHECK(printExpr(*simplifyCondition(condition(BinaryOp::Or, tap(0, 1, 2), condition(BinaryOp::Lt, integer(3), integer(2))))) ==
        "(i - k) % 2 == 0");
  // The same value, simplified or not, at every i and k of either sign, for conditions drawn at random.
  std::mt19937_64 random(7);
  const BinaryOp comparisons[] = {BinaryOp::Lt, BinaryOp::Le, BinaryOp::Gt, BinaryOp::Ge, BinaryOp::Eq, BinaryOp::Ne};
  std::function<ExprPtr(int)> draw = [&](int depth) -> ExprPtr {
    if (depth > 0 && random() % 2) return condition(random() % 2 ? BinaryOp::And : BinaryOp::Or, draw(depth - 1), draw(depth - 1));
    if (random() % 3 == 0) return tap(random() % 3, 1 + random() % 2, 1 + random() % 3);
    ExprPtr lhs = random() % 2 ? ExprPtr(index(BinaryOp::Mul, k, integer(random() % 2))) : ExprPtr(integer(random() % 5));
    return condition(comparisons[random() % 6], index(BinaryOp::Add, lhs, integer(random() % 3)), integer(random() % 4));
  };
  for (int drawn = 0; drawn < 200; ++drawn) {
    ExprPtr original = draw(3), simplified = simplifyCondition(original);
    INFO(printExpr(*original) << " -> " << printExpr(*simplified));
    for (int64_t iv = -5; iv <= 5; ++iv)
      for (int64_t kv = -2; kv <= 2; ++kv) {
        // C++'s integer arithmetic (truncating quotients, remainders of the dividend's sign), as Tensor IR's.
        std::function<int64_t(const Expr&)> value = [&](const Expr& e) -> int64_t {
          if (const auto* constant = e.as<IntImm>()) return constant->value;
          if (const auto* truth = e.as<BoolImm>()) return truth->value;
          if (const auto* axis = e.as<AxisVar>()) return axis->name == "i" ? iv : kv;
          const auto& binary = *e.as<Binary>();
          int64_t a = value(*binary.lhs), b = value(*binary.rhs);
          switch (binary.op) {
            case BinaryOp::Add: return a + b;
            case BinaryOp::Sub: return a - b;
            case BinaryOp::Mul: return a * b;
            case BinaryOp::Mod: return a % b;
            case BinaryOp::Lt: return a < b;
            case BinaryOp::Le: return a <= b;
            case BinaryOp::Gt: return a > b;
            case BinaryOp::Ge: return a >= b;
            case BinaryOp::Eq: return a == b;
            case BinaryOp::Ne: return a != b;
            case BinaryOp::And: return a && b;
            case BinaryOp::Or: return a || b;
            default: FAIL("an operation the conditions drawn do not use"); return 0;
          }
        };
        INFO(iv << " " << kv);
        CHECK(value(*simplified) == value(*original));
      }
  }
}

TEST_CASE("size polynomials and derived sizes: arithmetic, names that are their definitions, one per definition",
          "[tensor-ir][dims]") {
  SizePolynomial h = SizePolynomial::of(Dim::size("H")), k = SizePolynomial::of(Dim::size("KH"));
  SizePolynomial one = SizePolynomial::constant(1), two = SizePolynomial::constant(2);
  CHECK((h - k + one).toString() == "H - KH + 1");
  CHECK((k * h * two - h + h).toString() == "2*H*KH");
  CHECK((one - h).toString() == "-H + 1");
  CHECK((h - h).constantValue() == 0);
  CHECK((h * two).dividedExactly(2) == h);
  CHECK_FALSE((h + one).dividedExactly(2));
  CHECK((h * two).asDim() == Dim{2, {"H"}});
  CHECK_FALSE((h - k).asDim());

  Kernel kernel;
  kernel.sizes = {"H", "KH"};
  // An exact quotient is a Dim, others are derived sizes named by their definitions, made once.
  CHECK(derivedDim(kernel, h * two, two) == Dim::size("H"));
  Dim quotient = derivedDim(kernel, h - k, two);
  CHECK(quotient == Dim::size("(H - KH)/2"));
  CHECK(derivedDim(kernel, h - k, two) == quotient);
  Dim outputs = derivedDim(kernel, SizePolynomial::of(quotient) + one, one);
  CHECK(outputs == Dim::size("(H - KH)/2 + 1"));
  CHECK(kernel.derivedSizes.size() == 2);
  CHECK((Dim{2, {"(H - KH)/2 + 1"}}).toString() == "2*((H - KH)/2 + 1)");
  CHECK(polynomialOf(kernel, outputs) == SizePolynomial::of(quotient) + one);
  CHECK(polynomialOf(kernel, quotient) == SizePolynomial::of(quotient));

  // Floor division, and the launcher's checks.
  CHECK(floorDivide(-1, 2) == -1);
  CHECK(floorDivide(7, -2) == -4);
  CHECK(floorDivide(6, 3) == 2);
  kernel.name = "k";
  kernel.outputs = {TensorParam{"y", DType::F32, {outputs}, {}}};
  std::map<std::string, int64_t> sizes = {{"H", 9}, {"KH", 4}};
  bindDerivedSizes(kernel, sizes);
  CHECK(sizes.at("(H - KH)/2") == 2);
  CHECK(sizes.at("(H - KH)/2 + 1") == 3);
  sizes = {{"H", 1}, {"KH", 4}};
  CHECK_THROWS_WITH(bindDerivedSizes(kernel, sizes), "dimension 0 of y is (H - KH)/2 + 1 = -1, which is negative");
  kernel.derivedSizes.push_back(DerivedSize{"H/(KH - 4)", h, k - SizePolynomial::constant(4)});
  sizes = {{"H", 9}, {"KH", 4}};
  CHECK_THROWS_WITH(bindDerivedSizes(kernel, sizes), "the dimension H/(KH - 4) divides by zero");
}

namespace {

// How many exponentials of `source`'s one kernel approximateExponentials computes by the approximation,
// and how many stay exact.
std::pair<int, int> approximatedExponentials(const std::string& source) {
  std::vector<Kernel> kernels = emmy::testing::kernelsOfText(source);
  REQUIRE(kernels.size() == 1);
  Kernel approximated = approximateExponentials(kernels[0]);
  verifyKernel(approximated);
  int approximate = 0, exact = 0;
  for (const Stage& stage : approximated.stages)
    forEachNode(*stage.body, [&](const Expr& node) {
      const auto* unary = node.as<Unary>();
      if (unary && (unary->op == UnaryOp::Exp || unary->op == UnaryOp::Exp2)) ++(unary->approximate ? approximate : exact);
    });
  return {approximate, exact};
}

}  // namespace

TEST_CASE("exponentials that only 16-bit results show are approximated, and only those", "[tensor-ir]") {
  // Softmax: e reaches y (f16) through a sum and a division.
  const char* softmax = R"(
kernel k(x: T[N, D]) -> (y: T[N, D]) {
    m[n] = max[d](x[n, d])
    e[n, d] = exp(f32(x[n, d]) - m[n])
    s[n] = sum[d](e[n, d])
    y[n, d] = T(e[n, d] / s[n])
}
)";
  auto instance = [](std::string text, const std::string& type) {
    for (size_t at; (at = text.find("T[")) != std::string::npos || (at = text.find("T(")) != std::string::npos;)
      text.replace(at, 1, type);
    return text;
  };
  CHECK(approximatedExponentials(instance(softmax, "f16")) == std::pair{1, 0});
  CHECK(approximatedExponentials(instance(softmax, "bf16")) == std::pair{1, 0});
  CHECK(approximatedExponentials(instance(softmax, "f32")) == std::pair{0, 1});
  // e also reaches an f32 output.
  CHECK(approximatedExponentials(R"(
kernel k(x: f16[N, D]) -> (y: f16[N, D], z: f32[N, D]) {
    e[n, d] = exp(f32(x[n, d]))
    y[n, d] = f16(e[n, d] * 2.0)
    z[n, d] = e[n, d] + 1.0
}
)") == std::pair{0, 1});
  // An exponential compared, floored or made an integer can move its result a whole step; one in a
  // select's branch cannot, nor one of another's argument.
  CHECK(approximatedExponentials(R"(
kernel k(x: f16[N]) -> (y: f16[N]) {
    y[n] = f16(where(exp(f32(x[n])) > 1.5, exp2(f32(x[n])), 0.0))
}
)") == std::pair{1, 1});
  CHECK(approximatedExponentials(R"(
kernel k(x: f16[N]) -> (y: f16[N]) {
    y[n] = f16(floor(exp(f32(x[n]))) + exp(exp(f32(x[n]))))
}
)") == std::pair{2, 1});
  CHECK(approximatedExponentials(R"(
kernel k(x: f16[N]) -> (y: i32[N]) {
    e[n] = exp(f32(x[n]))
    y[n] = i32(e[n] * 4.0)
}
)") == std::pair{0, 1});
  // A stage compared by another stage is exact, though it reaches a 16-bit output too.
  CHECK(approximatedExponentials(R"(
kernel k(x: f16[N]) -> (y: f16[N]) {
    e[n] = exp(f32(x[n]))
    y[n] = f16(where(e[n] > 2.0, e[n], 0.0))
}
)") == std::pair{0, 1});
}
