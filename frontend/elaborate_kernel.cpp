// One kernel instance: its signature, its statements in order, and the stages they define.
#include <fmt/format.h>

#include "frontend/affine.h"
#include "frontend/elaborator.h"
#include "frontend/operations.h"
#include "ir/tensor/build.h"
#include "ir/tensor/rewrite.h"
#include "ir/tensor/verifier.h"
#include "support/text.h"

namespace emmy {

using namespace tensor;

const IndexBinding* Scope::findIndex(const std::string& name) const {
  for (auto it = indices.rbegin(); it != indices.rend(); ++it)
    if (it->name == name) return &*it;
  return nullptr;
}

KernelElaboration::KernelElaboration(Elaborator& program, const LoadedModule& module, const ast::KernelDef& def,
                                     TypeArguments typeArguments, IntegerArguments integerArguments)
    : program(program), module(module), def(def), diagnostics(program.diagnostics()),
      typeArguments(std::move(typeArguments)), integerArguments(std::move(integerArguments)) {
  kernel.name = def.name.name;
  kernel.loc = def.name.loc;
  for (const ast::TypeParam& param : def.typeParams)
    if (auto it = this->typeArguments.find(param.name.name); it != this->typeArguments.end())
      kernel.typeArguments.emplace_back(param.name.name, it->second);
  // Only values other than the default name the instance, so that `emmy build` keeps the plain names.
  for (const ast::IntegerParam& param : def.integerParams) {
    auto it = this->integerArguments.find(param.name.name);
    if (it == this->integerArguments.end()) continue;
    std::optional<int64_t> byDefault = param.defaultValue;
    if (param.defaultParam) byDefault = this->integerArguments.at(param.defaultParam->name);
    if (it->second != byDefault) kernel.integerArguments.emplace_back(param.name.name, it->second);
  }
}

void KernelElaboration::error(const SourceLoc& loc, std::string message) { fail(diagnostics, loc, std::move(message)); }

namespace {

}  // namespace

std::optional<std::string> reservedNameProblem(const std::string& name) {
  if (name.find("__") != std::string::npos) return fmt::format("'{}': names containing '__' are reserved for the compiler", name);
  return std::nullopt;
}

namespace {

const char* symbolKindName(Symbol::Kind kind) {
  switch (kind) {
    case Symbol::Kind::Input: return "an input";
    case Symbol::Kind::Output: return "an output";
    case Symbol::Kind::Stage: return "a tensor";
    case Symbol::Kind::Scalar: return "a scalar parameter";
    case Symbol::Kind::Size: return "a size";
    case Symbol::Kind::TypeParam: return "a type parameter";
    case Symbol::Kind::IntegerParam: return "an integer parameter";
  }
  return "a name";
}

}  // namespace

std::optional<Kernel> KernelElaboration::run() {
  // An error another instance of the same generic kernel already reported is not reported again, so
  // failure is tracked here rather than read off the diagnostics.
  bool failed = !declareSignature();
  for (const ast::Statement& s : def.body) {
    try {
      statement(s);
    } catch (const CompilationAborted&) {
      failed = true;
      for (const ast::Ident& t : s.targets) poisoned.insert(t.name);
    }
  }
  for (const ast::Param& output : def.outputs) {
    auto it = symbols.find(output.name.name);
    if (it != symbols.end() && it->second.kind == Symbol::Kind::Output && !it->second.defined &&
        !poisoned.count(output.name.name)) {
      diagnostics.error(output.name.loc, fmt::format("output '{}' is never defined in the body of '{}'",
                                                     output.name.name, def.name.name));
      failed = true;
    }
  }
  if (failed) return std::nullopt;
  dropUnusedDerivedSizes();
  kernel.schedule = composeSchedule(foldTypeCases(program.ownSchedule(module, def, typeArguments, integerArguments), typeArguments));
  kernel.paramValues = program.paramValues();
  verifyKernel(kernel);
  return std::move(kernel);
}

// A call may compute sizes that no tensor of the caller keeps (a quotient that came out exact).
void KernelElaboration::dropUnusedDerivedSizes() {
  std::set<std::string> used;
  auto useShape = [&](const Shape& shape) {
    for (const Dim& dim : shape) used.insert(dim.sizes.begin(), dim.sizes.end());
  };
  for (const TensorParam& input : kernel.inputs) useShape(input.shape);
  for (const TensorParam& output : kernel.outputs) useShape(output.shape);
  for (const Stage& stage : kernel.stages) {
    useShape(stage.shape());
    if (stage.reduction)
      for (const Axis& axis : stage.reduction->axes) used.insert(axis.extent.sizes.begin(), axis.extent.sizes.end());
    forEachNode(*stage.body, [&](const Expr& node) {
      if (const auto* size = node.as<SizeVar>()) used.insert(size->name);
    });
  }
  std::vector<DerivedSize> kept;
  for (auto derived = kernel.derivedSizes.rbegin(); derived != kernel.derivedSizes.rend(); ++derived) {
    if (!used.count(derived->name)) continue;
    for (const SizePolynomial* polynomial : {&derived->numerator, &derived->denominator, &derived->operands[0], &derived->operands[1]})
      for (const auto& [monomial, coefficient] : polynomial->terms) used.insert(monomial.begin(), monomial.end());
    kept.insert(kept.begin(), *derived);
  }
  kernel.derivedSizes = std::move(kept);
}

// ---------------------------------------------------------------------------------------------------
// Signature

void KernelElaboration::declare(const std::string& name, Symbol symbol) {
  if (std::optional<std::string> problem = reservedNameProblem(name)) error(symbol.loc, *problem);
  auto [it, fresh] = symbols.emplace(name, symbol);
  if (!fresh)
    error(symbol.loc, fmt::format("duplicate definition of '{}' (already {} at {}:{})", name,
                                  symbolKindName(it->second.kind), it->second.loc.line, it->second.loc.column));
}

std::optional<DType> KernelElaboration::resolveDType(const ast::Ident& name) {
  if (std::optional<DType> dtype = parseDType(name.name)) return dtype;
  if (auto it = typeArguments.find(name.name); it != typeArguments.end()) return it->second;
  if (poisoned.count(name.name)) throw CompilationAborted{};  // a type parameter with an error, reported
  std::vector<std::string> known;
  for (DType t : kAllDTypes) known.emplace_back(dtypeName(t));
  for (const ast::TypeParam& param : def.typeParams) known.push_back(param.name.name);
  error(name.loc, withDTypeSuggestion(fmt::format("unknown type '{}'", name.name), name.name, known));
}

SizePolynomial KernelElaboration::dimPolynomial(const ast::Expr& e, DimPlace place) {
  const char* form = "a positive number, a size name, or an expression of those and integer parameters with + - * /";
  if (const auto* number = e.as<ast::Number>()) {
    if (!number->isInteger) error(e.loc, fmt::format("a dimension is {}, not {}", form, number->text));
    return SizePolynomial::constant(number->intValue);
  }
  if (const auto* binary = e.as<ast::Binary>()) {
    bool arithmetic = binary->op == ast::BinaryOp::Add || binary->op == ast::BinaryOp::Sub ||
                      binary->op == ast::BinaryOp::Mul || binary->op == ast::BinaryOp::Div;
    if (!arithmetic) error(binary->opLoc, fmt::format("a dimension is {}, not '{}'", form, ast::binaryOpSpelling(binary->op)));
    SizePolynomial lhs = dimPolynomial(*binary->lhs, place);
    SizePolynomial rhs = dimPolynomial(*binary->rhs, place);
    switch (binary->op) {
      case ast::BinaryOp::Add: return lhs + rhs;
      case ast::BinaryOp::Sub: return lhs - rhs;
      case ast::BinaryOp::Mul: return lhs * rhs;
      default: break;
    }
    if (rhs.constantValue() == 0) error(binary->opLoc, "this dimension divides by zero");
    return quotientPolynomial(kernel, lhs, rhs);
  }
  if (const auto* call = e.as<ast::Call>()) {
    // min(a, b) and max(a, b), checked by the parser. Where one operand is the extreme at every size, 0
    // included (a pool's windows in floor mode, bounded as ceil_mode's are), the dimension is that operand.
    SizePolynomial a = dimPolynomial(*call->args[0].value, place), b = dimPolynomial(*call->args[1].value, place);
    bool minimum = call->callee.name == "min";
    BoundsProver prover({}, {}, kernel.derivedSizes, /*smallestSize=*/0);
    auto atLeastZero = [&](const SizePolynomial& p) { return prover.provesNonNegative(AffineForm::ofPolynomial(p)); };
    if (atLeastZero(b - a)) return minimum ? a : b;
    if (atLeastZero(a - b)) return minimum ? b : a;
    return extremePolynomial(kernel, minimum ? DerivedSize::Kind::Minimum : DerivedSize::Kind::Maximum, a, b);
  }
  const auto* nameExpr = e.as<ast::Name>();
  if (!nameExpr) error(e.loc, fmt::format("a dimension is {}", form));
  const std::string& name = nameExpr->name;
  if (poisoned.count(name)) throw CompilationAborted{};  // a size or parameter whose declaration failed, reported
  auto it = symbols.find(name);
  if (it == symbols.end()) {
    std::vector<std::string> sizes(kernel.sizes.begin(), kernel.sizes.end());
    if (place == DimPlace::Output)
      error(e.loc, withSuggestion(fmt::format("output uses size '{}', which no input has (an output's shape may "
                                              "use sizes of the inputs only)",
                                              name),
                                  name, sizes));
    if (place == DimPlace::Body)
      error(e.loc, withSuggestion(fmt::format("unknown size '{}' (a dimension in the body uses the kernel's sizes, "
                                              "numbers and integer parameters)",
                                              name),
                                  name, sizes));
    declare(name, Symbol{Symbol::Kind::Size, DType::I64, {}, e.loc});
    kernel.sizes.push_back(name);
    return SizePolynomial::of(Dim::size(name));
  }
  if (it->second.kind == Symbol::Kind::IntegerParam) return SizePolynomial::constant(it->second.value);
  if (it->second.kind != Symbol::Kind::Size)
    error(e.loc, fmt::format("'{}' is {}, not a size", name, symbolKindName(it->second.kind)));
  return SizePolynomial::of(Dim::size(name));
}

Dim KernelElaboration::resolveDim(const ast::Expr& e, DimPlace place) {
  SizePolynomial value = dimPolynomial(e, place);
  if (std::optional<int64_t> constant = value.constantValue()) {
    if (*constant < 1)
      error(e.loc, fmt::format("a dimension must be at least 1, not {}{}", *constant,
                               e.as<ast::Number>() ? "" : " (the value of this expression)"));
    return Dim::constant(*constant);
  }
  return derivedDim(kernel, value, SizePolynomial::constant(1));
}

Shape KernelElaboration::resolveShape(const ast::TypeExpr& type, bool isOutput) {
  Shape shape;
  for (const ast::DimExpr& dim : type.dims) {
    Dim resolved = resolveDim(*dim.expr, isOutput ? DimPlace::Output : DimPlace::Input);
    // A size's value comes from an input where it is a dimension of its own.
    if (!isOutput && resolved.factor == 1 && resolved.sizes.size() == 1 && !kernel.findDerivedSize(resolved.sizes[0]))
      sizesStandingAlone.insert(resolved.sizes[0]);
    shape.push_back(resolved);
  }
  return shape;
}

bool KernelElaboration::declareSignature() {
  // Each parameter is declared on its own: after an error in one the others are still checked, and the
  // failed one is poisoned so that its uses in the body fail silently instead of as unknown names.
  bool declared = true;
  auto each = [&](const ast::Ident& name, const auto& declareOne) {
    try {
      declareOne();
    } catch (const CompilationAborted&) {
      declared = false;
      poisoned.insert(name.name);
    }
  };
  for (const ast::TypeParam& param : def.typeParams) each(param.name, [&] { declareTypeParam(param); });
  for (const ast::IntegerParam& param : def.integerParams)
    each(param.name, [&] {
      declare(param.name.name, Symbol{Symbol::Kind::IntegerParam, DType::I64, {}, param.name.loc, false,
                                      integerArguments.at(param.name.name)});
    });
  for (const ast::Param& param : def.inputs) each(param.name, [&] { declareInput(param); });
  for (const std::string& size : kernel.sizes)
    if (!sizesStandingAlone.count(size)) {
      const SourceLoc& loc = symbols.at(size).loc;
      diagnostics.error(loc, fmt::format("size '{}' is used only inside dimension expressions; make it a dimension of "
                                         "its own of some input, which gives its value",
                                         size));
      declared = false;
    }
  for (const ast::Param& param : def.outputs) each(param.name, [&] { declareOutput(param); });
  return declared;
}

void KernelElaboration::declareTypeParam(const ast::TypeParam& param) {
  declare(param.name.name, Symbol{Symbol::Kind::TypeParam, DType::F32, {}, param.name.loc});
  std::vector<std::string> bound;
  for (const ast::Ident& type : param.bound) {
    if (!parseDType(type.name)) {
      std::vector<std::string> known;
      for (DType t : kAllDTypes) known.emplace_back(dtypeName(t));
      error(type.loc, withDTypeSuggestion(fmt::format("unknown type '{}' in the bound of {}", type.name, param.name.name),
                                          type.name, known));
    }
    bound.push_back(type.name);
  }
  auto argument = typeArguments.find(param.name.name);
  if (argument == typeArguments.end())
    error(param.name.loc, fmt::format("the type parameter {} of '{}' has no type", param.name.name, def.name.name));
  if (std::find(bound.begin(), bound.end(), dtypeName(argument->second)) == bound.end())
    error(param.name.loc, fmt::format("{} = {} violates the bound of {}: {}", param.name.name,
                                      dtypeName(argument->second), param.name.name, join(bound, " | ")));
}

void KernelElaboration::declareInput(const ast::Param& param) {
  if (!param.type.isTensor) {
    DType dtype = *resolveDType(param.type.elementType);
    ScalarParamDecl scalar{param.name.name, dtype, nullptr, param.loc};
    if (param.defaultValue) {
      Scope constantScope;
      constantScope.module = &module;
      constantScope.kernelNames = false;
      TensorValue value = expr(*param.defaultValue, constantScope);
      const Expr* folded = value.literal ? nullptr : value.at({}).get();
      if (!value.literal && !(folded && folded->as<BoolImm>()))
        error(param.defaultValue->loc, fmt::format("the default of '{}' must be a constant", param.name.name));
      if (isInteger(dtype) && value.literal && !value.literal->isInteger)
        error(param.defaultValue->loc, fmt::format("the default of '{}' is not an integer", param.name.name));
      scalar.defaultValue = value.at({}, dtype);
    }
    declare(param.name.name, Symbol{Symbol::Kind::Scalar, dtype, {}, param.name.loc});
    kernel.scalars.push_back(scalar);
    return;
  }
  if (param.defaultValue) error(param.defaultValue->loc, "only scalar parameters can have a default");
  // The shape first: its sizes are declared even when the dtype is wrong, so the outputs can use them.
  Shape shape = resolveShape(param.type, false);
  DType dtype = *resolveDType(param.type.elementType);
  declare(param.name.name, Symbol{Symbol::Kind::Input, dtype, shape, param.name.loc});
  kernel.inputs.push_back(TensorParam{param.name.name, dtype, shape, param.loc});
}

void KernelElaboration::declareOutput(const ast::Param& param) {
  DType dtype = *resolveDType(param.type.elementType);
  if (!param.type.isTensor)
    error(param.type.loc, fmt::format("output '{}' must be a tensor, e.g. {}[N]", param.name.name, dtypeName(dtype)));
  if (param.defaultValue) error(param.defaultValue->loc, "only scalar parameters can have a default");
  Shape shape = resolveShape(param.type, true);
  declare(param.name.name, Symbol{Symbol::Kind::Output, dtype, shape, param.name.loc});
  kernel.outputs.push_back(TensorParam{param.name.name, dtype, shape, param.loc});
}

// ---------------------------------------------------------------------------------------------------
// Statements

void KernelElaboration::statement(const ast::Statement& s) {
  // A target whose declaration or earlier definition failed: whatever this one says would follow from that.
  for (const ast::Ident& t : s.targets)
    if (poisoned.count(t.name)) throw CompilationAborted{};
  target = s.targets.front().name;
  callsInStatement = 0;
  if (s.indexForm)
    indexStatement(s);
  else
    wholeTensorStatement(s);
}

void KernelElaboration::checkTarget(const ast::Ident& name) {
  if (std::optional<std::string> problem = reservedNameProblem(name.name)) error(name.loc, *problem);
  auto it = symbols.find(name.name);
  if (it == symbols.end()) return;
  const Symbol& existing = it->second;
  if (existing.kind == Symbol::Kind::Output && !existing.defined) return;
  if (existing.kind == Symbol::Kind::Input) error(name.loc, fmt::format("cannot assign to input '{}'", name.name));
  error(name.loc, fmt::format("duplicate definition of '{}' (already {} at {}:{})", name.name,
                              symbolKindName(existing.kind), existing.loc.line, existing.loc.column));
}

DType KernelElaboration::assignedType(const ast::Ident& name, DType valueType, bool literal, const SourceLoc& loc) {
  auto it = symbols.find(name.name);
  if (it == symbols.end() || it->second.kind != Symbol::Kind::Output) return valueType;
  DType declared = it->second.dtype;
  // Assignment converts like PyTorch's out= does, except that it never silently drops a fraction.
  bool allowed = declared == valueType || valueType == DType::Bool || (isFloat(declared) && !literal) ||
                 (isFloat(declared) && literal) || (isInteger(declared) && isInteger(valueType));
  if (!allowed)
    error(loc, fmt::format("cannot assign a value of type {} to output '{}' of type {}; convert it with {}(...)",
                           dtypeName(valueType), name.name, dtypeName(declared), dtypeName(declared)));
  return declared;
}

std::string KernelElaboration::freshStageName(const std::string& hint) {
  std::string base = target + "__" + hint;
  std::string name = base;
  for (int k = 1; symbols.count(name); ++k) name = fmt::format("{}_{}", base, k);
  return name;
}

void KernelElaboration::addStage(Stage stage) {
  auto it = symbols.find(stage.name);
  if (it != symbols.end()) {
    EMMY_INTERNAL_ASSERT(it->second.kind == Symbol::Kind::Output && !it->second.defined,
                         "stage '{}' defined twice", stage.name);
    it->second.defined = true;
  } else {
    symbols.emplace(stage.name, Symbol{Symbol::Kind::Stage, stage.dtype, stage.shape(), stage.loc, true});
  }
  kernel.stages.push_back(std::move(stage));
}

const Stage& KernelElaboration::materialize(const std::string& name, const TensorValue& value, const SourceLoc& loc) {
  Stage stage;
  stage.name = name;
  stage.dtype = value.literal ? value.literal->defaultType() : value.dtype;
  stage.loc = loc;
  std::vector<ExprPtr> index;
  for (size_t k = 0; k < value.shape.size(); ++k) {
    stage.axes.push_back(Axis{fmt::format("i{}", k), value.shape[k]});
    index.push_back(std::make_shared<AxisVar>(stage.axes.back().name));
  }
  if (value.reduction) {
    const PendingReduction& pending = *value.reduction;
    Reduction reduction{pending.op, {}, pending.accumulator};
    std::vector<ExprPtr> reductionIndex;
    for (size_t k = 0; k < pending.extents.size(); ++k) {
      reduction.axes.push_back(Axis{fmt::format("r{}", k), pending.extents[k]});
      reductionIndex.push_back(std::make_shared<AxisVar>(reduction.axes.back().name));
    }
    stage.body = pending.body(index, reductionIndex);
    stage.reduction = std::move(reduction);
  } else {
    stage.body = value.at(index, stage.dtype);
  }
  addStage(std::move(stage));
  return kernel.stages.back();
}

TensorValue KernelElaboration::realize(const TensorValue& value) {
  if (!value.reduction) return value;
  std::string name = freshStageName(value.reduction->hint);
  const Stage& stage = materialize(name, value, value.loc);
  return TensorValue::ofTensor(stage.name, stage.dtype, stage.shape(), value.loc);
}

void KernelElaboration::wholeTensorStatement(const ast::Statement& s) {
  for (const ast::Ident& t : s.targets) checkTarget(t);
  Scope scope;
  scope.module = &module;
  const auto* call = s.value->as<ast::Call>();
  std::optional<Callee> callee;
  if (call) callee = resolveCallee(*call, scope);
  std::vector<TensorValue> values;
  if (callee && callee->kernel) {
    std::vector<std::string> names;
    for (const ast::Ident& t : s.targets) names.push_back(t.name);
    values = callKernel(*callee->module, *callee->kernel, *call, scope, names);
    if (values.size() != s.targets.size())
      error(s.loc, fmt::format("'{}' returns {} result(s) but {} name(s) are given", call->callee.name,
                               values.size(), s.targets.size()));
  } else {
    if (s.targets.size() > 1) error(s.value->loc, "several results need a kernel call on the right, e.g. (a, b) = moments(x)");
    values.push_back(exprOrPending(*s.value, scope));
  }
  for (size_t k = 0; k < s.targets.size(); ++k) store(s.targets[k], values[k], s);
}

void KernelElaboration::store(const ast::Ident& name, TensorValue value, const ast::Statement& s) {
  auto symbol = symbols.find(name.name);
  if (symbol != symbols.end() && symbol->second.defined) return;  // a kernel call stored it under this name
  if (symbol == symbols.end() || symbol->second.kind != Symbol::Kind::Output) {
    materialize(name.name, value, s.loc);
    return;
  }
  DType dtype = assignedType(name, value.literal ? value.literal->defaultType() : value.dtype,
                             value.literal.has_value(), s.value->loc);
  const Shape& declared = symbol->second.shape;
  if (value.literal) value = castOp(dtype, value, value.loc);
  if (!(value.reduction && value.shape == declared)) {
    value = realize(value);
    Shape shape = broadcastShapes(value.shape, declared, s.value->loc, diagnostics);
    if (shape != declared)
      error(s.value->loc, fmt::format("a value of shape {} cannot be stored in output '{}' of shape {}",
                                      shapeToString(value.shape), name.name, shapeToString(declared)));
    value = broadcastTo(value, declared);
  }
  value.dtype = dtype;  // materialize stores in the declared type, converting each element
  materialize(name.name, value, s.loc);
}

std::vector<std::string> builtinFunctionNames() {
  std::vector<std::string> names{"where", "pad",   "min",       "max",       "sum",          "prod",
                                 "mean",  "pow",   "clamp",     "transpose", "permute",      "reshape",
                                 "broadcast_to",   "unsqueeze", "squeeze",   "softmax",      "log_softmax"};
#define EMMY_NAME_ENTRY(Op, spelling) \
  if (UnaryOp::Op != UnaryOp::Neg && UnaryOp::Op != UnaryOp::Not) names.push_back(spelling);
  EMMY_UNARY_OPS(EMMY_NAME_ENTRY)
#undef EMMY_NAME_ENTRY
  for (DType t : kAllDTypes) names.emplace_back(dtypeName(t));
  return names;
}

}  // namespace emmy
