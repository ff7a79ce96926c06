// Index form: `NAME[i, j] = EXPR`. Range inference, affine reads with bounds proofs, reductions.
#include <fmt/format.h>

#include "frontend/elaborator.h"
#include "frontend/operations.h"
#include "ir/tensor/build.h"
#include "ir/tensor/rewrite.h"
#include "ir/tensor/scalar_ops.h"
#include "support/text.h"

namespace emmy {

using namespace tensor;

namespace {

// Every identifier named in `e` (for the names a `where` condition guards).
void namesIn(const ast::Expr& e, std::set<std::string>& out) {
  switch (e.kind) {
    case ast::ExprKind::Name: out.insert(static_cast<const ast::Name&>(e).name); break;
    case ast::ExprKind::Subscript: {
      const auto& s = static_cast<const ast::Subscript&>(e);
      namesIn(*s.base, out);
      for (const ast::ExprPtr& index : s.indices) namesIn(*index, out);
      break;
    }
    case ast::ExprKind::Call:
      for (const ast::Argument& arg : static_cast<const ast::Call&>(e).args) namesIn(*arg.value, out);
      break;
    case ast::ExprKind::List:
      for (const ast::ExprPtr& element : static_cast<const ast::List&>(e).elements) namesIn(*element, out);
      break;
    case ast::ExprKind::Reduction: namesIn(*static_cast<const ast::Reduction&>(e).body, out); break;
    case ast::ExprKind::Unary: namesIn(*static_cast<const ast::Unary&>(e).operand, out); break;
    case ast::ExprKind::Binary:
      namesIn(*static_cast<const ast::Binary&>(e).lhs, out);
      namesIn(*static_cast<const ast::Binary&>(e).rhs, out);
      break;
    default: break;
  }
}

// Range inference: the first place where an index stands alone as a subscript of a tensor of known
// shape sets its range; every later such place must agree.
class RangeInference {
public:
  RangeInference(KernelElaboration& k) : k_(k) {}

  struct Place {
    Dim dim;
    SourceLoc loc;
    std::string description;
  };

  void bind(const ast::Ident& index) { scope_.push_back(&index); }
  void seed(const ast::Ident& index, Dim dim, std::string description) {
    places_.emplace(&index, Place{std::move(dim), index.loc, std::move(description)});
  }
  // An index whose range is written: its subscripts are proved against it, not compared with it.
  void fix(const ast::Ident& index, Dim dim, std::string description) {
    seed(index, std::move(dim), std::move(description));
    bounded_.insert(&index);
  }

  void visit(const ast::Expr& e, const std::set<std::string>& guarded) {
    switch (e.kind) {
      case ast::ExprKind::Subscript: subscript(static_cast<const ast::Subscript&>(e), guarded); break;
      case ast::ExprKind::Reduction: {
        const auto& r = static_cast<const ast::Reduction&>(e);
        size_t depth = scope_.size();
        for (size_t k = 0; k < r.indices.size(); ++k) {
          const ast::Ident& index = r.indices[k];
          if (lookup(index.name) || k_.symbols.count(index.name))
            k_.error(index.loc, fmt::format("reduction index '{}' reuses a name visible around it; choose another name",
                                            index.name));
          scope_.push_back(&index);
          // An index with a bound takes its range from it (indexReductionParts), not from its subscripts.
          if (r.bounds[k]) bounded_.insert(&index);
          else keys_.push_back(&index);
        }
        visit(*r.body, guarded);
        scope_.resize(depth);
        break;
      }
      case ast::ExprKind::Call: {
        const auto& c = static_cast<const ast::Call&>(e);
        if (!c.module && c.callee.name == "where" && c.args.size() == 3) {
          std::set<std::string> inner = guarded;
          namesIn(*c.args[0].value, inner);
          visit(*c.args[0].value, guarded);
          visit(*c.args[1].value, inner);
          visit(*c.args[2].value, inner);
        } else {
          for (const ast::Argument& arg : c.args) visit(*arg.value, guarded);
        }
        break;
      }
      case ast::ExprKind::List:
        for (const ast::ExprPtr& element : static_cast<const ast::List&>(e).elements) visit(*element, guarded);
        break;
      case ast::ExprKind::Unary: visit(*static_cast<const ast::Unary&>(e).operand, guarded); break;
      case ast::ExprKind::Binary:
        visit(*static_cast<const ast::Binary&>(e).lhs, guarded);
        visit(*static_cast<const ast::Binary&>(e).rhs, guarded);
        break;
      default: break;
    }
  }

