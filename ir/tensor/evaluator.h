// The reference meaning of Tensor IR: a naive, obviously correct evaluator. Every lowering is compared
// against it, and it is compared against LibTorch.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>

#include "ir/tensor/nodes.h"
#include "support/value.h"

namespace emmy::tensor {

// Inputs that do not fit the kernel (a missing tensor, a wrong rank, two sizes that disagree). The
// message names what is wrong, e.g. "size N is 3 in x (dimension 0) but 4 in w (dimension 0)".
class EvaluationError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

struct EvaluationInputs {
  std::map<std::string, Buffer> tensors;       // by input name
  std::map<std::string, Value> scalars;        // by scalar name; a missing one takes its default
  std::map<std::string, int64_t> sizes;        // optional: sizes no input determines
};

// Every size of the kernel, from the inputs' shapes (and `given`); throws EvaluationError on a conflict
// or when a size is determined by nothing.
std::map<std::string, int64_t> bindSizes(const Kernel& kernel, const std::map<std::string, Buffer>& tensors,
                                         const std::map<std::string, int64_t>& given);

// Adds the value of every derived size to `sizes`, which hold the others; throws EvaluationError for a
// division by zero or a dimension that comes out negative.
void bindDerivedSizes(const Kernel& kernel, std::map<std::string, int64_t>& sizes);

// Every scalar of the kernel: the value given (of exactly its dtype) or its default; throws
// EvaluationError for an unknown name, a wrong dtype or a missing value without a default.
std::map<std::string, Value> bindScalars(const Kernel& kernel, const std::map<std::string, Value>& given);

int64_t evaluateDim(const Dim& dim, const std::map<std::string, int64_t>& sizes);

// Runs the kernel; returns every output by name.
std::map<std::string, Buffer> evaluate(const Kernel& kernel, const EvaluationInputs& inputs);

}  // namespace emmy::tensor
