// frontend/parser.cpp and grammar/Emmy.g4: the AST built from the spec's examples (structure and
// locations), and the syntax errors, as the user sees them.
#include <algorithm>
#include <limits>
#include <memory>
#include <string>

#include <catch2/catch.hpp>

#include "frontend/parser.h"

using namespace emmy;

namespace {

struct Parsed {
  std::unique_ptr<ast::Module> module;
  std::string errors;  // rendered
};

Parsed parse(std::string text) {
  Diagnostics diagnostics;
  auto module = parseModule(std::make_shared<SourceFile>("test.emmy", std::move(text)), diagnostics);
  return {std::move(module), diagnostics.render()};
}

// Parses text that must be valid.
std::unique_ptr<ast::Module> parseValid(std::string text) {
  Parsed parsed = parse(std::move(text));
  INFO(parsed.errors);
  REQUIRE(parsed.module != nullptr);
  REQUIRE(parsed.errors.empty());
  return std::move(parsed.module);
}

// The rendered diagnostics of text that must be invalid.
std::string errorsOf(std::string text) {
  Parsed parsed = parse(std::move(text));
  CHECK(parsed.module == nullptr);
  return parsed.errors;
}

// The source text a location covers.
std::string spelled(const SourceLoc& loc) {
  REQUIRE(loc.valid());
  return std::string(loc.file->line(loc.line).substr(loc.column - 1, loc.length));
}

std::string position(const SourceLoc& loc) { return std::to_string(loc.line) + ":" + std::to_string(loc.column); }

// A compact rendering of an expression that shows its structure: binary and unary operators in prefix
// form, everything else as written.
std::string show(const ast::Expr& e) {
  auto list = [](const std::vector<ast::ExprPtr>& items) {
    std::string out;
    for (const auto& item : items) out += (out.empty() ? "" : ", ") + show(*item);
    return out;
  };
  if (auto* number = e.as<ast::Number>()) return number->text;
  if (auto* boolean = e.as<ast::Bool>()) return boolean->value ? "true" : "false";
  if (auto* name = e.as<ast::Name>()) return name->name;
  if (auto* subscript = e.as<ast::Subscript>()) return show(*subscript->base) + "[" + list(subscript->indices) + "]";
  if (auto* elements = e.as<ast::List>()) return "[" + list(elements->elements) + "]";
  if (auto* unary = e.as<ast::Unary>())
    return std::string(unary->op == ast::UnaryOp::Neg ? "(neg " : "(not ") + show(*unary->operand) + ")";
  if (auto* binary = e.as<ast::Binary>())
    return std::string("(") + ast::binaryOpSpelling(binary->op) + " " + show(*binary->lhs) + " " +
           show(*binary->rhs) + ")";
  if (auto* reduction = e.as<ast::Reduction>()) {
    std::string indices;
    for (const ast::Ident& index : reduction->indices) indices += (indices.empty() ? "" : ", ") + index.name;
    return reduction->op.name + "[" + indices + "](" + show(*reduction->body) + ")";
  }
  auto* call = e.as<ast::Call>();
  REQUIRE(call != nullptr);
  std::string out = (call->module ? call->module->name + "." : "") + call->callee.name + "(";
  for (size_t i = 0; i < call->args.size(); ++i) {
    if (i) out += ", ";
    if (call->args[i].keyword) out += call->args[i].keyword->name + "=";
    out += show(*call->args[i].value);
  }
  return out + ")";
}

// The expression of `fn f(...) = EXPR`.
const ast::Expr& fnBody(const ast::Module& module) {
  REQUIRE(module.fns.size() == 1);
  return *module.fns[0].body;
}

std::string showExpr(const std::string& expr) { return show(fnBody(*parseValid("fn f() = " + expr + "\n"))); }

// The literal `text`, as the parser reads it.
ast::Number numberLiteral(const std::string& text) {
  auto module = parseValid("fn f() = " + text + "\n");
  const auto* number = fnBody(*module).as<ast::Number>();
  REQUIRE(number != nullptr);
  CHECK(number->text == text);
  return *number;
}

const char* const kSoftmax = R"(# comments run from '#' to the end of the line
import nn                      # stdlib/nn.emmy

kernel softmax(x: f32[N, D]) -> (y: f32[N, D]) {
    m[n]    = max[d](x[n, d])
    e[n, d] = exp(x[n, d] - m[n])
    s[n]    = sum[d](e[n, d])
    y[n, d] = e[n, d] / s[n]
}
)";

const char* const kMatmulSchedule = R"(schedule matmul {
    param BM in [32, 64, 128] = 64     # tuning parameter: candidates and the default
    param BN in [32, 64, 128] = 64
    param BK in [8, 16, 32] = 16

    tile C (i, j) by (BM, BN) -> (io, jo, ii, ji)
    bind C.io to block.y
    bind C.jo to block.x
    tile C (ii, ji) by (4, 4) -> (it, jt, ir, jr)
    bind C.it to thread.y
    bind C.jt to thread.x
    split C.k by BK -> (ko, ki)
    reorder C (io, jo, it, jt, ko, ki, ir, jr)
    cache A in shared at C.ko -> As
    cache B in shared at C.ko -> Bs
    pad As by 1
    cache C in registers at C.jt
    unroll C.ki
    unroll C.ir
    vectorize C.jr
}
)";

std::vector<std::string> names(const std::vector<ast::Ident>& idents) {
  std::vector<std::string> out;
  for (const ast::Ident& ident : idents) out.push_back(ident.name);
  return out;
}

using Strings = std::vector<std::string>;

}  // namespace

// ---------------------------------------------------------------------------------------------------
// The spec's examples

