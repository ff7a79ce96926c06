// The static performance report of `emmy build --stats` (no GPU needed): per CUDA kernel, the block and
// the occupancy its registers and shared memory allow on the target, and the instruction mix of its
// innermost loops; with sizes (`--size`), the grid, the bytes it must move and the flops it must do, the
// roofline bound on an H100/H200-class GPU and the issue time beside the memory time.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backend/nvrtc.h"
#include "compiler/pipeline.h"

namespace emmy {

// The lines to print after each kernel's resource line, in the order of `resources` (the kernels of
// every instance in `lowered`, in order): the occupancy, the instruction mix of its innermost loops (from
// `ptx`, performance/instruction_mix.h), and with `sizes` (may be empty) the grid, the roofline and the
// issue time beside the memory time.
std::vector<std::string> performanceReport(const std::vector<Lowered>& lowered, const std::vector<KernelResources>& resources,
                                           const std::string& ptx, const std::string& arch,
                                           const std::map<std::string, int64_t>& sizes);

// The static model's estimate of how long one kernel instance runs on an H200-class GPU, for ranking the
// candidates of `emmy tune --cost-model`: per CUDA kernel, the largest of its terms — the least bytes from
// memory, the bytes its threads request from L2, its shared-memory wavefronts (bank conflicts included,
// for the first warp's lanes), its instruction issue (the issue cycles per memory access of its innermost
// loops in the PTX, times the accesses its threads make) and its arithmetic (FP32, or the tensor cores'
// peak once its PTX uses them) — plus a tenth of its issue time when something else bounds it, divided by
// the part of the machine its grid keeps busy (waves of resident blocks) and by how well its resident warps
// hide latency (occupancy from ptxas) — but the memory term, where the loads a thread keeps in flight are
// known, runs its waves at the bandwidth they reach, tail and latency included — plus its barriers and a
// launch. A kernel that spills is ranked after every one that does not, and its summary says so. `compiled` (NVRTC with a cubin) may be null: then 32
// registers per thread, the shared memory the kernel declares, and no issue term. A ranking, not a
// prediction of measured times.
struct TimeEstimate {
  double seconds = 0;
  std::string summary;  // per CUDA kernel: blocks, waves, occupancy, what bounds it, spills
};
TimeEstimate estimateTime(const Lowered& lowered, const CudaCompileResult* compiled, const std::string& arch,
                          const std::map<std::string, int64_t>& sizes);

// What a kernel instance must do at given sizes: the least bytes its CUDA kernels move (each global tensor
// a kernel touches, once per kernel) and the flops they do, summed over its CUDA kernels. The numbers of
// the roofline lines above; `emmy bench` divides them by the time measured.
struct Work {
  double bytes = 0;
  double flops = 0;
};
Work instanceWork(const Lowered& lowered, const std::map<std::string, int64_t>& sizes);
// The same for the CUDA kernel `function` of `lowered` alone (nullopt: no such kernel).
std::optional<Work> kernelWork(const Lowered& lowered, const std::string& function, const std::map<std::string, int64_t>& sizes);

}  // namespace emmy
