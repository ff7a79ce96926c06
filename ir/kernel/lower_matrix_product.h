// Tile IR's MatrixProduct spelled out per thread (part of the pass lower-tile-to-kernel): the ring of
// shared slices and its asynchronous copies, the fragments each warp loads with ldmatrix and multiplies
// with mma.sync (f16, bf16) or each lane loads with 16-byte shared loads and multiplies with FFMA (f32),
// and the epilogue applied to each accumulator where the layout puts it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ir/kernel/nodes.h"
#include "ir/tile/nodes.h"

namespace emmy::kernel {

// What the nest's lowering provides: a global tensor's flat index, and an expression with its global
// reads indexed flat.
struct GlobalIndexing {
  std::function<ExprPtr(const std::string& tensor, const std::vector<ExprPtr>& indices)> flatIndex;
  std::function<ExprPtr(const ExprPtr&)> lowerExpr;
  // That every index of a read is inside its tensor's dimension (the test of a padded read).
  std::function<ExprPtr(const std::string& tensor, const std::vector<ExprPtr>& indices)> inBounds;
};

StmtPtr lowerMatrixProduct(const tile::MatrixProduct& product, const GlobalIndexing& indexing);

}  // namespace emmy::kernel
