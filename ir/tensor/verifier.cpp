#include "ir/tensor/verifier.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "ir/tensor/printer.h"
#include "support/diagnostics.h"
#include "support/value.h"

namespace emmy::tensor {

namespace {

class KernelVerifier {
public:
  explicit KernelVerifier(const Kernel& kernel) : kernel_(kernel) {}

  void run() {
    checkSignature();
    for (const Stage& stage : kernel_.stages) checkStage(stage);
    checkOutputs();
  }

private:
  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) const {
    std::string where = fmt::format("invalid Tensor IR in kernel {}", kernel_.instanceName());
    if (stage_) where += fmt::format(", stage {}", stage_->name);
    throw InternalError(where + ": " + fmt::format(format, std::forward<Args>(args)...));
  }

  // Tensors, scalars and sizes share one namespace.
  void declare(const std::string& name, const char* what) {
    if (name.empty()) fail("{} name is empty", what);
    if (!names_.insert(name).second) fail("{} name {} is already used", what, name);
  }

  void checkDim(const Dim& dim, const std::string& where) const {
    if (dim.factor < 0) fail("{} has a negative dimension {}", where, dim.toString());
    if (!std::is_sorted(dim.sizes.begin(), dim.sizes.end()))
      fail("{} has a dimension whose size names are not sorted: {}", where, dim.toString());
    for (const std::string& size : dim.sizes)
      if (!sizes_.count(size)) fail("{} uses size {}, which is not a size of the kernel", where, size);
  }

  void checkTensorParam(const TensorParam& param, const char* what) {
    for (const Dim& dim : param.shape) checkDim(dim, fmt::format("{} {}", what, param.name));
  }

  void checkSignature() {
    for (const std::string& size : kernel_.sizes) {
      declare(size, "size");
      sizes_.insert(size);
    }
    // A derived size is computed from the sizes before it.
    for (const DerivedSize& derived : kernel_.derivedSizes) {
      bool quotient = derived.kind == DerivedSize::Kind::Quotient;
      for (const SizePolynomial* polynomial : quotient ? std::array{&derived.numerator, &derived.denominator}
                                                       : std::array{&derived.operands[0], &derived.operands[1]})
        for (const auto& [monomial, coefficient] : polynomial->terms)
          for (const std::string& size : monomial)
            if (!sizes_.count(size)) fail("derived size {} uses {}, which is not a size before it", derived.name, size);
      if (quotient && derived.denominator.terms.empty()) fail("derived size {} divides by zero", derived.name);
      declare(derived.name, "derived size");
      sizes_.insert(derived.name);
    }
    for (const TensorParam& input : kernel_.inputs) {
      declare(input.name, "input");
      checkTensorParam(input, "input");
    }
    for (const ScalarParamDecl& scalar : kernel_.scalars) {
      declare(scalar.name, "scalar");
      const Expr* value = scalar.defaultValue.get();
      if (!value) continue;
      if (value->kind != ExprKind::IntImm && value->kind != ExprKind::FloatImm && value->kind != ExprKind::BoolImm)
        fail("the default of scalar {} is not an immediate: {}", scalar.name, printExpr(*value));
      if (value->dtype != scalar.dtype)
        fail("the default of scalar {} is {}, not {}", scalar.name, dtypeName(value->dtype), dtypeName(scalar.dtype));
      checkExpr(*value);
    }
  }

  void checkAxes(const std::vector<Axis>& axes, const char* what) {
    for (const Axis& axis : axes) {
      if (axis.name.empty()) fail("{} name is empty", what);
      if (std::any_of(axes_.begin(), axes_.end(), [&](const Axis* a) { return a->name == axis.name; }))
        fail("{} {} repeats the name of another axis", what, axis.name);
      checkDim(axis.extent, fmt::format("{} {}", what, axis.name));
      axes_.push_back(&axis);
    }
  }

  void checkStage(const Stage& stage) {
    stage_ = &stage;
    axes_.clear();
    declare(stage.name, "stage");
    checkAxes(stage.axes, "axis");
    DType bodyDType = stage.dtype;
    if (stage.reduction) {
      const Reduction& reduction = *stage.reduction;
      if (reduction.axes.empty()) fail("the reduction has no axes");
      checkAxes(reduction.axes, "reduction axis");
      if (reduction.op == ReduceOp::Mean && !isFloat(reduction.accumulator))
        fail("mean accumulates in {}, which is not a float type", dtypeName(reduction.accumulator));
      bodyDType = reduction.accumulator;
    }
    if (!stage.body) fail("the body is null");
    if (stage.body->dtype != bodyDType)
      fail("the body is {} but must be {} ({}): {}", dtypeName(stage.body->dtype), dtypeName(bodyDType),
           stage.reduction ? "the accumulator's dtype" : "the stage's dtype", printExpr(*stage.body));
    checkExpr(*stage.body);
    definedStages_.insert(stage.name);
    stage_ = nullptr;
  }

  void checkOutputs() {
    std::set<std::string> outputNames;
    for (const TensorParam& output : kernel_.outputs) {
      checkTensorParam(output, "output");
      if (!outputNames.insert(output.name).second) fail("output {} is declared twice", output.name);
      const Stage* stage = kernel_.findStage(output.name);
      if (!stage) fail("output {} has no stage of that name", output.name);
      if (stage->dtype != output.dtype || stage->shape() != output.shape)
        fail("output {} is declared {}{} but its stage is {}{}", output.name, dtypeName(output.dtype),
             shapeToString(output.shape), dtypeName(stage->dtype), shapeToString(stage->shape()));
    }
  }

  // ---- expressions ------------------------------------------------------------------------------------
  void checkExpr(const Expr& expr) {
    dispatch(expr, [this](const auto& node) { check(node); });
  }

