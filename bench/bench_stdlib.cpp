// emmy_bench_stdlib: the device's copy bandwidth, then every kernel of the standard library, in every
// type, at the sizes of the performance targets (spec PIPELINE.md), timed on the GPU with CUDA events
// (check/gpu.h, as `emmy bench` does), each followed at once by PyTorch on the same work: eager,
// torch.compile, cuBLAS for the products and FlashAttention-2 for the attentions. Each measurement is
// printed as it is made and, with --json, written as one JSON object per line (bench/ARCHITECTURE.md);
// --table prints the table of such a file. A benchmark, not a test: without a GPU it says so and exits 0.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "check/gpu.h"
#include "check/profile_report.h"
#include "compiler/elaborate.h"
#include "frontend/frontend.h"
#include "runtime/device.h"
#include "runtime/torch_gpu.h"
#include "support/diagnostics.h"
#include "support/text.h"

namespace {

using namespace emmy;
using Json = nlohmann::ordered_json;
using Sizes = std::map<std::string, int64_t>;

// What the table holds an instance's speed against: the copy bandwidth ("memory"), or the FP32 or the
// tensor-core peak ("product", "attention").
constexpr const char* kMemory = "memory";
constexpr const char* kProduct = "product";
constexpr const char* kAttention = "attention";

struct BenchedKernel {
  const char* module;  // a module of the standard library, or a file of bench/ ("bench/device_copy.emmy")
  const char* name;
  const char* family;
  Sizes sizes;
  std::map<std::string, double> scalars;
  std::vector<std::string> types;  // empty: f32, f16 and bf16
  double (*flops)(const Sizes&);   // the conventional count; null: the static model's
};

double size(const Sizes& sizes, const char* name) { return static_cast<double>(sizes.at(name)); }

// The flops conventions of the performance targets: a product 2·M·N·K; an attention its two products,
// 4·B·H·S·L·E, the causal one half of that.
double matmulFlops(const Sizes& s) { return 2 * size(s, "M") * size(s, "N") * size(s, "K"); }
double bmmFlops(const Sizes& s) { return 2 * size(s, "B") * size(s, "M") * size(s, "N") * size(s, "K"); }
double linearFlops(const Sizes& s) { return 2 * size(s, "N") * size(s, "IN") * size(s, "OUT"); }
double mlpFlops(const Sizes& s) { return 2 * 2 * size(s, "N") * size(s, "D") * size(s, "H"); }
double attentionFlops(const Sizes& s) {
  return 4 * size(s, "B") * size(s, "H") * size(s, "S") * size(s, "L") * size(s, "E");
}
double causalFlops(const Sizes& s) { return 4 * size(s, "B") * size(s, "H") * size(s, "S") * size(s, "S") * size(s, "E") / 2; }

// The performance targets' sizes: memory-bound work moves at least 256 MiB (row kernels N·D = 2^26, D
// from 256 to 65536), products are 4096^3 (bmm the same flops), attention B=4, H=16, S=L=2048, E=64 and
// 128. In the targets' order, so that a run cut short has measured the first.
const std::vector<BenchedKernel> kKernels = {
    {"bench/device_copy.emmy", "device_copy", kMemory, {{"N", 1 << 27}}, {}, {}, nullptr},
    {"linalg.emmy", "transpose", kMemory, {{"M", 8192}, {"N", 8192}}, {}, {}, nullptr},
    {"nn.emmy", "softmax", kMemory, {{"N", 16384}, {"D", 4096}}, {}, {}, nullptr},
    {"nn.emmy", "softmax", kMemory, {{"N", 262144}, {"D", 256}}, {}, {"f32"}, nullptr},
    {"nn.emmy", "softmax", kMemory, {{"N", 1024}, {"D", 65536}}, {}, {"f32"}, nullptr},
    {"nn.emmy", "log_softmax", kMemory, {{"N", 16384}, {"D", 4096}}, {}, {}, nullptr},
    {"nn.emmy", "layernorm", kMemory, {{"N", 16384}, {"D", 4096}}, {}, {}, nullptr},
    {"nn.emmy", "rmsnorm", kMemory, {{"N", 16384}, {"D", 4096}}, {}, {}, nullptr},
    {"linalg.emmy", "matmul", kProduct, {{"M", 4096}, {"N", 4096}, {"K", 4096}}, {}, {}, matmulFlops},
    {"linalg.emmy", "bmm", kProduct, {{"B", 8}, {"M", 2048}, {"N", 2048}, {"K", 2048}}, {}, {}, bmmFlops},
    {"nn.emmy", "linear", kProduct, {{"N", 4096}, {"IN", 4096}, {"OUT", 4096}}, {}, {}, linearFlops},
    {"nn.emmy", "mlp", kProduct, {{"N", 4096}, {"D", 4096}, {"H", 4096}}, {}, {}, mlpFlops},
    {"nn.emmy", "attention", kAttention, {{"B", 4}, {"H", 16}, {"S", 2048}, {"L", 2048}, {"E", 64}}, {{"scale", 0.125}}, {}, attentionFlops},
    {"nn.emmy", "attention", kAttention, {{"B", 4}, {"H", 16}, {"S", 2048}, {"L", 2048}, {"E", 128}}, {{"scale", 0.08838834764831845}}, {"bf16"}, attentionFlops},
    {"nn.emmy", "causal_attention", kAttention, {{"B", 4}, {"H", 16}, {"S", 2048}, {"E", 64}}, {{"scale", 0.125}}, {}, causalFlops},
    {"nn.emmy", "causal_attention", kAttention, {{"B", 4}, {"H", 16}, {"S", 2048}, {"E", 128}}, {{"scale", 0.08838834764831845}}, {"bf16"}, causalFlops},
    {"nn.emmy", "attend", kMemory, {{"B", 4}, {"H", 16}, {"S", 1024}, {"L", 1024}, {"E", 64}}, {}, {}, nullptr},
};

const char* familyOf(const std::string& kernel) {
  for (const BenchedKernel& each : kKernels)
    if (kernel == each.name) return each.family;
  return kMemory;
}

std::filesystem::path benchFile(const std::string& name) { return std::filesystem::path(EMMY_BENCH_DIR) / name; }

std::filesystem::path moduleFile(const BenchedKernel& kernel) {
  constexpr std::string_view kBench = "bench/";
  std::string_view module = kernel.module;
  if (module.substr(0, kBench.size()) == kBench) return benchFile(std::string(module.substr(kBench.size())));
  return Frontend::defaultStdlibDir() / module;
}

// --json FILE: one object per line, flushed as written, so that a run cut short leaves whole lines.
class JsonLines {
public:
  explicit JsonLines(const std::string& path) : file_(path.empty() ? nullptr : std::fopen(path.c_str(), "w")) {
    if (!path.empty() && !file_) throw UsageError(fmt::format("cannot write {}: {}", path, std::strerror(errno)));
  }
  ~JsonLines() {
    if (file_) std::fclose(file_);
  }
  void write(const Json& line) {
    if (!file_) return;
    fmt::print(file_, "{}\n", line.dump());
    std::fflush(file_);
  }

private:
  std::FILE* file_;
};

// Adds what is known of a measurement's time and throughput to `line`.
void addTimes(Json& line, double median, double min, int repetitions, const Work& work, const Throughput& measured,
              const runtime::TorchClocks& clocks) {
  line["median_ms"] = median;
  line["min_ms"] = min;
  line["repetitions"] = repetitions;
  line["bytes"] = work.bytes;
  if (work.flops > 0) line["flops"] = work.flops;
  line["bytes_per_s"] = measured.bytesPerSecond;
  if (work.flops > 0) line["flops_per_s"] = measured.flopsPerSecond;
  if (measured.bandwidthFraction > 0) line["dram_fraction"] = measured.bandwidthFraction;
  if (measured.copyFraction > 0) line["copy_fraction"] = measured.copyFraction;
  if (measured.flopsFraction > 0) line["fp32_fraction"] = measured.flopsFraction;
  if (measured.tensorFraction > 0) line["tensor_fraction"] = measured.tensorFraction;
  if (clocks.smMHz > 0) {
    line["sm_clock_mhz"] = clocks.smMHz;
    line["memory_clock_mhz"] = clocks.memoryMHz;
  }
}

Json kernelLine(const BenchRecord& record) {
  Json line = {{"record", "kernel"},   {"kernel", record.kernel}, {"dtype", record.dtype},
               {"family", familyOf(record.kernel)}, {"sizes", record.sizes}, {"implementation", record.implementation},
               {"ok", !record.failure}};
  if (record.failure) {
    line[record.skipped ? "skipped" : "error"] = *record.failure;
  } else {
    addTimes(line, record.medianMilliseconds, record.minMilliseconds, record.repetitions, record.work, record.throughput,
             record.clocks);
    if (record.emmySpeedup > 0) line["emmy_speedup"] = record.emmySpeedup;
  }
  if (record.compileSeconds > 0) line["compile_s"] = record.compileSeconds;
  if (!record.sdpaBackend.empty()) line["sdpa_backend"] = record.sdpaBackend;
  return line;
}

Json deviceLine(const runtime::CudaDevice& device) {
  return {{"record", "device"},
          {"name", device.name},
          {"arch", device.arch()},
          {"sms", device.multiprocessors},
          {"sm_clock_max_mhz", device.smClockKHz / 1000.0},
          {"memory_clock_max_mhz", device.memoryClockKHz / 1000.0},
          {"bus_width_bits", device.busWidthBits},
          {"l2_bytes", device.l2Bytes},
          {"memory_bytes", device.memoryBytes},
          {"driver", fmt::format("{}.{}", device.driverVersion / 1000, device.driverVersion % 1000 / 10)},
          {"peak_bandwidth", device.peakBandwidth()},
          {"peak_fp32_flops", device.peakFp32Flops()},
          {"peak_tensor_flops", device.peakTensorFlops()}};
}

// The buffer each copy reads (and the one it writes): 1 GiB moved per copy.
constexpr int64_t kCopyBytes = int64_t{1} << 29;

// copy_float4.cu as the f32 instance of device_copy.emmy, `hostFunction`, so that the harness of `emmy
// run` runs it: NVRTC compiles the file's kernel; the host compile (EMMY_HOST_ONLY, against
// emmy_cuda_host.h, which launches kernels from NVRTC's module by name) compiles the file's launcher,
// reference_copy, which needs float4 only as a pointer type.
std::string referenceCopySource(const std::string& hostFunction) {
  return fmt::format(R"cuda(#ifndef __CUDACC_RTC__
struct float4;
#endif
{0}
#ifndef __CUDACC_RTC__
extern "C" const char* emmy_last_error(void) {{ return "N is not a multiple of 4, or reference_copy failed"; }}
extern "C" int {1}(const float* x, float* y, int64_t N, cudaStream_t stream) {{
  return N % 4 != 0 || reference_copy(x, y, N * 4, stream) != 0;
}}
#endif
)cuda",
                     kReferenceCopySource, hostFunction);
}