TEST_CASE("the softmax kernel of the spec", "[parser]") {
  auto module = parseValid(kSoftmax);
  REQUIRE(module->imports.size() == 1);
  CHECK(module->imports[0].module.name == "nn");
  CHECK(spelled(module->imports[0].loc) == "import nn");
  REQUIRE(module->kernels.size() == 1);
  const ast::KernelDef& kernel = module->kernels[0];
  CHECK(kernel.name.name == "softmax");
  CHECK(position(kernel.name.loc) == "4:8");
  CHECK(spelled(kernel.loc) == "kernel softmax(x: f32[N, D]) -> (y: f32[N, D]) {");
  CHECK(kernel.typeParams.empty());

  REQUIRE(kernel.inputs.size() == 1);
  const ast::Param& x = kernel.inputs[0];
  CHECK(x.name.name == "x");
  CHECK(spelled(x.loc) == "x: f32[N, D]");
  CHECK(x.type.elementType.name == "f32");
  CHECK(x.type.isTensor);
  CHECK(spelled(x.type.loc) == "f32[N, D]");
  REQUIRE(x.type.dims.size() == 2);
  REQUIRE(x.type.dims[0].expr->as<ast::Name>());
  CHECK(x.type.dims[0].expr->as<ast::Name>()->name == "N");
  CHECK(position(x.type.dims[1].loc) == "4:26");
  CHECK(x.defaultValue == nullptr);
  REQUIRE(kernel.outputs.size() == 1);
  CHECK(spelled(kernel.outputs[0].loc) == "y: f32[N, D]");

  REQUIRE(kernel.body.size() == 4);
  const ast::Statement& m = kernel.body[0];
  CHECK(names(m.targets) == Strings{"m"});
  CHECK(m.indexForm);
  CHECK(names(m.indices) == Strings{"n"});
  CHECK(spelled(m.indices[0].loc) == "n");
  CHECK(spelled(m.loc) == "m[n]    = max[d](x[n, d])");
  CHECK(show(*m.value) == "max[d](x[n, d])");
  CHECK(spelled(m.value->loc) == "max[d](x[n, d])");
  const auto* max = m.value->as<ast::Reduction>();
  REQUIRE(max != nullptr);
  CHECK(spelled(max->op.loc) == "max");
  CHECK(position(max->indices[0].loc) == "5:19");
  CHECK(spelled(max->body->loc) == "x[n, d]");

  const ast::Statement& e = kernel.body[1];
  CHECK(names(e.indices) == Strings{"n", "d"});
  CHECK(show(*e.value) == "exp((- x[n, d] m[n]))");
  const auto* exp = e.value->as<ast::Call>();
  REQUIRE(exp != nullptr);
  CHECK_FALSE(exp->module);
  CHECK(spelled(exp->callee.loc) == "exp");
  const auto* difference = exp->args[0].value->as<ast::Binary>();
  REQUIRE(difference != nullptr);
  CHECK(spelled(difference->loc) == "x[n, d] - m[n]");
  CHECK(position(difference->opLoc) == "6:27");
  CHECK(spelled(difference->opLoc) == "-");
  CHECK(show(*kernel.body[2].value) == "sum[d](e[n, d])");
  CHECK(show(*kernel.body[3].value) == "(/ e[n, d] s[n])");
}

TEST_CASE("fn gelu_tanh of the spec", "[parser]") {
  auto module = parseValid(
      "fn gelu_tanh(x) = 0.5 * x * (1 + tanh(0.7978845608 * (x + 0.044715 * x * x * x)))\n");
  const ast::FnDef& fn = module->fns.at(0);
  CHECK(fn.name.name == "gelu_tanh");
  CHECK(names(fn.params) == Strings{"x"});
  CHECK(spelled(fn.params[0].loc) == "x");
  CHECK(show(*fn.body) == "(* (* 0.5 x) (+ 1 tanh((* 0.7978845608 (+ x (* (* (* 0.044715 x) x) x))))))");
  CHECK(spelled(fn.body->loc) == "0.5 * x * (1 + tanh(0.7978845608 * (x + 0.044715 * x * x * x)))");
  CHECK(spelled(fn.loc) == "fn gelu_tanh(x) = 0.5 * x * (1 + tanh(0.7978845608 * (x + 0.044715 * x * x * x)))");
}

TEST_CASE("a generic kernel with type parameters, defaults and a single output", "[parser]") {
  auto module = parseValid(
      "kernel layernorm<T: f16 | bf16 | f32>(x: T[N, 64], w: T[64], eps: f32 = 1e-5) -> y: T[N, 64] {\n"
      "    y = nn.layernorm(x, w, b, eps=eps)\n"
      "}\n");
  const ast::KernelDef& kernel = module->kernels.at(0);
  REQUIRE(kernel.typeParams.size() == 1);
  CHECK(kernel.typeParams[0].name.name == "T");
  CHECK(names(kernel.typeParams[0].bound) == Strings{"f16", "bf16", "f32"});
  CHECK(position(kernel.typeParams[0].bound[2].loc) == "1:34");
  REQUIRE(kernel.inputs.size() == 3);
  CHECK(kernel.inputs[0].type.elementType.name == "T");
  REQUIRE(kernel.inputs[0].type.dims[1].expr->as<ast::Number>());
  CHECK(kernel.inputs[0].type.dims[1].expr->as<ast::Number>()->intValue == 64);
  CHECK(spelled(kernel.inputs[0].type.dims[1].loc) == "64");
  const ast::Param& eps = kernel.inputs[2];
  CHECK_FALSE(eps.type.isTensor);
  CHECK(eps.type.dims.empty());
  REQUIRE(eps.defaultValue != nullptr);
  CHECK(spelled(eps.defaultValue->loc) == "1e-5");
  CHECK(spelled(eps.loc) == "eps: f32 = 1e-5");
  REQUIRE(kernel.outputs.size() == 1);
  CHECK(kernel.outputs[0].name.name == "y");
  CHECK(spelled(kernel.outputs[0].type.loc) == "T[N, 64]");
}

