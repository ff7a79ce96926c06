// Tensor IR: a kernel as a list of stages, each a whole tensor defined by a scalar expression over its
// axes, optionally reduced over reduction axes. Both frontends (the .emmy elaborator and the TorchScript
// importer) produce this level; it holds meaning, dtypes and symbolic shapes, and nothing about loops.
//
// Conventions the verifier enforces (so that the evaluator and the lowering never guess):
//  - Every expression carries its dtype. Operands of arithmetic and of comparisons have equal dtypes
//    (the frontend inserts Casts); comparisons, Not, And and Or give bool.
//  - Axis variables, size variables and subscripts are i64.
//  - A reduction stage's body has the reduction's accumulator dtype; the reduced value is cast to the
//    stage's dtype once at the end.
#pragma once

#include <cstdint>
#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/tensor/schedule.h"
#include "support/dtype.h"
#include "support/source.h"

namespace emmy::tensor {

// ---------------------------------------------------------------------------------------------------
// Dimensions: a constant times a product of size names (N, 64, N*D, 2*H). Products arise from reshape.
struct Dim {
  int64_t factor = 1;
  std::vector<std::string> sizes;  // sorted, with repeats (N*N)

  static Dim constant(int64_t value) { return Dim{value, {}}; }
  static Dim size(std::string name) { return Dim{1, {std::move(name)}}; }

  bool isConstant() const { return sizes.empty(); }
  bool operator==(const Dim&) const = default;
  Dim operator*(const Dim& other) const;
  // The quotient when `other` divides this exactly (factor divides and every size name is present).
  std::optional<Dim> dividedBy(const Dim& other) const;
  std::string toString() const;  // "N", "64", "2*H*N"
};

using Shape = std::vector<Dim>;
std::string shapeToString(const Shape& shape);  // "[N, 64]"

// A polynomial in sizes with integer coefficients: a dimension written as an expression
// (`H + 2 * PAD - KH`, LANGUAGE.md section 2) once its integer parameters are known.
struct SizePolynomial {
  std::map<std::vector<std::string>, int64_t> terms;  // sorted size names of a monomial -> nonzero coefficient

  static SizePolynomial constant(int64_t value);
  static SizePolynomial of(const Dim& dim);
  SizePolynomial operator+(const SizePolynomial& other) const;
  SizePolynomial operator-(const SizePolynomial& other) const;
  SizePolynomial operator*(const SizePolynomial& other) const;
  bool operator==(const SizePolynomial&) const = default;
  std::optional<int64_t> constantValue() const;
  // The polynomial as a Dim when it is one: a positive constant, or a positive constant times sizes.
  std::optional<Dim> asDim() const;
  // The quotient when every coefficient is a multiple of `divisor`.
  std::optional<SizePolynomial> dividedExactly(int64_t divisor) const;
  // The terms in the order they are written: sizes added, then those subtracted, then the constant.
  std::vector<std::pair<std::vector<std::string>, int64_t>> orderedTerms() const;
  std::string toString() const;  // "H - KH + 1"
};

// A size the kernel computes from other sizes, all before it: the floor of numerator / denominator, or
// the least or greatest of two polynomials (`min(a, b)`, `max(a, b)`). A dimension written as an
// expression that is no Dim is one of these, named by its definition (`H - KH + 1`, `(H - 3)/2`,
// `min(H, 4)`), which no size name the user writes can be; the launcher computes it. A denominator of 1
// makes a quotient a polynomial. Only quotients, minima and maxima appear inside other definitions.
struct DerivedSize {
  enum class Kind { Quotient, Minimum, Maximum };
  std::string name;
  SizePolynomial numerator;    // of a quotient
  SizePolynomial denominator;  // of a quotient
  Kind kind = Kind::Quotient;
  std::array<SizePolynomial, 2> operands;  // of a minimum or maximum
  std::string definition() const;  // "(H - KH)/2", "H - KH + 1", "min(H, 4)"
};

// Whether a size name is a derived size's (a definition, not an identifier).
bool isDerivedSizeName(const std::string& name);

// ---------------------------------------------------------------------------------------------------
// Scalar expressions. The node list is one X-macro so that visitors cannot miss a node.
#define EMMY_TENSOR_EXPR_NODES(X) \
  X(IntImm)                       \
  X(FloatImm)                     \
  X(BoolImm)                      \
  X(AxisVar)                      \
  X(SizeVar)                      \
  X(ScalarParam)                  \
  X(Load)                         \
  X(Unary)                        \
  X(Binary)                       \
  X(Select)                       \
  X(Cast)

enum class ExprKind {
#define EMMY_ENUM_ENTRY(Node) Node,
  EMMY_TENSOR_EXPR_NODES(EMMY_ENUM_ENTRY)
#undef EMMY_ENUM_ENTRY
};

struct Expr {
  Expr(ExprKind kind, DType dtype) : kind(kind), dtype(dtype) {}
  virtual ~Expr() = default;
  const ExprKind kind;
  const DType dtype;

