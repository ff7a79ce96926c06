#include "check/profile_report.h"

#include <algorithm>

#include <fmt/format.h>

#include "backend/nvrtc.h"
#include "backend/sim/simulator.h"
#include "compiler/pipeline.h"
#include "performance/instruction_mix.h"
#include "performance/performance.h"
#include "support/text.h"

namespace emmy {

namespace {

std::string kilobytes(double bytes) { return fmt::format("{:.1f} KB", bytes / 1e3); }

double ratio(uint64_t part, uint64_t whole) { return whole ? static_cast<double>(part) / static_cast<double>(whole) : 0; }

// The issue estimate of each CUDA kernel from its PTX (empty without NVRTC): its innermost loops' issue
// cycles per 4-byte word of global memory, against DRAM's, and per FP32 instruction, against the FP32
// pipe's floor; the whole kernel's when it has no loop.
std::map<std::string, std::string> issueEstimates(const std::string& cuda, const std::string& fileName) {
  std::map<std::string, std::string> estimates;
  std::string whyNot;
  if (!nvrtcAvailable(&whyNot)) return estimates;
  CudaCompileResult compiled = compileCuda(cuda, fileName, "sm_90", /*wantCubin=*/false);
  if (!compiled.ok) return estimates;
  for (const KernelMix& mix : instructionMix(compiled.ptx)) {
    double cycles = 0, words = 0, fp32 = 0;
    auto add = [&](const LoopMix& loop) {
      cycles += loop.issueCycles;
      words += loop.words;
      if (auto found = loop.instructions.find(InstructionClass::Fp32); found != loop.instructions.end()) fp32 += found->second;
    };
    for (const LoopMix& loop : mix.loops)
      if (loop.innermost) add(loop);
    if (mix.loops.empty()) add(mix.whole);
    std::vector<std::string> parts;
    if (words > 0)
      parts.push_back(fmt::format("{:.3f} issue cycles per 4-byte word of global memory (DRAM: {:.3f})", cycles / (32 * words),
                                  kDramCyclesPerWord));
    if (fp32 > 0)
      parts.push_back(fmt::format("{:.2f} per FP32 warp instruction (the FP32 pipe's floor: 0.25)", cycles / fp32));
    if (parts.empty()) parts.push_back(fmt::format("{:.2f} issue cycles per warp iteration", cycles));
    estimates[mix.name] = join(parts, "; ") + (mix.loops.empty() ? ", the whole kernel" : ", its innermost loops on sm_90");
  }
  return estimates;
}

void printKernelProfile(const sim::KernelProfile& kernel, std::optional<double> leastBytes, const std::string& issue,
                        const char* indent, std::FILE* report) {
  sim::AccessCounters global = kernel.total(true), shared = kernel.total(false);
  fmt::print(report, "{}{}: {} launch(es), {} blocks of {} threads, {} barriers released\n", indent, kernel.name,
             kernel.launches, kernel.blocks, kernel.threadsPerBlock, kernel.barriers);
  fmt::print(report, "{}  global: {} requests, {} sectors, {:.2f} sectors per request (ideal {:.2f}); {} requested, {} distinct{}\n",
             indent, global.requests, global.sectors, ratio(global.sectors, global.requests),
             ratio(global.idealSectors, global.requests), kilobytes(static_cast<double>(kernel.requestedGlobalBytes())),
             kilobytes(static_cast<double>(kernel.distinctGlobalBytes)),
             leastBytes ? fmt::format(", least traffic {} (requested {:.2f}x of it)", kilobytes(*leastBytes),
                                      *leastBytes > 0 ? static_cast<double>(kernel.requestedGlobalBytes()) / *leastBytes : 0)
                        : "");
  fmt::print(report, "{}  shared: {} requests, {} wavefronts (ideal {}: {} from bank conflicts)\n", indent, shared.requests,
             shared.wavefronts, shared.idealWavefronts, shared.wavefronts - shared.idealWavefronts);
  uint64_t instructions = global.executions + shared.executions, divergent = global.divergent + shared.divergent;
  fmt::print(report, "{}  divergent: {} of {} warp memory instructions ran with some running lanes off\n", indent, divergent,
             instructions);
  if (!issue.empty()) fmt::print(report, "{}  issue: {}\n", indent, issue);
}

void printSites(const sim::KernelProfile& kernel, std::FILE* report) {
  fmt::print(report, "      {:>5}  {:<15} {:>9} {:>9} {:>13} {:>15} {:>7} {:>9}  {}\n", "line", "access", "instr.", "requests",
             "sectors/req", "wavefronts/req", "lanes", "divergent", "code");
  for (const sim::AccessSite& site : kernel.sites) {
    const sim::AccessCounters& c = site.counters;
    std::string access = fmt::format("{} {} {}B", site.global ? "global" : "shared", site.store ? "store" : "load", site.bytes);
    std::string perRequest = site.global ? fmt::format("{:.2f} ({:.2f})", ratio(c.sectors, c.requests), ratio(c.idealSectors, c.requests))
                                         : "-";
    std::string wavefronts = site.global ? "-" : fmt::format("{:.2f} ({:.2f})", ratio(c.wavefronts, c.requests),
                                                             ratio(c.idealWavefronts, c.requests));
    std::string code = site.code.size() > 60 ? site.code.substr(0, 57) + "..." : site.code;
    fmt::print(report, "      {:>5}  {:<15} {:>9} {:>9} {:>13} {:>15} {:>7.1f} {:>9}  {}\n",
               site.line ? std::to_string(site.line) : "?", access, c.executions, c.requests, perRequest, wavefronts,
               ratio(c.lanes, c.executions), c.divergent, code);
  }
}

}  // namespace

std::optional<Baseline> profileBaseline(const tensor::Kernel& kernel, const std::map<std::string, int64_t>& sizes,
                                        double leastBytes) {
  Baseline baseline;
  if (kernel.name == "softmax" || kernel.name == "log_softmax" || kernel.name == "layernorm" || kernel.name == "rmsnorm") {
    int64_t rows = sizes.at("N"), cols = sizes.at("D");
    baseline.cuFileName = "softmax_warp_row.cu";
    baseline.source = kReferenceSoftmaxSource;
    baseline.description = fmt::format("bench/reference/softmax_warp_row.cu, f32, {} rows of {}", rows, cols);
    baseline.leastBytes = 8.0 * static_cast<double>(rows * cols);
    baseline.profile = sim::profileProgram(
        baseline.cuFileName, baseline.source,
        fmt::format("#include \"softmax_warp_row.cu\"\nint main() {{\n  float *x, *y;\n"
                    "  if (cudaMalloc((void**)&x, {0}) || cudaMalloc((void**)&y, {0})) return 1;\n"
                    "  return reference_softmax(x, y, {1}, {2}, 0);\n}}\n",
                    std::max<int64_t>(4 * rows * cols, 1), rows, cols));
    return baseline;
  }
  if (kernel.name == "matmul" && kernel.typeArguments.size() == 1 && kernel.typeArguments[0].second == DType::F32) {
    int64_t m = sizes.at("M"), n = sizes.at("N"), k = sizes.at("K");
    baseline.cuFileName = "sgemm_tiled.cu";
    baseline.source = kReferenceSgemmSource;
    baseline.description = fmt::format("bench/reference/sgemm_tiled.cu, 128 x 128 tiles, 8 x 8 per thread, M={} N={} K={}", m, n, k);
    baseline.leastBytes = 4.0 * static_cast<double>(m * k + k * n + m * n);
    baseline.profile = sim::profileProgram(
        baseline.cuFileName, baseline.source,
        fmt::format("#include \"sgemm_tiled.cu\"\nint main() {{\n  float *a, *b, *c;\n"
                    "  if (cudaMalloc((void**)&a, {0}) || cudaMalloc((void**)&b, {1}) || cudaMalloc((void**)&c, {2})) return 1;\n"
                    "  return reference_sgemm(a, b, c, {3}, {4}, {5}, 0);\n}}\n",
                    std::max<int64_t>(4 * m * k, 1), std::max<int64_t>(4 * k * n, 1), std::max<int64_t>(4 * m * n, 1), m, n, k));
    return baseline;
  }
  if (kernel.name == "transpose") {
    // A copy of the same bytes: each element read once and written once.
    int64_t bytes = static_cast<int64_t>(leastBytes / 2) / 16 * 16;
    baseline.cuFileName = "copy_float4.cu";
    baseline.source = kReferenceCopySource;
    baseline.description = fmt::format("bench/reference/copy_float4.cu, a copy of {} in 16-byte vectors", kilobytes(static_cast<double>(bytes)));
    baseline.leastBytes = 2.0 * static_cast<double>(bytes);
    baseline.profile = sim::profileProgram(
        baseline.cuFileName, baseline.source,
        fmt::format("#include \"copy_float4.cu\"\nint main() {{\n  void *in, *out;\n"
                    "  if (cudaMalloc(&in, {0}) || cudaMalloc(&out, {0})) return 1;\n"
                    "  return reference_copy(in, out, {1}, 0);\n}}\n",
                    std::max<int64_t>(bytes, 16), bytes));
    return baseline;
  }
  return std::nullopt;
}

void printProfile(const tensor::Kernel& kernel, const cuda::GeneratedCuda& cuda, const sim::Profile& profile,
                  const std::map<std::string, int64_t>& sizes, bool stdlib, std::FILE* report) {
  Lowered lowered = lower(kernel, PipelineOptions{});
  std::map<std::string, std::string> issue = issueEstimates(cuda.source, cuda.baseName + ".cu");
  fmt::print(report, "  profile (CPU simulation, counted per warp instruction as the hardware groups accesses; "
                     "docs/profile.md defines each counter):\n");
  if (profile.kernels.empty()) {
    fmt::print(report, "    no kernel ran: every output is empty\n");
    return;
  }
  double leastTotal = 0;
  for (const sim::KernelProfile& k : profile.kernels) {
    std::optional<Work> work = kernelWork(lowered, k.name, sizes);
    if (work) leastTotal += work->bytes;
    printKernelProfile(k, work ? std::optional<double>(work->bytes) : std::nullopt, issue.count(k.name) ? issue[k.name] : "",
                       "    ", report);
    printSites(k, report);
  }
  if (!stdlib) return;
  std::optional<Baseline> baseline = profileBaseline(kernel, sizes, leastTotal);
  if (!baseline) {
    fmt::print(report, "  baseline: none here (tests/gpu/run.sh measures it against cuBLAS or PyTorch's attention on a "
                       "GPU)\n");
    return;
  }
  fmt::print(report, "  baseline ({}):\n", baseline->description);
  std::map<std::string, std::string> baselineIssue = issueEstimates(baseline->source, baseline->cuFileName);
  for (const sim::KernelProfile& k : baseline->profile.kernels)
    printKernelProfile(k, baseline->leastBytes, baselineIssue.count(k.name) ? baselineIssue[k.name] : "", "    ", report);
}

}  // namespace emmy
