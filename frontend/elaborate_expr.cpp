// Expressions of both forms: names, literals, operators, builtins, casts, where, fn inlining.
#include <fmt/format.h>

#include "frontend/elaborator.h"
#include "frontend/operations.h"
#include "frontend/parser.h"
#include "ir/tensor/build.h"
#include "support/text.h"

namespace emmy {

using namespace tensor;

namespace {

BinaryOp elementwiseOp(ast::BinaryOp op) {
  switch (op) {
    case ast::BinaryOp::Or: return BinaryOp::Or;
    case ast::BinaryOp::And: return BinaryOp::And;
    case ast::BinaryOp::Lt: return BinaryOp::Lt;
    case ast::BinaryOp::Le: return BinaryOp::Le;
    case ast::BinaryOp::Gt: return BinaryOp::Gt;
    case ast::BinaryOp::Ge: return BinaryOp::Ge;
    case ast::BinaryOp::Eq: return BinaryOp::Eq;
    case ast::BinaryOp::Ne: return BinaryOp::Ne;
    case ast::BinaryOp::Add: return BinaryOp::Add;
    case ast::BinaryOp::Sub: return BinaryOp::Sub;
    case ast::BinaryOp::Mul: return BinaryOp::Mul;
    case ast::BinaryOp::Div: return BinaryOp::Div;
    case ast::BinaryOp::Mod: return BinaryOp::Mod;
    case ast::BinaryOp::MatMul: break;
  }
  throw InternalError("@ is not elementwise");
}

// fns are inlined by recursion, and everything after the frontend walks expressions recursively: both
// are bounded, with a diagnostic at the call that goes past the bound.
constexpr size_t kMaxFnNesting = 100;
// Each call copies its fn's body, so fns that call the previous one twice double the code at each level.
constexpr uint64_t kMaxInlinedOperations = 100000;

// `value` with each element built once per index (the same index expressions give the same node), so that
// an fn using a parameter twice shares its argument's expression instead of building it twice. The
// element function is held by pointer: a copy of the value (each use of a parameter) then copies no
// closures, which would otherwise copy everything the value was built from.
TensorValue sharingElements(TensorValue value) {
  if (value.literal || value.reduction || !value.element) return value;
  using Built = std::map<std::vector<const Expr*>, std::pair<std::vector<ExprPtr>, ExprPtr>>;
  auto element = std::make_shared<const std::function<ExprPtr(const std::vector<ExprPtr>&)>>(std::move(value.element));
  value.element = [element, built = std::make_shared<Built>()](const std::vector<ExprPtr>& index) {
    std::vector<const Expr*> key;
    for (const ExprPtr& e : index) key.push_back(e.get());
    auto it = built->find(key);
    if (it == built->end()) it = built->emplace(key, std::make_pair(index, (*element)(index))).first;  // keeps `index` alive
    return it->second.second;
  };
  return value;
}

}  // namespace

ExpressionExtent KernelElaboration::extentOf(const ExprPtr& e) {
  if (auto known = extents.find(e.get()); known != extents.end()) return known->second.second;
  ExpressionExtent extent{1, 1};
  auto add = [&](const ExprPtr& child) {
    ExpressionExtent inner = extentOf(child);
    extent.operations = std::min(extent.operations + inner.operations, kMaxInlinedOperations + 1);
    extent.depth = std::max(extent.depth, inner.depth + 1);
  };
  dispatch(*e, [&](const auto& node) {
    using Node = std::decay_t<decltype(node)>;
    if constexpr (std::is_same_v<Node, Load>) {
      for (const ExprPtr& index : node.indices) add(index);
      if (node.padValue) add(node.padValue);
    } else if constexpr (std::is_same_v<Node, Unary> || std::is_same_v<Node, Cast>) {
      add(node.operand);
    } else if constexpr (std::is_same_v<Node, Binary>) {
      add(node.lhs), add(node.rhs);
    } else if constexpr (std::is_same_v<Node, Select>) {
      add(node.condition), add(node.ifTrue), add(node.ifFalse);
    }
  });
  extents.emplace(e.get(), std::make_pair(e, extent));
  return extent;
}

TensorValue KernelElaboration::expr(const ast::Expr& e, Scope& scope) { return realize(exprOrPending(e, scope)); }

TensorValue KernelElaboration::exprOrPending(const ast::Expr& e, Scope& scope) {
  switch (e.kind) {
    case ast::ExprKind::Number: {
      const auto& number = static_cast<const ast::Number&>(e);
      return TensorValue::ofLiteral(Literal{number.isInteger, number.floatValue}, e.loc);
    }
    case ast::ExprKind::Bool:
      return TensorValue::ofScalar(std::make_shared<BoolImm>(static_cast<const ast::Bool&>(e).value), e.loc);
    case ast::ExprKind::Name: return name(static_cast<const ast::Name&>(e), scope);
    case ast::ExprKind::Subscript:
      if (!scope.indexForm)
        error(e.loc, "subscripts belong to index form (NAME[i, ...] = ...); in whole-tensor form use whole tensors");
      return subscript(static_cast<const ast::Subscript&>(e), scope);
    case ast::ExprKind::Call: return call(static_cast<const ast::Call&>(e), scope, true);
    case ast::ExprKind::List:
      error(e.loc, "a list is only allowed as an argument (axis=[...], permute, reshape, broadcast_to)");
    case ast::ExprKind::Reduction:
      if (!scope.indexForm)
        error(e.loc, fmt::format("{}[...](...) is index form; in whole-tensor form write {}(x, axis=K)",
                                 static_cast<const ast::Reduction&>(e).op.name, static_cast<const ast::Reduction&>(e).op.name));
      return indexReduction(static_cast<const ast::Reduction&>(e), scope);
    case ast::ExprKind::Unary: {
      const auto& unary = static_cast<const ast::Unary&>(e);
      TensorValue operand = expr(*unary.operand, scope);
      return unaryOp(unary.op == ast::UnaryOp::Neg ? UnaryOp::Neg : UnaryOp::Not, operand, e.loc, diagnostics);
    }
    case ast::ExprKind::Binary: {
      const auto& binary = static_cast<const ast::Binary&>(e);
      TensorValue lhs = expr(*binary.lhs, scope);
      TensorValue rhs = expr(*binary.rhs, scope);
      if (binary.op == ast::BinaryOp::MatMul) {
        if (scope.indexForm) error(binary.opLoc, "@ multiplies whole tensors; in index form write sum[k](a[i, k] * b[k, j])");
        TensorValue product = matmul(lhs, rhs, binary.opLoc);
        product.loc = e.loc;
        return product;
      }
      if (std::optional<TensorValue> folded = indexByItsExtent(binary, lhs, rhs, scope)) {
        folded->loc = e.loc;
        return *folded;
      }
      if (binary.op == ast::BinaryOp::Div)
        if (std::optional<TensorValue> quotient = sizeQuotient(lhs, rhs)) {
          quotient->loc = e.loc;
          return *quotient;
        }
      TensorValue result = binaryOp(elementwiseOp(binary.op), lhs, rhs, binary.opLoc, diagnostics);
      result.loc = e.loc;
      return result;
    }
  }
  throw InternalError("unknown AST expression kind");
}

std::optional<TensorValue> KernelElaboration::indexByItsExtent(const ast::Binary& e, const TensorValue& lhs,
                                                                const TensorValue& rhs, const Scope& scope) {
  if (e.op != ast::BinaryOp::Div && e.op != ast::BinaryOp::Mod) return std::nullopt;
  const auto* name = e.lhs->as<ast::Name>();
  bool indexName = name && scope.kernelNames && !scope.fnArguments.count(name->name);
  const IndexBinding* index = indexName ? scope.findIndex(name->name) : nullptr;
  if (!index || !rhs.isScalar() || !(rhs.literal ? rhs.literal->isInteger : isInteger(rhs.dtype))) return std::nullopt;
  std::optional<AffineForm> divisor = affineOf(*rhs.at({}, DType::I64));
  AffineForm extent = AffineForm::ofDim(index->extent);
  if (!divisor || divisor->indices != extent.indices || divisor->sizes != extent.sizes || divisor->constant != extent.constant)
    return std::nullopt;
  // An index is below its extent: `o / OUT` is 0 and `o % OUT` is o (a group's channel when groups = 1).
  return e.op == ast::BinaryOp::Div ? TensorValue::ofLiteral(Literal{true, 0}, e.loc) : lhs;
}

std::optional<TensorValue> KernelElaboration::sizeQuotient(const TensorValue& lhs, const TensorValue& rhs) {
  if (!rhs.literal || !rhs.literal->isInteger || rhs.literal->value < 1 || lhs.literal || !lhs.isScalar() ||
      lhs.dtype != DType::I64)
    return std::nullopt;
  std::optional<AffineForm> form = affineOf(*lhs.at({}));
  if (!form || form->hasIndices() || form->constant < 0) return std::nullopt;
  SizePolynomial numerator = SizePolynomial::constant(form->constant);
  for (const auto& [monomial, coefficient] : form->sizes) {
    if (coefficient < 0) return std::nullopt;  // it might be negative, where `/` truncates and a quotient floors
    SizePolynomial term = SizePolynomial::constant(coefficient);
    for (const std::string& size : monomial) term = term * polynomialOf(kernel, Dim::size(size));
    numerator = numerator + term;
  }
  SizePolynomial denominator = SizePolynomial::constant(static_cast<int64_t>(rhs.literal->value));
  if (numerator.constantValue()) return std::nullopt;  // numbers fold as numbers
  return TensorValue::ofScalar(dimValue(derivedDim(kernel, numerator, denominator)), lhs.loc);
}

TensorValue KernelElaboration::name(const ast::Name& e, Scope& scope) {
  const std::string& n = e.name;
  if (auto argument = scope.fnArguments.find(n); argument != scope.fnArguments.end()) {
    TensorValue value = argument->second;
    value.loc = e.loc;
    return value;
  }
  std::vector<std::string> visible;
  for (const auto& [argumentName, value] : scope.fnArguments) visible.push_back(argumentName);
  if (scope.kernelNames) {
    if (scope.findIndex(n)) return TensorValue::ofScalar(std::make_shared<AxisVar>(n), e.loc);
    if (auto it = symbols.find(n); it != symbols.end()) {
      const Symbol& symbol = it->second;
      if (poisoned.count(n)) throw CompilationAborted{};
      switch (symbol.kind) {
        case Symbol::Kind::Output:
          if (!symbol.defined) error(e.loc, fmt::format("output '{}' is used before it is defined", n));
          [[fallthrough]];
        case Symbol::Kind::Input:
        case Symbol::Kind::Stage:
          if (scope.indexForm && !symbol.shape.empty())
            error(e.loc, fmt::format("in index form a tensor is read element by element: write {}[...]", n));
          return TensorValue::ofTensor(n, symbol.dtype, symbol.shape, e.loc);
        case Symbol::Kind::Scalar: return TensorValue::ofScalar(std::make_shared<ScalarParam>(symbol.dtype, n), e.loc);
        case Symbol::Kind::Size: return TensorValue::ofScalar(std::make_shared<SizeVar>(n), e.loc);
        case Symbol::Kind::IntegerParam:
          return TensorValue::ofLiteral(Literal{true, static_cast<double>(symbol.value)}, e.loc);
        case Symbol::Kind::TypeParam: error(e.loc, fmt::format("'{}' is a type; convert a value with {}(value)", n, n));
      }
    }
    if (poisoned.count(n)) throw CompilationAborted{};
    for (const IndexBinding& index : scope.indices) visible.push_back(index.name);
    for (const auto& [symbolName, symbol] : symbols) visible.push_back(symbolName);
  } else if (symbols.count(n) || scope.findIndex(n)) {
    if (scope.fnStack.empty()) error(e.loc, fmt::format("the default of a scalar parameter must be a constant, not '{}'", n));
    error(e.loc, fmt::format("fn '{}' sees only its parameters, not '{}'; pass it as an argument",
                             scope.fnStack.back()->name.name, n));
  }
  error(e.loc, withSuggestion(fmt::format("unknown name '{}'", n), n, visible));
}

KernelElaboration::Callee KernelElaboration::resolveCallee(const ast::Call& c, const Scope& scope) {
  const LoadedModule& within = *scope.module;
  const std::string& n = c.callee.name;
  if (c.module) {
    auto imported = within.imports.find(c.module->name);
    if (imported == within.imports.end()) {
      std::vector<std::string> modules;
      for (const auto& [moduleName, m] : within.imports) modules.push_back(moduleName);
      error(c.module->loc, withSuggestion(fmt::format("unknown module '{}' (not imported)", c.module->name),
                                          c.module->name, modules));
    }
    const LoadedModule& target = *imported->second;
    if (auto fn = target.fns.find(n); fn != target.fns.end()) return Callee{&target, fn->second, nullptr};
    if (auto kernel = target.kernels.find(n); kernel != target.kernels.end())
      return Callee{&target, nullptr, kernel->second};
    std::vector<std::string> names;
    for (const auto& [fnName, fn] : target.fns) names.push_back(fnName);
    for (const auto& [kernelName, kernel] : target.kernels) names.push_back(kernelName);
    error(c.callee.loc, withSuggestion(fmt::format("module '{}' has no fn or kernel '{}'", c.module->name, n), n, names));
  }
  bool local = scope.fnArguments.count(n) || (scope.kernelNames && (scope.findIndex(n) || symbols.count(n)));
  if (local && !(symbols.count(n) && symbols.at(n).kind == Symbol::Kind::TypeParam))
    error(c.callee.loc, fmt::format("'{}' is not a function here: a local name of the same name hides it", n));
  if (auto fn = within.fns.find(n); fn != within.fns.end()) return Callee{&within, fn->second, nullptr};
  if (auto kernel = within.kernels.find(n); kernel != within.kernels.end()) return Callee{&within, nullptr, kernel->second};
  return Callee{};
}

std::vector<const ast::Expr*> KernelElaboration::matchArguments(const std::string& callee,
                                                                const std::vector<std::string>& params,
                                                                size_t required, const ast::Call& c) {
  std::vector<const ast::Expr*> matched(params.size(), nullptr);
  size_t positional = 0;
  for (const ast::Argument& arg : c.args) {
    if (!arg.keyword) {
      if (positional >= params.size())
        error(arg.value->loc, fmt::format("'{}' takes {} argument{} but {} were given", callee,
                                          required == params.size() ? fmt::format("{}", params.size())
                                                                    : fmt::format("{} to {}", required, params.size()),
                                          params.size() == 1 ? "" : "s", c.args.size()));
      matched[positional++] = arg.value.get();
      continue;
    }
    auto it = std::find(params.begin(), params.end(), arg.keyword->name);
    if (it == params.end()) {
      const std::string& keyword = arg.keyword->name;
      std::string message = fmt::format("'{}' has no parameter '{}' (parameters: {})", callee, keyword, join(params, ", "));
      // `where(x = 0, ...)` names a value of the kernel: meant as a comparison, not as an argument.
      if (symbols.count(keyword)) error(arg.keyword->loc, message + "; use '==' to compare");
      error(arg.keyword->loc, withSuggestion(message, keyword, params));
    }
    size_t slot = it - params.begin();
    if (matched[slot]) error(arg.keyword->loc, fmt::format("argument '{}' of '{}' is given twice", arg.keyword->name, callee));
    matched[slot] = arg.value.get();
  }
  for (size_t k = 0; k < required; ++k)
    if (!matched[k])
      error(c.loc, fmt::format("'{}' takes {} argument{} but {} were given (missing '{}')", callee,
                               required == params.size() ? fmt::format("{}", params.size())
                                                         : fmt::format("{} to {}", required, params.size()),
                               params.size() == 1 ? "" : "s", c.args.size(), params[k]));
  return matched;
}

TensorValue KernelElaboration::call(const ast::Call& c, Scope& scope, bool allowPending) {
  Callee callee = resolveCallee(c, scope);
  std::string n = c.callee.name;
  if (callee.fn) return inlineFn(*callee.module, *callee.fn, c, scope);
  if (callee.kernel) {
    if (scope.indexForm) {
      // A kernel named like a cast or a builtin hides it (definitions shadow builtins): say so.
      const std::vector<std::string> builtins = builtinFunctionNames();
      bool hidesBuiltin = !c.module && (parseDType(n) || std::find(builtins.begin(), builtins.end(), n) != builtins.end());
      error(c.loc, fmt::format("kernel '{}' can only be called in whole-tensor form{}", n,
                               hidesBuiltin ? fmt::format("; the kernel hides the builtin '{}' (rename the kernel to use it)", n) : ""));
    }
    std::vector<TensorValue> results = callKernel(*callee.module, *callee.kernel, c, scope, {});
    if (results.size() != 1)
      error(c.loc, fmt::format("'{}' returns {} results; name them all: (a, b) = {}(...)", n, results.size(), n));
    return results.front();
  }
  auto operand = [&](const ast::Expr* e) { return expr(*e, scope); };
  // Casts: a dtype name or a type parameter of the kernel.
  std::optional<DType> castType = parseDType(n);
  if (!castType && scope.kernelNames)
    if (auto it = typeArguments.find(n); it != typeArguments.end()) castType = it->second;
  if (castType) {
    auto args = matchArguments(n, {"value"}, 1, c);
    return castOp(*castType, operand(args[0]), c.loc);
  }
  if (n == "where") return whereCall(c, scope);
  if (n == "pad") error(c.loc, "pad(x, value) reads with a default and must be subscripted: pad(x, value)[i, ...]");
  bool reductionCall = false;
  for (const ast::Argument& arg : c.args) reductionCall |= arg.keyword.has_value();
  if ((n == "min" || n == "max") && c.args.size() == 2 && !reductionCall) {
    auto args = matchArguments(n, {"a", "b"}, 2, c);
    return binaryOp(n == "min" ? BinaryOp::Min : BinaryOp::Max, operand(args[0]), operand(args[1]), c.loc, diagnostics);
  }
  if (n == "pow") {
    auto args = matchArguments(n, {"a", "b"}, 2, c);
    return binaryOp(BinaryOp::Pow, operand(args[0]), operand(args[1]), c.loc, diagnostics);
  }
  if (n == "clamp") {
    auto args = matchArguments(n, {"x", "lo", "hi"}, 3, c);
    TensorValue x = operand(args[0]), lo = operand(args[1]), hi = operand(args[2]);
    return binaryOp(BinaryOp::Min, binaryOp(BinaryOp::Max, x, lo, c.loc, diagnostics), hi, c.loc, diagnostics);
  }
  if (std::optional<UnaryOp> op = builtinUnary(n)) {
    auto args = matchArguments(n, {"x"}, 1, c);
    return unaryOp(*op, operand(args[0]), c.loc, diagnostics);
  }
  if (std::optional<TensorValue> value = wholeTensorFunction(c, scope)) {
    return allowPending ? *value : realize(*value);
  }
  std::vector<std::string> names = builtinFunctionNames();
  for (const auto& [fnName, fn] : scope.module->fns) names.push_back(fnName);
  for (const auto& [kernelName, kernel] : scope.module->kernels) names.push_back(kernelName);
  error(c.callee.loc, withDTypeSuggestion(fmt::format("unknown function '{}'", n), n, names));
}

TensorValue KernelElaboration::whereCall(const ast::Call& c, Scope& scope) {
  auto args = matchArguments("where", {"condition", "a", "b"}, 3, c);
  TensorValue condition = expr(*args[0], scope);
  // In index form the condition guards the reads of each branch: what it implies proves their bounds,
  // and a reduction hoisted out of a branch keeps it.
  ExprPtr guard = scope.indexForm && condition.isScalar() && !condition.literal ? condition.at({}) : nullptr;
  auto branch = [&](const ast::Expr& e, bool taken) {
    size_t facts = scope.facts.size(), guards = scope.guards.size();
    if (guard) {
      collectFacts(*guard, taken, scope.facts);
      scope.guards.push_back(taken ? guard : std::make_shared<Unary>(DType::Bool, UnaryOp::Not, guard));
    }
    TensorValue value = expr(e, scope);
    scope.facts.resize(facts);
    scope.guards.resize(guards);
    return value;
  };
  TensorValue ifTrue = branch(*args[1], true);
  TensorValue ifFalse = branch(*args[2], false);
  TensorValue result = selectOp(condition, ifTrue, ifFalse, c.loc, diagnostics);
  result.loc = c.loc;
  return result;
}

TensorValue KernelElaboration::inlineFn(const LoadedModule& fnModule, const ast::FnDef& fn, const ast::Call& c,
                                        Scope& scope) {
  // A recursive call was reported when the module was loaded.
  if (std::find(scope.fnStack.begin(), scope.fnStack.end(), &fn) != scope.fnStack.end()) throw CompilationAborted{};
  if (scope.fnStack.size() == kMaxFnNesting)
    error(c.loc, fmt::format("fn nesting deeper than {}: '{}' is called inside {} fns that are being inlined",
                             kMaxFnNesting, fn.name.name, kMaxFnNesting));
  std::vector<std::string> params;
  for (const ast::Ident& param : fn.params) params.push_back(param.name);
  auto args = matchArguments(fn.name.name, params, params.size(), c);
  Scope body;
  body.module = &fnModule;
  body.kernelNames = false;
  body.indexForm = scope.indexForm;
  body.fnStack = scope.fnStack;
  body.fnStack.push_back(&fn);
  for (size_t k = 0; k < params.size(); ++k) body.fnArguments[params[k]] = sharingElements(expr(*args[k], scope));
  TensorValue result = sharingElements(expr(*fn.body, body));
  result.loc = c.loc;
  if (result.literal || result.reduction) return result;
  // The code this call stands for, as the later passes and the CUDA see it: a tree, not the shared DAG.
  // Every call is measured at the same index, so that the calls inside it reuse their elements.
  while (static_cast<int>(measuringIndex.size()) < result.rank())
    measuringIndex.push_back(std::make_shared<AxisVar>(fmt::format("i{}", measuringIndex.size())));
  ExpressionExtent extent =
      extentOf(result.at(std::vector<ExprPtr>(measuringIndex.begin(), measuringIndex.begin() + result.rank())));
  if (extent.operations > kMaxInlinedOperations)
    error(c.loc, fmt::format("the call of fn '{}' expands to more than {} operations (an fn's body is copied at each of "
                             "its calls, here also inside the fns it calls); compute the repeated part once, as a "
                             "stage of its own",
                             fn.name.name, kMaxInlinedOperations));
  if (extent.depth > static_cast<uint64_t>(kMaxExpressionDepth))
    error(c.loc, fmt::format("the call of fn '{}' expands to an expression nested {} levels deep (the limit is {})",
                             fn.name.name, extent.depth, kMaxExpressionDepth));
  return result;
}

}  // namespace emmy