  template <typename T>
  const T* as() const { return kind == T::kKind ? static_cast<const T*>(this) : nullptr; }
};
using ExprPtr = std::shared_ptr<const Expr>;

struct IntImm final : Expr {
  static constexpr ExprKind kKind = ExprKind::IntImm;
  IntImm(DType dtype, int64_t value) : Expr(kKind, dtype), value(value) {}
  const int64_t value;
};

struct FloatImm final : Expr {
  static constexpr ExprKind kKind = ExprKind::FloatImm;
  FloatImm(DType dtype, double value) : Expr(kKind, dtype), value(value) {}
  const double value;  // may be +-inf
};

struct BoolImm final : Expr {
  static constexpr ExprKind kKind = ExprKind::BoolImm;
  explicit BoolImm(bool value) : Expr(kKind, DType::Bool), value(value) {}
  const bool value;
};

// An axis of the enclosing stage (or of its reduction), as an i64 value.
struct AxisVar final : Expr {
  static constexpr ExprKind kKind = ExprKind::AxisVar;
  explicit AxisVar(std::string name) : Expr(kKind, DType::I64), name(std::move(name)) {}
  const std::string name;
};

// A size name of the kernel, as an i64 value.
struct SizeVar final : Expr {
  static constexpr ExprKind kKind = ExprKind::SizeVar;
  explicit SizeVar(std::string name) : Expr(kKind, DType::I64), name(std::move(name)) {}
  const std::string name;
};

// A scalar parameter of the kernel.
struct ScalarParam final : Expr {
  static constexpr ExprKind kKind = ExprKind::ScalarParam;
  ScalarParam(DType dtype, std::string name) : Expr(kKind, dtype), name(std::move(name)) {}
  const std::string name;
};

// An element of an input tensor or of an earlier stage. Without `padValue` the frontend has proved every
// subscript in bounds; with it, an out-of-bounds read gives `padValue` (same dtype as the tensor).
struct Load final : Expr {
  static constexpr ExprKind kKind = ExprKind::Load;
  Load(DType dtype, std::string tensor, std::vector<ExprPtr> indices, ExprPtr padValue = nullptr)
      : Expr(kKind, dtype), tensor(std::move(tensor)), indices(std::move(indices)), padValue(std::move(padValue)) {}
  const std::string tensor;
  const std::vector<ExprPtr> indices;
  const ExprPtr padValue;
};

#define EMMY_UNARY_OPS(X) \
  X(Neg, "neg") X(Not, "not") X(Exp, "exp") X(Exp2, "exp2") X(Log, "log") X(Log2, "log2") X(Sqrt, "sqrt") \
  X(Rsqrt, "rsqrt") X(Abs, "abs") X(Sin, "sin") X(Cos, "cos") X(Tanh, "tanh") X(Erf, "erf")                \
  X(Sigmoid, "sigmoid") X(Relu, "relu") X(Gelu, "gelu") X(Silu, "silu") X(Floor, "floor") X(Ceil, "ceil")

enum class UnaryOp {
#define EMMY_ENUM_ENTRY(Op, name) Op,
  EMMY_UNARY_OPS(EMMY_ENUM_ENTRY)
#undef EMMY_ENUM_ENTRY
};
const char* unaryOpName(UnaryOp op);

// The result has the operand's dtype (Not: bool operand). Float-only functions get float operands.
// An `approximate` exp or exp2 of f32 may be off by a few units in the last place of f32 (and by its
// argument's rounding), where its value only reaches results rounded to 16 bits
// (approximate_exponentials.h).
struct Unary final : Expr {
  static constexpr ExprKind kKind = ExprKind::Unary;
  Unary(DType dtype, UnaryOp op, ExprPtr operand, bool approximate = false)
      : Expr(kKind, dtype), op(op), operand(std::move(operand)), approximate(approximate) {}
  const UnaryOp op;
  const ExprPtr operand;
  const bool approximate;
};

#define EMMY_BINARY_OPS(X)                                                                               \
  X(Add, "+") X(Sub, "-") X(Mul, "*") X(Div, "/") X(Mod, "%") X(Min, "min") X(Max, "max") X(Pow, "pow") \
  X(Lt, "<") X(Le, "<=") X(Gt, ">") X(Ge, ">=") X(Eq, "==") X(Ne, "!=") X(And, "and") X(Or, "or")

enum class BinaryOp {
#define EMMY_ENUM_ENTRY(Op, name) Op,
  EMMY_BINARY_OPS(EMMY_ENUM_ENTRY)
#undef EMMY_ENUM_ENTRY
};
const char* binaryOpName(BinaryOp op);
bool isComparison(BinaryOp op);

// Integer Div truncates toward zero and Mod takes the dividend's sign; both give 0 for a zero divisor.
// Integer arithmetic wraps. Float Mod is fmod.
struct Binary final : Expr {
  static constexpr ExprKind kKind = ExprKind::Binary;
  Binary(DType dtype, BinaryOp op, ExprPtr lhs, ExprPtr rhs)
      : Expr(kKind, dtype), op(op), lhs(std::move(lhs)), rhs(std::move(rhs)) {}
  const BinaryOp op;
  const ExprPtr lhs, rhs;
};

// Only the taken branch is evaluated.
struct Select final : Expr {
  static constexpr ExprKind kKind = ExprKind::Select;
  Select(ExprPtr condition, ExprPtr ifTrue, ExprPtr ifFalse)
      : Expr(kKind, ifTrue->dtype), condition(std::move(condition)), ifTrue(std::move(ifTrue)), ifFalse(std::move(ifFalse)) {}
  const ExprPtr condition, ifTrue, ifFalse;
};

// Conversion to `dtype`: float to integer truncates toward zero; to bool tests for non-zero.
struct Cast final : Expr {
  static constexpr ExprKind kKind = ExprKind::Cast;
  Cast(DType dtype, ExprPtr operand) : Expr(kKind, dtype), operand(std::move(operand)) {}
  const ExprPtr operand;
};

// Calls `visitor.visitNode(const Node&)` for the dynamic type of `expr`.
template <typename Visitor>
decltype(auto) dispatch(const Expr& expr, Visitor&& visitor) {
  switch (expr.kind) {
#define EMMY_DISPATCH_CASE(Node) \
  case ExprKind::Node: return visitor(static_cast<const Node&>(expr));
    EMMY_TENSOR_EXPR_NODES(EMMY_DISPATCH_CASE)
#undef EMMY_DISPATCH_CASE
  }
  __builtin_unreachable();
}

// ---------------------------------------------------------------------------------------------------
// Stages and kernels.
struct Axis {
  std::string name;
  Dim extent;
};

#define EMMY_REDUCE_OPS(X) X(Sum, "sum") X(Max, "max") X(Min, "min") X(Prod, "prod") X(Mean, "mean")
enum class ReduceOp {
#define EMMY_ENUM_ENTRY(Op, name) Op,
  EMMY_REDUCE_OPS(EMMY_ENUM_ENTRY)
#undef EMMY_ENUM_ENTRY
};
const char* reduceOpName(ReduceOp op);

struct Reduction {
  ReduceOp op;
  std::vector<Axis> axes;
  DType accumulator;  // the body's dtype
};

// stage[axes] = body                                       without a reduction
// stage[axes] = cast<dtype>(reduce_op over raxes of body)  with one (mean divides by the axes' extents)
struct Stage {
  std::string name;
  DType dtype;
  std::vector<Axis> axes;  // one per dimension, in order; the stage's shape is their extents
  std::optional<Reduction> reduction;
  ExprPtr body;
  SourceLoc loc;

