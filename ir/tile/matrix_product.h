// Which contractions a block-level product (`mma`, section 5; docs/schedules.md) computes: a sum of
// f32(A) * f32(B), A and B of one type, each read from a tensor in global memory, over the rows m, the
// columns n and the depth k of the product. Each of m, n and k is one axis of the stage, or several that
// `fuse` made one loop of (an implicit GEMM: a convolution's output pixels, its channels and taps). A
// reads the axes of m and k, B those of n and k, neither the other's. f16 and bf16 operands run on the
// tensor cores (mma.sync), f32 ones on the CUDA cores (FFMA from registers).
//
// An operand's slices are copied into shared memory 16 bytes at a time where they are contiguous in
// memory (its flat index steps by one along the slice's rows: `a[m, k]`, or a weight `w[o, c, kh, kw]`
// read at k fused from (c, kh, kw)), and gathered an element at a time elsewhere (`x[n, c, i - 1 + kh,
// j - 1 + kw]`, with the elements outside x 0, or the elements a mask leaves out).
#pragma once

#include <map>
#include <set>
#include <string>
#include <variant>

#include "ir/tensor/nodes.h"
#include "ir/tile/schedule_model.h"

namespace emmy::tile {

struct ProductContraction {
  const tensor::Load* a = nullptr;  // reads m: the rows of the product
  const tensor::Load* b = nullptr;  // reads n: its columns
  std::set<std::string> m, n, k;    // axis names of the stage (k: its reduction axes)
  DType dtype = DType::F16;         // of both operands: f16 or bf16 (tensor cores) or f32 (CUDA cores)
  bool aKContiguous = true;         // A's slices are laid out along k (else along m)
  bool bKContiguous = true;         // B's slices are laid out along k (else along n)
  // The last two subscripts are k and the operand's own axis (one each), its others use neither, and the
  // read is not padded: the operands of a plain (batched) matrix product.
  bool aPlain = true, bPlain = true;
  // Of a masked product, `where(mask, f32(A) * f32(B), 0)`: the mask, on the operand whose axes it reads
  // (B where it reads only k), which is then read as 0 where it is false.
  tensor::ExprPtr aMask, bMask;
};

// The product a sum adds up: `x * y`, or `where(mask, x * y, 0)` (a transposed convolution's taps that
// fall between its input's elements), with the mask in `*mask` (null where it always holds); null where
// `term` is neither.
const tensor::Binary* summedProduct(const tensor::ExprPtr& term, tensor::ExprPtr* mask);

// A factor of the product as the operand it reads: X[...] in `f32(X[...])` or an f32 `X[...]`; null else.
const tensor::Load* productOperand(const tensor::ExprPtr& factor);

// The contraction `stage` computes over the rows `rowAxes` and the columns `colAxes` (its pure axes),
// or why a block-level product cannot compute it (a sentence that reads well after "S cannot run as a
// block-level product: "). `global` names the tensors that are in global memory (inputs and
// temporaries): only those can be copied asynchronously.
std::variant<ProductContraction, std::string> productContraction(const tensor::Stage& stage, const std::set<std::string>& rowAxes,
                                                                 const std::set<std::string>& colAxes,
                                                                 const std::set<std::string>& global);

// The axes of a stage that its loop or axis `name` runs over: `name` itself for an axis; for a loop that
// `fuse` made, the axes fused into it (through the fuses and splits that made it), each with its value
// over `value`, the loop's: a fused (a, b) is a = value / extent(b), b = value % extent(b). `extents`
// gives every loop's and axis's extent (Tile IR's StageLoops); without it the values are null. Empty
// where a loop under it covers only part of an axis (split before it was fused).
std::map<std::string, tensor::ExprPtr> axesUnder(const std::vector<LoopDerivation>& derivations, const std::string& name,
                                                 const tensor::ExprPtr& value,
                                                 const std::map<std::string, tensor::ExprPtr>* extents,
                                                 const std::set<std::string>& stageAxes);

// The mma.sync shape: m16n8k16. A warp tile is a multiple of 16 along m and n (fragments of B are
// loaded two n-tiles at a time), the depth of a block's slice a multiple of 16.
constexpr int64_t kMmaRows = 16, kMmaCols = 8, kMmaDepth = 16;
// The elements of one 16-byte copy and one ldmatrix row.
constexpr int64_t kMatrixRowElements = 8;

// The f32 product on the CUDA cores: a warp's 32 lanes form kLaneRows x kLaneCols, each lane holding
// results in 4 x 4 groups kLaneRows * 4 rows and kLaneCols * 4 columns apart, so that its operands are
// 16-byte shared reads, and the lanes of a quarter-warp read one row of A and 128 bytes of B. A warp
// tile is then a multiple of 16 rows and 32 columns; k goes one shared row (of both operands) a step.
constexpr int64_t kLaneRows = 4, kLaneCols = 8, kLaneGroup = 4;
// The k of one lane group of the transposing copies (an f32 operand whose k is contiguous in memory).
constexpr int64_t kTransposeDepth = 8;
inline bool onTensorCores(DType operands) { return operands != DType::F32; }

}  // namespace emmy::tile
