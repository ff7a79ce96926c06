// The block-level product (`mma`, ir/tile/matrix_product.h) on the tensor cores (f16, bf16) and on the
// CUDA cores (f32): every layout of the operands, with and without an epilogue and a batch, agrees with
// the reference at ragged sizes (K < 16, M = 1, empty); the default policy and the stdlib products use
// it; its PTX has mma.sync and ldmatrix (f16, bf16) or 16-byte shared loads and FFMA (f32), and its
// shared-memory accesses no bank conflicts.
#include <catch2/catch.hpp>

#include <random>

#include <fmt/format.h>

#include "backend/nvrtc.h"
#include "backend/sim/simulator.h"
#include "compiler/elaborate.h"
#include "compiler/pipeline.h"
#include "test_kernels.h"

namespace {

using namespace emmy;

// A product c = a x b in `dtype` whose a is read as a[m, k] or a[k, m] and b as b[k, n] or b[n, k], with
// a batch axis and a bias and relu epilogue when asked, as a block-level product with small tiles.
std::string productSource(const std::string& dtype, bool aRows, bool bRows, bool batch, bool epilogue, int stages) {
  std::string z = batch ? "Z, " : "", zi = batch ? "z, " : "";
  std::string a = aRows ? "a: " + dtype + "[" + z + "M, K]" : "a: " + dtype + "[" + z + "K, M]";
  std::string b = bRows ? "b: " + dtype + "[" + z + "K, N]" : "b: " + dtype + "[" + z + "N, K]";
  std::string aRead = aRows ? "a[" + zi + "m, k]" : "a[" + zi + "k, m]";
  std::string bRead = bRows ? "b[" + zi + "k, n]" : "b[" + zi + "n, k]";
  std::string result = epilogue ? dtype + "(relu(acc[" + zi + "m, n] + f32(bias[n])))" : dtype + "(acc[" + zi + "m, n])";
  std::string source = "kernel product(" + a + ", " + b + (epilogue ? ", bias: " + dtype + "[N]" : "") + ") -> (c: " +
                       dtype + "[" + z + "M, N]) {\n    acc[" + zi + "m, n] = sum[k](f32(" + aRead + ") * f32(" + bRead +
                       "))\n    c[" + zi + "m, n] = " + result + "\n}\n";
  source += "schedule product {\n    tile c (m, n) by (32, 64) -> (mo, no, mi, ni)\n";
  if (batch) source += "    bind c.z to block.z\n";
  source += "    bind c.mo to block.y\n    bind c.no to block.x\n    split c.k by " + std::string(dtype == "f32" ? "16" : "32") +
            " -> (ko, ki)\n";
  source += "    mma c (mi, ni, ki) by (16, 32) stages " + std::to_string(stages) + "\n}\n";
  return source;
}

// The `--profile` counters of one run of a stdlib linalg kernel in the simulation.
sim::KernelProfile profiledRun(const tensor::Kernel& kernel, const std::map<std::string, int64_t>& sizes, uint64_t seed) {
  sim::SimulationOptions options;
  options.profile = true;
  sim::SimulatedKernel program(kernel, emitCudaFiles({lower(kernel, PipelineOptions{})}, "linalg.emmy"), options);
  KernelRun run = program.run(testing::randomInputs(kernel, sizes, seed));
  INFO(run.failure.value_or(""));
  REQUIRE(run.profile.has_value());
  REQUIRE(run.profile->kernels.size() == 1);
  return run.profile->kernels[0];
}

}  // namespace