  Shape shape() const;
};

struct TensorParam {
  std::string name;
  DType dtype;
  Shape shape;
  SourceLoc loc;
};

struct ScalarParamDecl {
  std::string name;
  DType dtype;
  ExprPtr defaultValue;  // an immediate of `dtype`, or null
  SourceLoc loc;
};

struct Kernel {
  std::string name;                                          // as written: "softmax"
  std::vector<std::pair<std::string, DType>> typeArguments;  // T = f16, for an instance of a generic kernel
  std::vector<TensorParam> inputs;
  std::vector<TensorParam> outputs;  // each is also defined by the stage of the same name
  std::vector<ScalarParamDecl> scalars;
  std::vector<std::string> sizes;  // every size name, in order of first appearance in the signature
  // Sizes computed from the others, each from those before it; not parameters of the host function.
  std::vector<DerivedSize> derivedSizes;
  // Integer parameters given values other than their defaults: `STRIDE = 2`; they name the instance.
  std::vector<std::pair<std::string, int64_t>> integerArguments;
  std::vector<Stage> stages;       // in definition order: a stage reads only inputs and earlier stages
  std::vector<Directive> schedule;  // the kernel's schedule block, empty when it has none
  // The values `-D` gave params: those the default policy declares read them there.
  std::map<std::string, int64_t> paramValues;
  // In a launch variant (launch_variants.h): the largest value a size takes where the variant runs.
  std::map<std::string, int64_t> sizeAtMost;
  std::string launchVariant;  // its name, which its CUDA kernels' names carry ("LANES32"); empty if the only one
  SourceLoc loc;

  // "softmax" or, for an instance, "softmax_f16": the host function's name.
  std::string instanceName() const;
  // "softmax", "softmax<f16>" or "conv2d<f16, STRIDE=2>": the instance as `--kernel` names it.
  std::string selector() const;
  const Stage* findStage(const std::string& name) const;
  const TensorParam* findInput(const std::string& name) const;
  bool isOutput(const std::string& name) const;
  const DerivedSize* findDerivedSize(const std::string& name) const;
  // Every size name: those of the signature, then the derived ones.
  std::vector<std::string> allSizes() const;
};

}  // namespace emmy::tensor
