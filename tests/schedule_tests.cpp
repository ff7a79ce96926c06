// Schedules applied: the matmul schedule of section 5 and a cooperative softmax run correctly at ragged
// sizes and their CUDA has what the directives ask for; schedules drawn at random from the legal space
// of five kernels all agree with the reference; a cache of whole rows serves the rows that fit; an
// attention's softmax is computed online in one pass;
// `--emit schedule` fed back gives the same CUDA; every generated file compiles with NVRTC for sm_80 and
// sm_90.
#include <random>
#include <regex>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "backend/nvrtc.h"
#include "backend/sim/simulator.h"
#include "driver/pipeline.h"
#include "frontend/frontend.h"
#include "ir/tile/printer.h"
#include "golden_files.h"
#include "random_schedules.h"
#include "test_kernels.h"

namespace {

using namespace emmy;
using testing::RowNames;
using Sizes = std::map<std::string, int64_t>;

const char* const kMatmul = R"(
kernel matmul(A: f32[M, K], B: f32[K, N]) -> (C: f32[M, N]) {
    C[i, j] = sum[k](A[i, k] * B[k, j])
}
)";

// The same product with an epilogue: C applies its expression to acc, and is scheduled as acc's
// reduction (its loops are i, j, k).
const char* const kMatmulEpilogue = R"(
kernel matmul(A: f32[M, K], B: f32[K, N], bias: f32[N]) -> (C: f32[M, N]) {
    acc[i, j] = sum[k](A[i, k] * B[k, j])
    C[i, j]   = relu(acc[i, j] + bias[j])
}
)";

const char* const kLayernorm = R"(
kernel layernorm(x: f32[N, D], w: f32[D], b: f32[D], eps: f32 = 1e-5) -> (y: f32[N, D]) {
    mu[n]   = mean[d](x[n, d])
    var[n]  = mean[d]((x[n, d] - mu[n]) * (x[n, d] - mu[n]))
    y[n, d] = (x[n, d] - mu[n]) * rsqrt(var[n] + eps) * w[d] + b[d]
}
)";

const std::string kChain = R"(
kernel chain(x: f32[N, D], b: f32[D]) -> (y: f32[N, D]) {
    t[n, d] = x[n, d] * 2.0 + b[d]
    y[n, d] = gelu(t[n, d]) - x[n, d]
}
)";

std::string example(const std::string& name) {
  return testing::readFile(std::filesystem::path(EMMY_SOURCE_DIR) / "examples" / (name + ".emmy"));
}
// examples/matmul.emmy: the matrix product with the schedule of section 5 of the language.
std::string specMatmul() { return example("matmul"); }
// examples/softmax.emmy: m, e, s and y over rows n and columns d.
std::string softmaxKernel() { return example("softmax"); }

// Rows across blocks; each reduction and the output row across 128 threads.
const char* const kCooperativeSoftmaxSchedule = R"(
schedule softmax {
    bind y.n to block.x
    compute m at y.n
    compute s at y.n
    split m.d by 128 -> (d_step, d_lane)
    reorder m (d_lane, d_step)
    bind m.d_lane to thread.x
    split s.d by 128 -> (d_step, d_lane)
    reorder s (d_lane, d_step)
    bind s.d_lane to thread.x
    split y.d by 128 -> (d_step, d_lane)
    reorder y (n, d_lane, d_step)
    bind y.d_lane to thread.x
}
)";

struct Built {
  tensor::Kernel kernel;
  Lowered lowered;
  cuda::GeneratedCuda cuda;
};

Built build(const std::string& source) {
  std::vector<tensor::Kernel> kernels = testing::kernelsOfText(source);
  REQUIRE(kernels.size() == 1);
  Built built{kernels[0], {}, {}};
  try {
    built.lowered = lower(built.kernel, PipelineOptions{});
  } catch (const CompilationFailed& failed) {
    FAIL(source << failed.diagnostics.render());
  }
  built.cuda = emitCudaFiles({built.lowered}, "test.emmy");
  return built;
}