TEST_CASE("block-level products: every operand layout, f16, bf16 and f32, agrees with the reference at ragged sizes",
          "[tensorcores][sweep]") {
  const std::vector<std::map<std::string, int64_t>> sizes = {
      {{"M", 1}, {"N", 1}, {"K", 1}},     {{"M", 1}, {"N", 70}, {"K", 7}},  {{"M", 45}, {"N", 53}, {"K", 61}},
      {{"M", 33}, {"N", 130}, {"K", 15}}, {{"M", 64}, {"N", 64}, {"K", 96}}, {{"M", 0}, {"N", 5}, {"K", 9}},
      {{"M", 9}, {"N", 5}, {"K", 0}}};
  uint64_t seed = 1;
  for (const std::string dtype : {"f16", "bf16", "f32"})
    for (bool aRows : {true, false})
      for (bool bRows : {true, false}) {
        bool batch = aRows != bRows, epilogue = aRows == bRows;
        int stages = 2 + static_cast<int>(seed % 3);
        std::string source = productSource(dtype, aRows, bRows, batch, epilogue, stages);
        INFO(source);
        for (const tensor::Kernel& kernel : testing::kernelsOfText(source)) {
          std::string cuda = emitCudaFiles({lower(kernel, PipelineOptions{})}, "product.emmy").source;
          if (dtype == "f32") {
            // k-major slices: a row-major a (k contiguous) and a b read as b[n, k] are transposed by their copies.
            for (const auto& [operand, transposed] : {std::pair{"a", aRows}, std::pair{"b", !bRows}}) {
              std::string name = operand;
              CHECK(cuda.find("emmy_load_shared_vector<16>(&c__" + name + "_fragments[") != std::string::npos);
              CHECK(cuda.find((transposed ? "emmy_copy_async(c__" : "emmy_copy_async_lanes<4>(c__") + name + "_slices_") !=
                    std::string::npos);
            }
            CHECK(cuda.find("emmy_mma_m16n8k16<") == std::string::npos);
          } else {
          CHECK(cuda.find("emmy_mma_m16n8k16<") != std::string::npos);
          CHECK(cuda.find(aRows ? "emmy_ldmatrix<4, false>((uint32_t*)&c__a_fragments" : "emmy_ldmatrix<4, true>((uint32_t*)&c__a_fragments") != std::string::npos);
          CHECK(cuda.find(bRows ? "emmy_ldmatrix<4, true>((uint32_t*)&c__b_fragments" : "emmy_ldmatrix<4, false>((uint32_t*)&c__b_fragments") != std::string::npos);
          }
          sim::SimulatedKernel program(kernel, emitCudaFiles({lower(kernel, PipelineOptions{})}, "product.emmy"));
          for (std::map<std::string, int64_t> size : sizes) {
            if (batch) size["Z"] = 2;
            INFO(testing::describeSizes(size));
            testing::checkAgainstEvaluator(kernel, program, size, seed++);
          }
        }
      }
}

