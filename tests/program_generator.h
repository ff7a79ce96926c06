// Random well-formed .emmy programs with random schedules, for the `[generator]` test
// (generator_tests.cpp): one kernel over rows and columns (and an inner size for a matrix product) made
// of random statements in index and whole-tensor form (every builtin and cast, every dtype with
// promotion, integer division and wrapping, broadcasting, reductions with one or several indices and
// bounded ones, affine reads under `where` guards and through `pad`, `fn` definitions and calls, stdlib
// kernel calls, scalar parameters, several outputs) around a core whose schedule is drawn from the legal
// space of random_schedules.h, sometimes with random directives that may be illegal. Names are drawn at
// random, hostile ones included (C++ and CUDA words, the compiler's own names).
//
// Values stay where the reference and the generated code must agree within the tolerance: float
// magnitudes are bounded (tanh around what grows), and what is discontinuous (comparisons, floor, ceil,
// %, casts to integers, argmax) only sees values both compute exactly (reads, integers).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace emmy::testing {

struct GeneratorOptions {
  // Names that are C++ or CUDA words, the generated code's own names, cache- and accumulator-shaped
  // names.
  bool hostileNames = true;
  // Sizes of 0 among the size sets (issue 12, section 2).
  bool zeroSizes = true;
  // `argmax` and `argmin` (whole-tensor and index form).
  bool argmax = true;
  // Reductions whose index carries its bound: `sum[k < d + 1](..)`, `max[k < 3](pad(..)[..])`.
  bool boundedReductions = true;
  // Outputs of dtype f64 (which may hold f32 work).
  bool f64Outputs = true;
  // Statements after the core read the stages its schedule computes at a loop of another.
  bool sharedComputedStages = true;
  // A reduction in the chain's stage that its schedule may compute at a loop of the output.
  bool computeAtReductions = true;
};

struct GeneratedProgram {
  uint64_t seed = 0;
  std::string source;  // the whole .emmy file
  std::string kernel;  // the one kernel it defines
  // Ragged size sets to check it at; each binds every size of the kernel.
  std::vector<std::map<std::string, int64_t>> sizes;
  // The schedule holds directives drawn without regard to legality: a clean diagnostic is a valid
  // outcome (an internal error never is).
  bool scheduleMayBeRefused = false;
};

// The same seed and options give the same program.
GeneratedProgram generateProgram(uint64_t seed, const GeneratorOptions& options);

}  // namespace emmy::testing
