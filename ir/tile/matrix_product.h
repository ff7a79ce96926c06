// Which contractions a block-level product (`mma`, section 5; docs/schedules.md) computes: a sum over one
// axis k of f32(A) * f32(B), A and B of one type, each read from a tensor in global memory at subscripts
// whose last two are k and one output axis (m for A, n for B, in either order) and whose others use
// neither. f16 and bf16 operands run on the tensor cores (mma.sync), f32 ones on the CUDA cores (FFMA
// from registers). The order of the last two subscripts says how each operand's slices are copied into
// shared memory and read from there.
#pragma once

#include <set>
#include <string>
#include <variant>

#include "ir/tensor/nodes.h"

namespace emmy::tile {

struct ProductContraction {
  const tensor::Load* a = nullptr;  // indexed by m: the rows of the product
  const tensor::Load* b = nullptr;  // indexed by n: its columns
  std::string m, n, k;              // axis names of the stage (k: its reduction axis)
  DType dtype = DType::F16;         // of both operands: f16 or bf16 (tensor cores) or f32 (CUDA cores)
  bool aKContiguous = true;         // A's last subscript is k (else m)
  bool bKContiguous = true;         // B's last subscript is k (else n)
};

// A factor of the product as the operand it reads: X[...] in `f32(X[...])` or an f32 `X[...]`; null else.
const tensor::Load* productOperand(const tensor::ExprPtr& factor);

// The contraction `stage` computes with `rowAxis` as the product's m, or why a block-level product
// cannot compute it (a sentence that reads well after "S cannot run as a block-level product: ").
// `global` names the tensors that are in global memory (inputs and temporaries): only those can be
// copied asynchronously.
std::variant<ProductContraction, std::string> productContraction(const tensor::Stage& stage, const std::string& rowAxis,
                                                                 const std::set<std::string>& global);

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
