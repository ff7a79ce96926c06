// The pass `index-widths`: a kernel whose index arithmetic the sizes bound gets a twin that computes it
// in 32 bits, which the launcher runs where the bound is below 2^31 (see the .cpp).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ir/kernel/nodes.h"

namespace emmy::kernel {

using tensor::Expr;

// A bound on the magnitude of an index value: a polynomial in the kernel's sizes with positive
// coefficients (sorted size names, with repeats, to coefficient), evaluated at their magnitudes. The
// coefficients are rational (a quotient by 4 then a product by 4 gives back the size): f64, rounded
// far less than the bounds' own slack.
struct IndexBound {
  std::map<std::vector<std::string>, double> terms;
  bool nonnegative = false;  // the value itself is never below 0
};

// Which i64 expressions of one kernel are index arithmetic, and their bounds: constants, sizes, the
// hardware indices, the shared bytes of the launch, and loop and let variables defined by such, under
// + - * / % min max abs, selects, and the comparisons that use them. A read of a buffer or a scalar
// is a user value, which may be anything. Passes and the CUDA printer walk the body in order and tell
// it where scopes open and close and where variables are defined, so that a name means what it means
// there.
class IndexArithmetic {
public:
  explicit IndexArithmetic(const Function& function);

  // The bound of `e` (of type i64) when it is index arithmetic.
  std::optional<IndexBound> boundOf(const Expr& e) const;
  bool isIndex(const Expr& e) const { return e.dtype == DType::I64 && boundOf(e).has_value(); }
  // The same, calling `each` with every index subexpression of `e`'s bound, `e`'s own included.
  std::optional<IndexBound> boundOf(const Expr& e, const std::function<void(const IndexBound&)>& each) const;

  void openScope() { scopes_.emplace_back(); }
  void closeScope() { scopes_.pop_back(); }
  // Defines `loop`'s variable (for its body, in a scope the caller opened); the bound of its increment,
  // `var + step` after the last iteration, when it is index arithmetic.
  std::optional<IndexBound> define(const For& loop);
  void define(const Let& let);

  // An index value as an exact polynomial with integer coefficients in atoms: sizes, hardware indices
  // and variables whose values are not such polynomials (`#N`, N counting definitions, so that a
  // shadowing name is another atom). A difference of two such values cancels what they share (a
  // copy's step, `along * K + k + 8 - (along * K + k)`, is 8), which the bounds of its operands cannot.
  using ExactForm = std::map<std::vector<std::string>, int64_t>;

private:
  struct Variable {
    std::optional<IndexBound> bound;
    std::optional<ExactForm> exact;
  };
  const Variable* variable(const std::string& name) const;
  void defineVariable(const std::string& name, std::optional<IndexBound> bound, std::optional<ExactForm> exact);
  // The exact form of `e`, where it has a small one within a few levels (beyond, nothing: the bounds
  // then come from the operands alone, and a deep expression costs no more than before).
  std::optional<ExactForm> exactFormOf(const Expr& e, int levels) const;
  std::optional<IndexBound> boundOfExactForm(const ExactForm& form) const;
  // The bound of a sum or difference through its exact form, where that is tighter than `operands'`.
  IndexBound tightenedByExactForm(const Expr& e, IndexBound operands) const;

  const Function& function_;
  std::vector<std::map<std::string, Variable>> scopes_;
  std::map<std::string, IndexBound> atomBounds_;  // of the atoms `#N`
};

// The bound of every index value of `function` as one polynomial (each coefficient the largest any value
// has; values that are not index arithmetic stay in 64 bits and have none).
IndexBound indexBoundOf(const Function& function);

// The launcher's test that every index value of a kernel whose bound is `bound` fits in 32 bits: the
// polynomial at the sizes, in f64 (its products do not overflow), at most `kIndexLimit` (an AxisVar the
// simulation may lower, so that tests run the 64-bit kernel at small sizes).
ExprPtr indicesFit(const IndexBound& bound);
ExprPtr indexLimit();
bool isIndexLimit(const std::string& name);
inline constexpr int64_t kIndexLimit = 2147483647;

Program chooseIndexWidths(const Program& program);
// The suffix of a 64-bit twin's name (no kernel the lowering names otherwise ends so).
inline constexpr const char* kWideTwinSuffix = "__i64";

}  // namespace emmy::kernel
