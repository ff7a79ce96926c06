// Comparing an output of the generated code with the reference evaluator's, as `emmy check` reports it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/tensor/nodes.h"
#include "support/dtype.h"
#include "support/value.h"

namespace emmy {

// The tolerance of a dtype (spec section 6): an element passes when |generated - reference| <=
// tolerance + tolerance * |reference|. Integers and bool compare exactly (tolerance 0).
double toleranceFor(DType dtype);

// The float dtype an output's value was computed in, whose tolerance it is held to: of the output's
// stage and of every stage it reads, the float dtype of lowest precision among their stored dtypes,
// reduction accumulators and float arithmetic and casts (`y: f64 = f64(f32 work)` is f32). The input data
// and the immediates, which the reference reads exactly as the generated code does, do not count. The
// output's own dtype when it is not a float.
DType computedPrecision(const tensor::Kernel& kernel, const std::string& output);

struct OutputComparison {
  std::string name;
  DType dtype = DType::F32;
  DType precision = DType::F32;  // whose tolerance applies: computedPrecision, or `dtype`
  std::vector<int64_t> shape;
  double maxAbsError = 0;
  double maxRelError = 0;  // relative to the reference, over the elements whose reference is not zero
  int64_t mismatches = 0;  // elements outside the tolerance
  // The element furthest outside the tolerance; meaningful when mismatches > 0.
  int64_t worstIndex = 0;
  Value worstGenerated, worstReference;

  bool ok() const { return mismatches == 0; }
};

// NaN matches NaN and an infinity matches the same infinity; any other NaN or infinity is a mismatch.
// The two buffers must have the same dtype and shape; the tolerance is `precision`'s (by default the dtype's).
OutputComparison compareOutput(const std::string& name, const Buffer& generated, const Buffer& reference,
                               std::optional<DType> precision = std::nullopt);

// One line: `y: max abs err 2.4e-07, max rel err 3.1e-07, tolerance 1e-04 (f32): ok` (`(f64 computed in
// f32)` where the precision is not the dtype's), or `FAILED` with the count of differing elements and the
// worst one's index and values.
std::string formatComparison(const OutputComparison& comparison);

}  // namespace emmy
