// The Loop IR of one nest, as lower_tensor_to_loops.cpp builds it, taken apart for the schedule: the
// root's loops, the stages computed among them, and the root's own computation.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/loop/nodes.h"

namespace emmy::tile {

// One stage's computation: `store`, or for a reduction: init, the reduction loops around update, and
// finalize (which stores the result).
struct Computation {
  const tensor::Stage* stage = nullptr;
  const loop::Store* store = nullptr;
  std::string accumulator;
  DType accumulatorType = DType::F32;
  const loop::Store* init = nullptr;
  std::vector<const loop::For*> reductionLoops;
  const loop::Store* update = nullptr;
  const loop::Store* finalize = nullptr;
};

// A member: a stage Loop IR computes in place, inside the root's first `depth` loops.
struct Member {
  Computation computation;
  size_t depth;  // it needs the root's first `depth` axes
};

// A stage computed whole before the root's loops in Loop IR (`compute ... at` a stage that is not
// computed in place by default): Tile IR computes only the part the root reads in its loop.
struct WholeMember {
  Computation computation;
  std::vector<std::string> axisVars;  // its Loop IR variables, one per axis
};

struct NestParts {
  std::vector<std::string> rootVars;  // the Loop IR variable of each root axis
  std::vector<WholeMember> wholes;
  std::vector<Member> members;
  // Outputs stored beside the root's store, element by element (lower_tensor_to_loops.cpp, step 5).
  std::vector<Computation> companions;
  Computation root;
};

NestParts parseNest(const tensor::Kernel& kernel, const loop::LoopNest& nest);

// Does `expr` read `tensor`?
bool reads(const tensor::Expr& expr, const std::string& tensor);
// Does `computation` read `tensor` (in its store, its update or its finalize)?
bool reads(const Computation& computation, const std::string& tensor);

// A root that is elementwise over one reduction computed in place at all of its axes (a contraction and
// its epilogue: `acc[m, n] = sum[k](..)` then `c[m, n] = T(acc[m, n]) + b[n]`) is scheduled as one
// reduction: the root's loops are its axes and the reduction's, and its own expression is applied to
// each result. That reduction, if the nest has one (and its reduction axes do not share a name with the
// root's axes, which would make the root's loops ambiguous).
const Member* epilogueReduction(const NestParts& parts);

// The root's computation with `folded` (from epilogueReduction) as its reduction: `folded`'s init,
// loops and update, and as finalize the root's store reading the reduction's result. The store is
// owned by `finalize`.
Computation withEpilogue(const NestParts& parts, const Member& folded, std::shared_ptr<loop::Store>& finalize);

// Online softmax. A reduction `R = sum[l](exp(X - M) * g)` whose M is a member `M = max[l](Y)` over the
// same loops needs M, that is a whole pass over l, before it can start. Keeping a running maximum of Y
// instead, and multiplying what R (and every other such sum) has accumulated by exp(old - new) each
// time the maximum grows, computes them all in the one pass of R's loops (the flash-attention
// recurrence). This describes that pass, for the root's reduction `folded` (see epilogueReduction): it
// exists when M is read only as exp(X - M), by `folded` and by sums over the same loops that only the
// root reads. Expressions use the Loop IR variables of `folded`'s loops.
struct OnlineSoftmax {
  // The running maximum: M's accumulator, initialised to -inf, and the values Y whose maximum it keeps.
  Computation max;
  tensor::ExprPtr maxOf;
  // The other sums (the softmax's denominator): their computations and, per sum, its term
  // (exp(X - M) or exp(X - M) * g) with M replaced by `shiftedMax`.
  std::vector<Computation> sums;
  std::vector<tensor::ExprPtr> sumTerms;
  tensor::ExprPtr rootTerm;  // `folded`'s term, likewise
  tensor::ExprPtr shiftedMax;  // shiftedMaximum of the running maximum
  bool approximate = false;    // the root term's exp is approximated, and so may the rescale factor be
};

// A running maximum with -inf read as 0, so that exp(X - shifted) is 0 rather than NaN while every X
// so far is -inf (a row masked so far), and exp(old - shifted) rescales by 0 when the first finite X
// comes.
tensor::ExprPtr shiftedMaximum(const tensor::ExprPtr& max);
// exp(running - shiftedMaximum(next)): the factor that rescales the sums of a running maximum as it moves
// to `next`, in the hardware's approximation where the sums' terms are (`approximatesExp`).
tensor::ExprPtr rescaleFactor(const tensor::ExprPtr& running, const tensor::ExprPtr& next, bool approximate);
// Whether `term` computes an exponential in the hardware's approximation (approximate_exponentials.h).
bool approximatesExp(const tensor::Expr& term);

std::optional<OnlineSoftmax> onlineSoftmax(const NestParts& parts, const Member& folded);

// The term a reduction `acc = acc (op) term` adds; null when its update has another form.
tensor::ExprPtr reductionTerm(const Computation& computation);
// `computation`'s expression over its reduction loops, with their variables renamed to `loops`'; null
// when the loops differ in number or extent.
tensor::ExprPtr overLoops(const tensor::ExprPtr& expr, const Computation& computation, const std::vector<const loop::For*>& loops);
// A sum's term `exp(X - M)` or `exp(X - M) * g`, or either under a condition free of M, with M (the stage
// `max`) read nowhere else, as the same term with `shiftedMax` for M; null when it has another form.
tensor::ExprPtr termOver(const tensor::ExprPtr& term, const std::string& max, const tensor::ExprPtr& shiftedMax);

}  // namespace emmy::tile