TEST_CASE("the matmul schedule of the spec", "[parser]") {
  auto module = parseValid(kMatmulSchedule);
  REQUIRE(module->schedules.size() == 1);
  const ast::Schedule& schedule = module->schedules[0];
  CHECK(schedule.kernel.name == "matmul");
  CHECK(spelled(schedule.loc) == "schedule matmul {");
  const std::vector<ast::ParamDecl>& params = schedule.params;
  REQUIRE(params.size() == 3);
  CHECK(params[0].name.name == "BM");
  REQUIRE(params[0].candidates.size() == 3);
  CHECK(params[0].candidates[2].value == 128);
  CHECK(spelled(params[0].candidates[2].loc) == "128");
  CHECK(params[0].defaultValue.value == 64);
  CHECK(spelled(params[0].loc) == "param BM in [32, 64, 128] = 64");
  CHECK(params[2].candidates[0].value == 8);

  const std::vector<ast::Directive>& d = schedule.directives;
  REQUIRE(d.size() == 15);
  using K = ast::DirectiveKind;

  CHECK(d[0].kind == K::Tile);
  CHECK(d[0].stage.name == "C");
  CHECK(names(d[0].axes) == Strings{"i", "j"});
  REQUIRE(d[0].factors.size() == 2);
  CHECK_FALSE(d[0].factors[0].value);
  CHECK(d[0].factors[0].param.name == "BM");
  CHECK(spelled(d[0].factors[1].param.loc) == "BN");
  CHECK(names(d[0].results) == Strings{"io", "jo", "ii", "ji"});
  CHECK(spelled(d[0].loc) == "tile C (i, j) by (BM, BN) -> (io, jo, ii, ji)");
  CHECK(d[3].factors[1].value == 4);

  CHECK(d[1].kind == K::Bind);
  CHECK(d[1].stage.name == "C");
  CHECK(names(d[1].axes) == Strings{"io"});
  CHECK(d[1].targetScope.name == "block");
  CHECK(d[1].targetDim.name == "y");
  CHECK_FALSE(d[1].atomic);
  CHECK(d[5].targetScope.name == "thread");

  CHECK(d[6].kind == K::Split);
  CHECK(names(d[6].axes) == Strings{"k"});
  CHECK(d[6].factors.at(0).param.name == "BK");
  CHECK(names(d[6].results) == Strings{"ko", "ki"});

  CHECK(d[7].kind == K::Reorder);
  CHECK(names(d[7].axes) == Strings{"io", "jo", "it", "jt", "ko", "ki", "ir", "jr"});

  CHECK(d[8].kind == K::Cache);
  CHECK(d[8].stage.name == "A");
  CHECK(d[8].memory.name == "shared");
  CHECK(d[8].atStage.name == "C");
  CHECK(d[8].atAxis.name == "ko");
  CHECK(names(d[8].results) == Strings{"As"});
  CHECK(d[11].memory.name == "registers");
  CHECK(d[11].results.empty());

  CHECK(d[10].kind == K::Pad);
  CHECK(d[10].stage.name == "As");
  CHECK(d[10].factors.at(0).value == 1);

  CHECK(d[12].kind == K::Unroll);
  CHECK(names(d[13].axes) == Strings{"ir"});
  CHECK(d[14].kind == K::Vectorize);
  CHECK(spelled(d[14].loc) == "vectorize C.jr");
}

TEST_CASE("the directives the matmul schedule does not use", "[parser]") {
  auto module = parseValid(
      "schedule softmax {\n"
      "  bind y.d to warp.x atomic\n"
      "  compute m at y.n\n"
      "  inline e\n"
      "  root s\n"
      "  double_buffer As\n"
      "  fuse y (n, d) -> nd\n"
      "}\n");
  const std::vector<ast::Directive>& d = module->schedules.at(0).directives;
  REQUIRE(d.size() == 6);
  using K = ast::DirectiveKind;
  CHECK(d[0].kind == K::Bind);
  CHECK(d[0].atomic);
  CHECK(d[0].targetScope.name == "warp");
  CHECK(spelled(d[0].loc) == "bind y.d to warp.x atomic");
  CHECK(d[1].kind == K::ComputeAt);
  CHECK(d[1].stage.name == "m");
  CHECK(d[1].atStage.name == "y");
  CHECK(d[1].atAxis.name == "n");
  CHECK(d[2].kind == K::Inline);
  CHECK(d[2].stage.name == "e");
  CHECK(d[3].kind == K::Root);
  CHECK(d[4].kind == K::DoubleBuffer);
  CHECK(d[4].stage.name == "As");
  CHECK(d[5].kind == K::Fuse);
  CHECK(names(d[5].axes) == Strings{"n", "d"});
  CHECK(names(d[5].results) == Strings{"nd"});
}

TEST_CASE("kernel calls, several results, lists and subscripts of calls", "[parser]") {
  auto module = parseValid(
      "kernel k(x: f32[N, D]) -> (y: f32[N, D]) {\n"
      "    y = nn.layernorm(x, w, b, eps=1e-5)\n"
      "    (mu, var) = moments(x)\n"
      "    z[i, j] = pad(x, 0)[i - 1, j]\n"
      "    r = reshape(permute(x, [1, 0]), [-1, D])\n"
      "    t = sum(x, axis=[0, 1], keepdim=false)\n"
      "}\n");
  const std::vector<ast::Statement>& body = module->kernels.at(0).body;
  REQUIRE(body.size() == 5);

  CHECK_FALSE(body[0].indexForm);
  CHECK(names(body[0].targets) == Strings{"y"});
  const auto* layernorm = body[0].value->as<ast::Call>();
  REQUIRE(layernorm != nullptr);
  REQUIRE(layernorm->module);
  CHECK(layernorm->module->name == "nn");
  CHECK(spelled(layernorm->module->loc) == "nn");
  CHECK(spelled(layernorm->callee.loc) == "layernorm");
  REQUIRE(layernorm->args.size() == 4);
  CHECK_FALSE(layernorm->args[0].keyword);
  REQUIRE(layernorm->args[3].keyword);
  CHECK(layernorm->args[3].keyword->name == "eps");
  CHECK(position(layernorm->args[3].keyword->loc) == "2:31");
  CHECK(spelled(layernorm->loc) == "nn.layernorm(x, w, b, eps=1e-5)");

  CHECK(names(body[1].targets) == Strings{"mu", "var"});
  CHECK_FALSE(body[1].indexForm);
  CHECK(spelled(body[1].targets[1].loc) == "var");
  CHECK(spelled(body[1].loc) == "(mu, var) = moments(x)");

  CHECK(show(*body[2].value) == "pad(x, 0)[(- i 1), j]");
  const auto* padded = body[2].value->as<ast::Subscript>();
  REQUIRE(padded != nullptr);
  CHECK(padded->base->as<ast::Call>() != nullptr);
  CHECK(spelled(padded->loc) == "pad(x, 0)[i - 1, j]");

  CHECK(show(*body[3].value) == "reshape(permute(x, [1, 0]), [(neg 1), D])");
  const auto* reshape = body[3].value->as<ast::Call>();
  REQUIRE(reshape != nullptr);
  CHECK(spelled(reshape->args[1].value->loc) == "[-1, D]");
  CHECK(show(*body[4].value) == "sum(x, axis=[0, 1], keepdim=false)");
}

// ---------------------------------------------------------------------------------------------------
// Expressions

