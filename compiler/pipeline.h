// The whole lowering of one kernel instance, pass by pass, in order. Each level is verified after the
// pass that produces it, and can be dumped after any pass (`emmy build --dump-after=PASS|all`).
#pragma once

#include <optional>
#include <ostream>
#include <string>

#include "backend/cuda/emit_cuda.h"
#include "ir/kernel/nodes.h"
#include "ir/loop/nodes.h"
#include "ir/tile/nodes.h"
#include "ir/tensor/nodes.h"

namespace emmy {

enum class Level { Tensor, Loop, Tile, Kernel };

struct PipelineOptions {
  Level stopAfter = Level::Kernel;
  std::string dumpAfter;           // a pass name, "all", or empty
  std::ostream* dump = nullptr;    // where dumps go
  // Debugging: the barrier that place-barriers leaves out (see kernel::placeBarriers), so that the
  // simulation's race detection can be seen at work.
  std::optional<int> dropBarrier;
};

struct Lowered {
  tensor::Kernel tensor;
  loop::Program loop;
  tile::Program tile;
  kernel::Program kernel;
};

// The CUDA files of every instance in `lowered` (each lowered to Kernel IR), for `sourceFile`.
cuda::GeneratedCuda emitCudaFiles(const std::vector<Lowered>& lowered, const std::string& sourceFile);

// The names of the passes, in order (for --dump-after).
const std::vector<std::string>& passNames();

Lowered lower(const tensor::Kernel& kernel, const PipelineOptions& options);

// `lower` of each kernel; the schedule errors of all of them, not only the first kernel's, are thrown
// together as one CompilationFailed.
std::vector<Lowered> lowerAll(const std::vector<tensor::Kernel>& kernels, const PipelineOptions& options);

}  // namespace emmy
