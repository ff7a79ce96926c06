// emmy_bench_stdlib: every kernel of the standard library, in every type, at sizes large enough to
// matter, timed on the GPU with CUDA events (check/gpu.h, as `emmy bench` does) against PyTorch eager on
// the GPU (cuBLAS behind torch.matmul and F.linear), with GB/s, TFLOP/s and the fraction of the device's
// peak. A benchmark, not a test: without a GPU it says so and exits 0.
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "check/gpu.h"
#include "frontend/frontend.h"
#include "runtime/device.h"
#include "support/diagnostics.h"

namespace {

using namespace emmy;

struct StdlibKernel {
  const char* module;
  const char* name;
  std::vector<std::string> sizes;
  std::map<std::string, double> scalars;
};

// Memory-bound kernels move hundreds of MB (far more than the L2 cache); matrix products do tens to
// hundreds of GFLOP.
const std::vector<StdlibKernel> kKernels = {
    {"nn.emmy", "softmax", {"N=8192", "D=4096"}, {}},
    {"nn.emmy", "log_softmax", {"N=8192", "D=4096"}, {}},
    {"nn.emmy", "layernorm", {"N=8192", "D=4096"}, {}},
    {"nn.emmy", "rmsnorm", {"N=8192", "D=4096"}, {}},
    {"nn.emmy", "linear", {"N=4096", "IN=4096", "OUT=4096"}, {}},
    {"nn.emmy", "mlp", {"N=2048", "D=2048", "H=8192"}, {}},
    {"nn.emmy", "attention", {"B=4", "H=16", "S=1024", "L=1024", "E=64"}, {{"scale", 0.125}}},
    {"nn.emmy", "causal_attention", {"B=4", "H=16", "S=1024", "E=64"}, {{"scale", 0.125}}},
    {"nn.emmy", "attend", {"B=4", "H=16", "S=1024", "L=1024", "E=64"}, {}},
    {"linalg.emmy", "matmul", {"M=4096", "N=4096", "K=4096"}, {}},
    {"linalg.emmy", "bmm", {"B=16", "M=1024", "N=1024", "K=1024"}, {}},
    {"linalg.emmy", "transpose", {"M=8192", "N=8192"}, {}},
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times every standard-library kernel on the GPU against PyTorch eager"};
  BenchSettings settings;
  settings.timing = {5, 30, true};
  std::string only;
  std::vector<std::string> types = {"f32", "f16", "bf16"};
  app.add_option("--repeat", settings.timing.repetitions, "timed calls per kernel (default 30)")->check(CLI::Range(1, 10000));
  app.add_option("--warmup", settings.timing.warmup, "untimed calls first (default 5)")->check(CLI::Range(0, 10000));
  app.add_option("--kernel", only, "only this kernel (softmax, matmul, ...)");
  app.add_option("--types", types, "element types (default f32 f16 bf16)");
  app.add_flag("!--no-flush-l2", settings.timing.flushL2, "do not overwrite the L2 cache between calls");
  app.add_flag("!--no-torch", settings.compareWithTorch, "do not time PyTorch");
  CLI11_PARSE(app, argc, argv);

  runtime::DeviceProbe probe = runtime::probeCudaDevice();
  if (!probe.device) {
    fmt::print("no CUDA device found ({}): nothing to measure\n", probe.reason);
    return 0;
  }
  std::vector<BenchCase> cases;
  for (const StdlibKernel& kernel : kKernels) {
    if (!only.empty() && only != kernel.name) continue;
    for (const std::string& type : types) {
      BenchCase benchCase;
      benchCase.file = (Frontend::defaultStdlibDir() / kernel.module).string();
      benchCase.kernel = fmt::format("{}<{}>", kernel.name, type);
      benchCase.sizes = kernel.sizes;
      for (const auto& [name, value] : kernel.scalars) benchCase.scalars.push_back(fmt::format("{}={}", name, value));
      cases.push_back(std::move(benchCase));
    }
  }
  try {
    return runBench(cases, settings);
  } catch (const std::exception& e) {
    fmt::print(stderr, "emmy_bench_stdlib: {}\n", e.what());
    return 1;
  }
}
