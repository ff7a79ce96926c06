// The counters of `emmy check --profile` (backend/sim/profile.h, docs/profile.md) on hand-written CUDA
// whose counts are known by arithmetic: each snippet is profiled in the simulation and every counter
// compared with the number the hardware's rules give.
#include <string>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "backend/sim/simulator.h"
#include "check/check.h"
#include "compiler/pipeline.h"
#include "frontend/frontend.h"

using namespace emmy;

namespace {

// Profiles `kernels` (a .cu text) launched by `launches` (statements in main, with buffers a and b of
// 1 MiB each from cudaMalloc).
sim::Profile profileOf(const std::string& kernels, const std::string& launches) {
  std::string main = fmt::format(R"cpp(#include "snippet.cu"
int main() {{
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, 1 << 20) || cudaMalloc(&b, 1 << 20)) return 1;
  {}
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}}
)cpp",
                                 launches);
  return sim::profileProgram("snippet.cu", kernels, main);
}

const sim::KernelProfile& kernelNamed(const sim::Profile& profile, const std::string& name) {
  for (const sim::KernelProfile& kernel : profile.kernels)
    if (kernel.name == name) return kernel;
  FAIL("no kernel " << name << " in the profile");
  throw;
}

// The one site of `kernel` with this kind of access.
const sim::AccessSite& siteOf(const sim::KernelProfile& kernel, bool global, bool store) {
  const sim::AccessSite* found = nullptr;
  for (const sim::AccessSite& site : kernel.sites)
    if (site.global == global && site.store == store) {
      REQUIRE(found == nullptr);
      found = &site;
    }
  REQUIRE(found != nullptr);
  return *found;
}

}  // namespace

TEST_CASE("a coalesced float4 load takes 4 sectors per request: a quarter warp's 128 bytes", "[profile]") {
  sim::Profile profile = profileOf(R"cpp(
__global__ void copy4(const float4* __restrict__ in, float4* __restrict__ out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = in[i];
}
)cpp",
                                   "EMMY_LAUNCH(copy4, dim3(3), dim3(64), 0, (const float4*)a, (float4*)b);");
  const sim::KernelProfile& kernel = kernelNamed(profile, "copy4");
  CHECK(kernel.launches == 1);
  CHECK(kernel.blocks == 3);
  CHECK(kernel.threadsPerBlock == 64);
  const sim::AccessSite& load = siteOf(kernel, true, false);
  CHECK(load.bytes == 16);
  CHECK(load.line == 4);
  CHECK(load.code == "out[i] = in[i];");
  CHECK(load.counters.executions == 6);  // 6 warps, one instruction each
  CHECK(load.counters.requests == 24);   // 4 per warp
  CHECK(load.counters.sectors == 96);    // 4 per request
  CHECK(load.counters.idealSectors == 96);
  CHECK(load.counters.lanes == 192);
  CHECK(load.counters.divergent == 0);
  CHECK(siteOf(kernel, true, true).counters.sectors == 96);
  CHECK(kernel.distinctGlobalBytes == 2 * 192 * 16);
  CHECK(kernel.requestedGlobalBytes() == 2 * 192 * 16);
}

TEST_CASE("global sectors per request: 4-byte accesses coalesced, strided and broadcast", "[profile]") {
  sim::Profile profile = profileOf(R"cpp(
__global__ void strided(const float* __restrict__ in, float* __restrict__ out, int stride) {
  out[threadIdx.x] = in[threadIdx.x * stride];
}
)cpp",
                                   "EMMY_LAUNCH(strided, dim3(1), dim3(32), 0, (const float*)a, (float*)b, 1);\n"
                                   "  EMMY_LAUNCH(strided, dim3(1), dim3(32), 0, (const float*)a, (float*)b, 8);\n"
                                   "  EMMY_LAUNCH(strided, dim3(1), dim3(32), 0, (const float*)a, (float*)b, 0);");
  const sim::KernelProfile& kernel = kernelNamed(profile, "strided");
  CHECK(kernel.launches == 3);
  const sim::AccessSite& load = siteOf(kernel, true, false);
  CHECK(load.counters.requests == 3);
  // Stride 1: 128 bytes in 4 sectors. Stride 8 floats (32 bytes): a sector per lane. Stride 0: one sector.
  CHECK(load.counters.sectors == 4 + 32 + 1);
  CHECK(load.counters.idealSectors == 4 + 4 + 1);
  CHECK(siteOf(kernel, true, true).counters.sectors == 3 * 4);
}

TEST_CASE("shared wavefronts: stride 33 has no conflict, stride 32 is 32-way, a broadcast is one pass", "[profile]") {
  sim::Profile profile = profileOf(R"cpp(
__global__ void banks(float* __restrict__ out, int stride) {
  EMMY_SHARED(float, tile, 32 * 33);
  tile[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = tile[threadIdx.x * stride];
}
)cpp",
                                   "EMMY_LAUNCH(banks, dim3(1), dim3(32), 0, (float*)a, 33);\n"
                                   "  EMMY_LAUNCH(banks, dim3(1), dim3(32), 0, (float*)a, 32);\n"
                                   "  EMMY_LAUNCH(banks, dim3(1), dim3(32), 0, (float*)a, 0);");
  const sim::KernelProfile& kernel = kernelNamed(profile, "banks");
  CHECK(kernel.barriers == 3);
  const sim::AccessSite& load = siteOf(kernel, false, false);
  CHECK(load.counters.requests == 3);
  CHECK(load.counters.wavefronts == 1 + 32 + 1);
  CHECK(load.counters.idealWavefronts == 3);
  CHECK(siteOf(kernel, false, true).counters.wavefronts == 3);
}

