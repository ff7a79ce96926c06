// Affine subscripts and the bounds proofs of index form: a read is accepted without `pad` only when its
// subscripts provably stay inside the tensor for every index in range and every size >= 1, using the
// conditions of the `where` branches around it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ir/tensor/nodes.h"

namespace emmy {

// sum(coefficient * index) + sum(coefficient * size monomial) + constant
struct AffineForm {
  std::map<std::string, int64_t> indices;
  std::map<std::vector<std::string>, int64_t> sizes;  // key: sorted size names of a monomial
  int64_t constant = 0;

  static AffineForm ofDim(const tensor::Dim& dim);
  static AffineForm ofPolynomial(const tensor::SizePolynomial& polynomial);
  AffineForm operator+(const AffineForm& other) const;
  AffineForm operator-(const AffineForm& other) const;
  AffineForm scaled(int64_t factor) const;
  bool hasIndices() const { return !indices.empty(); }
};

// The affine form of an integer expression over axis variables, size variables and integer immediates
// with + - and multiplication by constants (sizes may multiply sizes); nullopt for anything else.
std::optional<AffineForm> affineOf(const tensor::Expr& expr);

// Facts `F >= 0` implied when `condition` is true (taken) or false (not taken). Conjunctions of affine
// comparisons contribute; anything else contributes nothing, which is always safe.
void collectFacts(const tensor::Expr& condition, bool taken, std::vector<AffineForm>& facts);

class BoundsProver {
public:
  // `extents`: the range [0, extent) of every index in scope. `facts`: forms known to be >= 0.
  // `derivedSizes`: the kernel's, whose definitions stand in for them. `smallestSize`: 1 where a size of
  // 0 leaves nothing to prove (an index's range is empty), 0 for claims about dimensions themselves.
  BoundsProver(std::map<std::string, tensor::Dim> extents, std::vector<AffineForm> facts,
               const std::vector<tensor::DerivedSize>& derivedSizes, int64_t smallestSize = 1);

  // True when `form >= 0` holds for every index in range and every size >= smallestSize under the facts.
  bool provesNonNegative(const AffineForm& form) const;

private:
  bool provesByIntervals(const AffineForm& form) const;
  bool sizeFormNonNegative(AffineForm form) const;

  std::map<std::string, std::vector<AffineForm>> lowerBounds_, upperBounds_;  // size-only forms per index
  std::vector<AffineForm> facts_;
  const std::vector<tensor::DerivedSize>& derivedSizes_;
  int64_t smallestSize_;
};

}  // namespace emmy