TEST_CASE("operators bind as the spec lists them, loosest first", "[parser]") {
  CHECK(showExpr("a or b and not c < d + e * -f") == "(or a (and b (not (< c (+ d (* e (neg f)))))))");
  CHECK(showExpr("-a * b + c < d and e or f") == "(or (and (< (+ (* (neg a) b) c) d) e) f)");
  CHECK(showExpr("not a == b") == "(not (== a b))");
  CHECK(showExpr("a @ b % c / d * e") == "(* (/ (% (@ a b) c) d) e)");
  CHECK(showExpr("(a + b) * c") == "(* (+ a b) c)");
  CHECK(showExpr("- -a") == "(neg (neg a))");
  CHECK(showExpr("not not a") == "(not (not a))");
}

TEST_CASE("binary operators associate to the left", "[parser]") {
  CHECK(showExpr("a - b - c") == "(- (- a b) c)");
  CHECK(showExpr("a / b * c") == "(* (/ a b) c)");
  CHECK(showExpr("a or b or c") == "(or (or a b) c)");
  CHECK(showExpr("a and b and c") == "(and (and a b) c)");
}

TEST_CASE("every comparison operator", "[parser]") {
  CHECK(showExpr("where(a <= b, a >= b, a != b)") == "where((<= a b), (>= a b), (!= a b))");
  CHECK(showExpr("(a < b) == (c > d)") == "(== (< a b) (> c d))");
}

TEST_CASE("expression locations cover the expression and its operator", "[parser]") {
  auto module = parseValid("fn f(a, b) = -(a + b) * 2\n");
  const auto* product = fnBody(*module).as<ast::Binary>();
  REQUIRE(product != nullptr);
  CHECK(spelled(product->loc) == "-(a + b) * 2");
  CHECK(spelled(product->opLoc) == "*");
  const auto* negation = product->lhs->as<ast::Unary>();
  REQUIRE(negation != nullptr);
  CHECK(spelled(negation->loc) == "-(a + b)");
  CHECK(spelled(negation->operand->loc) == "a + b");
  CHECK(spelled(product->rhs->loc) == "2");
}

TEST_CASE("number literals", "[parser]") {
  CHECK(numberLiteral("2").isInteger);
  CHECK(numberLiteral("2").intValue == 2);
  CHECK(numberLiteral("2").floatValue == 2.0);
  CHECK(numberLiteral("9223372036854775807").intValue == std::numeric_limits<int64_t>::max());
  CHECK_FALSE(numberLiteral("0.5").isInteger);
  CHECK(numberLiteral("0.5").floatValue == 0.5);
  CHECK_FALSE(numberLiteral("1e-5").isInteger);
  CHECK(numberLiteral("1e-5").floatValue == 1e-5);
  CHECK(numberLiteral("1E5").floatValue == 1e5);
  CHECK(numberLiteral(".5").floatValue == 0.5);
  CHECK(numberLiteral("2.").floatValue == 2.0);
  CHECK(numberLiteral("2.5e+3").floatValue == 2500.0);
  CHECK_FALSE(numberLiteral("inf").isInteger);
  CHECK(numberLiteral("inf").floatValue == std::numeric_limits<double>::infinity());
  CHECK(numberLiteral("inf").text == "inf");
}

TEST_CASE("rank-0 tensors: the type T[], a definition NAME[] = and a read NAME[]", "[parser]") {
  auto module = parseValid(
      "kernel loss(x: f32[N], w: f32[], eps: f32) -> (l: f32[]) {\n"
      "    l[] = sum[i](x[i]) * w[] + eps\n"
      "}\n");
  const ast::KernelDef& kernel = module->kernels.at(0);
  CHECK(kernel.inputs[1].type.isTensor);
  CHECK(kernel.inputs[1].type.dims.empty());
  CHECK(spelled(kernel.inputs[1].type.loc) == "f32[]");
  CHECK_FALSE(kernel.inputs[2].type.isTensor);
  CHECK(kernel.outputs[0].type.isTensor);
  CHECK(kernel.outputs[0].type.dims.empty());
  const ast::Statement& statement = kernel.body.at(0);
  CHECK(statement.indexForm);
  CHECK(statement.indices.empty());
  CHECK(show(*statement.value) == "(+ (* sum[i](x[i]) w[]) eps)");
  CHECK(errorsOf("fn f() = sum[](x)\n") ==
        "test.emmy:1:13: error: a reduction needs at least one index, as in sum[k](...)\n"
        "fn f() = sum[](x)\n"
        "            ^~\n");
}

TEST_CASE("integer parameters beside type parameters, and dimensions written as expressions", "[parser]") {
  auto module = parseValid(
      "kernel conv<T: f16 | f32, STRIDE: i64 = 1, PAD: i64 = -1, G: i64>(x: T[N, C, H], w: T[O, C / G, K])\n"
      "    -> (y: T[N, O, (H + 2 * PAD - K) / STRIDE + 1]) {\n"
      "    y[n, o, i] = sum[c, k](x[n, c, i * STRIDE + k] * w[o, c, k])\n"
      "}\n");
  const ast::KernelDef& kernel = module->kernels.at(0);
  REQUIRE(kernel.typeParams.size() == 1);
  CHECK(kernel.typeParams[0].name.name == "T");
  REQUIRE(kernel.integerParams.size() == 3);
  CHECK(kernel.integerParams[0].name.name == "STRIDE");
  CHECK(kernel.integerParams[0].defaultValue == 1);
  CHECK(kernel.integerParams[1].defaultValue == -1);
  CHECK_FALSE(kernel.integerParams[2].defaultValue);
  CHECK(show(*kernel.inputs[1].type.dims[1].expr) == "(/ C G)");
  CHECK(show(*kernel.outputs[0].type.dims[2].expr) == "(+ (/ (- (+ H (* 2 PAD)) K) STRIDE) 1)");
  CHECK(spelled(kernel.outputs[0].type.dims[2].loc) == "(H + 2 * PAD - K) / STRIDE + 1");
  CHECK(errorsOf("kernel k(x: f32[N % 2]) -> (y: f32[N]) {\n    y = x\n}\n") ==
        "test.emmy:1:19: error: a dimension combines sizes, integers and integer parameters with + - * / only, not '%'\n"
        "kernel k(x: f32[N % 2]) -> (y: f32[N]) {\n"
        "                  ^\n");
  CHECK(errorsOf("kernel k(x: f32[f(N)]) -> (y: f32[N]) {\n    y = x\n}\n") ==
        "test.emmy:1:17: error: a dimension calls min(a, b) or max(a, b) only, not 'f'\n"
        "kernel k(x: f32[f(N)]) -> (y: f32[N]) {\n"
        "                ^\n");
  CHECK(errorsOf("kernel k(x: f32[N[0]]) -> (y: f32[N]) {\n    y = x\n}\n") ==
        "test.emmy:1:17: error: a dimension is an integer, a size name, or an expression of those and integer parameters "
        "with + - * /, min, max and parentheses\n"
        "kernel k(x: f32[N[0]]) -> (y: f32[N]) {\n"
        "                ^~~~\n");
  // The list may break after a comma; a default may name an earlier integer parameter.
  auto broken = parseValid("kernel k<T: f32,\n         S: i64 = 2,\n         S_H: i64 = S>(x: T[N]) -> (y: T[N]) {\n"
                           "    y = x\n}\n");
  REQUIRE(broken->kernels.at(0).integerParams.size() == 2);
  CHECK(broken->kernels.at(0).integerParams[1].defaultParam->name == "S");
  CHECK(errorsOf("kernel k<T: f32 = 2>(x: T[N]) -> (y: T[N]) {\n    y = x\n}\n").find(
            "only an integer parameter (T: i64 = ...) has a default") != std::string::npos);
}