namespace {

// A convolution as a product of fused loops (an implicit GEMM), drawn from `seed`: 2-d, in f16, bf16 or
// f32, with a stride, a padding read as 0 and a dilation; the weight [OUT, C, KH, KW] (copied 16 bytes
// at a time along the fused taps) or [KH, KW, C, OUT] (along the output channels); or, `transposed`,
// the transposed convolution, its input element at (i + padding - kh * dilation) / stride a masked
// product takes only where that divides, the weight [C, OUT, KH, KW] or [KH, KW, C, OUT]; the output [N, OUT,
// OH, OW] (its fused columns adjacent in memory) or [N, OH, OW, OUT] (OUT apart); tiles of every legal
// shape. Also its sizes, ragged.
struct GeneratedConvolution {
  std::string source;
  std::vector<std::map<std::string, int64_t>> sizes;
};

GeneratedConvolution convolution(uint64_t seed, bool transposed) {
  std::mt19937_64 random(seed);
  auto pick = [&](std::vector<int64_t> choices) { return choices[random() % choices.size()]; };
  std::string dtype = std::vector<std::string>{"f16", "bf16", "f32"}[random() % 3];
  int64_t stride = pick({1, 2, 3}), padding = pick({0, 1, 2}), dilation = pick({1, 2});
  bool weightTapsFirst = random() % 2, channelsLast = random() % 2;
  auto extent = [&](const std::string& size, const std::string& taps) {
    if (transposed) return fmt::format("({} - 1) * {} - {} + {} * ({} - 1) + 1", size, stride, 2 * padding, dilation, taps);
    return fmt::format("({} + {} - {} * ({} - 1) - 1) / {} + 1", size, 2 * padding, dilation, taps, stride);
  };
  std::string oh = extent("H", "KH"), ow = extent("W", "KW");
  std::string weightOwn = transposed ? "C, OUT" : "OUT, C", weightOwnAt = transposed ? "c, o" : "o, c";
  std::string weight = weightTapsFirst ? "w: " + dtype + "[KH, KW, C, OUT]" : "w: " + dtype + "[" + weightOwn + ", KH, KW]";
  std::string weightRead = weightTapsFirst ? "w[kh, kw, c, o]" : "w[" + weightOwnAt + ", kh, kw]";
  // The input element a tap reads, and (transposed) where one is there.
  auto input = [&](const std::string& at, const std::string& tap) {
    if (transposed) return fmt::format("({} + {} - {} * {}) / {}", at, padding, tap, dilation, stride);
    return fmt::format("{} * {} - {} + {} * {}", at, stride, padding, tap, dilation);
  };
  std::string read = fmt::format("f32(pad(x, 0)[n, c, {}, {}]) * f32({})", input("i", "kh"), input("j", "kw"), weightRead);
  if (transposed)
    read = fmt::format("where(({0} + {1} - kh * {2}) % {3} == 0 and ({4} + {1} - kw * {2}) % {3} == 0, {5}, 0)", "i", padding,
                       dilation, stride, "j", read);
  std::string output = channelsLast ? fmt::format("y: {}[N, {}, {}, OUT]", dtype, oh, ow) : fmt::format("y: {}[N, OUT, {}, {}]", dtype, oh, ow);
  std::string outputAt = channelsLast ? "y[n, i, j, o]" : "y[n, o, i, j]";
  std::string source = fmt::format(
      "kernel conv(x: {0}[N, C, H, W], {1}, b: {0}[OUT]) -> ({2}) {{\n"
      "    {3} = {0}(sum[c, kh, kw]({4}) + f32(b[o]))\n}}\n",
      dtype, weight, output, outputAt, read);
  bool tensorCores = dtype != "f32";
  int64_t warpRows = pick({16, 32}), warpCols = tensorCores ? pick({16, 32, 64}) : pick({32, 64});
  int64_t blockRows = warpRows * pick({1, 2}), blockCols = warpCols * pick({1, 2}), depth = tensorCores ? pick({16, 32}) : pick({8, 16});
  source += "schedule conv {\n    fuse y (i, j) -> ij\n    fuse y (c, kh) -> c_kh\n    fuse y (c_kh, kw) -> taps\n";
  if (channelsLast) source += "    reorder y (n, o, ij)\n";
  source += fmt::format("    tile y (o, ij) by ({}, {}) -> (o_block, ij_block, o_in, ij_in)\n", blockRows, blockCols);
  source += "    bind y.n to block.z\n    bind y.o_block to block.y\n    bind y.ij_block to block.x\n";
  source += fmt::format("    split y.taps by {} -> (taps_slice, taps_in)\n", depth);
  source += fmt::format("    mma y (o_in, ij_in, taps_in) by ({}, {}) stages {}\n}}\n", warpRows, warpCols, pick({2, 3}));
  std::vector<std::map<std::string, int64_t>> sizes;
  for (int s = 0; s < 2; ++s) {
    int64_t kh = pick({1, 2, 3}), kw = pick({1, 3});
    // At least one output element each way: a transposed convolution's input covers the padding.
    int64_t h = transposed ? 2 * padding + pick({1, 4, 9}) : dilation * (kh - 1) + pick({1, 4, 9});
    int64_t w = transposed ? 2 * padding + pick({1, 6, 13}) : dilation * (kw - 1) + pick({1, 6, 13});
    sizes.push_back({{"N", pick({1, 2})}, {"C", pick({1, 3, 7})}, {"OUT", pick({1, 5, 33, 70})}, {"KH", kh}, {"KW", kw},
                     {"H", h}, {"W", w}});
  }
  return {source, sizes};
}

}  // namespace

