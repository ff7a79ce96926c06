// Which reductions a block-level scan (`scan`, docs/language_extensions.md) computes: a running
// reduction along one axis t of its stage, S[.., t, ..] = op over k < t + 1 (inclusive) or k < t
// (exclusive) of v(k), written `sum[k < t + 1](x[n, k])` or `cumsum(x, axis=1)`. Its one reduction axis
// k has t's extent, its term is where(k < t + c, v, identity) with v free of t, and op is sum, prod,
// max or min. A block of THREADS threads then takes the row in tiles of THREADS x ITEMS elements: each
// thread folds ITEMS consecutive ones, the threads scan their totals in shared memory, and each element
// gets the totals before it; work in proportion to the row, rather than the row's square that one
// reduction per element does.
#pragma once

#include <string>
#include <variant>

#include "ir/tensor/nodes.h"

namespace emmy::tile {

struct PrefixReduction {
  std::string t, k;  // the scanned axis of the stage and its reduction axis
  bool inclusive = true;
};

// The running reduction `stage` computes along its axis `axis`, or why it is none (a sentence that reads
// well after "S cannot run as a block-level scan: ").
std::variant<PrefixReduction, std::string> prefixReduction(const tensor::Stage& stage, const std::string& axis);

// The value v of a running reduction's term where(k < t + c, v, identity), in Tensor IR or Loop IR.
const tensor::ExprPtr& scannedValue(const tensor::Expr& term);

// A thread folds at most this many elements of a tile.
constexpr int64_t kMaxScanItems = 16;

}  // namespace emmy::tile
