// PyTorch on the GPU, as the second opinion of `emmy run` and the baseline of `emmy bench` for the
// standard library's kernels. Emmy never links LibTorch (and Debian's is CPU-only), so this runs
// torch_stdlib.py (beside emmy_cuda_host.h) with python3 ($EMMY_PYTHON to choose another): a batch of
// requests per process (`emmy run`), or a session that answers them one at a time (`emmy bench`), since
// importing torch takes seconds.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/gpu_kernel.h"

namespace emmy::runtime {

// One kernel instance of the standard library, for torch_stdlib.py.
struct TorchRequest {
  std::string kernel;  // "layernorm"
  std::string dtype;   // "bf16": the instance's T
  std::map<std::string, int64_t> sizes;
  std::map<std::string, double> scalars;
  std::map<std::string, int64_t> params;  // the instance's integer arguments (stride = 2, GROUPS = 3, ...)
  // Run: read the inputs as NAME.npy from inputsDir and write the outputs as NAME.npy to outputsDir.
  std::string inputsDir, outputsDir;
  // Bench, when timing.repetitions > 0: time PyTorch eager on random inputs instead, then its baselines.
  Timing timing;
  int compileSeconds = 0;  // bench: also torch.compile, its compilation abandoned after this long; 0: not tried
};

// The device's clocks right after a measurement, as NVML reads them; 0 where unknown.
struct TorchClocks {
  double smMHz = 0, memoryMHz = 0;
};

// One timed piece of work in PyTorch.
struct TorchTiming {
  bool ok = false;
  std::string error;  // when not ok
  double medianMilliseconds = 0, minMilliseconds = 0;  // bench and copy
  TorchClocks clocks;
};

// A baseline beside eager: "torch.compile", "cublas" (a product kernel's matrix products alone, through
// torch.matmul) or "flash-attention" (SDPA held to FlashAttention-2).
struct TorchBaseline : TorchTiming {
  std::string name;
  bool skipped = false;       // not ok because it was not tried, or given up (`error` says why), not an error
  double compileSeconds = 0;  // torch.compile: the time its compilation took, or was given before it was abandoned
};

// A request's result: the run, or PyTorch eager's timing and the baselines of the kernel.
struct TorchResult : TorchTiming {
  std::string sdpaBackend;  // the attentions: "flash", "efficient", "cudnn" or "math", as SDPA picks it
  std::vector<TorchBaseline> baselines;
};

struct TorchBatch {
  // Why there is no result at all: no python3, no PyTorch, no CUDA device for it, a crash.
  std::optional<std::string> unavailable;
  std::string torchVersion, device;  // as PyTorch says
  std::vector<TorchResult> results;  // one per request, in order
};

// The JSON list torch_stdlib.py reads.
std::string torchRequestsJson(const std::vector<TorchRequest>& requests);

// What torch_stdlib.py wrote, for `expected` requests; a result file that does not fit is `unavailable`.
TorchBatch parseTorchResults(const std::string& json, size_t expected);

// The command line: python, the script, the two files.
std::vector<std::string> torchCommand(const std::filesystem::path& requests, const std::filesystem::path& results);

// Runs the batch; never throws for an environment without PyTorch (that is `unavailable`).
TorchBatch runTorch(const std::vector<TorchRequest>& requests, std::chrono::seconds timeout = std::chrono::seconds(600));

// torch_stdlib.py as a session (`--serve`): one python3 process answers requests one at a time on a
// socket, so that `emmy bench` times PyTorch on each kernel right after Emmy's code on it and imports
// torch only once. The process starts with the session (torch imports while Emmy compiles) and ends with
// it; one that dies or overruns a request is killed, the request answered with why, and the next request
// starts a fresh one. Never throws for an environment without PyTorch (that is `unavailable`).
class TorchSession {
public:
  TorchSession();
  ~TorchSession();
  TorchSession(const TorchSession&) = delete;
  TorchSession& operator=(const TorchSession&) = delete;

  // Why no request can be answered (no python3, no PyTorch, no CUDA device for it), once the process
  // has said whether it started (this waits for that); empty while PyTorch is there.
  const std::optional<std::string>& unavailable();
  const std::string& torchVersion() const { return torchVersion_; }  // as PyTorch says, once started
  const std::string& device() const { return device_; }

  // A bench request (timing.repetitions > 0), answered within `timeout`.
  TorchResult bench(const TorchRequest& request, std::chrono::seconds timeout);
  // cudaMemcpy device to device (`copy_`) of `bytes` between two tensors, timed as `timing` says.
  TorchTiming copy(int64_t bytes, const Timing& timing, std::chrono::seconds timeout);
  // The clocks now (all 0 without NVML or PyTorch).
  TorchClocks clocks();

private:
  struct Process;
  // The result line for one request line, or a TorchResult that says why there is none.
  TorchResult exchange(const std::string& request, std::chrono::seconds timeout);
  void start();
  // Stops the process that failed for `why`; returns why, with the end of its output. One that never
  // started makes the session unavailable.
  std::string end(const std::string& why);

  std::unique_ptr<Process> process_;
  std::optional<std::string> unavailable_;
  std::string torchVersion_, device_;
};

}  // namespace emmy::runtime
