#include "ir/tensor/evaluator.h"

#include <algorithm>
#include <exception>
#include <functional>
#include <thread>

#include <fmt/format.h>

#include "ir/tensor/build.h"
#include "ir/tensor/printer.h"
#include "ir/tensor/scalar_ops.h"
#include "ir/tensor/verifier.h"
#include "support/diagnostics.h"
#include "support/text.h"

namespace emmy::tensor {

namespace {

using SizeMap = std::map<std::string, int64_t>;

// ---------------------------------------------------------------------------------------------------
// Sizes.

int64_t checkedProduct(int64_t a, int64_t b, const std::string& what) {
  int64_t product;
  if (__builtin_mul_overflow(a, b, &product)) throw EvaluationError(fmt::format("{} is too large", what));
  return product;
}

int64_t elementCount(const std::vector<int64_t>& extents, const std::string& what) {
  int64_t count = 1;
  for (int64_t extent : extents) count = checkedProduct(count, extent, what);
  return count;
}

std::vector<int64_t> axisExtents(const std::vector<Axis>& axes, const SizeMap& sizes) {
  std::vector<int64_t> extents;
  for (const Axis& axis : axes) extents.push_back(evaluateDim(axis.extent, sizes));
  return extents;
}

// Where a size got its value: a tensor's dimension, or `given`.
struct SizeSource {
  int64_t value;
  std::string tensor;  // empty when given
  size_t dimension;
};

std::vector<std::string> inputNames(const Kernel& kernel) {
  std::vector<std::string> names;
  for (const TensorParam& input : kernel.inputs) names.push_back(input.name);
  return names;
}

void checkInputTensor(const TensorParam& input, const std::map<std::string, Buffer>& tensors) {
  auto it = tensors.find(input.name);
  if (it == tensors.end()) throw EvaluationError(fmt::format("no tensor given for input {}", input.name));
  const Buffer& buffer = it->second;
  if (buffer.dtype() != input.dtype)
    throw EvaluationError(fmt::format("input {} is {} but the tensor given is {}", input.name, dtypeName(input.dtype),
                                      dtypeName(buffer.dtype())));
  if (buffer.shape().size() != input.shape.size())
    throw EvaluationError(fmt::format("input {} has rank {} ({}{}) but the tensor given has rank {}", input.name,
                                      input.shape.size(), dtypeName(input.dtype), shapeToString(input.shape),
                                      buffer.shape().size()));
}

// ---------------------------------------------------------------------------------------------------
// Compiled expressions: every name is resolved once, so evaluating an element does no lookups.

// Evaluates an expression at the stage's axis values (its axes, then its reduction's), in slot order.
using CompiledExpr = std::function<Value(const int64_t* axisValues)>;

Value immediateValue(const Expr& expr) {
  if (const auto* imm = expr.as<IntImm>()) return Value::ofInt(imm->dtype, imm->value);
  if (const auto* imm = expr.as<FloatImm>()) return Value::ofFloat(imm->dtype, imm->value);
  return Value::ofBool(expr.as<BoolImm>()->value);
}

CompiledExpr constant(Value value) {
  return [value](const int64_t*) { return value; };
}

// A tensor as a Load reads it: the buffer and its row-major layout.
struct TensorRef {
  const Buffer* buffer;
  std::vector<int64_t> strides;
};

struct EvaluationState {
  SizeMap sizes;
  std::map<std::string, Value> scalars;
  std::map<std::string, TensorRef> tensors;  // inputs and the stages computed so far
};

class StageCompiler {
public:
  StageCompiler(const Stage& stage, const EvaluationState& state) : state_(state) {
    for (const Axis& axis : stage.axes) axisSlots_.emplace(axis.name, axisSlots_.size());
    if (stage.reduction)
      for (const Axis& axis : stage.reduction->axes) axisSlots_.emplace(axis.name, axisSlots_.size());
  }