TEST_CASE("indices on the left with their range", "[parser]") {
  auto module = parseValid("kernel k(x: f32[N]) -> (y: f32[N]) {\n    t[i < N - 1, j, k < 2 * N] = x[i]\n    y = x\n}\n");
  const ast::Statement& statement = module->kernels.at(0).body.at(0);
  CHECK(names(statement.indices) == Strings{"i", "j", "k"});
  REQUIRE(statement.indexRanges.size() == 3);
  CHECK(show(*statement.indexRanges[0]) == "(- N 1)");
  CHECK(statement.indexRanges[1] == nullptr);
  CHECK(show(*statement.indexRanges[2]) == "(* 2 N)");
}

TEST_CASE("reduction indices with a bound", "[parser]") {
  auto module = parseValid("fn f() = max[di < 3, j, k < t + 1](x[k])\n");
  const auto* max = fnBody(*module).as<ast::Reduction>();
  REQUIRE(max != nullptr);
  CHECK(names(max->indices) == Strings{"di", "j", "k"});
  REQUIRE(max->bounds.size() == 3);
  CHECK(show(*max->bounds[0]) == "3");
  CHECK(max->bounds[1] == nullptr);
  CHECK(show(*max->bounds[2]) == "(+ t 1)");
  CHECK(spelled(max->indices[2].loc) == "k");
  CHECK(spelled(max->bounds[2]->loc) == "t + 1");
}

TEST_CASE("booleans, names and reductions over several indices", "[parser]") {
  CHECK(showExpr("true or false") == "(or true false)");
  auto module = parseValid("fn f() = sum[k, l](x[i, k] * y[k, l])\n");
  const auto* sum = fnBody(*module).as<ast::Reduction>();
  REQUIRE(sum != nullptr);
  CHECK(sum->op.name == "sum");
  CHECK(names(sum->indices) == Strings{"k", "l"});
  CHECK(spelled(sum->indices[1].loc) == "l");
  CHECK(spelled(sum->loc) == "sum[k, l](x[i, k] * y[k, l])");
  CHECK(show(*sum->body) == "(* x[i, k] y[k, l])");
}

// ---------------------------------------------------------------------------------------------------
// Lines, comments and keywords

TEST_CASE("a line break inside brackets continues the line", "[parser]") {
  auto module = parseValid(
      "kernel k(\n"
      "    x: f32[N,\n"
      "           D],   # a comment inside brackets\n"
      "    w: f32[D],\n"
      ") -> (\n"
      "    y: f32[N, D]) {\n"
      "    y[n, d] = (x[n, d] +\n"
      "\n"
      "               w[d]) * f(1,\n"
      "                         2,)\n"
      "}\n");
  const ast::KernelDef& kernel = module->kernels.at(0);
  REQUIRE(kernel.inputs.size() == 2);
  CHECK(kernel.inputs[0].type.dims.size() == 2);
  CHECK(position(kernel.inputs[1].loc) == "4:5");
  REQUIRE(kernel.body.size() == 1);
  const ast::Statement& statement = kernel.body[0];
  CHECK(show(*statement.value) == "(* (+ x[n, d] w[d]) f(1, 2))");
  // A location that spans lines is cut at the end of its first line.
  CHECK(position(statement.loc) == "7:5");
  CHECK(spelled(statement.loc) == "y[n, d] = (x[n, d] +");
  CHECK(spelled(statement.value->loc) == "(x[n, d] +");
}

TEST_CASE("a kernel header may break its line before or after '->'", "[parser]") {
  for (const char* header : {"kernel k(x: f32[N], s: f32 = 2)\n    -> (y: f32[N]) {\n",
                             "kernel k(x: f32[N], s: f32 = 2)\r\n\t-> y: f32[N] {\r\n",
                             "kernel k(x: f32[N], s: f32 = 2) ->\n    (y: f32[N]) {\n",
                             "kernel k(x: f32[N], s: f32 = 2) ->  # the outputs\n  y: f32[N] {\n"}) {
    INFO(header);
    auto module = parseValid(std::string(header) + "    y[i] = x[i] * s\n}\n");
    const ast::KernelDef& kernel = module->kernels.at(0);
    CHECK(kernel.inputs.size() == 2);
    REQUIRE(kernel.outputs.size() == 1);
    CHECK(position(kernel.outputs[0].loc).starts_with("2:"));
    CHECK(kernel.body.size() == 1);
  }
  // So may a directive with an arrow.
  auto module = parseValid("schedule k {\n    split y.i by 4\n        -> (a, b)\n    bind y.a to block.x\n}\n");
  CHECK(module->schedules.at(0).directives.size() == 2);
  // Only the line right after: a blank line before '->' still ends the header.
  CHECK_THAT(errorsOf("kernel k(x: f32[N])\n\n-> (y: f32[N]) {\n    y = x\n}\n"),
             Catch::StartsWith("test.emmy:1:20: error: unexpected end of line; expected '->'"));
}