// The reference float4 kernel copying kCopyBytes, timed and its copy checked, through runtime::GpuKernel.
runtime::GpuRun referenceCopy(const runtime::CudaDevice& device, const runtime::Timing& timing) {
  Diagnostics diagnostics;
  std::optional<std::vector<tensor::Kernel>> kernels =
      elaborateFile(benchFile("device_copy.emmy").string(), "device_copy<f32>",
                    /*requireTypes=*/true, {}, diagnostics);
  EMMY_INTERNAL_ASSERT(kernels && kernels->size() == 1, "bench/device_copy.emmy does not compile:\n{}", diagnostics.render());
  const tensor::Kernel& kernel = kernels->front();
  tensor::EvaluationInputs inputs = prepareInputs(kernel, "", 0, {{"N", kCopyBytes / 4}});
  runtime::GpuRun run;
  try {
    runtime::GpuKernel program(device, kernel, {"reference_copy_float4", referenceCopySource(kernel.instanceName()), ""});
    run = program.run(inputs, timing);
  } catch (const InternalError& error) {
    run.failure = error.what();
  }
  const Buffer& source = inputs.tensors.at("x");
  if (!run.failure && std::memcmp(run.outputs.at("y").data(), source.data(), source.byteSize()) != 0)
    run.failure = "the copy differs from its source";
  return run;
}