  void checkOperand(const ExprPtr& operand, const Expr& parent) {
    if (!operand) fail("null operand in {}", printExpr(parent));
    checkExpr(*operand);
  }

  void requireDType(const Expr& operand, DType dtype, const char* what, const Expr& parent) const {
    if (operand.dtype != dtype)
      fail("{} {} is {}, not {}, in {}", what, printExpr(operand), dtypeName(operand.dtype), dtypeName(dtype),
           printExpr(parent));
  }

  void requireResultDType(const Expr& node, DType dtype) const {
    if (node.dtype != dtype) fail("{} has dtype {}, not {}", printExpr(node), dtypeName(node.dtype), dtypeName(dtype));
  }

  void check(const IntImm& node) {
    if (!isInteger(node.dtype)) fail("integer immediate {} has dtype {}", node.value, dtypeName(node.dtype));
    if (Value::ofInt(node.dtype, node.value).i != node.value)
      fail("integer immediate {} does not fit {}", node.value, dtypeName(node.dtype));
  }
  void check(const FloatImm& node) {
    if (!isFloat(node.dtype)) fail("float immediate {} has dtype {}", node.value, dtypeName(node.dtype));
  }
  void check(const BoolImm&) {}

  void check(const AxisVar& node) {
    if (std::none_of(axes_.begin(), axes_.end(), [&](const Axis* axis) { return axis->name == node.name; }))
      fail("axis {} is not an axis of the stage or of its reduction", node.name);
  }

  void check(const SizeVar& node) {
    if (!sizes_.count(node.name)) fail("size {} is not a size of the kernel", node.name);
  }

  void check(const ScalarParam& node) {
    auto it = std::find_if(kernel_.scalars.begin(), kernel_.scalars.end(),
                           [&](const ScalarParamDecl& scalar) { return scalar.name == node.name; });
    if (it == kernel_.scalars.end()) fail("scalar {} is not a scalar parameter of the kernel", node.name);
    if (it->dtype != node.dtype)
      fail("scalar {} is used as {} but declared {}", node.name, dtypeName(node.dtype), dtypeName(it->dtype));
  }

  void check(const Load& node) {
    DType dtype;
    size_t rank;
    if (const TensorParam* input = kernel_.findInput(node.tensor)) {
      dtype = input->dtype;
      rank = input->shape.size();
    } else if (const Stage* stage = kernel_.findStage(node.tensor); stage && definedStages_.count(node.tensor)) {
      dtype = stage->dtype;
      rank = stage->axes.size();
    } else if (stage) {
      fail("{} reads stage {}, which is not defined before it", printExpr(node), node.tensor);
    } else {
      fail("{} reads {}, which is neither an input nor a stage", printExpr(node), node.tensor);
    }
    if (node.dtype != dtype)
      fail("{} has dtype {} but {} is {}", printExpr(node), dtypeName(node.dtype), node.tensor, dtypeName(dtype));
    if (node.indices.size() != rank)
      fail("{} has {} subscripts but {} has rank {}", printExpr(node), node.indices.size(), node.tensor, rank);
    for (const ExprPtr& index : node.indices) {
      checkOperand(index, node);
      requireDType(*index, DType::I64, "subscript", node);
    }
    if (node.padValue) {
      checkOperand(node.padValue, node);
      requireDType(*node.padValue, dtype, "pad value", node);
    }
  }

  void check(const Unary& node) {
    checkOperand(node.operand, node);
    DType operand = node.operand->dtype;
    if (node.op == UnaryOp::Not) {
      requireDType(*node.operand, DType::Bool, "operand", node);
      requireResultDType(node, DType::Bool);
      return;
    }
    requireResultDType(node, operand);
    bool integerAllowed = node.op == UnaryOp::Neg || node.op == UnaryOp::Abs || node.op == UnaryOp::Relu ||
                          node.op == UnaryOp::Floor || node.op == UnaryOp::Ceil;
    if (!isFloat(operand) && !(integerAllowed && isInteger(operand)))
      fail("{} takes {} operands, not {}, in {}", unaryOpName(node.op), integerAllowed ? "numeric" : "float",
           dtypeName(operand), printExpr(node));
  }

  void check(const Binary& node) {
    checkOperand(node.lhs, node);
    checkOperand(node.rhs, node);
    if (node.op == BinaryOp::And || node.op == BinaryOp::Or) {
      requireDType(*node.lhs, DType::Bool, "operand", node);
      requireDType(*node.rhs, DType::Bool, "operand", node);
      requireResultDType(node, DType::Bool);
      return;
    }
    requireDType(*node.rhs, node.lhs->dtype, "right operand", node);
    if (isComparison(node.op)) {
      requireResultDType(node, DType::Bool);
      return;
    }
    requireResultDType(node, node.lhs->dtype);
    if (node.dtype == DType::Bool) fail("arithmetic on bool operands in {}", printExpr(node));
  }

  void check(const Select& node) {
    checkOperand(node.condition, node);
    checkOperand(node.ifTrue, node);
    checkOperand(node.ifFalse, node);
    requireDType(*node.condition, DType::Bool, "condition", node);
    requireDType(*node.ifFalse, node.ifTrue->dtype, "false branch", node);
  }

  void check(const Cast& node) { checkOperand(node.operand, node); }

  const Kernel& kernel_;
  std::set<std::string> sizes_;          // the kernel's sizes, derived ones included
  std::set<std::string> names_;          // inputs, scalars, sizes and stages declared so far
  std::set<std::string> definedStages_;  // stages before the current one
  const Stage* stage_ = nullptr;         // the stage being checked
  std::vector<const Axis*> axes_;        // its axes and its reduction's
};

}  // namespace

void verifyKernel(const Kernel& kernel) { KernelVerifier(kernel).run(); }

}  // namespace emmy::tensor