TEST_CASE("block-level products of fused loops: convolutions and transposed convolutions as implicit GEMMs agree with the "
          "reference", "[tensorcores][sweep]") {
  for (uint64_t seed = 1; seed <= 16; ++seed) {
    GeneratedConvolution generated = convolution(seed, seed > 10);
    INFO(generated.source);
    for (const tensor::Kernel& kernel : testing::kernelsOfText(generated.source)) {
      Lowered compiled = lower(kernel, PipelineOptions{});
      std::string cuda = emitCudaFiles({compiled}, "conv.emmy").source;
      bool tensorCores = kernel.inputs[0].dtype != DType::F32;
      CHECK((cuda.find("emmy_mma_m16n8k16<") != std::string::npos) == tensorCores);
      sim::SimulatedKernel program(kernel, emitCudaFiles({compiled}, "conv.emmy"));
      for (const std::map<std::string, int64_t>& size : generated.sizes) {
        INFO(testing::describeSizes(size));
        testing::checkAgainstEvaluator(kernel, program, size, seed);
      }
    }
  }
}

TEST_CASE("stdlib convolutions, plain and transposed: without groups they are implicit GEMMs, with groups direct, and all "
          "agree with the reference", "[tensorcores]") {
  const std::string nn = (std::filesystem::path(EMMY_SOURCE_DIR) / "stdlib" / "nn.emmy").string();
  const std::map<std::string, int64_t> sizes{{"N", 2}, {"C", 4}, {"OUT", 6}, {"L", 11}, {"D", 4}, {"H", 7}, {"W", 6},
                                             {"K", 3}, {"KD", 2}, {"KH", 3}, {"KW", 2}};
  for (const auto& [selector, product] : std::vector<std::pair<std::string, bool>>{
           {"conv2d<f16>", true}, {"conv2d<bf16, stride=2, padding=1>", true}, {"conv2d<f16, groups=2>", false},
           {"conv2d<f32, padding=1>", true}, {"conv2d<f32, groups=2>", false}, {"conv1d<bf16, stride=2, padding=1, dilation=2>", true},
           {"conv1d<f16, groups=2>", false}, {"conv3d<f16, padding=1>", true},
           {"conv_transpose2d<f16, stride=2, padding=1, output_padding=1>", true}, {"conv_transpose2d<f32, padding=1>", true},
           {"conv_transpose2d<bf16, groups=2>", false}, {"conv_transpose1d<bf16, stride=3, dilation=2>", true},
           {"conv_transpose3d<f16, stride=2>", true}}) {
    INFO(selector);
    Diagnostics diagnostics;
    std::optional<std::vector<tensor::Kernel>> kernels = elaborateFile(nn, selector, true, {}, diagnostics);
    INFO(diagnostics.render());
    REQUIRE(kernels);
    REQUIRE(kernels->size() == 1);
    const tensor::Kernel& kernel = kernels->front();
    Lowered lowered = lower(kernel, PipelineOptions{});
    std::string schedule;
    for (const std::string& line : lowered.tile.schedule) schedule += line + "\n";
    INFO(schedule);
    CHECK((schedule.find("mma y (") != std::string::npos) == product);
    std::map<std::string, int64_t> used;
    for (const std::string& size : kernel.allSizes())
      if (sizes.count(size)) used[size] = sizes.at(size);
    sim::SimulatedKernel program(kernel, emitCudaFiles({lowered}, "nn.emmy"));
    testing::checkAgainstEvaluator(kernel, program, used, 5);
  }
}