  CompiledExpr compile(const Expr& expr) const {
    return dispatch(expr, [this](const auto& node) { return compileNode(node); });
  }

private:
  CompiledExpr compileNode(const IntImm& node) const { return constant(immediateValue(node)); }
  CompiledExpr compileNode(const FloatImm& node) const { return constant(immediateValue(node)); }
  CompiledExpr compileNode(const BoolImm& node) const { return constant(immediateValue(node)); }
  CompiledExpr compileNode(const SizeVar& node) const {
    return constant(Value::ofInt(DType::I64, state_.sizes.at(node.name)));
  }
  CompiledExpr compileNode(const ScalarParam& node) const { return constant(state_.scalars.at(node.name)); }

  CompiledExpr compileNode(const AxisVar& node) const {
    size_t slot = axisSlots_.at(node.name);
    return [slot](const int64_t* axisValues) { return Value::ofInt(DType::I64, axisValues[slot]); };
  }

  CompiledExpr compileNode(const Load& node) const {
    const TensorRef& tensor = state_.tensors.at(node.tensor);
    std::vector<CompiledExpr> indices;
    for (const ExprPtr& index : node.indices) indices.push_back(compile(*index));
    CompiledExpr padValue = node.padValue ? compile(*node.padValue) : nullptr;
    return [&node, &tensor, indices = std::move(indices), padValue = std::move(padValue)](const int64_t* axisValues) {
      const std::vector<int64_t>& extents = tensor.buffer->shape();
      int64_t flatIndex = 0;
      for (size_t d = 0; d < indices.size(); ++d) {
        int64_t index = indices[d](axisValues).i;
        if (index < 0 || index >= extents[d]) {
          if (padValue) return padValue(axisValues);
          throw InternalError(fmt::format("{} reads index {} of dimension {}, which has extent {}", printExpr(node),
                                          index, d, extents[d]));
        }
        flatIndex += index * tensor.strides[d];
      }
      return tensor.buffer->get(flatIndex);
    };
  }

  CompiledExpr compileNode(const Unary& node) const {
    return [op = node.op, dtype = node.dtype, operand = compile(*node.operand)](const int64_t* axisValues) {
      return applyUnary(op, dtype, operand(axisValues));
    };
  }

  CompiledExpr compileNode(const Binary& node) const {
    CompiledExpr lhs = compile(*node.lhs), rhs = compile(*node.rhs);
    // And/Or short-circuit like the && and || the generated code uses.
    if (node.op == BinaryOp::And)
      return
          [lhs, rhs](const int64_t* axisValues) { return lhs(axisValues).i ? rhs(axisValues) : Value::ofBool(false); };
    if (node.op == BinaryOp::Or)
      return
          [lhs, rhs](const int64_t* axisValues) { return lhs(axisValues).i ? Value::ofBool(true) : rhs(axisValues); };
    return [op = node.op, dtype = node.dtype, lhs, rhs](const int64_t* axisValues) {
      return applyBinary(op, dtype, lhs(axisValues), rhs(axisValues));
    };
  }

  CompiledExpr compileNode(const Select& node) const {
    return [condition = compile(*node.condition), ifTrue = compile(*node.ifTrue),
            ifFalse = compile(*node.ifFalse)](const int64_t* axisValues) {
      return condition(axisValues).i ? ifTrue(axisValues) : ifFalse(axisValues);
    };
  }

  CompiledExpr compileNode(const Cast& node) const {
    return [dtype = node.dtype, operand = compile(*node.operand)](const int64_t* axisValues) {
      return operand(axisValues).castTo(dtype);
    };
  }