void checkRuns(const Built& built, const std::vector<Sizes>& sizes) {
  sim::SimulatedKernel program(built.kernel, built.cuda);
  uint64_t seed = 7;
  for (const Sizes& size : sizes) testing::checkAgainstEvaluator(built.kernel, program, size, seed++);
}

void checkCompiles(const Built& built) {
  std::string whyNot;
  INFO(whyNot);
  REQUIRE(nvrtcAvailable(&whyNot));
  for (const char* arch : {"sm_80", "sm_90"}) {
    CudaCompileResult compiled = compileCuda(built.cuda.source, "test.cu", arch, false);
    INFO(arch << "\n" << compiled.log << built.cuda.source);
    REQUIRE(compiled.ok);
  }
}

bool contains(const std::string& text, const std::string& pattern) { return std::regex_search(text, std::regex(pattern)); }

}  // namespace

TEST_CASE("the matmul schedule of section 5 runs correctly at ragged sizes, with shared tiles and register accumulators",
          "[schedule]") {
  Built built = build(specMatmul());
  checkRuns(built, {{{"M", 67}, {"K", 33}, {"N", 70}}, {{"M", 1}, {"K", 1}, {"N", 1}}, {{"M", 64}, {"K", 16}, {"N", 128}}});
  const std::string& cu = built.cuda.source;
  CHECK(contains(cu, R"(EMMY_SHARED\(float, As, 1088\);)"));  // 64 x (16 + 1 of padding)
  CHECK(contains(cu, R"(EMMY_SHARED\(float, Bs, 1024\);)"));
  CHECK(contains(cu, R"(float C_acc\[16\];)"));  // 4 x 4 accumulators per thread
  CHECK(contains(cu, R"(__syncthreads\(\);)"));
  CHECK(contains(cu, R"(#pragma unroll\n\s*for \(int64_t ki)"));
  CHECK(contains(cu, R"(const int64_t it = \(int64_t\)threadIdx.y;)"));
  CHECK(contains(cu, R"(EMMY_LAUNCH\(matmul_k0, dim3\(.*\), dim3\(16, 16, 1\))"));
  CHECK(contains(cu, R"(\*reinterpret_cast<uint4\*>\(&C\[)"));  // vectorize C.jr: 16-byte stores of C
  checkCompiles(built);
}

TEST_CASE("double-buffered copies load the next slice while this one is used: cp.async from sm_80 on", "[schedule]") {
  std::string source = specMatmul() + "";
  source.insert(source.rfind("}"), "    double_buffer As\n    double_buffer Bs\n");
  Built built = build(source);
  checkRuns(built, {{{"M", 67}, {"K", 33}, {"N", 70}}, {{"M", 1}, {"K", 1}, {"N", 1}}, {{"M", 5}, {"K", 100}, {"N", 3}}});
  CHECK(contains(built.cuda.source, R"(emmy_copy_async\(As, )"));
  CHECK(contains(tile::printProgram(built.lowered.tile), R"(shared As: f32\[2, 64, 17\])"));
  std::string whyNot;
  REQUIRE(nvrtcAvailable(&whyNot));
  for (const char* arch : {"sm_75", "sm_80", "sm_90"}) {
    CudaCompileResult compiled = compileCuda(built.cuda.source, "test.cu", arch, false);
    INFO(arch << "\n" << compiled.log);
    REQUIRE(compiled.ok);
    CHECK(contains(compiled.ptx, "cp\\.async") == (std::string(arch) != "sm_75"));
  }
}

