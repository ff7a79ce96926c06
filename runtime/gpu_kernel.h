// Runs a kernel's generated code on the GPU: its kernels compiled by NVRTC for the device, its host
// function compiled as host C++ against emmy_cuda_host.h, together with a generated harness that reads
// the inputs from files, calls the host function (and times it with CUDA events), and writes the outputs.
// The harness runs in a child process, so that a kernel's fault or hang can neither take Emmy down nor
// stall it (backend/harness.h). This is what `emmy run`, `emmy bench` and `emmy tune` run.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/emit_cuda.h"
#include "backend/harness.h"
#include "runtime/device.h"

namespace emmy::runtime {

struct GpuOptions {
  std::chrono::seconds compileTimeout{300};
  std::chrono::seconds runTimeout{120};  // one run, every timed call included
};

// How a run times the host function; by default it does not (a correctness run).
struct Timing {
  int warmup = 0;        // untimed calls first
  int repetitions = 0;   // timed calls, each between two CUDA events on the host function's stream
  bool flushL2 = false;  // before each call, outside the events, overwrite twice the device's L2 cache
};

struct GpuRun : KernelRun {
  // One per timed call, in order: from the host function's first launch (or allocation) to the end of its
  // last kernel.
  std::vector<double> milliseconds;
  double medianMilliseconds() const;  // the middle one, or the mean of the two middle ones; 0 if none
  double minMilliseconds() const;     // 0 if none
};

// The folder holding emmy_cuda_host.h, emmy_cuda_driver.h and torch_stdlib.py: $EMMY_RUNTIME_DIR if set,
// else PREFIX/share/emmy/runtime next to an installed emmy, else this source tree's runtime/.
std::filesystem::path defaultRuntimeDir();

// What NVRTC compiles for a device of compute capability `capability`: a cubin for it when NVRTC knows it
// (`supported`), else PTX of the newest architecture NVRTC knows below it, which the driver compiles
// when it loads the module. Throws NoCudaDevice when NVRTC knows none at or below it.
struct ModuleTarget {
  std::string arch;  // "sm_90"
  bool cubin = true;
};
ModuleTarget moduleTarget(int capability, const std::vector<int>& supported);

// The generated code of one kernel instance, compiled for `device` and ready to run on any number of
// inputs. It lives in a temporary folder that goes away with the object.
class GpuKernel : public CompiledKernel {
public:
  // Compiles `source` (NVRTC for the kernels, harness::hostCompiler for the host function and the harness). A
  // .cu that does not compile is a bug in Emmy: InternalError, with the compiler's messages and the folder
  // where the files were kept. Throws CudaUnavailable without NVRTC, UsageError when the runtime's headers
  // or the host compiler are missing.
  GpuKernel(const CudaDevice& device, const tensor::Kernel& kernel, const cuda::GeneratedCuda& source,
            const GpuOptions& options = {});
  ~GpuKernel() override;
  GpuKernel(const GpuKernel&) = delete;
  GpuKernel& operator=(const GpuKernel&) = delete;

  // One call of the host function, each launch waited for, so that a fault names its kernel; the outputs
  // are those of this call. Then, with `timing`, the timed calls.
  GpuRun run(const tensor::EvaluationInputs& inputs, const Timing& timing) const;
  KernelRun run(const tensor::EvaluationInputs& inputs) const override { return run(inputs, Timing{}); }

  const std::string& compileCommand() const override { return compileCommand_; }
  double compileSeconds() const override { return compileSeconds_; }
  const ModuleTarget& target() const { return target_; }

private:
  CudaDevice device_;
  tensor::Kernel kernel_;
  GpuOptions options_;
  ModuleTarget target_;
  std::unique_ptr<TemporaryFolder> folder_;  // the sources, the module and the compiled harness
  std::string compileCommand_;
  double compileSeconds_ = 0;
};

}  // namespace emmy::runtime
