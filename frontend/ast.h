// The syntax tree of one .emmy file, as the parser builds it from ANTLR's parse tree. It is plain data
// with source locations; names are not resolved and types are not checked here (see elaborate*.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/tensor/schedule.h"

#include "support/source.h"

namespace emmy::ast {

struct Ident {
  std::string name;
  SourceLoc loc;
};

// ---------------------------------------------------------------------------------------------------
// Expressions
enum class ExprKind { Number, Bool, Name, Subscript, Call, List, Reduction, Unary, Binary };

struct Expr {
  Expr(ExprKind kind, SourceLoc loc) : kind(kind), loc(std::move(loc)) {}
  virtual ~Expr() = default;
  const ExprKind kind;
  SourceLoc loc;  // the whole expression

  template <typename T>
  const T* as() const { return kind == T::kKind ? static_cast<const T*>(this) : nullptr; }
};
using ExprPtr = std::unique_ptr<Expr>;

// `2`, `0.5`, `1e-5`, `inf`. An integer literal has no '.', exponent or `inf`.
struct Number final : Expr {
  static constexpr ExprKind kKind = ExprKind::Number;
  Number(SourceLoc loc, std::string text, bool isInteger, int64_t intValue, double floatValue)
      : Expr(kKind, std::move(loc)), text(std::move(text)), isInteger(isInteger), intValue(intValue), floatValue(floatValue) {}
  std::string text;
  bool isInteger;
  int64_t intValue;   // valid when isInteger
  double floatValue;  // always valid
};

struct Bool final : Expr {
  static constexpr ExprKind kKind = ExprKind::Bool;
  Bool(SourceLoc loc, bool value) : Expr(kKind, std::move(loc)), value(value) {}
  bool value;
};

// A plain identifier: tensor, index, size, scalar parameter, type parameter.
struct Name final : Expr {
  static constexpr ExprKind kKind = ExprKind::Name;
  Name(SourceLoc loc, std::string name) : Expr(kKind, std::move(loc)), name(std::move(name)) {}
  std::string name;
};

// `x[i, j + 1]` or `pad(x, 0)[i - 1]`.
struct Subscript final : Expr {
  static constexpr ExprKind kKind = ExprKind::Subscript;
  Subscript(SourceLoc loc, ExprPtr base, std::vector<ExprPtr> indices)
      : Expr(kKind, std::move(loc)), base(std::move(base)), indices(std::move(indices)) {}
  ExprPtr base;
  std::vector<ExprPtr> indices;
};

struct Argument {
  std::optional<Ident> keyword;  // `axis=1` has keyword "axis"
  ExprPtr value;
};

// `exp(x)`, `f32(x)`, `nn.layernorm(x, w, b, eps=1e-5)`, `sum(x, axis=[0, 1])`.
struct Call final : Expr {
  static constexpr ExprKind kKind = ExprKind::Call;
  Call(SourceLoc loc, std::optional<Ident> module, Ident callee, std::vector<Argument> args)
      : Expr(kKind, std::move(loc)), module(std::move(module)), callee(std::move(callee)), args(std::move(args)) {}
  std::optional<Ident> module;  // `nn` in `nn.softmax(...)`
  Ident callee;
  std::vector<Argument> args;
};

// `[1, 0]` or `[-1, D]`: only as a call argument.
struct List final : Expr {
  static constexpr ExprKind kKind = ExprKind::List;
  List(SourceLoc loc, std::vector<ExprPtr> elements) : Expr(kKind, std::move(loc)), elements(std::move(elements)) {}
  std::vector<ExprPtr> elements;
};

// `sum[k, l](EXPR)`, `max[di < 3, dj < KW](EXPR)`; `op` is the word before '[' as written (checked later).
struct Reduction final : Expr {
  static constexpr ExprKind kKind = ExprKind::Reduction;
  Reduction(SourceLoc loc, Ident op, std::vector<Ident> indices, std::vector<ExprPtr> bounds, ExprPtr body)
      : Expr(kKind, std::move(loc)),
        op(std::move(op)),
        indices(std::move(indices)),
        bounds(std::move(bounds)),
        body(std::move(body)) {}
  Ident op;
  std::vector<Ident> indices;
  std::vector<ExprPtr> bounds;  // one per index: `k < BOUND`, or null where the range is inferred
  ExprPtr body;
};

enum class UnaryOp { Neg, Not };

struct Unary final : Expr {
  static constexpr ExprKind kKind = ExprKind::Unary;
  Unary(SourceLoc loc, UnaryOp op, ExprPtr operand) : Expr(kKind, std::move(loc)), op(op), operand(std::move(operand)) {}
  UnaryOp op;
  ExprPtr operand;
};

enum class BinaryOp { Or, And, Lt, Le, Gt, Ge, Eq, Ne, Add, Sub, Mul, Div, Mod, MatMul };
const char* binaryOpSpelling(BinaryOp op);  // "or", "<", "@", ...

struct Binary final : Expr {
  static constexpr ExprKind kKind = ExprKind::Binary;
  Binary(SourceLoc loc, BinaryOp op, SourceLoc opLoc, ExprPtr lhs, ExprPtr rhs)
      : Expr(kKind, std::move(loc)), op(op), opLoc(std::move(opLoc)), lhs(std::move(lhs)), rhs(std::move(rhs)) {}
  BinaryOp op;
  SourceLoc opLoc;  // the operator token
  ExprPtr lhs, rhs;
};

// ---------------------------------------------------------------------------------------------------
// Kernel bodies
// `NAME[i, j] = EXPR` (index form) or `NAME = EXPR` / `(A, B) = CALL` (whole-tensor form).
struct Statement {
  std::vector<Ident> targets;  // one, or several for `(A, B) = CALL`
  bool indexForm = false;      // true: `targets[0][indices] = value`
  std::vector<Ident> indices;
  std::vector<ExprPtr> indexRanges;  // one per index: `i < RANGE`, or null where the range is inferred
  ExprPtr value;
  SourceLoc loc;  // the whole statement
};

// A dimension in a type: an integer literal, a size name, or an expression of those and integer
// parameters with + - * / and parentheses (the parser has checked that nothing else is used).
struct DimExpr {
  ExprPtr expr;
  SourceLoc loc;
};

// `f32`, `T`, `f32[N, D]` or `T[N, 64]`.
struct TypeExpr {
  Ident elementType;
  bool isTensor = false;
  std::vector<DimExpr> dims;
  SourceLoc loc;
};

struct Param {
  Ident name;
  TypeExpr type;
  ExprPtr defaultValue;  // scalars only
  SourceLoc loc;
};

// `T: f16 | bf16 | f32`
struct TypeParam {
  Ident name;
  std::vector<Ident> bound;
};

// `STRIDE: i64 = 1`: a compile-time integer, written among the type parameters. Its default may be an
// earlier integer parameter's value (`STRIDE_H: i64 = STRIDE`).
struct IntegerParam {
  Ident name;
  std::optional<int64_t> defaultValue;
  std::optional<Ident> defaultParam;
};

struct KernelDef {
  Ident name;
  std::vector<TypeParam> typeParams;
  std::vector<IntegerParam> integerParams;
  std::vector<Param> inputs;
  std::vector<Param> outputs;
  std::vector<Statement> body;
  SourceLoc loc;
};

// `fn gelu_tanh(x) = EXPR`
struct FnDef {
  Ident name;
  std::vector<Ident> params;
  ExprPtr body;
  SourceLoc loc;
};

struct Import {
  Ident module;
  SourceLoc loc;
};

// ---------------------------------------------------------------------------------------------------
// Schedules (section 5 of the language). Parsed here; the frontend replaces params by their values
// (schedule.cpp) and the lowering checks and applies the directives.
using tensor::DirectiveKind;

// A number written in a directive: a literal or a `param` name.
struct Factor {
  std::optional<int64_t> value;
  Ident param;  // valid when !value
  SourceLoc loc;
};

// One `V if SIZE <= B` or `V if T == f16` of a param's default: `comparison` is "<=", "<", ">=", ">", "=="
// or "!="; `bound` a number, or a type's name.
struct SizeCaseDecl {
  Factor value;
  Ident size;
  std::string comparison;
  Factor bound;
  SourceLoc loc;
};

// `param P in [c, ...] = d`, or `= v if SIZE <= B else ... else d`
struct ParamDecl {
  Ident name;
  std::vector<Factor> candidates;
  Factor defaultValue;  // the value where no case holds
  SourceLoc loc;
  std::vector<SizeCaseDecl> cases;  // in the order written; the first that holds gives the value
};

// What `bind S.a to ...` may name, as messages list it.
inline constexpr const char* kHardwareIndices =
    "block.x, block.y, block.z, thread.x, thread.y, thread.z, warp.x or grid.x";

// One directive, with the fields of tensor::Directive (ir/tensor/schedule.h) as written: numbers may
// be params, and the cache memory and bind target are the words written.
struct Directive {
  DirectiveKind kind;
  SourceLoc loc;  // the whole directive
  Ident stage;
  std::vector<Ident> axes;
  std::vector<Factor> factors;
  std::vector<Ident> results;
  Ident atStage, atAxis;
  Ident memory;                  // "shared" or "registers" as written
  Ident targetScope, targetDim;  // "block" / "thread" / "warp" / "grid", "x" / "y" / "z"
  bool atomic = false;
};

struct Schedule {
  Ident kernel;
  std::vector<ParamDecl> params;
  std::vector<Directive> directives;
  SourceLoc loc;
  // `schedule NAME<A | B, C>`: per type parameter of the kernel, the types of the instances it schedules
  // (empty: every type).
  std::vector<std::vector<Ident>> types;
  // `schedule NAME<A, P = 1 | 2>`: integer parameters and the values of the instances it schedules. A
  // schedule with neither types nor values schedules every instance no other schedule takes.
  struct IntegerChoice {
    Ident param;
    std::vector<int64_t> values;
  };
  std::vector<IntegerChoice> integers;
  bool typed() const { return !types.empty() || !integers.empty(); }
};

// ---------------------------------------------------------------------------------------------------
struct Module {
  std::shared_ptr<const SourceFile> source;
  std::vector<Import> imports;
  std::vector<FnDef> fns;
  std::vector<KernelDef> kernels;
  std::vector<Schedule> schedules;
};

}  // namespace emmy::ast