TEST_CASE("the default policy runs convolutions as implicit GEMMs, a group on the blocks, and a depthwise one in each "
          "thread, and all agree with the reference", "[tensorcores]") {
  std::vector<tensor::Kernel> kernels = testing::kernelsOfText(R"(
kernel conv<T: f16 | f32>(x: T[N, C, H, W], w: T[OUT, C, KH, KW], b: T[OUT])
    -> (y: T[N, OUT, H + 2 - KH + 1, W + 2 - KW + 1]) {
    y[n, o, i, j] = T(sum[c, kh, kw](f32(pad(x, 0)[n, c, i - 1 + kh, j - 1 + kw]) * f32(w[o, c, kh, kw])) + f32(b[o]))
}
kernel grouped(x: bf16[N, 4, H, W], w: bf16[64, 2, KH, KW]) -> (y: f32[N, 2, 32, H - KH + 1, W - KW + 1]) {
    y[n, g, o, i, j] = sum[c, kh, kw](f32(x[n, g * 2 + c, i + kh, j + kw]) * f32(w[g * 32 + o, c, kh, kw]))
}
kernel channels_last(x: f16[N, H, W, C], w: f16[KH, KW, C, OUT]) -> (y: f16[N, H - KH + 1, W - KW + 1, OUT]) {
    y[n, i, j, o] = f16(sum[kh, kw, c](f32(x[n, i + kh, j + kw, c]) * f32(w[kh, kw, c, o])))
}
kernel depthwise(x: f32[N, 8, H, W], w: f32[8, 1, KH, KW]) -> (y: f32[N, 8, 1, H - KH + 1, W - KW + 1]) {
    y[n, g, o, i, j] = sum[c, kh, kw](x[n, g + c, i + kh, j + kw] * w[g + o, c, kh, kw])
}
)");
  REQUIRE(kernels.size() == 5);
  const std::map<std::string, int64_t> sizes{{"N", 2}, {"C", 5}, {"OUT", 37}, {"H", 9}, {"W", 11}, {"KH", 3}, {"KW", 2}};
  for (const tensor::Kernel& kernel : kernels) {
    INFO(kernel.instanceName());
    Lowered lowered = lower(kernel, PipelineOptions{});
    std::string schedule;
    for (const std::string& line : lowered.tile.schedule) schedule += line + "\n";
    INFO(schedule);
    CHECK((schedule.find("mma y (") != std::string::npos) == (kernel.name != "depthwise"));
    if (kernel.name == "grouped") CHECK(schedule.find("bind y.n_g to block.z") != std::string::npos);
    std::map<std::string, int64_t> used;
    for (const std::string& size : kernel.allSizes())
      if (sizes.count(size)) used[size] = sizes.at(size);
    sim::SimulatedKernel program(kernel, emitCudaFiles({lowered}, "conv.emmy"));
    testing::checkAgainstEvaluator(kernel, program, used, 11);
  }
}

TEST_CASE("block-level products: the results of columns that are not adjacent in memory go each to its own place", "[tensorcores]") {
  // c is [N, M]: the product's columns n are M apart.
  for (const std::string dtype : {"f16", "f32"}) {
    std::string source = "kernel transposed(a: " + dtype + "[M, K], b: " + dtype + "[K, N]) -> (c: " + dtype + "[N, M]) {\n"
                         "    c[n, m] = " + dtype + "(sum[k](f32(a[m, k]) * f32(b[k, n])))\n}\n"
                         "schedule transposed {\n    tile c (m, n) by (64, 64) -> (mo, no, mi, ni)\n"
                         "    bind c.mo to block.y\n    bind c.no to block.x\n    split c.k by 16 -> (ko, ki)\n"
                         "    mma c (mi, ni, ki) by (32, 32) stages 2\n}\n";
    INFO(source);
    for (const tensor::Kernel& kernel : testing::kernelsOfText(source)) {
      sim::SimulatedKernel program(kernel, emitCudaFiles({lower(kernel, PipelineOptions{})}, "transposed.emmy"));
      testing::checkAgainstEvaluator(kernel, program, {{"M", 70}, {"N", 45}, {"K", 33}}, 3);
    }
  }
}