  IndexRanges finish(const std::vector<const ast::Ident*>& statementIndices) {
    IndexRanges ranges;
    std::vector<const ast::Ident*> all = statementIndices;
    all.insert(all.end(), keys_.begin(), keys_.end());
    for (const ast::Ident* index : all) {
      const Place* place = nullptr;
      if (auto it = places_.find(index); it != places_.end())
        place = &it->second;
      else if (auto guardedIt = guardedPlaces_.find(index); guardedIt != guardedPlaces_.end())
        place = &guardedIt->second;
      if (!place) {
        // A read of a tensor that is not there may be what would have set the range: that is the error.
        if (unresolvedRead_) {
          if (k_.poisoned.count(unresolvedRead_->name)) throw CompilationAborted{};
          k_.unknownTensor(*unresolvedRead_);
        }
        k_.diagnostics.error(index->loc,
                             fmt::format("cannot infer the range of index '{}': use it alone as a subscript of a "
                                         "tensor of known shape, as in x[{}] (reads through pad do not count)",
                                         index->name, index->name));
        continue;
      }
      ranges[index] = place->dim;
    }
    if (ranges.size() != all.size()) throw CompilationAborted{};
    return ranges;
  }

private:
  const ast::Ident* lookup(const std::string& name) const {
    for (auto it = scope_.rbegin(); it != scope_.rend(); ++it)
      if ((*it)->name == name) return *it;
    return nullptr;
  }

  void subscript(const ast::Subscript& s, const std::set<std::string>& guarded) {
    for (const ast::ExprPtr& index : s.indices) visit(*index, guarded);
    visit(*s.base, guarded);
    const auto* base = s.base->as<ast::Name>();
    if (!base) return;  // pad(x, v)[...] never sets a range
    auto symbol = k_.symbols.find(base->name);
    if (symbol == k_.symbols.end()) {
      if (!unresolvedRead_ && !lookup(base->name)) unresolvedRead_ = base;
      return;
    }
    const Symbol& tensor = symbol->second;
    bool known = tensor.kind == Symbol::Kind::Input || tensor.kind == Symbol::Kind::Stage ||
                 (tensor.kind == Symbol::Kind::Output && tensor.defined);
    if (!known) return;
    for (size_t p = 0; p < s.indices.size() && p < tensor.shape.size(); ++p) {
      const auto* name = s.indices[p]->as<ast::Name>();
      if (!name) continue;
      const ast::Ident* index = lookup(name->name);
      if (!index || bounded_.count(index)) continue;
      std::string description = fmt::format("{}[...] dimension {}", base->name, p);
      if (guarded.count(name->name)) {
        guardedPlaces_.emplace(index, Place{tensor.shape[p], name->loc, description});
        continue;
      }
      auto [first, fresh] = places_.emplace(index, Place{tensor.shape[p], name->loc, description});
      // Sizes computed from others (`H - 2` beside `H`) may differ: the bounds proof of the read decides.
      if (!fresh && !(first->second.dim == tensor.shape[p]) && !involvesDerivedSize(first->second.dim) &&
          !involvesDerivedSize(tensor.shape[p]))
        k_.error(name->loc, fmt::format("index '{}' ranges over {} (from {} at {}:{}) but here it indexes {}, of size {}",
                                        name->name, first->second.dim.toString(), first->second.description,
                                        first->second.loc.line, first->second.loc.column, description,
                                        tensor.shape[p].toString()));
    }
  }

  bool involvesDerivedSize(const Dim& dim) const {
    return std::any_of(dim.sizes.begin(), dim.sizes.end(),
                       [&](const std::string& size) { return k_.kernel.findDerivedSize(size) != nullptr; });
  }

