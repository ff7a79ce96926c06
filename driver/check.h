// `emmy check`: runs the generated CUDA on the CPU (backend/sim) and compares every output with the
// reference evaluator of Tensor IR (spec section 6).
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "backend/sim/simulator.h"
#include "driver/import.h"
#include "ir/tensor/nodes.h"

namespace emmy {

struct CheckOptions {
  std::string file;
  std::string kernel;              // --kernel NAME or NAME<TYPE, ...>; empty: every kernel, every instance
  std::vector<std::string> sizes;  // --size N=64, repeated
  std::vector<std::string> defines;  // -D BM=64, repeated: schedule params
  std::string inputsDir;           // --inputs DIR: DIR/NAME.npy per input tensor and scalar
  std::string saveDir;             // --save DIR: DIR/NAME.npy per output of the generated code
  uint64_t seed = 0;               // --seed S, for inputs that are not read from files
  bool verbose = false;            // also print the host compiler's command and the time taken
  ModelImportOptions modelImport;  // --input, --name: for a TorchScript model
  sim::SimulationOptions simulation;
};

// The CUDA that `emmy build` writes for a kernel. The driver passes the lowering in, so that checking
// and building cannot drift apart.
using CudaGenerator = std::function<sim::CudaSource(const tensor::Kernel&)>;

// Runs the check and prints to `report` a line per kernel (its sizes) and one per output. Returns 0
// when every output of every kernel is within tolerance and no simulation reported a failure
// (deadlock, crash, timeout, an error of the host function), 1 otherwise or after errors in the source (printed as diagnostics). Throws UsageError for
// a bad option, a bad input file or inputs that do not fit the kernel (exit code 2).
//
// Inputs not read from files are random: std::mt19937_64 seeded with `seed` afresh for each kernel,
// drawing the inputs in declaration order, element by element: floats uniform in [-1, 1) (53 random
// bits), integers uniform in [-8, 8], bool true or false with equal chance. Scalars without a file take
// their default.
int runCheck(const CheckOptions& options, const CudaGenerator& generateCuda, std::FILE* report = stdout);

}  // namespace emmy