TEST_CASE("blank lines, comments, CRLF line ends and one-line blocks", "[parser]") {
  auto module = parseValid(
      "\r\n"
      "# leading comment\r\n"
      "kernel k(x: f32[N]) -> (y: f32[N]) {   # after the brace\r\n"
      "\r\n"
      "    # between statements\r\n"
      "    t[i] = x[i]\r\n"
      "\r\n"
      "    y[i] = t[i] }\r\n"
      "kernel empty() -> (y: f32) {}\n"
      "schedule k { inline t }\n"
      "schedule k {\n"
      "}");
  REQUIRE(module->kernels.size() == 2);
  CHECK(module->kernels[0].body.size() == 2);
  CHECK(spelled(module->kernels[0].body[1].loc) == "y[i] = t[i]");
  CHECK(module->kernels[1].body.empty());
  REQUIRE(module->schedules.size() == 2);
  CHECK(module->schedules[0].directives.size() == 1);
  CHECK(module->schedules[1].directives.empty());
}

TEST_CASE("directive words are names outside schedule blocks", "[parser]") {
  auto module = parseValid(
      "kernel tile(pad: f32[N], in: f32[N]) -> (split: f32[N]) {\n"
      "    split[i] = pad(pad, 0)[i - 1] + in[i]\n"
      "    at = by + to + param + reorder + fuse + bind + inline + compute + root\n"
      "    cache = vectorize + unroll + double_buffer + atomic\n"
      "}\n"
      "schedule tile {\n"
      "    inline t\n"
      "}\n"
      "fn root(x) = x\n");
  const ast::KernelDef& kernel = module->kernels.at(0);
  CHECK(kernel.name.name == "tile");
  CHECK(kernel.inputs.at(0).name.name == "pad");
  CHECK(kernel.outputs.at(0).name.name == "split");
  CHECK(show(*kernel.body.at(0).value) == "(+ pad(pad, 0)[(- i 1)] in[i])");
  CHECK(names(kernel.body.at(2).targets) == Strings{"cache"});
  CHECK(module->schedules.at(0).directives.at(0).stage.name == "t");
  CHECK(module->fns.at(0).name.name == "root");
}

TEST_CASE("scan, threads and mma, which LANGUAGE.md does not reserve, are names where no directive starts", "[parser]") {
  auto module = parseValid(
      "schedule k {\n"
      "    param mma in [32, 64] = 64\n"
      "    scan scan.threads by (mma, 4)\n"
      "    threads mma scan\n"
      "    mma threads (scan, mma, threads) by (scan, mma) stages threads\n"
      "    split scan.t by 4 -> (threads, mma)\n"
      "}\n");
  const std::vector<ast::Directive>& directives = module->schedules.at(0).directives;
  REQUIRE(directives.size() == 4);
  CHECK(directives[0].kind == ast::DirectiveKind::Scan);
  CHECK(directives[0].stage.name == "scan");
  CHECK(directives[0].axes.at(0).name == "threads");
  CHECK(directives[1].kind == ast::DirectiveKind::Threads);
  CHECK(directives[1].stage.name == "mma");
  CHECK(directives[2].kind == ast::DirectiveKind::Mma);
  CHECK(names(directives[2].axes) == Strings{"scan", "mma", "threads"});
  CHECK(names(directives[3].results) == Strings{"threads", "mma"});
}

// ---------------------------------------------------------------------------------------------------
// Syntax errors

TEST_CASE("a missing operand", "[parser]") {
  CHECK(errorsOf("kernel add_one(x: f32[N]) -> (y: f32[N]) {\n"
                 "    y[i] = x[i] + * 1\n"
                 "}\n") ==
        "test.emmy:2:19: error: unexpected '*'; expected an expression\n"
        "    y[i] = x[i] + * 1\n"
        "                  ^\n");
  CHECK(errorsOf("fn f(x) = x +\n") ==
        "test.emmy:1:14: error: unexpected end of line; expected an expression\n"
        "fn f(x) = x +\n"
        "             ^\n");
  CHECK(errorsOf("fn f(x) = x +") ==
        "test.emmy:1:14: error: unexpected end of file; expected an expression\n"
        "fn f(x) = x +\n"
        "             ^\n");
}

TEST_CASE("every syntax error of a file is reported, one per line", "[parser]") {
  CHECK(errorsOf("kernal f(x: f32[N]) -> (y: f32[N]) {\n"
                 "}\n"
                 "kernel g(x: f32[N]) -> (y: f32[N]) {\n"
                 "    y[i] = x[i] x[i] + * 2\n"
                 "    + y = x\n"
                 "    y[i] 2\n"
                 "    y = f(x, , 2)\n"
                 "}\n"
                 "fn h(x) = (x, 1)\n") ==
        "test.emmy:1:1: error: unexpected 'kernal'; expected 'import', 'fn', 'kernel' or 'schedule'; did you mean "
        "'kernel'?\n"
        "kernal f(x: f32[N]) -> (y: f32[N]) {\n"
        "^~~~~~\n"
        "test.emmy:4:17: error: unexpected 'x'; expected end of line\n"
        "    y[i] = x[i] x[i] + * 2\n"
        "                ^\n"
        "test.emmy:5:5: error: unexpected '+'; expected a statement: NAME = ..., NAME[i, ...] = ... or (A, B) = ...\n"
        "    + y = x\n"
        "    ^\n"
        "test.emmy:6:10: error: unexpected '2'; expected '='\n"
        "    y[i] 2\n"
        "         ^\n"
        "test.emmy:7:14: error: unexpected ','; expected ')'\n"
        "    y = f(x, , 2)\n"
        "             ^\n"
        "test.emmy:9:13: error: unexpected ','; expected ')'\n"
        "fn h(x) = (x, 1)\n"
        "            ^\n");
}

TEST_CASE("a definition with a broken header is skipped whole", "[parser]") {
  CHECK(errorsOf("kernel f(x: f32[N]) -> {\n"
                 "    y = x\n"
                 "}\n"
                 "schedule f x {\n"
                 "    inline y\n"
                 "}\n"
                 "fn g(x) = * 2\n") ==
        "test.emmy:1:24: error: unexpected '{'; expected a name or '('\n"
        "kernel f(x: f32[N]) -> {\n"
        "                       ^\n"
        "test.emmy:4:12: error: unexpected 'x'; expected '{' or '<'\n"
        "schedule f x {\n"
        "           ^\n"
        "test.emmy:7:11: error: unexpected '*'; expected an expression\n"
        "fn g(x) = * 2\n"
        "          ^\n");
}

