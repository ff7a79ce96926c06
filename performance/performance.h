// The static performance report of `emmy build --stats` (no GPU needed): per CUDA kernel, the block and
// the occupancy its registers and shared memory allow on the target; with sizes (`--size`), the grid,
// the bytes it must move and the flops it must do, and the roofline bound on an H100/H200-class GPU.
// Nothing here measures or estimates a time beyond that bound.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backend/nvrtc.h"
#include "compiler/pipeline.h"

namespace emmy {

// The lines to print after each kernel's resource line, in the order of `resources` (the kernels of
// every instance in `lowered`, in order). `sizes` may be empty: then only the block and occupancy.
std::vector<std::string> performanceReport(const std::vector<Lowered>& lowered, const std::vector<KernelResources>& resources,
                                           const std::string& arch, const std::map<std::string, int64_t>& sizes);

// The static model's estimate of how long one kernel instance runs on an H200-class GPU, for ranking the
// candidates of `emmy tune --cost-model`: per CUDA kernel, the largest of the roofline terms (the least
// bytes from memory, the bytes its threads request from L2 and from shared memory, its FP32 flops), divided
// by the part of the machine its grid keeps busy (waves of resident blocks) and by how well its resident
// warps hide latency (occupancy from `resources`, ptxas's report; null: 32 registers per thread and the
// shared memory the kernel declares), plus its barriers and a launch. A ranking, not a prediction of measured times.
struct TimeEstimate {
  double seconds = 0;
  std::string summary;  // per CUDA kernel: blocks, waves, occupancy and what bounds it
};
TimeEstimate estimateTime(const Lowered& lowered, const std::vector<KernelResources>* resources, const std::string& arch,
                          const std::map<std::string, int64_t>& sizes);

// What a kernel instance must do at given sizes: the least bytes its CUDA kernels move (each global tensor
// a kernel touches, once per kernel) and the flops they do, summed over its CUDA kernels. The numbers of
// the roofline lines above; `emmy bench` divides them by the time measured.
struct Work {
  double bytes = 0;
  double flops = 0;
};
Work instanceWork(const Lowered& lowered, const std::map<std::string, int64_t>& sizes);

}  // namespace emmy