  const EvaluationState& state_;
  std::map<std::string, size_t> axisSlots_;
};

std::vector<int64_t> rowMajorStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
  return strides;
}

// Steps `index` to the next row-major position within `extents`; false after the last one.
bool advance(int64_t* index, const std::vector<int64_t>& extents) {
  for (size_t d = extents.size(); d-- > 0;) {
    if (++index[d] < extents[d]) return true;
    index[d] = 0;
  }
  return false;
}

// One element of a reduction stage: the body folded over every point of the reduction axes, whose values
// are written to `reductionValues` (the slots after the stage's axes), last axis innermost.
Value reduce(const Reduction& reduction, const CompiledExpr& body, const int64_t* axisValues, int64_t* reductionValues,
             const std::vector<int64_t>& reductionExtents, int64_t reductionCount) {
  BinaryOp step = reductionStep(reduction.op);
  Value accumulator = reductionIdentity(reduction.op, reduction.accumulator);
  if (reductionCount > 0) {
    do {
      accumulator = applyBinary(step, reduction.accumulator, accumulator, body(axisValues));
    } while (advance(reductionValues, reductionExtents));
  }
  if (reduction.op == ReduceOp::Mean)
    accumulator = applyBinary(BinaryOp::Div, reduction.accumulator, accumulator,
                              Value::ofInt(reduction.accumulator, reductionCount));
  return accumulator;
}

// Stages with more work than this (elements times reduction points) are split over the machine's cores.
constexpr int64_t kParallelWork = int64_t(1) << 20;

Buffer evaluateStage(const Stage& stage, const EvaluationState& state) {
  CompiledExpr body = StageCompiler(stage, state).compile(*stage.body);
  std::vector<int64_t> extents = axisExtents(stage.axes, state.sizes);
  std::vector<int64_t> reductionExtents;
  if (stage.reduction) reductionExtents = axisExtents(stage.reduction->axes, state.sizes);
  int64_t reductionCount = elementCount(reductionExtents, fmt::format("the reduction of stage {}", stage.name));
  std::string stageName = fmt::format("stage {}", stage.name);
  checkedProduct(elementCount(extents, stageName), dtypeBytes(stage.dtype), stageName);  // Buffer's byte size

  Buffer result(stage.dtype, extents);
  // Elements [begin, end), each on its own: the same values whichever thread computes them.
  auto evaluateElements = [&](int64_t begin, int64_t end) {
    if (begin >= end) return;  // an empty stage: its extents may be 0, which the decomposition divides by
    std::vector<int64_t> axisValues(extents.size() + reductionExtents.size(), 0);
    for (int64_t rest = begin, d = static_cast<int64_t>(extents.size()); d-- > 0;) {
      axisValues[d] = rest % extents[d];
      rest /= extents[d];
    }
    int64_t* reductionValues = axisValues.data() + extents.size();
    for (int64_t flatIndex = begin; flatIndex < end; ++flatIndex, advance(axisValues.data(), extents)) {
      if (stage.reduction)
        result.set(flatIndex,
                   reduce(*stage.reduction, body, axisValues.data(), reductionValues, reductionExtents, reductionCount)
                       .castTo(stage.dtype));
      else
        result.set(flatIndex, body(axisValues.data()));
    }
  };
  int64_t elements = result.numel();
  int64_t work = checkedProduct(elements, std::max<int64_t>(reductionCount, 1), stageName);
  int64_t threads = work < kParallelWork ? 1 : std::min<int64_t>(std::max(1u, std::thread::hardware_concurrency()), elements);
  if (threads <= 1) {
    evaluateElements(0, elements);
    return result;
  }
  std::vector<std::thread> workers;
  std::vector<std::exception_ptr> failures(threads);
  for (int64_t t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      try {
        evaluateElements(elements * t / threads, elements * (t + 1) / threads);
      } catch (...) {
        failures[t] = std::current_exception();
      }
    });
  for (std::thread& worker : workers) worker.join();
  for (const std::exception_ptr& failure : failures)
    if (failure) std::rethrow_exception(failure);
  return result;
}

}  // namespace