TEST_CASE("vectorize makes 8-, 16- and 2x16-byte accesses where aligned and in bounds, lane by lane elsewhere", "[schedule]") {
  for (int width : {2, 4, 8}) {
    std::string schedule = fmt::format(R"(
schedule chain {{
    split y.d by {} -> (d_out, d_in)
    split y.d_in by {} -> (d_thread, d_vector)
    bind y.n to block.x
    bind y.d_thread to thread.x
    vectorize y.d_vector
}}
)", 32 * width, width);
    Built built = build(kChain + schedule);
    // Multiples of the width take the vector path; 45 and 1 also the lane-by-lane one.
    checkRuns(built, {{{"N", 3}, {"D", 128}}, {{"N", 7}, {"D", 45}}, {{"N", 2}, {"D", 1}}});
    std::string vector = width == 2 ? "uint2" : "uint4";
    CHECK(contains(built.cuda.source, "reinterpret_cast<const " + vector + R"(\*>\(&x\[)"));
    CHECK(contains(built.cuda.source, "reinterpret_cast<" + vector + R"(\*>\(&y\[)"));
    if (width == 8)  // 8 floats: two 16-byte accesses, the second from the local array's element 4
      CHECK(contains(built.cuda.source, R"(= \*reinterpret_cast<const uint4\*>\(&y__lanes\[\(int64_t\)4\]\);)"));
    checkCompiles(built);
  }
}

TEST_CASE("what a partial schedule leaves open is filled by the default policy, as printed directives", "[schedule]") {
  Built built = build(softmaxKernel() + "schedule softmax {\n    compute m at y.n\n}\n");
  checkRuns(built, {{{"N", 3}, {"D", 300}}, {{"N", 2}, {"D", 1}}});
  std::string printed = tile::printSchedule(built.lowered.tile);
  CHECK(contains(printed, "    compute m at y.n\n    # filled in by the default policy:\n    bind y.n to block.x\n"));
  CHECK(contains(printed, R"(split m.d by 256 -> \(d_step, d_lane\)\n    reorder m \(d_lane, d_step\)\n    bind m.d_lane to thread.x)"));
  CHECK(contains(built.cuda.source, "__shfl_xor_sync"));  // m and s are combined across the block
}

TEST_CASE("compute at: the part a loop reads, in shared memory by the block or in each thread's registers",
          "[schedule]") {
  Built tile = build(kChain + R"(
schedule chain {
    tile y (n, d) by (4, 32) -> (n_out, d_out, n_in, d_in)
    bind y.n_out to block.y
    bind y.d_out to block.x
    bind y.n_in to thread.y
    bind y.d_in to thread.x
    compute t at y.d_out
}
)");
  checkRuns(tile, {{{"N", 7}, {"D", 45}}, {{"N", 1}, {"D", 1}}});
  CHECK(contains(tile.cuda.source, R"(EMMY_SHARED\(float, t, 128\);)"));
  const std::string columns = R"(
kernel colnorm(x: f32[N, D]) -> (y: f32[N, D]) {
    c[d]    = sum[n](x[n, d])
    y[n, d] = x[n, d] / c[d]
}
schedule colnorm {
    split y.d by 32 -> (d_out, d_in)
    reorder y (d_out, n)
    bind y.d_out to block.x
    bind y.d_in to thread.x
)";
  Built shared = build(columns + "    compute c at y.d_out\n}\n");
  checkRuns(shared, {{{"N", 9}, {"D", 70}}, {{"N", 1}, {"D", 1}}});
  CHECK(contains(shared.cuda.source, R"(EMMY_SHARED\(float, c, 32\);)"));
  Built registers = build(columns + "    compute c at y.d_in\n}\n");
  checkRuns(registers, {{{"N", 9}, {"D", 70}}});
  CHECK_FALSE(contains(registers.cuda.source, R"(EMMY_SHARED\(float, c,)"));
  for (const Built* built : {&tile, &shared, &registers}) checkCompiles(*built);
}

TEST_CASE("a -D value changes the tiles it names", "[schedule]") {
  auto tileWith = [](const std::map<std::string, int64_t>& values) {
    Diagnostics diagnostics;
    Frontend frontend(diagnostics, {Frontend::defaultStdlibDir()});
    frontend.setParamValues(values);
    const ast::Module* module = frontend.loadText("test.emmy", specMatmul());
    REQUIRE(module != nullptr);
    std::vector<tensor::Kernel> kernels = frontend.elaborateAll(*module);
    INFO(diagnostics.render());
    REQUIRE(kernels.size() == 1);
    return tile::printProgram(lower(kernels[0], PipelineOptions{}).tile);
  };
  CHECK(contains(tileWith({}), R"(shared As: f32\[64, 17\])"));
  CHECK(contains(tileWith({{"BM", 128}, {"BK", 8}}), R"(shared As: f32\[128, 9\])"));
}