TEST_CASE("a statement or directive ends at the end of its line", "[parser]") {
  CHECK(errorsOf("kernel k(x: f32[N]) -> (y: f32[N]) { y = x z = x }\n") ==
        "test.emmy:1:44: error: unexpected 'z'; expected end of line\n"
        "kernel k(x: f32[N]) -> (y: f32[N]) { y = x z = x }\n"
        "                                           ^\n");
  CHECK(errorsOf("import nn import linalg\n") ==
        "test.emmy:1:11: error: unexpected 'import'; expected end of line\n"
        "import nn import linalg\n"
        "          ^~~~~~\n");
  // `{ }` do not continue a line: the '{' of a block is on the line of its header.
  CHECK(errorsOf("kernel k(x: f32[N]) -> (y: f32[N])\n{\n    y = x\n}\n") ==
        "test.emmy:1:35: error: unexpected end of line; expected '{'\n"
        "kernel k(x: f32[N]) -> (y: f32[N])\n"
        "                                  ^\n");
}

TEST_CASE("an unclosed bracket is reported where it was opened", "[parser]") {
  CHECK(errorsOf("kernel scale(x: f32[N]) -> (y: f32[N]) {\n"
                 "    y[i] = 2 * (x[i] + 1\n"
                 "}\n"
                 "fn f(x) = x +\n") ==
        "test.emmy:2:16: error: unclosed '('\n"
        "    y[i] = 2 * (x[i] + 1\n"
        "               ^\n");
  CHECK(errorsOf("fn f(x) = g(x,\n"
                 "          h(x[1]\n") ==
        "test.emmy:1:12: error: unclosed '('\n"
        "fn f(x) = g(x,\n"
        "           ^\n"
        "test.emmy:2:12: error: unclosed '('\n"
        "          h(x[1]\n"
        "           ^\n");
  CHECK(errorsOf("kernel k(x: f32[N]) -> (y: f32[N]) {\n"
                 "    y = x\n"
                 "kernel l(x: f32[N]) -> (y: f32[N]) {\n"
                 "    y = x\n"
                 "}\n") ==
        "test.emmy:1:36: error: unclosed '{'\n"
        "kernel k(x: f32[N]) -> (y: f32[N]) {\n"
        "                                   ^\n");
}

TEST_CASE("stray and mismatched closing brackets are reported at themselves", "[parser]") {
  CHECK(errorsOf("fn f(x) = x)\n") ==
        "test.emmy:1:12: error: unmatched ')'\n"
        "fn f(x) = x)\n"
        "           ^\n");
  CHECK(errorsOf("fn f(x) = x[1)\n") ==
        "test.emmy:1:14: error: ')' does not match '[' at 1:12\n"
        "fn f(x) = x[1)\n"
        "             ^\n");
  CHECK(errorsOf("}\n") ==
        "test.emmy:1:1: error: unmatched '}'\n"
        "}\n"
        "^\n");
}

TEST_CASE("chained comparisons are refused", "[parser]") {
  CHECK(errorsOf("kernel band(x: f32[N]) -> (y: bool[N]) {\n"
                 "    y[i] = 0 < x[i] < 1\n"
                 "}\n") ==
        "test.emmy:2:21: error: comparisons cannot be chained; combine them with 'and'\n"
        "    y[i] = 0 < x[i] < 1\n"
        "                    ^\n");
  CHECK(showExpr("0 < x and x < 1") == "(and (< 0 x) (< x 1))");
}

TEST_CASE("number literals out of range", "[parser]") {
  CHECK(errorsOf("fn f() = 9223372036854775808 + 1e999\n") ==
        "test.emmy:1:10: error: integer '9223372036854775808' is too large (the largest is 9223372036854775807)\n"
        "fn f() = 9223372036854775808 + 1e999\n"
        "         ^~~~~~~~~~~~~~~~~~~\n"
        "test.emmy:1:32: error: number '1e999' is out of the range of f64\n"
        "fn f() = 9223372036854775808 + 1e999\n"
        "                               ^~~~~\n");
  CHECK(errorsOf("kernel k(x: f32[99999999999999999999]) -> (y: f32) { y = 1 }\n") ==
        "test.emmy:1:17: error: integer '99999999999999999999' is too large (the largest is 9223372036854775807)\n"
        "kernel k(x: f32[99999999999999999999]) -> (y: f32) { y = 1 }\n"
        "                ^~~~~~~~~~~~~~~~~~~~\n");
}

TEST_CASE("keywords cannot be names", "[parser]") {
  CHECK(errorsOf("kernel import(x: f32) -> (y: f32) { y = x }\n") ==
        "test.emmy:1:8: error: 'import' is a keyword and cannot be used as a name\n"
        "kernel import(x: f32) -> (y: f32) { y = x }\n"
        "       ^~~~~~\n");
  CHECK(errorsOf("schedule k {\n    reorder y (tile, i)\n}\n") ==
        "test.emmy:2:16: error: 'tile' is a keyword inside a schedule and cannot be used as a name there\n"
        "    reorder y (tile, i)\n"
        "               ^~~~\n");
}