std::map<std::string, Value> bindScalars(const Kernel& kernel, const std::map<std::string, Value>& given) {
  std::vector<std::string> names;
  for (const ScalarParamDecl& scalar : kernel.scalars) names.push_back(scalar.name);
  for (const auto& [name, value] : given)
    if (std::find(names.begin(), names.end(), name) == names.end())
      throw EvaluationError(
          withSuggestion(fmt::format("kernel {} has no scalar {}", kernel.instanceName(), name), name, names));

  std::map<std::string, Value> values;
  for (const ScalarParamDecl& scalar : kernel.scalars) {
    auto it = given.find(scalar.name);
    if (it != given.end()) {
      if (it->second.dtype != scalar.dtype)
        throw EvaluationError(fmt::format("scalar {} is {} but the value given is {}", scalar.name,
                                          dtypeName(scalar.dtype), dtypeName(it->second.dtype)));
      values[scalar.name] = it->second;
    } else if (scalar.defaultValue) {
      values[scalar.name] = immediateValue(*scalar.defaultValue);
    } else {
      throw EvaluationError(fmt::format("no value given for scalar {}, which has no default", scalar.name));
    }
  }
  return values;
}

int64_t evaluateDim(const Dim& dim, const std::map<std::string, int64_t>& sizes) {
  int64_t value = dim.factor;
  for (const std::string& name : dim.sizes) {
    auto it = sizes.find(name);
    EMMY_INTERNAL_ASSERT(it != sizes.end(), "size {} of dimension {} is not bound", name, dim.toString());
    value = checkedProduct(value, it->second, "dimension " + dim.toString());
  }
  return value;
}

void bindDerivedSizes(const Kernel& kernel, std::map<std::string, int64_t>& sizes) {
  auto evaluatePolynomial = [&](const SizePolynomial& polynomial, const std::string& what) {
    int64_t sum = 0;
    for (const auto& [monomial, coefficient] : polynomial.terms) {
      int64_t term = evaluateDim(Dim{coefficient, monomial}, sizes);
      if (__builtin_add_overflow(sum, term, &sum)) throw EvaluationError(fmt::format("{} overflows int64", what));
    }
    return sum;
  };
  for (const DerivedSize& derived : kernel.derivedSizes) {
    std::string what = fmt::format("the dimension {}", derived.name);
    if (derived.kind != DerivedSize::Kind::Quotient) {
      int64_t a = evaluatePolynomial(derived.operands[0], what), b = evaluatePolynomial(derived.operands[1], what);
      sizes[derived.name] = derived.kind == DerivedSize::Kind::Minimum ? std::min(a, b) : std::max(a, b);
      continue;
    }
    int64_t numerator = evaluatePolynomial(derived.numerator, what);
    int64_t denominator = evaluatePolynomial(derived.denominator, what);
    if (denominator == 0) throw EvaluationError(fmt::format("{} divides by zero", what));
    sizes[derived.name] = floorDivide(numerator, denominator);
  }
  // A derived size that is a dimension must not be negative (a window larger than its padded input).
  auto check = [&](const Shape& shape, const std::string& tensor) {
    for (size_t d = 0; d < shape.size(); ++d)
      for (const std::string& size : shape[d].sizes)
        if (const DerivedSize* derived = kernel.findDerivedSize(size); derived && sizes.at(size) < 0)
          throw EvaluationError(fmt::format("dimension {} of {} is {} = {}, which is negative", d, tensor,
                                            derived->name, sizes.at(size)));
  };
  for (const TensorParam& input : kernel.inputs) check(input.shape, input.name);
  for (const TensorParam& output : kernel.outputs) check(output.shape, output.name);
  for (const Stage& stage : kernel.stages) check(stage.shape(), stage.name);
}