TEST_CASE("a cooperative softmax schedule combines each reduction across the block with warp shuffles", "[schedule]") {
  Built built = build(softmaxKernel() + kCooperativeSoftmaxSchedule);
  checkRuns(built, {{{"N", 3}, {"D", 300}}, {{"N", 1}, {"D", 1}}, {{"N", 2}, {"D", 128}}});
  const std::string& cu = built.cuda.source;
  CHECK(contains(cu, R"(__shfl_xor_sync)"));
  CHECK(contains(cu, R"(EMMY_SHARED\(float, m_acc_partials, 4\);)"));
  CHECK(contains(cu, R"(const int64_t d_lane = \(int64_t\)threadIdx.x;)"));
  CHECK(contains(cu, R"(__launch_bounds__\(128, 4\))"));
  checkCompiles(built);
}

TEST_CASE("a cache of whole rows reads a row once where it fits, and from memory where it does not", "[schedule]") {
  // The layer norm's mean, variance and output all read x: through the copy of its row up to 8192
  // f32 elements, from x itself beyond.
  Built built = build(std::string(kLayernorm) + R"(
schedule layernorm {
    bind y.n to block.x
    split y.d by 64 -> (d_step, d_lane)
    reorder y (n, d_lane, d_step)
    bind y.d_lane to thread.x
    split mu.d by 64 -> (d_step, d_lane)
    reorder mu (d_lane, d_step)
    bind mu.d_lane to thread.x
    split var.d by 64 -> (d_step, d_lane)
    reorder var (d_lane, d_step)
    bind var.d_lane to thread.x
    cache x in shared at y.n -> x_row
}
)");
  checkRuns(built, {{{"N", 3}, {"D", 45}}, {{"N", 2}, {"D", 8192}}, {{"N", 2}, {"D", 8193}}, {{"N", 1}, {"D", 1}}});
  const std::string& cu = built.cuda.source;
  CHECK(contains(cu, R"(if \(\(D <= \(int64_t\)8192\)\) \{)"));
  CHECK(contains(cu, R"(EMMY_SHARED\(float, x_row, 8192\);)"));
  CHECK(contains(cu, R"(emmy_copy_async_lanes<4>\(x_row, )"));
  CHECK(contains(cu, R"(mu_acc = \(mu_acc \+ x_row\[)"));
  CHECK(contains(cu, R"(mu_acc = \(mu_acc \+ x\[)"));  // the path for longer rows
  checkCompiles(built);
  // A read of another row goes to memory.
  Built mirrored = build(R"(
kernel mirrored(x: f32[N, D]) -> (y: f32[N, D]) {
    s[n]    = sum[d](x[n, d] * x[N - 1 - n, d])
    y[n, d] = x[n, d] / s[n]
}
schedule mirrored {
    bind y.n to block.x
    split y.d by 64 -> (d_step, d_lane)
    reorder y (n, d_lane, d_step)
    bind y.d_lane to thread.x
    cache x in shared at y.n -> x_row
}
)");
  checkRuns(mirrored, {{{"N", 5}, {"D", 100}}});
  CHECK(contains(mirrored.cuda.source, R"(s_acc = \(s_acc \+ \(x_row\[d_1\] \* x\[)"));
}

