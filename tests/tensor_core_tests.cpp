// The block-level product (`mma`, ir/tile/matrix_product.h) on the tensor cores (f16, bf16) and on the
// CUDA cores (f32): every layout of the operands, with and without an epilogue and a batch, agrees with
// the reference at ragged sizes (K < 16, M = 1, empty); the default policy and the stdlib products use
// it; its PTX has mma.sync and ldmatrix (f16, bf16) or 16-byte shared loads and FFMA (f32), and its
// shared-memory accesses no bank conflicts.
#include <catch2/catch.hpp>

#include "backend/nvrtc.h"
#include "backend/sim/simulator.h"
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
           {"linalg.emmy", {"matmul<f16>", "matmul<bf16>", "bmm<f16>"}}, {"nn.emmy", {"linear<bf16>", "mlp<f16>"}}}) {
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