TEST_CASE("schedule syntax errors", "[parser]") {
  CHECK(errorsOf("schedule k {\n"
                 "    splt y.n by 4 -> (no, ni)\n"
                 "    bind y.n to block\n"
                 "    4 x\n"
                 "    split y.n by 4 -> (no, nm, ni)\n"
                 "    tile y (n) by (4, 4, 4) -> (a, b)\n"
                 "    fuse y (a, b, c) -> abc\n"
                 "}\n") ==
        "test.emmy:2:5: error: unknown directive 'splt' (directives: param, split, tile, reorder, fuse, bind, "
        "inline, compute, root, cache, vectorize, unroll, pad, double_buffer, threads, mma, scan); did you mean 'split'?\n"
        "    splt y.n by 4 -> (no, ni)\n"
        "    ^~~~\n"
        "test.emmy:3:22: error: unexpected end of line; a loop binds to block.x, block.y, block.z, thread.x, "
        "thread.y, thread.z, warp.x or grid.x\n"
        "    bind y.n to block\n"
        "                     ^\n"
        "test.emmy:4:5: error: unexpected '4'; expected a directive (param, split, tile, reorder, fuse, bind, inline, "
        "compute, root, cache, vectorize, unroll, pad, double_buffer, threads, mma, scan)\n"
        "    4 x\n"
        "    ^\n");
  CHECK(errorsOf("schedule k {\n"
                 "    split y.n by 4 -> (no, nm, ni)\n"
                 "    tile y (n) by (4, 4, 4) -> (a, b)\n"
                 "    fuse y (a, b, c) -> abc\n"
                 "}\n") ==
        "test.emmy:2:24: error: split makes 2 loops, as in 'split S.a by F -> (ao, ai)'; found 3\n"
        "    split y.n by 4 -> (no, nm, ni)\n"
        "                       ^~~~~~~~~~\n"
        "test.emmy:3:13: error: tile takes 2 axes, as in 'tile S (a, b) by (Fa, Fb) -> (ao, bo, ai, bi)'; found 1\n"
        "    tile y (n) by (4, 4, 4) -> (a, b)\n"
        "            ^\n"
        "test.emmy:3:20: error: tile takes 2 factors, as in 'tile S (a, b) by (Fa, Fb) -> (ao, bo, ai, bi)'; found 3\n"
        "    tile y (n) by (4, 4, 4) -> (a, b)\n"
        "                   ^~~~~~~\n"
        "test.emmy:3:33: error: tile makes 4 loops, as in 'tile S (a, b) by (Fa, Fb) -> (ao, bo, ai, bi)'; found 2\n"
        "    tile y (n) by (4, 4, 4) -> (a, b)\n"
        "                                ^~~~\n"
        "test.emmy:4:13: error: fuse takes 2 axes, as in 'fuse S (a, b) -> ab'; found 3\n"
        "    fuse y (a, b, c) -> abc\n"
        "            ^~~~~~~\n");
}

TEST_CASE("forms the grammar accepts but the builder refuses", "[parser]") {
  CHECK(errorsOf("kernel k(x: f32[N], w: f32[N] = 1) -> (y: f32[N] = 2) {\n"
                 "    y[i + 1] = x[i]\n"
                 "    y = sum[k + 1](x) + f(x)[1](2)\n"
                 "}\n") ==
        "test.emmy:1:33: error: only a scalar parameter can have a default value\n"
        "kernel k(x: f32[N], w: f32[N] = 1) -> (y: f32[N] = 2) {\n"
        "                                ^\n"
        "test.emmy:1:52: error: an output cannot have a default value\n"
        "kernel k(x: f32[N], w: f32[N] = 1) -> (y: f32[N] = 2) {\n"
        "                                                   ^\n"
        "test.emmy:2:7: error: an index on the left of '=' must be a name, or a name and its range, as in y[i < N]\n"
        "    y[i + 1] = x[i]\n"
        "      ^~~~~\n"
        "test.emmy:3:13: error: a reduction index must be a name, or a name and its bound, as in sum[k](...) or "
        "sum[k < 3](...)\n"
        "    y = sum[k + 1](x) + f(x)[1](2)\n"
        "            ^~~~~\n"
        "test.emmy:3:32: error: unexpected '('; a reduction is written OP[k, ...](EXPR)\n"
        "    y = sum[k + 1](x) + f(x)[1](2)\n"
        "                               ^\n");
}

TEST_CASE("unexpected characters and invalid UTF-8", "[parser]") {
  CHECK(errorsOf("fn f(x) = x $ 2\nfn g(x) = x ! 2\nfn h(x) = \xc3\xa9\n") ==
        "test.emmy:1:13: error: unexpected character '$'\n"
        "fn f(x) = x $ 2\n"
        "            ^\n"
        "test.emmy:2:13: error: unexpected character '!'\n"
        "fn g(x) = x ! 2\n"
        "            ^\n"
        "test.emmy:3:11: error: unexpected character '\xc3\xa9' (U+00E9)\n"
        "fn h(x) = \xc3\xa9\n"
        "          ^~\n");
  // Columns count bytes, also after a character of several (here the byte-order mark).
  CHECK(errorsOf("\xef\xbb\xbf" "fn f(x) = \x01\n") ==
        "test.emmy:1:14: error: unexpected character U+0001\n"
        "\xef\xbb\xbf" "fn f(x) = \x01\n"
        "             ^\n");
  CHECK(errorsOf("fn f(x) = x\n# \xff\xfe\n") ==
        "test.emmy:2:3: error: this file is not valid UTF-8 (byte 0xFF)\n"
        "# \xff\xfe\n"
        "  ^\n");
  CHECK(errorsOf("# \xed\xa0\x80 is a surrogate\n").find("not valid UTF-8 (byte 0xED)") != std::string::npos);
  CHECK(parse("\xef\xbb\xbf" "fn f(x) = x  # \xe2\x86\x92 arrows in comments are fine\n").errors.empty());
}

TEST_CASE("nesting too deep to parse is refused, not a crash", "[parser]") {
  std::string deep = "fn f(x) = " + std::string(100000, '(') + "x" + std::string(100000, ')') + "\n";
  std::string errors = errorsOf(deep);
  CHECK(errors.rfind("test.emmy:1:267: error: brackets are nested too deeply (the limit is 256)\n", 0) == 0);
  CHECK(std::count(errors.begin(), errors.end(), '\n') == 3);

  std::string deepest = "fn f(x) = " + std::string(255, '(') + "g(x)" + std::string(255, ')') + "\n";
  CHECK(show(fnBody(*parseValid(deepest))) == "g(x)");

  std::string chain = "fn f(x) = x";
  for (int i = 0; i < 100000; ++i) chain += " + x";
  CHECK(errorsOf(chain + "\n").rfind(
            "test.emmy:1:11: error: expression is nested too deeply (more than 1000 levels); split it into several "
            "statements\n",
            0) == 0);
  CHECK(errorsOf("fn f(x) = " + std::string(100000, '-') + "x\n").find("nested too deeply") != std::string::npos);
  std::string subscripts = "fn f(x) = x";
  for (int i = 0; i < 100000; ++i) subscripts += "[i]";
  CHECK(errorsOf(subscripts + "\n").find("nested too deeply") != std::string::npos);
}

TEST_CASE("an empty file is an empty module", "[parser]") {
  auto module = parseValid("");
  CHECK(module->kernels.empty());
  CHECK(module->source != nullptr);
  CHECK(parseValid("\n\n# only a comment").get() != nullptr);
}