TEST_CASE("an online softmax runs in one pass over the keys, masked prefixes and masked rows included", "[schedule]") {
  // Row s sees the keys l >= s: its running maximum starts at -inf for s > 0, and the rows past L see
  // no key at all (NaN, as in the reference).
  Built built = build(R"(
kernel masked(logits: f32[S, L], v: f32[L, E]) -> (o: f32[S, E]) {
    x[s, l]  = where(l >= s, logits[s, l], -inf)
    m[s]     = max[l](x[s, l])
    p[s, l]  = exp(x[s, l] - m[s])
    den[s]   = sum[l](p[s, l])
    pv[s, e] = sum[l](p[s, l] * v[l, e])
    o[s, e]  = pv[s, e] / den[s]
}
schedule masked {
    split o.s by 8 -> (so, si)
    bind o.so to block.x
    bind o.si to thread.y
    split o.e by 16 -> (eo, et)
    bind o.et to thread.x
    split o.l by 8 -> (lo, li)
    reorder o (so, eo, lo, si, et, li)
    cache logits in shared at o.lo
    cache v in shared at o.lo
}
)");
  checkRuns(built, {{{"S", 21}, {"L", 13}, {"E", 20}}, {{"S", 5}, {"L", 30}, {"E", 3}}, {{"S", 1}, {"L", 1}, {"E", 1}}});
  CHECK(built.lowered.kernel.functions.size() == 1);
  CHECK(contains(built.cuda.source, R"(o_rescale = expf\(\(m_acc - \(\(m_next == -INFINITY\) \? 0.0f : m_next\)\)\);)"));
  checkCompiles(built);
}

TEST_CASE("schedules drawn at random from the legal space all agree with the reference", "[schedule]") {
  std::mt19937_64 random(2026);
  struct Family {
    std::string kernel;
    std::function<std::string(std::mt19937_64&)> draw;
    std::vector<Sizes> sizes;
  };
  std::vector<Family> families{
      {kMatmul, [](std::mt19937_64& r) { return testing::randomMatmulSchedule(r); }, {{{"M", 37}, {"K", 19}, {"N", 45}}, {{"M", 1}, {"K", 3}, {"N", 2}}}},
      {kMatmulEpilogue, [](std::mt19937_64& r) { return testing::randomMatmulSchedule(r); }, {{{"M", 29}, {"K", 23}, {"N", 41}}}},
      {softmaxKernel(), [](std::mt19937_64& r) { return testing::randomRowSchedule(r, RowNames{"softmax", "y", {"m", "s"}}); },
       {{{"N", 5}, {"D", 77}}, {{"N", 2}, {"D", 1}}}},
      {kLayernorm, [](std::mt19937_64& r) { return testing::randomRowSchedule(r, RowNames{"layernorm", "y", {"mu", "var"}}); },
       {{{"N", 6}, {"D", 45}}, {{"N", 1}, {"D", 3}}}},
      {kChain, [](std::mt19937_64& r) { return testing::randomChainSchedule(r); }, {{{"N", 7}, {"D", 45}}, {{"N", 3}, {"D", 1}}}},
  };
  constexpr int kPerFamily = 15;
  int tried = 0;
  for (const Family& family : families)
    for (int k = 0; k < kPerFamily; ++k) {
      std::string source = family.kernel + family.draw(random);
      INFO(source);
      Built built = build(source);
      checkRuns(built, family.sizes);
      checkCompiles(built);
      ++tried;
    }
  WARN("schedules tried: " << tried);
  CHECK(tried == kPerFamily * static_cast<int>(families.size()));
}

TEST_CASE("the printed schedule, fed back, gives the same CUDA byte for byte", "[schedule]") {
  std::mt19937_64 random(11);
  std::vector<std::string> sources{specMatmul(),
                                   softmaxKernel() + kCooperativeSoftmaxSchedule, softmaxKernel(), kMatmul,
                                   std::string(kChain) + testing::randomChainSchedule(random),
                                   std::string(kLayernorm) + testing::randomRowSchedule(random, RowNames{"layernorm", "y", {"mu", "var"}})};
  for (const std::string& source : sources) {
    INFO(source);
    Built first = build(source);
    std::string printed = tile::printSchedule(first.lowered.tile);
    std::string kernelOnly = source.substr(0, source.find("\nschedule "));
    INFO(printed);
    Built again = build(kernelOnly + "\n" + printed);
    CHECK(again.cuda.source == first.cuda.source);
  }
}
