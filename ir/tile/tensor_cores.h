// Which contractions the tensor cores can compute (`mma`, section 5; docs/schedules.md): a sum over one
// axis k of f32(A) * f32(B), A and B of f16 or bf16 (both the same), each read from a tensor in global
// memory at subscripts whose last two are k and one output axis (m for A, n for B, in either order) and
// whose others use neither. The order of those two says how each operand's tile is laid out in shared
// memory and read into fragments (ldmatrix, with .trans where m or n is the contiguous one).
#pragma once

#include <set>
#include <string>
#include <variant>

#include "ir/tensor/nodes.h"

namespace emmy::tile {

struct TensorCoreContraction {
  const tensor::Load* a = nullptr;  // indexed by m: the rows of the product
  const tensor::Load* b = nullptr;  // indexed by n: its columns
  std::string m, n, k;              // axis names of the stage (k: its reduction axis)
  DType dtype = DType::F16;         // of both operands
  bool aKContiguous = true;         // A's last subscript is k (else m)
  bool bKContiguous = true;         // B's last subscript is k (else n)
};

// The contraction `stage` computes with `rowAxis` as the product's m, or why the tensor cores cannot
// compute it (a sentence that ends "…: not on tensor cores" reads well after it). `global` names the
// tensors that are in global memory (inputs and temporaries): only those can be copied asynchronously.
std::variant<TensorCoreContraction, std::string> tensorCoreContraction(const tensor::Stage& stage,
                                                                       const std::string& rowAxis,
                                                                       const std::set<std::string>& global);

// The mma.sync shape: m16n8k16. A warp tile is a multiple of 16 along m and n (fragments of B are
// loaded two n-tiles at a time), the depth of a block's slice a multiple of 16.
constexpr int64_t kMmaRows = 16, kMmaCols = 8, kMmaDepth = 16;
// The elements of one 16-byte copy and one ldmatrix row.
constexpr int64_t kMatrixRowElements = 8;

}  // namespace emmy::tile