// The device's copy bandwidth, the 100% of memory-bound work, measured two ways and written as "copy"
// lines: cudaMemcpy device to device (PyTorch's copy_) and the reference float4 kernel, bytes read plus
// written over the median time. Returns the faster, or 0 when neither ran.
double measureCopyBandwidth(const runtime::CudaDevice& device, runtime::TorchSession* torch,
                            const runtime::Timing& timing, JsonLines& json) {
  double best = 0;
  const Work moved{2.0 * kCopyBytes, 0};
  auto report = [&](const char* implementation, const std::optional<std::string>& failure, double median, double min,
                    const runtime::TorchClocks& clocks) {
    Json line = {{"record", "copy"}, {"implementation", implementation}, {"ok", !failure}};
    if (failure) {
      fmt::print("copy ({}): FAILED: {}\n", implementation, *failure);
      line["error"] = *failure;
    } else {
      Throughput measured = throughput(moved, median, device);
      fmt::print("copy ({}): {:.4f} ms, {:.2f} TB/s (median of {})\n", implementation, median,
                 measured.bytesPerSecond / 1e12, timing.repetitions);
      addTimes(line, median, min, timing.repetitions, moved, measured, clocks);
      best = std::max(best, measured.bytesPerSecond);
    }
    std::fflush(stdout);
    json.write(line);
  };
  runtime::GpuRun reference = referenceCopy(device, timing);
  report("reference_copy_float4", reference.failure, reference.medianMilliseconds(), reference.minMilliseconds(),
         torch ? torch->clocks() : runtime::TorchClocks{});
  if (torch && !torch->unavailable()) {
    runtime::TorchTiming copy = torch->copy(kCopyBytes, timing, std::chrono::seconds(120));
    report("cudaMemcpy (torch copy_)", copy.ok ? std::nullopt : std::optional(copy.error), copy.medianMilliseconds,
           copy.minMilliseconds, copy.clocks);
  }
  return best;
}

