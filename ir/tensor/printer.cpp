#include "ir/tensor/printer.h"

#include <charconv>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "support/text.h"
#include "support/value.h"

namespace emmy::tensor {

namespace {

// Binding strength, loosest first, as in the language.
enum Precedence { kOr = 1, kAnd, kNot, kComparison, kAdditive, kMultiplicative, kUnary, kAtom };

struct Printed {
  std::string text;
  int precedence;
};

int binaryPrecedence(BinaryOp op) {
  switch (op) {
    case BinaryOp::Or: return kOr;
    case BinaryOp::And: return kAnd;
    case BinaryOp::Add:
    case BinaryOp::Sub: return kAdditive;
    case BinaryOp::Mul:
    case BinaryOp::Div:
    case BinaryOp::Mod: return kMultiplicative;
    case BinaryOp::Min:
    case BinaryOp::Max:
    case BinaryOp::Pow: return kAtom;  // printed as calls
    default: return kComparison;
  }
}

bool isImmediate(const Expr& expr) {
  return expr.kind == ExprKind::IntImm || expr.kind == ExprKind::FloatImm || expr.kind == ExprKind::BoolImm;
}

// Shortest decimal that reads back as `value` rounded to `dtype`; integral values keep a ".0".
std::string floatText(DType dtype, double value) {
  double rounded = Value::ofFloat(dtype, value).f;
  std::string text;
  if (!std::isfinite(rounded) || dtype == DType::F64) {
    text = fmt::format("{}", rounded);
  } else if (dtype == DType::F32) {
    text = fmt::format("{}", static_cast<float>(rounded));
  } else {
    // f16 and bf16 have no shortest-form formatter: take the fewest digits that read back the same.
    text = fmt::format("{}", rounded);
    for (int digits = 1; digits <= 9; ++digits) {
      std::string candidate = fmt::format("{:.{}g}", rounded, digits);
      double parsed = 0;
      std::from_chars(candidate.data(), candidate.data() + candidate.size(), parsed);
      if (Value::ofFloat(dtype, parsed).f == rounded) {
        text = fmt::format("{}", parsed);
        break;
      }
    }
  }
  if (text.find_first_not_of("-0123456789") == std::string::npos) text += ".0";
  return text;
}

std::string parenthesized(const Printed& printed, int minimumPrecedence) {
  return printed.precedence >= minimumPrecedence ? printed.text : "(" + printed.text + ")";
}

// `implied` is the dtype a reader infers for `expr` from where it stands (see printer.h). A null operand
// (IR still being built, printed in a verifier message) prints as `<null>`.
Printed print(const Expr* expr, std::optional<DType> implied);

// The dtype a reader infers for an operand: its sibling's when that is not an immediate, else `fallback`.
std::optional<DType> impliedBySibling(const Expr* sibling, std::optional<DType> fallback) {
  return !sibling || isImmediate(*sibling) ? fallback : std::optional<DType>(sibling->dtype);
}

// Prints one node; `implied` is the dtype a reader infers for it from where it stands (see printer.h).
struct ExprPrinter {
  std::optional<DType> implied;

  Printed operator()(const BoolImm& node) const { return {node.value ? "true" : "false", kAtom}; }
  Printed operator()(const IntImm& node) const {
    return immediate(fmt::format("{}", node.value), node.dtype, DType::I64);
  }
  Printed operator()(const FloatImm& node) const {
    return immediate(floatText(node.dtype, node.value), node.dtype, DType::F32);
  }
  Printed operator()(const AxisVar& node) const { return {node.name, kAtom}; }
  // A derived size is named by its definition, which binds like a sum (`H - 2`) or a quotient.
  Printed operator()(const SizeVar& node) const {
    return {node.name, isDerivedSizeName(node.name) ? kAdditive : kAtom};
  }
  Printed operator()(const ScalarParam& node) const { return {node.name, kAtom}; }

  Printed operator()(const Load& node) const {
    std::vector<std::string> indices;
    for (const ExprPtr& index : node.indices) indices.push_back(print(index.get(), DType::I64).text);
    std::string tensor = node.tensor;
    if (node.padValue) tensor = fmt::format("pad({}, {})", node.tensor, print(node.padValue.get(), node.dtype).text);
    return {fmt::format("{}[{}]", tensor, join(indices, ", ")), kAtom};
  }

  Printed operator()(const Unary& node) const {
    if (node.op == UnaryOp::Not) return {"not " + parenthesized(print(node.operand.get(), DType::Bool), kNot), kNot};
    Printed operand = print(node.operand.get(), implied);
    // `-(-x)` rather than `--x`.
    if (node.op == UnaryOp::Neg) return {"-" + parenthesized(operand, kAtom), kUnary};
    return {fmt::format("{}{}({})", node.approximate ? "approximate_" : "", unaryOpName(node.op), operand.text), kAtom};
  }