TEST_CASE("shared wavefronts of 8- and 16-byte accesses are counted per half and quarter warp", "[profile]") {
  sim::Profile profile = profileOf(R"cpp(
__global__ void wide(double* __restrict__ out, int stride) {
  EMMY_SHARED(double, tile, 32 * 32);
  tile[threadIdx.x * stride] = 1.0;
  __syncthreads();
  out[threadIdx.x] = tile[threadIdx.x * stride];
}
)cpp",
                                   "EMMY_LAUNCH(wide, dim3(1), dim3(32), 0, (double*)a, 1);\n"
                                   "  EMMY_LAUNCH(wide, dim3(1), dim3(32), 0, (double*)a, 16);");
  const sim::AccessSite& load = siteOf(kernelNamed(profile, "wide"), false, false);
  // Two half-warp requests per instruction. Stride 1: each half reads 128 contiguous bytes, one pass.
  // Stride 16 doubles (128 bytes): the 16 lanes of a half hit the same two banks, 16 passes.
  CHECK(load.counters.requests == 4);
  CHECK(load.counters.wavefronts == 2 * 1 + 2 * 16);
  CHECK(load.counters.idealWavefronts == 4);
}

TEST_CASE("divergence: a warp whose lanes skip an access is counted once per instruction", "[profile]") {
  sim::Profile profile = profileOf(R"cpp(
__global__ void guarded(const float* __restrict__ in, float* __restrict__ out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i];
}
)cpp",
                                   "EMMY_LAUNCH(guarded, dim3(2), dim3(64), 0, (const float*)a, (float*)b, 100);");
  const sim::AccessSite& load = siteOf(kernelNamed(profile, "guarded"), true, false);
  // Warps of lanes 0-31, 32-63, 64-95 are whole; the fourth has lanes 96-99 only.
  CHECK(load.counters.executions == 4);
  CHECK(load.counters.lanes == 100);
  CHECK(load.counters.divergent == 1);
  CHECK(load.counters.sectors == 4 + 4 + 4 + 1);
}

TEST_CASE("a 16-bit element read from shared memory and stored to global memory is two accesses", "[profile]") {
  // GCC stores a call's 16-bit result straight to memory without instrumenting it: the shared element's
  // read is inlined when profiling, so that the store shows.
  sim::Profile profile = profileOf(R"cpp(
__global__ void reverse(const __half* __restrict__ in, __half* __restrict__ out) {
  EMMY_SHARED(__half, tile, 32);
  tile[threadIdx.x] = in[threadIdx.x];
  __syncthreads();
  out[threadIdx.x] = tile[31 - threadIdx.x];
}
)cpp",
                                   "EMMY_LAUNCH(reverse, dim3(1), dim3(32), 0, (const __half*)a, (__half*)b);");
  const sim::KernelProfile& kernel = kernelNamed(profile, "reverse");
  REQUIRE(kernel.sites.size() == 4);
  const sim::AccessSite& store = siteOf(kernel, true, true);
  CHECK(store.line == 6);
  CHECK(store.bytes == 2);
  CHECK(store.counters.lanes == 32);
  CHECK(store.counters.sectors == 2);  // 64 bytes
  CHECK(siteOf(kernel, false, false).line == 6);
  CHECK(siteOf(kernel, false, true).line == 4);
  CHECK(siteOf(kernel, true, false).line == 4);
}

// A global load beside a shared element's read in one expression: the read's simulation code is inlined
// when profiling, and the optimizer moved the global load into it (a float load does not alias the flag
// that marks the simulation's own accesses), where the instrumentation reported it as the simulation's:
// `w[i] * x + tile[i]` lost its global load. Each is counted, in either order, loops unrolled or not.
TEST_CASE("a global load in an expression with shared reads is counted wherever the optimizer moves it", "[profile]") {
  sim::Profile profile = profileOf(R"cpp(
__global__ void mixed(const float* __restrict__ w, float* __restrict__ out) {
  EMMY_SHARED(float, tile, 64);
  tile[threadIdx.x] = out[threadIdx.x];
  tile[threadIdx.x + 32] = out[threadIdx.x + 32];
  __syncthreads();
  float sum = 0.0f;
  for (int r = 0; r < 4; ++r) sum += (tile[threadIdx.x] - tile[threadIdx.x + 32]) * w[threadIdx.x + 32 * r] + tile[threadIdx.x + 32];
  for (int r = 0; r < 4; ++r) sum += tile[threadIdx.x] + w[threadIdx.x + 32 * r] * tile[threadIdx.x + 32];
  __syncthreads();
  out[threadIdx.x] = sum;
}
)cpp",
                                   "EMMY_LAUNCH(mixed, dim3(1), dim3(32), 0, (const float*)a, (float*)b);");
  const sim::KernelProfile& kernel = kernelNamed(profile, "mixed");
  uint64_t loadRequests = 0, loadSectors = 0;
  for (const sim::AccessSite& site : kernel.sites)
    if (site.global && !site.store && site.line >= 8) {
      loadRequests += site.counters.requests;
      loadSectors += site.counters.sectors;
    }
  CHECK(loadRequests == 8);  // two loops of 4 coalesced 128-byte loads of w
  CHECK(loadSectors == 32);
}

