// Whole-tensor form: views (transpose, permute, reshape, broadcast_to, unsqueeze, squeeze) built as
// index maps, reductions with axis=/keepdim=, softmax and log_softmax, and the matrix product `@`.
#include <cmath>

#include <fmt/format.h>

#include "frontend/elaborator.h"
#include "frontend/operations.h"
#include "ir/tensor/build.h"
#include "ir/tensor/scalar_ops.h"

namespace emmy {

using namespace tensor;

namespace {

const std::vector<std::string> kWholeTensorFunctions = {"sum",       "prod",    "mean",         "max",
                                                        "min",       "transpose", "permute",    "reshape",
                                                        "broadcast_to", "unsqueeze", "squeeze", "softmax",
                                                        "log_softmax", "logsumexp", "cumsum", "cumprod", "argmax", "argmin"};

// `value` seen through `map`, which turns an index of the result into one of `value`.
TensorValue view(const TensorValue& value, Shape shape, const SourceLoc& loc,
                 std::function<std::vector<ExprPtr>(const std::vector<ExprPtr>&)> map) {
  TensorValue result;
  result.dtype = value.dtype;
  result.shape = std::move(shape);
  result.loc = loc;
  result.element = [value, map](const std::vector<ExprPtr>& index) { return value.at(map(index)); };
  return result;
}

ExprPtr i64(int64_t v) { return std::make_shared<IntImm>(DType::I64, v); }
ExprPtr binary(BinaryOp op, ExprPtr a, ExprPtr b) { return std::make_shared<Binary>(DType::I64, op, a, b); }

}  // namespace

// A reduction of `value`'s elements by `op`, its body and extents left to fill.
static std::pair<TensorValue, std::shared_ptr<PendingReduction>> pendingReduction(ReduceOp op, const TensorValue& value,
                                                                                  std::string hint, const SourceLoc& loc,
                                                                                  Diagnostics& diagnostics) {
  auto pending = std::make_shared<PendingReduction>();
  TensorValue result;
  result.dtype = reductionResultType(op, value.dtype, loc, diagnostics);
  result.loc = loc;
  result.reduction = pending;
  pending->op = op;
  pending->accumulator = accumulatorType(result.dtype);
  pending->hint = std::move(hint);
  return {result, pending};
}

// The reduction of `value` over `axes` (sorted, distinct), as a pending stage.
static TensorValue reduce(ReduceOp op, const TensorValue& value, const std::vector<int>& axes, bool keepdim,
                          const SourceLoc& loc, Diagnostics& diagnostics) {
  auto [result, pending] = pendingReduction(op, value, reduceOpName(op), loc, diagnostics);
  std::vector<int> outputPosition(value.shape.size(), -1);  // of each kept dimension
  for (int d = 0; d < value.rank(); ++d) {
    bool reduced = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (reduced) {
      pending->extents.push_back(value.shape[d]);
      if (keepdim) result.shape.push_back(Dim::constant(1));
    } else {
      outputPosition[d] = static_cast<int>(result.shape.size());
      result.shape.push_back(value.shape[d]);
    }
  }
  DType accumulator = pending->accumulator;
  pending->body = [value, axes, outputPosition, accumulator](const std::vector<ExprPtr>& index,
                                                             const std::vector<ExprPtr>& reductionIndex) {
    std::vector<ExprPtr> source;
    for (size_t d = 0; d < outputPosition.size(); ++d) {
      if (outputPosition[d] >= 0) {
        source.push_back(index[outputPosition[d]]);
      } else {
        size_t r = std::find(axes.begin(), axes.end(), static_cast<int>(d)) - axes.begin();
        source.push_back(reductionIndex[r]);
      }
    }
    return value.at(source, accumulator);
  };
  return result;
}

// The running reduction of `value` along `axis`: element i is the reduction of elements 0..i, a
// reduction over the whole axis whose body adds the identity past i.
static TensorValue scan(ReduceOp op, const TensorValue& value, int axis, const SourceLoc& loc, Diagnostics& diagnostics) {
  auto [result, pending] = pendingReduction(op, value, op == ReduceOp::Sum ? "cumsum" : "cumprod", loc, diagnostics);
  result.shape = value.shape;
  pending->extents = {value.shape[axis]};
  DType accumulator = pending->accumulator;
  pending->body = [value, axis, op, accumulator](const std::vector<ExprPtr>& index, const std::vector<ExprPtr>& reductionIndex) {
    std::vector<ExprPtr> source = index;
    source[axis] = reductionIndex[0];
    ExprPtr taken = std::make_shared<Binary>(DType::Bool, BinaryOp::Le, reductionIndex[0], index[axis]);
    return takenOrIdentity(taken, value.at(source, accumulator), op, accumulator);
  };
  return result;
}

TensorValue KernelElaboration::matmul(const TensorValue& a, const TensorValue& b, const SourceLoc& loc) {
  if (a.rank() < 2 || b.rank() < 2)
    error(loc, fmt::format("@ needs operands of rank 2 or more, not {} and {}", shapeToString(a.shape), shapeToString(b.shape)));
  const Dim& inner = a.shape[a.rank() - 1];
  if (!(inner == b.shape[b.rank() - 2]))
    error(loc, fmt::format("the inner dimensions of @ differ: {} @ {} ({} vs {})", shapeToString(a.shape),
                           shapeToString(b.shape), inner.toString(), b.shape[b.rank() - 2].toString()));
  DType dtype = promote(a.dtype, b.dtype);
  if (dtype == DType::Bool) error(loc, "@ of bool tensors is not defined; convert them first");
  Shape batchA(a.shape.begin(), a.shape.end() - 2), batchB(b.shape.begin(), b.shape.end() - 2);
  Shape shape = broadcastShapes(batchA, batchB, loc, diagnostics);
  size_t batch = shape.size();
  shape.push_back(a.shape[a.rank() - 2]);
  shape.push_back(b.shape[b.rank() - 1]);
  Shape targetA = shape, targetB = shape;
  targetA[batch + 1] = inner;  // [..., M, K]
  targetB[batch] = inner;      // [..., K, N]
  TensorValue left = broadcastTo(a, targetA), right = broadcastTo(b, targetB);
  auto pending = std::make_shared<PendingReduction>();
  pending->op = ReduceOp::Sum;
  pending->extents = {inner};
  pending->accumulator = accumulatorType(dtype);
  pending->hint = "matmul";
  DType accumulator = pending->accumulator;
  pending->body = [left, right, batch, accumulator](const std::vector<ExprPtr>& index,
                                                    const std::vector<ExprPtr>& reductionIndex) {
    std::vector<ExprPtr> ia(index.begin(), index.begin() + batch), ib = ia;
    ia.push_back(index[batch]);
    ia.push_back(reductionIndex[0]);
    ib.push_back(reductionIndex[0]);
    ib.push_back(index[batch + 1]);
    return std::static_pointer_cast<const Expr>(
        std::make_shared<Binary>(accumulator, BinaryOp::Mul, left.at(ia, accumulator), right.at(ib, accumulator)));
  };
  TensorValue result;
  result.dtype = dtype;
  result.shape = shape;
  result.reduction = pending;
  result.loc = loc;
  return result;
}

std::optional<TensorValue> KernelElaboration::wholeTensorFunction(const ast::Call& c, Scope& scope) {
  const std::string& n = c.callee.name;
  if (std::find(kWholeTensorFunctions.begin(), kWholeTensorFunctions.end(), n) == kWholeTensorFunctions.end())
    return std::nullopt;
  if (scope.indexForm)
    error(c.callee.loc, fmt::format("'{}' works on whole tensors; in index form {}", n,
                                    (n == "sum" || n == "prod" || n == "mean" || n == "max" || n == "min")
                                        ? fmt::format("write {}[k](...)", n)
                                        : std::string("write the subscripts out")));

  // An integer constant argument (axis numbers and the like).
  auto constant = [&](const ast::Expr& e, const char* what) -> int64_t {
    TensorValue value = expr(e, scope);
    if (!value.literal || !value.literal->isInteger) error(e.loc, fmt::format("{} must be an integer constant", what));
    return static_cast<int64_t>(value.literal->value);
  };
  // An axis of a tensor of rank `rank` (negative counts from the end).
  auto axisOf = [&](const ast::Expr& e, int rank) -> int {
    int64_t axis = constant(e, "an axis");
    if (rank == 0) error(e.loc, fmt::format("axis {} is out of range: a tensor of rank 0 has no axes", axis));
    if (axis < -rank || axis >= rank)
      error(e.loc, fmt::format("axis {} is out of range for a tensor of rank {} (use {} to {})", axis, rank, -rank,
                               rank - 1));
    return static_cast<int>(axis < 0 ? axis + rank : axis);
  };
  auto axesOf = [&](const ast::Expr& e, int rank) {
    std::vector<int> axes;
    if (const auto* list = e.as<ast::List>()) {
      for (const ast::ExprPtr& element : list->elements) {
        int axis = axisOf(*element, rank);
        if (std::find(axes.begin(), axes.end(), axis) != axes.end())
          error(element->loc, fmt::format("axis {} is listed twice", axis));
        axes.push_back(axis);
      }
    } else {
      axes.push_back(axisOf(e, rank));
    }
    return axes;
  };
  auto boolConstant = [&](const ast::Expr& e) {
    const auto* literal = e.as<ast::Bool>();
    if (!literal) error(e.loc, "keepdim must be true or false");
    return literal->value;
  };
  // A shape entry: a dimension as a type writes it (a number, a size, an expression of them, LANGUAGE.md
  // section 2), or -1 where `allowInferred`.
  auto dimOf = [&](const ast::Expr& e, bool allowInferred) -> std::optional<Dim> {
    if (const auto* neg = e.as<ast::Unary>(); neg && allowInferred && neg->op == ast::UnaryOp::Neg)
      if (const auto* one = neg->operand->as<ast::Number>(); one && one->isInteger && one->intValue == 1)
        return std::nullopt;
    return resolveDim(e, DimPlace::Body);
  };
  auto shapeOf = [&](const ast::Expr& e, bool allowInferred, SourceLoc* inferredAt) {
    const auto* list = e.as<ast::List>();
    if (!list) error(e.loc, "expected a shape: a list such as [N, 64]");
    std::vector<std::optional<Dim>> dims;
    for (const ast::ExprPtr& element : list->elements) {
      dims.push_back(dimOf(*element, allowInferred));
      if (!dims.back()) {
        if (inferredAt->valid()) error(element->loc, "only one entry of a shape may be -1");
        *inferredAt = element->loc;
      }
    }
    return dims;
  };

  if (n == "sum" || n == "prod" || n == "mean" || n == "max" || n == "min") {
    auto args = matchArguments(n, {"x", "axis", "keepdim"}, 1, c);
    if (!args[1]) error(c.loc, fmt::format("{}(x) needs the axes to reduce: {}(x, axis=K) or axis=[K, ...]", n, n));
    TensorValue x = expr(*args[0], scope);
    if (x.literal) error(args[0]->loc, fmt::format("{} reduces a tensor, not a number", n));
    std::vector<int> axes = axesOf(*args[1], x.rank());
    std::sort(axes.begin(), axes.end());
    bool keepdim = args[2] ? boolConstant(*args[2]) : false;
    ReduceOp op = n == "sum" ? ReduceOp::Sum : n == "prod" ? ReduceOp::Prod : n == "mean" ? ReduceOp::Mean
                : n == "max" ? ReduceOp::Max : ReduceOp::Min;
    return reduce(op, x, axes, keepdim, c.loc, diagnostics);
  }
  if (n == "argmax" || n == "argmin") {
    auto args = matchArguments(n, {"x", "axis", "keepdim"}, 2, c);
    TensorValue x = expr(*args[0], scope);
    if (x.literal || x.dtype == DType::Bool)
      error(args[0]->loc, fmt::format("{} needs a tensor of numbers; convert a bool one first, e.g. i32(x)", n));
    int axis = axisOf(*args[1], x.rank());
    bool keepdim = args[2] ? boolConstant(*args[2]) : false;
    // The extreme along the axis, then the least position where x reaches it (or is NaN, which max and min
    // propagate), as in index form.
    TensorValue best = realize(reduce(n == "argmax" ? ReduceOp::Max : ReduceOp::Min, x, {axis}, true, c.loc, diagnostics));
    TensorValue position;  // the index along the axis
    position.dtype = DType::I64;
    position.shape = x.shape;
    position.loc = c.loc;
    position.element = [axis](const std::vector<ExprPtr>& index) { return index[axis]; };
    return reduce(ReduceOp::Min, extremeCandidate(x, best, position, c.loc, diagnostics), {axis}, keepdim, c.loc, diagnostics);
  }
  if (n == "cumsum" || n == "cumprod") {
    auto args = matchArguments(n, {"x", "axis"}, 2, c);
    TensorValue x = expr(*args[0], scope);
    if (x.literal) error(args[0]->loc, fmt::format("{} needs a tensor, not a number", n));
    return scan(n == "cumsum" ? ReduceOp::Sum : ReduceOp::Prod, x, axisOf(*args[1], x.rank()), c.loc, diagnostics);
  }
  if (n == "logsumexp") {
    auto args = matchArguments(n, {"x", "axis", "keepdim"}, 2, c);
    TensorValue x = expr(*args[0], scope);
    if (x.literal || !isFloat(x.dtype))
      error(args[0]->loc, "logsumexp needs a floating-point tensor; convert it first, e.g. f32(x)");
    std::vector<int> axes = axesOf(*args[1], x.rank());
    std::sort(axes.begin(), axes.end());
    bool keepdim = args[2] ? boolConstant(*args[2]) : false;
    // max + log(sum(exp(x - max))), with an infinite max taken as 0 (as PyTorch: all -inf gives -inf, a
    // +inf gives +inf), computed in the accumulator type and rounded once.
    TensorValue wide = castOp(accumulatorType(x.dtype), x, x.loc);
    TensorValue maximum = realize(reduce(ReduceOp::Max, wide, axes, true, c.loc, diagnostics));
    TensorValue infinite = binaryOp(BinaryOp::Eq, unaryOp(UnaryOp::Abs, maximum, c.loc, diagnostics),
                                    TensorValue::ofLiteral(Literal{false, INFINITY}, c.loc), c.loc, diagnostics);
    TensorValue shift = selectOp(infinite, TensorValue::ofLiteral(Literal{false, 0}, c.loc), maximum, c.loc, diagnostics);
    TensorValue exponent = unaryOp(UnaryOp::Exp, binaryOp(BinaryOp::Sub, wide, shift, c.loc, diagnostics), c.loc, diagnostics);
    TensorValue total = realize(reduce(ReduceOp::Sum, exponent, axes, true, c.loc, diagnostics));
    TensorValue result = castOp(x.dtype, binaryOp(BinaryOp::Add, unaryOp(UnaryOp::Log, total, c.loc, diagnostics), shift, c.loc, diagnostics), c.loc);
    if (keepdim) return result;
    Shape shape;
    for (int d = 0; d < x.rank(); ++d)
      if (std::find(axes.begin(), axes.end(), d) == axes.end()) shape.push_back(x.shape[d]);
    return view(result, shape, c.loc, [axes](const std::vector<ExprPtr>& index) {
      std::vector<ExprPtr> source = index;
      for (int axis : axes) source.insert(source.begin() + axis, i64(0));
      return source;
    });
  }
  if (n == "softmax" || n == "log_softmax") {
    auto args = matchArguments(n, {"x", "axis"}, 2, c);
    TensorValue x = expr(*args[0], scope);
    if (x.literal || !isFloat(x.dtype))
      error(args[0]->loc, fmt::format("{} needs a floating-point tensor; convert it first, e.g. f32(x)", n));
    std::vector<int> axes{axisOf(*args[1], x.rank())};
    // Computed in the accumulator type and rounded once, as PyTorch does for f16 and bf16.
    DType internal = accumulatorType(x.dtype);
    TensorValue wide = castOp(internal, x, x.loc);
    TensorValue maximum = realize(reduce(ReduceOp::Max, wide, axes, true, c.loc, diagnostics));
    TensorValue shifted = binaryOp(BinaryOp::Sub, wide, maximum, c.loc, diagnostics);
    TensorValue exponent = unaryOp(UnaryOp::Exp, shifted, c.loc, diagnostics);
    TensorValue total = realize(reduce(ReduceOp::Sum, exponent, axes, true, c.loc, diagnostics));
    TensorValue result = n == "softmax"
                             ? binaryOp(BinaryOp::Div, exponent, total, c.loc, diagnostics)
                             : binaryOp(BinaryOp::Sub, shifted, unaryOp(UnaryOp::Log, total, c.loc, diagnostics), c.loc,
                                        diagnostics);
    return castOp(x.dtype, result, c.loc);
  }

  // Views: one tensor argument first.
  std::vector<std::string> params;
  size_t required = 2;
  if (n == "transpose") params = {"x", "a", "b"}, required = 3;
  if (n == "permute" || n == "reshape" || n == "broadcast_to") params = {"x", "shape"};
  if (n == "permute") params = {"x", "dims"};
  if (n == "unsqueeze" || n == "squeeze") params = {"x", "axis"};
  auto args = matchArguments(n, params, required, c);
  TensorValue x = expr(*args[0], scope);
  if (x.literal) error(args[0]->loc, fmt::format("{} needs a tensor, not a number", n));
  int rank = x.rank();

  if (n == "transpose" || n == "permute") {
    std::vector<int> order(rank);
    for (int d = 0; d < rank; ++d) order[d] = d;
    if (n == "transpose") {
      std::swap(order[axisOf(*args[1], rank)], order[axisOf(*args[2], rank)]);
    } else {
      order = axesOf(*args[1], rank);
      if (static_cast<int>(order.size()) != rank)
        error(args[1]->loc, fmt::format("permute needs all {} axes of the tensor, in a new order", rank));
    }
    Shape shape;
    for (int d : order) shape.push_back(x.shape[d]);
    return view(x, shape, c.loc, [order](const std::vector<ExprPtr>& index) {
      std::vector<ExprPtr> source(index.size());
      for (size_t k = 0; k < order.size(); ++k) source[order[k]] = index[k];
      return source;
    });
  }
  if (n == "unsqueeze") {
    int64_t axis = constant(*args[1], "an axis");
    if (axis < -(rank + 1) || axis > rank)
      error(args[1]->loc, fmt::format("axis {} is out of range for unsqueeze of a tensor of rank {}", axis, rank));
    size_t position = static_cast<size_t>(axis < 0 ? axis + rank + 1 : axis);
    Shape shape = x.shape;
    shape.insert(shape.begin() + position, Dim::constant(1));
    return view(x, shape, c.loc, [position](const std::vector<ExprPtr>& index) {
      std::vector<ExprPtr> source = index;
      source.erase(source.begin() + position);
      return source;
    });
  }
  if (n == "squeeze") {
    int axis = axisOf(*args[1], rank);
    if (!(x.shape[axis] == Dim::constant(1)))
      error(args[1]->loc, fmt::format("squeeze: dimension {} has size {}, not 1", axis, x.shape[axis].toString()));
    Shape shape = x.shape;
    shape.erase(shape.begin() + axis);
    return view(x, shape, c.loc, [axis](const std::vector<ExprPtr>& index) {
      std::vector<ExprPtr> source = index;
      source.insert(source.begin() + axis, i64(0));
      return source;
    });
  }
  if (n == "broadcast_to") {
    SourceLoc unused;
    std::vector<std::optional<Dim>> dims = shapeOf(*args[1], false, &unused);
    Shape shape;
    for (const auto& dim : dims) shape.push_back(*dim);
    Shape combined = broadcastShapes(x.shape, shape, c.loc, diagnostics);
    if (combined != shape)
      error(c.loc, fmt::format("cannot broadcast {} to {}", shapeToString(x.shape), shapeToString(shape)));
    return broadcastTo(x, shape);
  }
  // reshape
  SourceLoc inferredAt;
  std::vector<std::optional<Dim>> dims = shapeOf(*args[1], true, &inferredAt);
  Dim total = Dim::constant(1), known = Dim::constant(1);
  for (const Dim& dim : x.shape) total = total * dim;
  for (const auto& dim : dims)
    if (dim) known = known * *dim;
  Shape shape;
  for (const auto& dim : dims) {
    if (dim) {
      shape.push_back(*dim);
      continue;
    }
    std::optional<Dim> inferred = total.dividedBy(known);
    if (!inferred)
      error(inferredAt, fmt::format("reshape: cannot infer -1: {} elements are not a multiple of {}", total.toString(),
                                    known.toString()));
    shape.push_back(*inferred);
  }
  Dim newTotal = Dim::constant(1);
  for (const Dim& dim : shape) newTotal = newTotal * dim;
  if (!(newTotal == total))
    error(args[1]->loc, fmt::format("reshape: {} has {} elements but {} has {}", shapeToString(x.shape),
                                    total.toString(), shapeToString(shape), newTotal.toString()));
  if (shape == x.shape) return x;
  Shape sourceShape = x.shape;
  return view(x, shape, c.loc, [shape, sourceShape](const std::vector<ExprPtr>& index) {
    // Row-major linear position in the new shape, then the coordinates it has in the old one.
    ExprPtr linear = index[0];
    for (size_t k = 1; k < shape.size(); ++k)
      linear = binary(BinaryOp::Add, binary(BinaryOp::Mul, linear, dimValue(shape[k])), index[k]);
    std::vector<ExprPtr> source(sourceShape.size());
    ExprPtr rest = linear;
    for (size_t k = sourceShape.size(); k-- > 0;) {
      source[k] = k == 0 ? rest : binary(BinaryOp::Mod, rest, dimValue(sourceShape[k]));
      rest = binary(BinaryOp::Div, rest, dimValue(sourceShape[k]));
    }
    return source;
  });
}

}  // namespace emmy
