// Rebuilding expressions with some nodes replaced: renaming tensors, substituting sizes and parameters.
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ir/tensor/nodes.h"

namespace emmy::tensor {

// Returns `expr` with every node for which `replace` returns non-null replaced by that result (its
// children are not visited); other nodes are rebuilt from their rewritten children. Unchanged subtrees
// are shared, not copied.
using ExprReplacer = std::function<ExprPtr(const Expr&)>;
ExprPtr rewrite(const ExprPtr& expr, const ExprReplacer& replace);

// Calls `visit` on every node of `expr`, parents before children, operands left to right.
void forEachNode(const Expr& expr, const std::function<void(const Expr&)>& visit);

// Does `expr` use the axis (or loop variable) `axis`?
bool mentionsAxis(const Expr& expr, const std::string& axis);

// The tensors `expr` reads.
std::set<std::string> tensorsRead(const Expr& expr);

// A term that a reduction `op` adds only where a condition holds: where(condition, value, identity), the
// identity an immediate (a bounded reduction's, `sum[l < s + 1]`; a masked product's). Nullopt for any
// other term.
struct MaskedTerm {
  ExprPtr condition, value;
};
std::optional<MaskedTerm> maskedTerm(const ExprPtr& term, ReduceOp op);

// The stages some output of `kernel` depends on, in definition order: the others are never computed.
std::vector<const Stage*> liveStages(const Kernel& kernel);

}  // namespace emmy::tensor
