// A loop whose body is a guard `a * v + b < E` on its own variable v (a > 0; b and E do not change in
// the loop) runs while the guard holds and never again after it fails, since the guard only grows
// false with v: the loop stops where it fails instead, v < ceil((E - b) / a), and the test goes. This
// is how a row kernel's passes look (a thread's vectors of the row, up to the row's end), and each of
// their iterations paid two 64-bit comparisons and branches for it.
//
// When the guarded body then chooses between a whole vector and its elements one by one (an IfAligned
// without addresses, whose condition has the same form: the vector's last element is in the row), the
// loop becomes two: the whole vectors, then the rest element by element, which is at most one
// iteration in the row kernels ("the tail handled once").
//
// Loops with a constant trip count that are unrolled keep their form: their bounds stay constant.
#include "ir/kernel/narrow_guarded_loops.h"

#include <optional>
#include <set>
#include <string>

#include "ir/tensor/rewrite.h"
#include "ir/tensor/simplify.h"
#include "ir/tile/nest_scheduler.h"

namespace emmy::kernel {

using namespace tensor;

namespace {

using tile::arithmetic;
using tile::i64;

// The terms of a conjunction.
void termsOf(const ExprPtr& condition, std::vector<ExprPtr>& terms) {
  if (const auto* both = condition->as<Binary>(); both && both->op == BinaryOp::And) {
    termsOf(both->lhs, terms);
    termsOf(both->rhs, terms);
  } else {
    terms.push_back(condition);
  }
}

// For a term `a * var + b < E` (a > 0, b and E without var and reading no buffer): the first value of
// var for which it fails, ceil((E - b) / a) (C's division truncates, which is the ceiling for a
// negative quotient).
std::optional<ExprPtr> failsFrom(const Expr& term, const std::string& var) {
  const auto* less = term.as<Binary>();
  if (!less || less->op != BinaryOp::Lt || less->lhs->dtype != DType::I64) return std::nullopt;
  std::optional<int64_t> a = coefficientOf(*less->lhs, var), onRight = coefficientOf(*less->rhs, var);
  if (!a || *a <= 0 || onRight != 0) return std::nullopt;
  bool readsBuffers = false;
  forEachNode(term, [&](const Expr& node) { readsBuffers = readsBuffers || node.as<Load>(); });
  if (readsBuffers) return std::nullopt;
  ExprPtr b = simplifyIndex(rewrite(less->lhs, [&](const Expr& node) -> ExprPtr {
    const auto* axis = node.as<AxisVar>();
    return axis && axis->name == var ? i64(0) : nullptr;
  }));
  ExprPtr span = arithmetic(BinaryOp::Sub, less->rhs, b);
  if (*a == 1) return span;
  ExprPtr up = arithmetic(BinaryOp::Div, arithmetic(BinaryOp::Add, span, i64(*a - 1)), i64(*a));
  ExprPtr down = arithmetic(BinaryOp::Div, span, i64(*a));
  return ExprPtr(std::make_shared<Select>(std::make_shared<Binary>(DType::Bool, BinaryOp::Ge, span, i64(0)), up, down));
}

// The names of the Lets the pass adds to a function: `v__end`, `v__whole`, numbered where a loop over v
// came before (two loops over v may share a C++ scope).
class Names {
public:
  std::string fresh(const std::string& base) {
    std::string name = base;
    for (int k = 1; !used_.insert(name).second; ++k) name = base + std::to_string(k);
    return name;
  }

private:
  std::set<std::string> used_;
};

StmtPtr narrow(const StmtPtr& stmt, Names& names);

// `loop` with its guard's terms of that form moved into its end, and split where its body chooses a
// whole vector, when it has that shape; else null.
StmtPtr narrowLoop(const For& loop, Names& names) {
  const Stmt* body = loop.body.get();
  if (const auto* block = body->as<Block>(); block && block->stmts.size() == 1) body = block->stmts[0].get();
  const auto* guard = body->as<If>();
  if (loop.unroll || !guard) return nullptr;
  std::vector<ExprPtr> terms, kept;
  termsOf(guard->condition, terms);
  ExprPtr end = loop.end;
  for (const ExprPtr& term : terms) {
    if (std::optional<ExprPtr> bound = failsFrom(*term, loop.var))
      end = arithmetic(BinaryOp::Min, end, *bound);
    else
      kept.push_back(term);
  }
  if (kept.size() == terms.size()) return nullptr;
  StmtPtr inner = narrow(guard->body, names);
  if (!kept.empty()) inner = std::make_shared<If>(tile::conjunction(kept), inner);
  // The end is computed once, before the loop.
  std::string last = names.fresh(loop.var + "__end");
  std::vector<StmtPtr> stmts{std::make_shared<Let>(last, end)};
  ExprPtr endVar = std::make_shared<AxisVar>(last);
  const auto* choice = inner->as<IfAligned>();
  const auto* step = loop.step->as<IntImm>();
  std::optional<ExprPtr> whole;
  if (choice && choice->addresses.empty() && choice->condition && step && step->value == 1) {
    std::vector<ExprPtr> wholeTerms;
    termsOf(choice->condition, wholeTerms);
    whole = endVar;
    for (const ExprPtr& term : wholeTerms) {
      std::optional<ExprPtr> bound = failsFrom(*term, loop.var);
      if (!bound) {
        whole.reset();
        break;
      }
      whole = arithmetic(BinaryOp::Min, *whole, *bound);
    }
  }
  if (!whole) {
    stmts.push_back(std::make_shared<For>(loop.var, loop.begin, endVar, loop.step, inner, false, loop.rolled));
    return std::make_shared<Block>(stmts);
  }
  std::string split = names.fresh(loop.var + "__whole");
  ExprPtr splitVar = std::make_shared<AxisVar>(split);
  stmts.push_back(std::make_shared<Let>(split, *whole));
  stmts.push_back(std::make_shared<For>(loop.var, loop.begin, splitVar, loop.step, choice->aligned, false, loop.rolled));
  stmts.push_back(std::make_shared<For>(loop.var, arithmetic(BinaryOp::Max, loop.begin, splitVar), endVar, loop.step,
                                        choice->otherwise, false, loop.rolled));
  return std::make_shared<Block>(stmts);
}

StmtPtr narrow(const StmtPtr& stmt, Names& names) {
  auto inner = [&](const StmtPtr& s) { return narrow(s, names); };
  if (const auto* loop = stmt->as<For>())
    if (StmtPtr narrowed = narrowLoop(*loop, names)) return narrowed;
  return withChildren(stmt, inner);
}

}  // namespace

Program narrowGuardedLoops(const Program& program) {
  Program result = program;
  for (Function& function : result.functions) {
    Names names;
    function.body = narrow(function.body, names);
  }
  return result;
}

}  // namespace emmy::kernel