std::map<std::string, int64_t> bindSizes(const Kernel& kernel, const std::map<std::string, Buffer>& tensors,
                                         const std::map<std::string, int64_t>& given) {
  std::vector<std::string> names = inputNames(kernel);
  for (const auto& [name, buffer] : tensors)
    if (std::find(names.begin(), names.end(), name) == names.end())
      throw EvaluationError(
          withSuggestion(fmt::format("kernel {} has no input {}", kernel.instanceName(), name), name, names));
  for (const auto& [name, value] : given) {
    if (std::find(kernel.sizes.begin(), kernel.sizes.end(), name) == kernel.sizes.end())
      throw EvaluationError(
          withSuggestion(fmt::format("kernel {} has no size {}", kernel.instanceName(), name), name, kernel.sizes));
    if (value < 0)
      throw EvaluationError(fmt::format("size {} is given as {}, but sizes are not negative", name, value));
  }

  // A dimension that is a single size name binds it; the first binding wins and later ones must agree.
  std::map<std::string, SizeSource> bound;
  for (const TensorParam& input : kernel.inputs) {
    checkInputTensor(input, tensors);
    const std::vector<int64_t>& shape = tensors.at(input.name).shape();
    for (size_t d = 0; d < input.shape.size(); ++d) {
      const Dim& dim = input.shape[d];
      if (dim.factor != 1 || dim.sizes.size() != 1) continue;
      const std::string& size = dim.sizes[0];
      auto [it, inserted] = bound.try_emplace(size, SizeSource{shape[d], input.name, d});
      if (!inserted && it->second.value != shape[d])
        throw EvaluationError(fmt::format("size {} is {} in {} (dimension {}) but {} in {} (dimension {})", size,
                                          it->second.value, it->second.tensor, it->second.dimension, shape[d],
                                          input.name, d));
    }
  }
  for (const auto& [size, value] : given) {
    auto [it, inserted] = bound.try_emplace(size, SizeSource{value, "", 0});
    if (!inserted && it->second.value != value)
      throw EvaluationError(fmt::format("size {} is {} in {} (dimension {}) but is given as {}", size, it->second.value,
                                        it->second.tensor, it->second.dimension, value));
  }

  std::map<std::string, int64_t> sizes;
  for (const std::string& size : kernel.sizes) {
    auto it = bound.find(size);
    if (it == bound.end())
      throw EvaluationError(
          fmt::format("size {} is not determined by any input; give it with --size {}=...", size, size));
    sizes[size] = it->second.value;
  }
  bindDerivedSizes(kernel, sizes);
  // Constant, product and derived dimensions are checked once every size is known.
  for (const TensorParam& input : kernel.inputs) {
    const std::vector<int64_t>& shape = tensors.at(input.name).shape();
    for (size_t d = 0; d < input.shape.size(); ++d) {
      int64_t expected = evaluateDim(input.shape[d], sizes);
      if (shape[d] == expected) continue;
      const Dim& dim = input.shape[d];
      std::string declared = dim.isConstant() ? dim.toString() : fmt::format("{} = {}", dim.toString(), expected);
      throw EvaluationError(fmt::format("dimension {} of {} is {} but must be {}", d, input.name, shape[d], declared));
    }
  }
  return sizes;
}

std::map<std::string, Buffer> evaluate(const Kernel& kernel, const EvaluationInputs& inputs) {
  verifyKernel(kernel);
  EvaluationState state{bindSizes(kernel, inputs.tensors, inputs.sizes), bindScalars(kernel, inputs.scalars), {}};
  for (const auto& [name, buffer] : inputs.tensors)
    state.tensors[name] = TensorRef{&buffer, rowMajorStrides(buffer.shape())};

  std::map<std::string, Buffer> stageResults;
  for (const Stage& stage : kernel.stages) {
    Buffer& result = stageResults[stage.name] = evaluateStage(stage, state);
    state.tensors[stage.name] = TensorRef{&result, rowMajorStrides(result.shape())};
  }
  std::map<std::string, Buffer> outputs;
  for (const TensorParam& output : kernel.outputs) outputs[output.name] = std::move(stageResults.at(output.name));
  return outputs;
}

}  // namespace emmy::tensor