// ldmatrix (emmy_ldmatrix) reads a 16-byte row per lane, recorded at its call: 8 lanes a request, one
// request per 8x8 matrix. 32 rows of 64 bytes (32 halves) each, every lane reading the first 16 bytes of
// its row: unswizzled, the 8 rows of a request fall on banks 0-3 (even rows) and 16-19 (odd rows), 4
// rows each, 4 wavefronts; with the 16-byte unit of row r stored at unit (r / 2) % 4 (an XOR swizzle),
// 8 rows cover all 32 banks, 1 wavefront. An .x2 has 2 requests, and its lanes 16-31, whose addresses
// are not used, are active all the same.
TEST_CASE("ldmatrix rows: 4 wavefronts a request at stride 64 bytes, 1 when XOR-swizzled", "[profile]") {
  sim::Profile profile = profileOf(R"cpp(
__global__ void rows(uint32_t* __restrict__ out, int swizzle) {
  EMMY_SHARED(__half, tile, 32 * 32);
  for (int i = threadIdx.x; i < 32 * 32; i += 32) tile[i] = __half(1.0f);
  __syncthreads();
  const int row = threadIdx.x, unit = swizzle ? row / 2 % 4 : 0;
  uint32_t f[4];
  emmy_ldmatrix<4, false>(f, tile, row * 32 + unit * 8);
  out[threadIdx.x] = f[0] + f[3];
}
__global__ void pair(uint32_t* __restrict__ out) {
  EMMY_SHARED(__half, tile, 32 * 32);
  for (int i = threadIdx.x; i < 32 * 32; i += 32) tile[i] = __half(1.0f);
  __syncthreads();
  const int row = threadIdx.x % 16;
  uint32_t f[2];
  emmy_ldmatrix<2, true>(f, tile, row * 32 + row / 2 % 4 * 8);
  out[threadIdx.x] = f[0] + f[1];
}
)cpp",
                                   "EMMY_LAUNCH(rows, dim3(1), dim3(32), 0, (uint32_t*)a, 0);\n"
                                   "  EMMY_LAUNCH(rows, dim3(1), dim3(32), 0, (uint32_t*)a, 1);\n"
                                   "  EMMY_LAUNCH(pair, dim3(1), dim3(32), 0, (uint32_t*)a);");
  const sim::AccessSite& x4 = siteOf(kernelNamed(profile, "rows"), false, false);
  CHECK(x4.line == 8);
  CHECK(x4.code == "emmy_ldmatrix<4, false>(f, tile, row * 32 + unit * 8);");
  CHECK(x4.bytes == 16);
  CHECK(x4.counters.executions == 2);
  CHECK(x4.counters.requests == 2 * 4);
  CHECK(x4.counters.wavefronts == 4 * 4 + 4 * 1);
  CHECK(x4.counters.idealWavefronts == 2 * 4);
  CHECK(x4.counters.lanes == 2 * 32);
  CHECK(x4.counters.divergent == 0);
  const sim::AccessSite& x2 = siteOf(kernelNamed(profile, "pair"), false, false);
  CHECK(x2.line == 17);
  CHECK(x2.bytes == 16);
  CHECK(x2.counters.requests == 2);
  CHECK(x2.counters.wavefronts == 2);
  CHECK(x2.counters.lanes == 32);
  CHECK(x2.counters.divergent == 0);
}

TEST_CASE("emmy check --profile of a kernel whose outputs are empty says that no kernel ran", "[profile]") {
  CheckOptions options;
  options.file = (std::filesystem::path(Frontend::defaultStdlibDir()) / "nn.emmy").string();
  options.kernel = "softmax<f32>";
  options.sizes = {"N=0", "D=100"};
  options.profile = true;
  sim::SimulationOptions simulation;
  simulation.profile = true;
  std::FILE* report = std::tmpfile();
  REQUIRE(report);
  int status = runCheck(
      options, [&](const tensor::Kernel& kernel) { return emitCudaFiles({lower(kernel, PipelineOptions{})}, options.file); },
      simulationCompiler(simulation), report);
  std::rewind(report);
  std::string text;
  for (int c; (c = std::fgetc(report)) != EOF;) text += static_cast<char>(c);
  std::fclose(report);
  INFO(text);
  CHECK(status == 0);
  CHECK(text.find("no kernel ran: every output is empty") != std::string::npos);
}
