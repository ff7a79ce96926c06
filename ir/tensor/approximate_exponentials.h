// Exponentials whose rounding no result can show: an exp or exp2 whose value reaches only f16 and bf16
// outputs, through arithmetic whose result moves with its operands (no comparison, no rounding to an
// integer, no index), is computed by the hardware's approximation (ex2.approx: a few units in the last
// place of f32, and the rounding of its argument times log2 e), about ten instructions fewer than expf.
// The 16-bit rounding at the end is 2^13 times coarser, so a result can differ only where the exact
// value lies within that error of a rounding boundary, by one unit in its last place: within what
// `emmy check` allows, as any reordering of f32 arithmetic is. Values that reach an f32 output, an
// integer output or a comparison keep expf.
#pragma once

#include "ir/tensor/nodes.h"

namespace emmy::tensor {

Kernel approximateExponentials(const Kernel& kernel);

}  // namespace emmy::tensor