// --table FILE: the human table of a JSON lines file, whole or cut short.
int printTable(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError(fmt::format("cannot read {}", path));
  Json device, torch;
  std::vector<Json> copies;
  std::vector<std::string> order;            // instances, as first measured
  std::map<std::string, std::map<std::string, Json>> measured;  // instance -> implementation -> line
  for (std::string text; std::getline(in, text);) {
    Json line = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!line.is_object()) continue;  // a line cut short
    std::string record = line.value("record", "");
    if (record == "device") device = line;
    if (record == "torch") torch = line;
    if (record == "copy") copies.push_back(line);
    if (record != "kernel") continue;
    std::vector<std::string> sizes;
    for (const auto& [name, value] : line["sizes"].items()) sizes.push_back(fmt::format("{}={}", name, value.get<int64_t>()));
    std::string instance = fmt::format("{:<16} {:<4} {}", line.value("kernel", ""), line.value("dtype", ""), join(sizes, " "));
    if (!measured.count(instance)) order.push_back(instance);
    measured[instance][line.value("implementation", "")] = line;
  }

  if (device.is_object())
    fmt::print("{} ({}, {} SMs, driver {}); PyTorch {}\n", device.value("name", ""), device.value("arch", ""),
               device.value("sms", 0), device.value("driver", ""),
               !torch.is_object() ? "not started" : torch.contains("version") ? torch.value("version", "")
                                                                             : "unavailable: " + torch.value("unavailable", ""));
  for (const Json& copy : copies)
    fmt::print("copy bandwidth, {}: {}\n", copy.value("implementation", ""),
               copy.value("ok", false) ? fmt::format("{:.2f} TB/s", copy.value("bytes_per_s", 0.0) / 1e12)
                                       : "FAILED: " + copy.value("error", ""));
  fmt::print("share: Emmy's, of the faster copy (memory-bound work), else of the tensor-core peak (f16, bf16) or\n"
             "FP32 peak (f32); x: Emmy's speed against the baseline (its time over Emmy's; above 1, Emmy is faster)\n\n");

  auto time = [](const Json& line) {
    if (line.is_null()) return std::string("-");
    if (!line.value("ok", false)) return std::string(line.contains("skipped") ? "skipped" : "FAILED");
    return fmt::format("{:.3f}", line.value("median_ms", 0.0));
  };
  auto speedup = [](const Json& line) {
    return line.is_object() && line.contains("emmy_speedup") ? fmt::format("{:.2f}x", line.value("emmy_speedup", 0.0))
                                                             : std::string("-");
  };
  auto share = [](const Json& emmy) {
    if (!emmy.is_object() || !emmy.value("ok", false)) return std::string("-");
    std::string dtype = emmy.value("dtype", "");
    if (std::string(familyOf(emmy.value("kernel", ""))) == kMemory)
      return emmy.contains("copy_fraction") ? fmt::format("{:.0f}% copy", 100 * emmy.value("copy_fraction", 0.0)) : "-";
    if (dtype != "f32" && emmy.contains("tensor_fraction"))
      return fmt::format("{:.0f}% TC", 100 * emmy.value("tensor_fraction", 0.0));
    return emmy.contains("fp32_fraction") ? fmt::format("{:.0f}% FP32", 100 * emmy.value("fp32_fraction", 0.0)) : "-";
  };
  size_t width = std::string("instance").size();
  for (const std::string& instance : order) width = std::max(width, instance.size());
  fmt::print("{:<{}} {:>9} {:>9} {:>9} {:>6} {:>10} {:>6} {:>15} {:>9} {:>6}  {}\n", "instance", width, "emmy ms", "share",
             "eager ms", "x", "compile ms", "x", "library", "ms", "x", "clocks (SM/memory MHz), SDPA");
  std::vector<std::string> notes;
  for (const std::string& instance : order) {
    std::map<std::string, Json>& lines = measured[instance];
    auto line = [&](const char* implementation) { return lines.count(implementation) ? lines[implementation] : Json(); };
    const char* libraryName = lines.count("cublas") ? "cublas" : "flash-attention";
    Json emmy = line("emmy"), eager = line("torch eager"), compiled = line("torch.compile"), library = line(libraryName);
    std::string clocks = emmy.is_object() && emmy.contains("sm_clock_mhz")
                             ? fmt::format("{:.0f}/{:.0f}", emmy.value("sm_clock_mhz", 0.0), emmy.value("memory_clock_mhz", 0.0))
                             : "";
    if (eager.is_object() && eager.contains("sdpa_backend")) clocks += " SDPA " + eager.value("sdpa_backend", "");
    fmt::print("{:<{}} {:>9} {:>9} {:>9} {:>6} {:>10} {:>6} {:>15} {:>9} {:>6}  {}\n", instance, width, time(emmy), share(emmy),
               time(eager), speedup(eager), time(compiled), speedup(compiled), library.is_null() ? "-" : libraryName,
               time(library), speedup(library), clocks);
    for (const auto& [implementation, each] : lines) {
      if (each.value("ok", false)) continue;
      std::string why = each.value("skipped", each.value("error", ""));
      std::replace(why.begin(), why.end(), '\n', ' ');
      notes.push_back(fmt::format("{} {}: {}", instance, implementation, why));
    }
  }
  for (const std::string& note : notes) fmt::print("- {}\n", note);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times the device's copy and every standard-library kernel on the GPU, each against PyTorch"};
  BenchSettings settings;
  settings.timing = {3, 10, true};
  settings.torchCompileSeconds = 30;
  settings.torchCompileBudget = 120;
  std::string only, jsonPath, tablePath;
  std::vector<std::string> types = {"f32", "f16", "bf16"};
  app.add_option("--repeat", settings.timing.repetitions, "timed calls per measurement (default 10)")->check(CLI::Range(1, 10000));
  app.add_option("--warmup", settings.timing.warmup, "untimed calls first (default 3)")->check(CLI::Range(0, 10000));
  app.add_option("--kernel", only, "only this kernel (softmax, matmul, ...)");
  app.add_option("--types", types, "element types (default f32 f16 bf16)");
  app.add_flag("!--no-flush-l2", settings.timing.flushL2, "do not overwrite the L2 cache between calls");
  app.add_flag("!--no-torch", settings.compareWithTorch, "do not time PyTorch");
  app.add_option("--compile-seconds", settings.torchCompileSeconds,
                 "torch.compile: seconds one compilation may take (default 30; 0: no torch.compile)")
      ->check(CLI::Range(0, 3600));
  app.add_option("--compile-budget", settings.torchCompileBudget,
                 "torch.compile: seconds all compilations may take together (default 120; 0: no limit)")
      ->check(CLI::Range(0, 36000));
  app.add_option("--json", jsonPath, "also write each measurement as a line of JSON to FILE");
  app.add_option("--table", tablePath, "print the table of a --json FILE (no GPU needed), and nothing else");
  CLI11_PARSE(app, argc, argv);

  try {
    if (!tablePath.empty()) return printTable(tablePath);
    runtime::DeviceProbe probe = runtime::probeCudaDevice();
    if (!probe.device) {
      fmt::print("no CUDA device found ({}): nothing to measure\n", probe.reason);
      return 0;
    }
    JsonLines json(jsonPath);
    json.write(deviceLine(*probe.device));
    std::optional<runtime::TorchSession> torch;
    if (settings.compareWithTorch) {
      settings.torch = &torch.emplace();  // PyTorch imports while the copy kernel compiles
    }
    settings.copyBytesPerSecond = measureCopyBandwidth(*probe.device, settings.torch, settings.timing, json);
    if (settings.torch) {
      const std::optional<std::string>& why = settings.torch->unavailable();
      json.write(why ? Json{{"record", "torch"}, {"unavailable", *why}}
                     : Json{{"record", "torch"}, {"version", settings.torch->torchVersion()}, {"device", settings.torch->device()}});
    }
    settings.record = [&json](const BenchRecord& record) { json.write(kernelLine(record)); };

    std::vector<BenchCase> cases;
    for (const BenchedKernel& kernel : kKernels) {
      if (!only.empty() && only != kernel.name) continue;
      for (const std::string& type : types) {
        if (!kernel.types.empty() && std::find(kernel.types.begin(), kernel.types.end(), type) == kernel.types.end())
          continue;
        BenchCase benchCase;
        benchCase.file = moduleFile(kernel).string();
        benchCase.kernel = fmt::format("{}<{}>", kernel.name, type);
        for (const auto& [name, value] : kernel.sizes) benchCase.sizes.push_back(fmt::format("{}={}", name, value));
        for (const auto& [name, value] : kernel.scalars) benchCase.scalars.push_back(fmt::format("{}={}", name, value));
        if (kernel.flops) benchCase.flops = kernel.flops(kernel.sizes);
        cases.push_back(std::move(benchCase));
      }
    }
    return runBench(cases, settings);
  } catch (const std::exception& e) {
    fmt::print(stderr, "emmy_bench_stdlib: {}\n", e.what());
    return 1;
  }
}