  Printed operator()(const Binary& node) const {
    // Operands of arithmetic have the result's dtype; those of comparisons and logic tell nothing.
    bool operandsHaveResultDType = !isComparison(node.op) && node.op != BinaryOp::And && node.op != BinaryOp::Or;
    std::optional<DType> fallback;
    if (operandsHaveResultDType) fallback = implied;
    Printed lhs = print(node.lhs.get(), impliedBySibling(node.rhs.get(), fallback));
    Printed rhs = print(node.rhs.get(), impliedBySibling(node.lhs.get(), fallback));
    int precedence = binaryPrecedence(node.op);
    if (precedence == kAtom) return {fmt::format("{}({}, {})", binaryOpName(node.op), lhs.text, rhs.text), kAtom};
    // Left-associative; comparisons do not chain, so neither side may be a comparison.
    int lhsMinimum = precedence == kComparison ? precedence + 1 : precedence;
    return {fmt::format("{} {} {}", parenthesized(lhs, lhsMinimum), binaryOpName(node.op),
                        parenthesized(rhs, precedence + 1)),
            precedence};
  }

  Printed operator()(const Select& node) const {
    return {fmt::format("where({}, {}, {})", print(node.condition.get(), DType::Bool).text,
                        print(node.ifTrue.get(), impliedBySibling(node.ifFalse.get(), implied)).text,
                        print(node.ifFalse.get(), impliedBySibling(node.ifTrue.get(), implied)).text),
            kAtom};
  }

  Printed operator()(const Cast& node) const {
    return {fmt::format("{}({})", dtypeName(node.dtype), print(node.operand.get(), std::nullopt).text), kAtom};
  }

  Printed immediate(std::string text, DType dtype, DType bareDType) const {
    if (dtype != implied.value_or(bareDType)) text += fmt::format("_{}", dtypeName(dtype));
    return {text, text.front() == '-' ? kUnary : kAtom};
  }
};

Printed print(const Expr* expr, std::optional<DType> implied) {
  if (!expr) return {"<null>", kAtom};
  return dispatch(*expr, ExprPrinter{implied});
}

std::string axesText(const std::vector<Axis>& axes) {
  std::vector<std::string> parts;
  for (const Axis& axis : axes) parts.push_back(axis.name + ": " + axis.extent.toString());
  return "(" + join(parts, ", ") + ")";
}

std::string tensorType(DType dtype, const Shape& shape) {
  return fmt::format("{}{}", dtypeName(dtype), shapeToString(shape));
}

std::string printStage(const Stage& stage) {
  std::string out = fmt::format("{}: {}", stage.name, tensorType(stage.dtype, stage.shape()));
  if (!stage.axes.empty()) out += " " + axesText(stage.axes);
  out += " = ";
  DType bodyDType = stage.dtype;
  if (const auto& reduction = stage.reduction) {
    out += fmt::format("{} over {} ", reduceOpName(reduction->op), axesText(reduction->axes));
    if (reduction->accumulator != stage.dtype) out += fmt::format("in {} ", dtypeName(reduction->accumulator));
    out += "of ";
    bodyDType = reduction->accumulator;
  }
  return out + print(stage.body.get(), bodyDType).text;
}

}  // namespace

std::string printExpr(const Expr& expr) { return print(&expr, std::nullopt).text; }

bool sameIndex(const Expr& a, const Expr& b) { return printExpr(a) == printExpr(b); }

std::string printKernel(const Kernel& kernel) {
  std::string out = "kernel " + kernel.instanceName();
  if (!kernel.typeArguments.empty() || !kernel.integerArguments.empty()) {
    std::vector<std::string> arguments;
    for (const auto& [param, dtype] : kernel.typeArguments)
      arguments.push_back(fmt::format("{} = {}", param, dtypeName(dtype)));
    for (const auto& [param, value] : kernel.integerArguments) arguments.push_back(fmt::format("{} = {}", param, value));
    out += fmt::format(" = {}<{}>", kernel.name, join(arguments, ", "));
  }
  out += "\n";
  for (const TensorParam& input : kernel.inputs)
    out += fmt::format("  input {}: {}\n", input.name, tensorType(input.dtype, input.shape));
  for (const ScalarParamDecl& scalar : kernel.scalars) {
    out += fmt::format("  scalar {}: {}", scalar.name, dtypeName(scalar.dtype));
    if (scalar.defaultValue) out += " = " + print(scalar.defaultValue.get(), scalar.dtype).text;
    out += "\n";
  }
  for (const TensorParam& output : kernel.outputs)
    out += fmt::format("  output {}: {}\n", output.name, tensorType(output.dtype, output.shape));
  if (!kernel.sizes.empty()) out += "  sizes " + join(kernel.sizes, ", ") + "\n";
  if (!kernel.derivedSizes.empty()) {
    std::vector<std::string> names;
    for (const DerivedSize& size : kernel.derivedSizes) names.push_back(size.name);
    out += "  computed sizes " + join(names, ", ") + "\n";
  }
  for (const Stage& stage : kernel.stages) out += "  " + printStage(stage) + "\n";
  return out;
}

}  // namespace emmy::tensor