  KernelElaboration& k_;
  std::vector<const ast::Ident*> scope_;
  std::vector<const ast::Ident*> keys_;  // reduction indices without a bound, in order of appearance
  std::set<const ast::Ident*> bounded_;  // reduction indices with one
  std::map<const ast::Ident*, Place> places_;
  // Reads inside a `where` branch whose condition names the index: they are bounds-checked like any
  // affine read, need not agree, and set the range only when no other place does.
  std::map<const ast::Ident*, Place> guardedPlaces_;
  const ast::Name* unresolvedRead_ = nullptr;  // the first subscripted name that is no tensor nor index
};

}  // namespace

void KernelElaboration::unknownTensor(const ast::Name& name) {
  std::vector<std::string> tensors;
  for (const auto& [n, symbol] : symbols)
    if (symbol.kind == Symbol::Kind::Input || symbol.kind == Symbol::Kind::Stage || symbol.kind == Symbol::Kind::Output)
      tensors.push_back(n);
  error(name.loc, withSuggestion(fmt::format("unknown tensor '{}'", name.name), name.name, tensors));
}

IndexRanges KernelElaboration::inferRanges(const ast::Statement& s) {
  RangeInference inference(*this);
  std::vector<const ast::Ident*> indices;
  auto symbol = symbols.find(s.targets.front().name);
  bool output = symbol != symbols.end() && symbol->second.kind == Symbol::Kind::Output;
  for (size_t k = 0; k < s.indices.size(); ++k) {
    inference.bind(s.indices[k]);
    indices.push_back(&s.indices[k]);
    if (s.indexRanges[k]) {
      Dim range = resolveDim(*s.indexRanges[k], DimPlace::Body);
      if (output && !(range == symbol->second.shape[k]))
        error(s.indexRanges[k]->loc, fmt::format("output '{}' has size {} in dimension {}, not {}", s.targets.front().name,
                                                 symbol->second.shape[k].toString(), k, range.toString()));
      inference.fix(s.indices[k], range, fmt::format("its range, {}", range.toString()));
    } else if (output) {
      inference.seed(s.indices[k], symbol->second.shape[k], fmt::format("the declaration of output '{}'", target));
    }
  }
  inference.visit(*s.value, {});
  return inference.finish(indices);
}

void KernelElaboration::indexStatement(const ast::Statement& s) {
  const ast::Ident& name = s.targets.front();
  checkTarget(name);
  for (size_t k = 0; k < s.indices.size(); ++k) {
    const ast::Ident& index = s.indices[k];
    if (index.name.find("__") != std::string::npos)
      error(index.loc, fmt::format("'{}': names containing '__' are reserved for the compiler", index.name));
    if (auto it = symbols.find(index.name); it != symbols.end())
      error(index.loc, fmt::format("index '{}' reuses the name of {} declared at {}:{}; choose another index name",
                                   index.name, it->second.kind == Symbol::Kind::Size ? "a size" : "a tensor or parameter",
                                   it->second.loc.line, it->second.loc.column));
    for (size_t j = 0; j < k; ++j)
      if (s.indices[j].name == index.name) error(index.loc, fmt::format("index '{}' appears twice on the left", index.name));
  }
  auto symbol = symbols.find(name.name);
  if (symbol != symbols.end() && symbol->second.kind == Symbol::Kind::Output &&
      symbol->second.shape.size() != s.indices.size() && symbol->second.shape.empty())
    error(name.loc, fmt::format("output '{0}' is a tensor of rank 0, defined as {0}[] = ...", name.name));
  if (symbol != symbols.end() && symbol->second.kind == Symbol::Kind::Output &&
      symbol->second.shape.size() != s.indices.size())
    error(name.loc, fmt::format("output '{}' has {} dimension(s) but {} index(es) are given", name.name,
                                symbol->second.shape.size(), s.indices.size()));

  IndexRanges statementRanges = inferRanges(s);
  ranges = &statementRanges;
  Scope scope;
  scope.module = &module;
  scope.indexForm = true;
  Stage stage;
  stage.name = name.name;
  stage.loc = s.loc;
  for (const ast::Ident& index : s.indices) {
    if (std::optional<std::string> problem = reservedNameProblem(index.name)) error(index.loc, *problem);
    scope.indices.push_back(IndexBinding{index.name, statementRanges.at(&index), index.loc});
    stage.axes.push_back(Axis{index.name, statementRanges.at(&index)});
  }
  std::optional<ReductionParts> parts;
  if (const auto* reduction = s.value->as<ast::Reduction>()) parts = indexReductionParts(*reduction, scope);
  if (parts && !parts->divisor) {
    stage.dtype = assignedType(name, parts->resultType, false, s.value->loc);
    stage.reduction = std::move(parts->reduction);
    stage.body = parts->body;
  } else {
    TensorValue value = parts ? hoistReduction(*parts, *s.value->as<ast::Reduction>(), scope) : expr(*s.value, scope);
    DType valueType = value.literal ? value.literal->defaultType() : value.dtype;
    stage.dtype = assignedType(name, valueType, value.literal.has_value(), s.value->loc);
    stage.body = value.at({}, stage.dtype);
  }
  ranges = nullptr;
  addStage(std::move(stage));
}

TensorValue KernelElaboration::subscript(const ast::Subscript& e, Scope& scope) {
  std::string tensorName;
  ExprPtr padValue;
  const ast::Expr* padArgument = nullptr;
  const ast::Expr* baseExpr = e.base.get();
  const auto* padCall = baseExpr->as<ast::Call>();
  if (padCall && !padCall->module && padCall->callee.name == "pad") {
    auto args = matchArguments("pad", {"x", "value"}, 2, *padCall);
    baseExpr = args[0];
    padArgument = args[1];
    const auto* tensorArg = baseExpr->as<ast::Name>();
    if (!tensorArg) error(baseExpr->loc, "the first argument of pad must name a tensor");
    tensorName = tensorArg->name;
  } else if (const auto* base = baseExpr->as<ast::Name>()) {
    tensorName = base->name;
  } else {
    error(baseExpr->loc, "only a tensor (or pad(tensor, value)) can be subscripted");
  }
  if (poisoned.count(tensorName)) throw CompilationAborted{};
  auto symbol = symbols.find(tensorName);
  bool isTensor = symbol != symbols.end() &&
                  (symbol->second.kind == Symbol::Kind::Input || symbol->second.kind == Symbol::Kind::Stage ||
                   symbol->second.kind == Symbol::Kind::Output);
  if (!isTensor || scope.fnArguments.count(tensorName) || scope.findIndex(tensorName)) {
    if (symbol == symbols.end() && !scope.findIndex(tensorName) && !scope.fnArguments.count(tensorName))
      unknownTensor(ast::Name(baseExpr->loc, tensorName));
    error(baseExpr->loc, fmt::format("'{}' is not a tensor and cannot be subscripted", tensorName));
  }
  const Symbol& tensor = symbol->second;
  if (tensor.kind == Symbol::Kind::Output && !tensor.defined)
    error(baseExpr->loc, fmt::format("output '{}' is used before it is defined", tensorName));
  if (e.indices.size() != tensor.shape.size() && tensor.shape.empty())
    error(e.loc, fmt::format("'{0}' is a tensor of rank 0, read as {0}[]", tensorName));
  if (e.indices.size() != tensor.shape.size())
    error(e.loc, fmt::format("'{}' has {} dimension(s) but {} subscript(s) are given", tensorName, tensor.shape.size(),
                             e.indices.size()));
  if (padArgument) {
    TensorValue value = expr(*padArgument, scope);
    if (!value.isScalar()) error(value.loc, "the value of pad must be a scalar");
    padValue = value.at({}, tensor.dtype);
  }
  std::map<std::string, Dim> extents;
  for (const IndexBinding& index : scope.indices) extents.emplace(index.name, index.extent);
  bool padNeeded = false;  // some subscript of a padded read may leave the tensor
  BoundsProver prover(extents, scope.facts, kernel.derivedSizes);
  std::vector<ExprPtr> indices;
  for (size_t p = 0; p < e.indices.size(); ++p) {
    const ast::Expr& sub = *e.indices[p];
    if (const auto* index = sub.as<ast::Name>();
        index && !scope.findIndex(index->name) && !symbols.count(index->name) && !poisoned.count(index->name)) {
      std::vector<std::string> indexNames;
      for (const IndexBinding& binding : scope.indices) indexNames.push_back(binding.name);
      error(sub.loc, withSuggestion(fmt::format("index '{}' is neither on the left nor an index of an enclosing "
                                                "reduction (there are no implicit reductions: write sum[{}](...))",
                                                index->name, index->name),
                                    index->name, indexNames));
    }
    TensorValue value = expr(sub, scope);
    bool integral = value.literal ? value.literal->isInteger : isInteger(value.dtype) || value.dtype == DType::Bool;
    if (!integral || !value.isScalar())
      error(sub.loc, fmt::format("a subscript must be an integer, not {}",
                                 value.literal ? "a fractional number" : std::string(dtypeName(value.dtype))));
    ExprPtr index = value.at({}, DType::I64);
    if (padValue) {
      std::optional<AffineForm> form = affineOf(*index);
      AffineForm last = AffineForm::ofDim(tensor.shape[p]) - AffineForm{{}, {}, 1};
      padNeeded = padNeeded || !form || !prover.provesNonNegative(*form) || !prover.provesNonNegative(last - *form);
    } else {
      std::optional<AffineForm> form = affineOf(*index);
      if (!form)
        error(sub.loc, "a subscript must be affine in the indices (sums of indices times constants, sizes and "
                       "numbers); read through pad(x, value) for anything else");
      AffineForm last = AffineForm::ofDim(tensor.shape[p]) - AffineForm{{}, {}, 1};
      if (!prover.provesNonNegative(*form) || !prover.provesNonNegative(last - *form))
        error(sub.loc, fmt::format("this read may fall outside '{}' (dimension {} has size {}): guard it with "
                                   "where(...) or read through pad({}, value)",
                                   tensorName, p, tensor.shape[p].toString(), tensorName));
    }
    indices.push_back(index);
  }
  // A padded read that provably stays inside the tensor reads it directly, with no guard at run time
  // (a convolution without padding, written once for every padding).
  if (!padNeeded) padValue = nullptr;
  return TensorValue::ofScalar(std::make_shared<Load>(tensor.dtype, tensorName, indices, padValue), e.loc);
}

namespace {

std::optional<ReduceOp> reduceOpNamed(const std::string& name) {
#define EMMY_MATCH_REDUCE(Op, spelling) \
  if (name == spelling) return ReduceOp::Op;
  EMMY_REDUCE_OPS(EMMY_MATCH_REDUCE)
#undef EMMY_MATCH_REDUCE
  return std::nullopt;
}

}  // namespace

DType reductionResultType(ReduceOp op, DType dtype, const SourceLoc& loc, Diagnostics& diagnostics) {
  if (op == ReduceOp::Mean && !isFloat(dtype))
    fail(diagnostics, loc, fmt::format("mean of {} values is not defined; convert them first, e.g. f32(...)",
                                       dtypeName(dtype)));
  if (dtype == DType::Bool && (op == ReduceOp::Sum || op == ReduceOp::Prod)) return DType::I64;
  return dtype;
}

KernelElaboration::ReductionParts KernelElaboration::indexReductionParts(const ast::Reduction& e, Scope& scope) {
  std::optional<ReduceOp> op = reduceOpNamed(e.op.name);
  // argmax and argmin find their extreme, then its first position.
  bool positional = e.op.name == "argmax" || e.op.name == "argmin";
  if (positional) op = e.op.name == "argmax" ? ReduceOp::Max : ReduceOp::Min;
  if (!op)
    error(e.op.loc, fmt::format("unknown reduction '{}': use sum, max, min, prod, mean, argmax or argmin", e.op.name));
  size_t depth = scope.indices.size(), factCount = scope.facts.size();
  Reduction reduction{*op, {}, DType::F32};
  std::vector<ExprPtr> boundGuards;
  for (size_t k = 0; k < e.indices.size(); ++k) {
    const ast::Ident& index = e.indices[k];
    if (std::optional<std::string> problem = reservedNameProblem(index.name)) error(index.loc, *problem);
    if (e.bounds[k]) {
      BoundedRange bounded = boundedRange(index, *e.bounds[k], scope);
      scope.indices.push_back(IndexBinding{index.name, bounded.extent, index.loc});
      reduction.axes.push_back(Axis{index.name, bounded.extent});
      if (bounded.guard) {
        boundGuards.push_back(bounded.guard);
        collectFacts(*bounded.guard, true, scope.facts);
      }
      continue;
    }
    auto range = ranges->find(&index);
    if (range == ranges->end()) {
      // Ranges are inferred from the statement itself; a reduction written in a fn has none to find.
      EMMY_INTERNAL_ASSERT(!scope.fnStack.empty(), "index '{}' of a reduction has no range", index.name);
      error(index.loc, fmt::format("cannot infer the range of index '{}' in fn {}: a fn's parameters are scalars, so "
                                   "nothing there is subscripted by it; write the reduction in the kernel and pass its "
                                   "result to the fn", index.name, scope.fnStack.back()->name.name));
    }
    scope.indices.push_back(IndexBinding{index.name, range->second, index.loc});
    reduction.axes.push_back(Axis{index.name, range->second});
  }
  // A mean whose count is not the product of the ranges sums, and is divided by its count.
  ExprPtr divisor;
  if (*op == ReduceOp::Mean && !boundGuards.empty()) {
    for (size_t k = 0; k < e.indices.size(); ++k) {
      const Axis& axis = reduction.axes[k];
      ExprPtr count = dimValue(axis.extent);
      for (const ExprPtr& guard : boundGuards) {
        const auto& bound = static_cast<const Binary&>(*guard);
        if (bound.lhs->as<AxisVar>()->name != axis.name) continue;
        forEachNode(*bound.rhs, [&](const Expr& node) {
          const auto* other = node.as<AxisVar>();
          for (size_t j = 0; other && j < e.indices.size(); ++j)
            if (other->name == e.indices[j].name)
              error(e.bounds[k]->loc, "a mean over indices whose bounds name each other is not supported; write "
                                      "sum[...](...) divided by the count");
        });
        count = std::make_shared<Binary>(DType::I64, BinaryOp::Max, bound.rhs, immediate(DType::I64, 0));
      }
      divisor = divisor ? std::make_shared<Binary>(DType::I64, BinaryOp::Mul, divisor, count) : count;
    }
    reduction.op = ReduceOp::Sum;
  }
  TensorValue value = expr(*e.body, scope);
  scope.indices.resize(depth);
  scope.facts.resize(factCount);
  DType bodyType = value.literal ? value.literal->defaultType() : value.dtype;
  DType resultType = reductionResultType(*op, bodyType, e.loc, diagnostics);
  reduction.accumulator = accumulatorType(resultType);
  ExprPtr body = value.at({}, reduction.accumulator);
  // Past its bound, an index adds the reduction's identity.
  for (const ExprPtr& guard : boundGuards) body = takenOrIdentity(guard, body, reduction.op, reduction.accumulator);
  if (!positional) return ReductionParts{reduction, body, resultType, divisor};

  // argmax/argmin: the extreme, hoisted into a stage of its own, then the least row-major position of
  // the reduction's indices where the body reaches it (or is NaN, which max and min propagate).
  if (bodyType == DType::Bool) error(e.loc, fmt::format("{} of bool values is not defined; convert them first, e.g. i32(...)", e.op.name));
  TensorValue extreme = hoistReduction(ReductionParts{reduction, body, resultType, nullptr}, e, scope, reduceOpName(*op));
  ExprPtr position;
  for (const Axis& axis : reduction.axes) {
    ExprPtr index = std::make_shared<AxisVar>(axis.name);
    position = position ? std::make_shared<Binary>(DType::I64, BinaryOp::Add,
                                                   std::make_shared<Binary>(DType::I64, BinaryOp::Mul, position, dimValue(axis.extent)), index)
                        : index;
  }
  TensorValue candidate = extremeCandidate(TensorValue::ofScalar(body, e.loc), extreme, TensorValue::ofScalar(position, e.loc), e.loc, diagnostics);
  return ReductionParts{Reduction{ReduceOp::Min, reduction.axes, DType::I64}, candidate.at({}, DType::I64), DType::I64, nullptr};
}

KernelElaboration::BoundedRange KernelElaboration::boundedRange(const ast::Ident& index, const ast::Expr& boundExpr,
                                                                Scope& scope) {
  TensorValue value = expr(boundExpr, scope);
  bool integral = value.literal ? value.literal->isInteger : isInteger(value.dtype);
  if (!integral || !value.isScalar()) error(boundExpr.loc, "the bound of a reduction index must be an integer");
  ExprPtr bound = value.at({}, DType::I64);
  std::optional<AffineForm> form = affineOf(*bound);
  if (!form)
    error(boundExpr.loc, "the bound of a reduction index must be affine in numbers, sizes and the enclosing indices");
  // The largest value the bound takes: each enclosing index at the end of its range where it adds, at 0
  // where it subtracts.
  AffineForm largest = *form;
  largest.indices.clear();
  for (const auto& [name, coefficient] : form->indices) {
    if (coefficient <= 0) continue;
    const IndexBinding* binding = scope.findIndex(name);
    EMMY_INTERNAL_ASSERT(binding != nullptr, "the bound of '{}' names '{}', which is not in scope", index.name, name);
    largest = largest + (AffineForm::ofDim(binding->extent) - AffineForm{{}, {}, 1}).scaled(coefficient);
  }
  // The range: a Dim at least that large for every size >= 1. One size monomial M may add, c * M; sizes
  // that subtract only lower the bound, and a constant c0 >= 0 adds at most c0 * M.
  std::vector<std::pair<std::vector<std::string>, int64_t>> adding;
  for (const auto& [monomial, coefficient] : largest.sizes)
    if (coefficient > 0) adding.emplace_back(monomial, coefficient);
  Dim extent;
  if (adding.empty()) {
    if (largest.constant < 1)
      error(boundExpr.loc, fmt::format("the bound of '{}' is never above 0, so the reduction is empty", index.name));
    extent = Dim::constant(largest.constant);
  } else if (adding.size() == 1) {
    extent = Dim{adding[0].second + std::max<int64_t>(largest.constant, 0), adding[0].first};
  } else {
    error(boundExpr.loc, fmt::format("the bound of '{}' grows with several sizes, so no one size bounds its range; "
                                     "bound it by a multiple of one size, or by a number",
                                     index.name));
  }
  AffineForm range = AffineForm::ofDim(extent);
  if (!form->hasIndices() && form->sizes == range.sizes && form->constant == range.constant) return {extent, nullptr};
  return {extent, std::make_shared<Binary>(DType::Bool, BinaryOp::Lt, std::make_shared<AxisVar>(index.name), bound)};
}

TensorValue KernelElaboration::indexReduction(const ast::Reduction& e, Scope& scope) {
  return hoistReduction(indexReductionParts(e, scope), e, scope);
}

TensorValue KernelElaboration::hoistReduction(const ReductionParts& parts, const ast::Reduction& e, Scope& scope,
                                              const std::string& hint) {
  // The hoisted stage runs over the indices around the reduction that its body or the enclosing `where`
  // conditions use, and keeps those conditions so that it reads nothing their branch would not.
  std::set<std::string> used;
  auto collect = [&](const ExprPtr& expr) {
    forEachNode(*expr, [&](const Expr& node) {
      if (const auto* axis = node.as<AxisVar>()) used.insert(axis->name);
    });
  };
  collect(parts.body);
  for (const ExprPtr& guard : scope.guards) collect(guard);
  Stage stage;
  stage.name = freshStageName(hint.empty() ? e.op.name : hint);
  // A sum to be divided is kept in the accumulator type and rounded once, after the division.
  stage.dtype = parts.divisor ? parts.reduction.accumulator : parts.resultType;
  stage.loc = e.loc;
  std::vector<ExprPtr> index;
  for (const IndexBinding& binding : scope.indices) {
    if (!used.count(binding.name)) continue;
    stage.axes.push_back(Axis{binding.name, binding.extent});
    index.push_back(std::make_shared<AxisVar>(binding.name));
  }
  ExprPtr body = parts.body;
  if (!scope.guards.empty()) {
    ExprPtr all = scope.guards.front();
    for (size_t k = 1; k < scope.guards.size(); ++k)
      all = std::make_shared<Binary>(DType::Bool, BinaryOp::And, all, scope.guards[k]);
    body = std::make_shared<Select>(all, body, immediate(body->dtype, 0));
  }
  stage.body = body;
  stage.reduction = parts.reduction;
  std::string name = stage.name;
  DType dtype = stage.dtype;
  addStage(std::move(stage));
  TensorValue value = TensorValue::ofScalar(std::make_shared<Load>(dtype, name, index), e.loc);
  if (!parts.divisor) return value;
  TensorValue count = TensorValue::ofScalar(parts.divisor, e.loc);
  return castOp(parts.resultType, binaryOp(BinaryOp::Div, value, castOp(dtype, count, e.loc), e.loc, diagnostics), e.loc);
}

}  // namespace emmy