TEST_CASE("block-level products: the default policy takes f16, bf16 and f32 products, and says why it does not", "[tensorcores]") {
  std::vector<tensor::Kernel> kernels = testing::kernelsOfText(R"(
kernel fed(a: bf16[M, K], w: bf16[N, K]) -> (c: f32[M, N]) {
    c[m, n] = sum[k](f32(a[m, k]) * f32(w[n, k]))
}
kernel strided(a: f16[K, M, 2]) -> (c: f32[M, M]) {
    c[m, n] = sum[k](f32(a[k, m, 0]) * f32(a[k, n, 1]))
}
kernel single(a: f32[M, K], b: f32[K, N]) -> (c: f32[M, N]) {
    c[m, n] = sum[k](a[m, k] * b[k, n])
}
)");
  REQUIRE(kernels.size() == 3);
  auto schedule = [](const tensor::Kernel& kernel) {
    std::string text;
    for (const std::string& line : lower(kernel, PipelineOptions{}).tile.schedule) text += line + "\n";
    return text;
  };
  CHECK(schedule(kernels[0]).find("mma c (m_in, n_in, k_in) by (c_warp_m, c_warp_n) stages c_stages") != std::string::npos);
  CHECK(schedule(kernels[1]).find("# c: not on the tensor cores: the last two subscripts of a are not k and one axis of c") !=
        std::string::npos);
  // f32 on the CUDA cores, with the f32 defaults (8 x 8 results a thread, slices of 8).
  std::string single = schedule(kernels[2]);
  CHECK(single.find("tensor cores") == std::string::npos);
  CHECK(single.find("mma c (m_in, n_in, k_in) by (c_warp_m, c_warp_n) stages c_stages") != std::string::npos);
  std::string singleCuda = emitCudaFiles({lower(kernels[2], PipelineOptions{})}, "single.emmy").source;
  CHECK(singleCuda.find("float c__accumulators[64];") != std::string::npos);
  CHECK(singleCuda.find("EMMY_SHARED(float, c__a_slices_0, 1056);") != std::string::npos);  // 8 x (128 + 4)
  for (size_t k : {0, 2}) {
    sim::SimulatedKernel program(kernels[k], emitCudaFiles({lower(kernels[k], PipelineOptions{})}, "fed.emmy"));
    testing::checkAgainstEvaluator(kernels[k], program, {{"M", 130}, {"N", 129}, {"K", 40}}, 7);
  }
}

