// PyTorch on the GPU, as the second opinion of `emmy run` and the baseline of `emmy bench` for the
// standard library's kernels. Emmy never links LibTorch (and Debian's is CPU-only), so this runs
// torch_stdlib.py (beside emmy_cuda_host.h) with python3 ($EMMY_PYTHON to choose another), one batch of
// requests per process, since importing torch takes seconds.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
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
  // Run: read the inputs as NAME.npy from inputsDir and write the outputs as NAME.npy to outputsDir.
  std::string inputsDir, outputsDir;
  // Bench, when timing.repetitions > 0: time PyTorch eager on random inputs instead.
  Timing timing;
};

struct TorchResult {
  bool ok = false;
  std::string error;  // when not ok
  double medianMilliseconds = 0, minMilliseconds = 0;  // bench
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

}  // namespace emmy::runtime
