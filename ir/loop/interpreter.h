// Runs a Loop IR program on the CPU, statement by statement. Tests compare it with the Tensor IR
// evaluator to show that fusion and the kernel boundaries keep the meaning.
#pragma once

#include <map>
#include <string>

#include "ir/loop/nodes.h"
#include "ir/tensor/evaluator.h"

namespace emmy::loop {

// The outputs, by name. Inputs are checked as the Tensor IR evaluator checks them.
std::map<std::string, Buffer> interpret(const Program& program, const tensor::EvaluationInputs& inputs);

}  // namespace emmy::loop