TEST_CASE("tensor cores: the stdlib's f16 and bf16 products have mma.sync and ldmatrix in their PTX for sm_80 and sm_90, and no spills", "[tensorcores]") {
  std::string whyNot;
  if (!nvrtcAvailable(&whyNot)) {
    WARN("NVRTC is not available, so the PTX is not checked: " << whyNot);
    return;
  }
  const std::filesystem::path stdlib = std::filesystem::path(EMMY_SOURCE_DIR) / "stdlib";
  for (const auto& [module, selectors] : std::vector<std::pair<const char*, std::vector<const char*>>>{
           {"linalg.emmy", {"matmul<f16>", "matmul<bf16>", "bmm<f16>"}}, {"nn.emmy", {"linear<bf16>", "mlp<f16>", "conv1d<bf16>", "conv2d<f16>", "conv3d<f16>"}}}) {
    for (const tensor::Kernel& kernel : testing::kernelsOf(stdlib / module)) {
      std::string name = kernel.instanceName();
      bool wanted = false;
      for (const char* selector : selectors) {
        std::string spelled = selector;
        spelled = spelled.substr(0, spelled.find('<')) + "_" + spelled.substr(spelled.find('<') + 1);
        spelled.pop_back();
        wanted = wanted || name == spelled;
      }
      if (!wanted) continue;
      INFO(name);
      for (const char* arch : {"sm_80", "sm_90"}) {
        CudaCompileResult compiled = compileCuda(emitCudaFiles({lower(kernel, PipelineOptions{})}, module).source,
                                                 name + ".cu", arch, true);
        INFO(arch << "\n" << compiled.log);
        REQUIRE(compiled.ok);
        CHECK(compiled.ptx.find("mma.sync.aligned.m16n8k16.row.col.f32") != std::string::npos);
        CHECK(compiled.ptx.find("ldmatrix.sync.aligned.m8n8.x4") != std::string::npos);
        CHECK(compiled.ptx.find("cp.async.cg.shared.global") != std::string::npos);
        for (const KernelResources& resources : resourceUsage(compiled)) {
          CHECK(resources.spillStoreBytes == 0);
          CHECK(resources.spillLoadBytes == 0);
        }
      }
    }
  }
}

TEST_CASE("block-level products: --profile counts no bank conflicts at the ldmatrix, shared-load and cp.async sites",
          "[tensorcores][profile]") {
  const std::filesystem::path stdlib = std::filesystem::path(EMMY_SOURCE_DIR) / "stdlib";
  for (const tensor::Kernel& kernel : testing::kernelsOf(stdlib / "linalg.emmy")) {
    bool tensorCores = kernel.instanceName() == "matmul_f16";
    if (!tensorCores && kernel.instanceName() != "matmul_f32") continue;
    INFO(kernel.instanceName());
    int readSites = 0, copySites = 0;
    for (const sim::AccessSite& site : profiledRun(kernel, {{"M", 128}, {"N", 256}, {"K", 96}}, 3).sites) {
      if (site.global) continue;
      INFO(site.line << ": " << site.code);
      bool read = site.code.find(tensorCores ? "emmy_ldmatrix" : "emmy_load_shared_vector") != std::string::npos;
      bool copy = site.code.find("emmy_copy_async") != std::string::npos;
      if (!read && !copy) continue;
      (read ? readSites : copySites) += 1;
      CHECK(site.counters.requests > 0);
      CHECK(site.counters.wavefronts == site.counters.idealWavefronts);
    }
    // Tensor cores: A and B in each of the 4 steps of the unrolled ring (a slice of 16: one ldmatrix.x4
    // of each a step). CUDA cores: A and B for each of the 8 k of a slice, in each of the 2 steps.
    CHECK(readSites == (tensorCores ? 8 : 32));
    CHECK(copySites >= (tensorCores ? 6 : 4));
  }
}

TEST_CASE("block-level products: the results are stored 16 bytes a lane, in whole sectors, in every dtype", "[tensorcores][profile]") {
  const std::filesystem::path stdlib = std::filesystem::path(EMMY_SOURCE_DIR) / "stdlib";
  for (const tensor::Kernel& kernel : testing::kernelsOf(stdlib / "linalg.emmy")) {
    if (kernel.name != "matmul") continue;
    INFO(kernel.instanceName());
    uint64_t stored = 0;
    for (const sim::AccessSite& site : profiledRun(kernel, {{"M", 128}, {"N", 256}, {"K", 32}}, 5).sites) {
      if (!site.global || !site.store) continue;
      INFO(site.line << ": " << site.code);
      CHECK(site.bytes == 16);
      CHECK(site.counters.sectors == site.counters.idealSectors);
      CHECK(site.counters.divergent == 0);
      stored += site.counters.executions * 32 * site.bytes;
    }
    // Every result once: M x N elements.
    CHECK(stored == 128 * 256 * static_cast<uint64_t>(dtypeBytes(kernel.outputs[0].dtype)));
  }
}
