// The standard library's schedules: every kernel is built by its own schedule, every `param` candidate
// gives code that passes the simulated check, the contractions' code is register-blocked with vector
// accesses, the row kernels read a row once where it fits (by vectors, without bank conflicts), and the
// attentions are one kernel with an online softmax.
#include <catch2/catch.hpp>

#include <set>
#include <tuple>

#include <fmt/format.h>

#include "backend/nvrtc.h"
#include "backend/sim/simulator.h"
#include "compiler/elaborate.h"
#include "compiler/pipeline.h"
#include "ir/tile/schedule_model.h"
#include "test_kernels.h"

namespace {

namespace fs = std::filesystem;
using namespace emmy;

const fs::path kStdlib = fs::path(EMMY_SOURCE_DIR) / "stdlib";

std::vector<tensor::Kernel> instances(const fs::path& file, const std::string& selector,
                                      const std::map<std::string, int64_t>& params) {
  Diagnostics diagnostics;
  std::optional<std::vector<tensor::Kernel>> kernels = elaborateFile(file.string(), selector, false, params, diagnostics);
  INFO(diagnostics.render());
  REQUIRE(kernels.has_value());
  return *kernels;
}

// The params the schedule of the kernel `selector` names declares, with their candidates and defaults.
std::map<std::string, DeclaredParam> paramsOf(const fs::path& file, const std::string& selector) {
  Diagnostics diagnostics;
  ElaborationDetails details;
  INFO(diagnostics.render());
  REQUIRE(elaborateFile(file.string(), selector, false, {}, diagnostics, &details).has_value());
  return details.params;
}

}  // namespace

TEST_CASE("every stdlib kernel is built by its own schedule", "[stdlib]") {
  for (const char* module : {"nn.emmy", "linalg.emmy"}) {
    for (const tensor::Kernel& kernel : instances(kStdlib / module, "", {})) {
      INFO(kernel.instanceName());
      CHECK(!kernel.schedule.empty());
      Lowered lowered = lower(kernel, PipelineOptions{});
      for (const loop::LoopNest& nest : lowered.loop.kernels) CHECK(tile::scheduleNames(kernel, nest));
    }
  }
}

TEST_CASE("every param candidate of the stdlib schedules passes the simulated check at ragged sizes", "[stdlib][sweep]") {
  // Each candidate but the default (the [lowering] tests run that one) with the other params at their
  // defaults, at sizes no tile divides, in a dtype that changes from one candidate to the next among
  // those whose schedule declares the param (a product's f16 and bf16 have a schedule of their own).
  size_t turn = 0;
  for (const char* module : {"nn.emmy", "linalg.emmy"}) {
    std::set<std::string> kernels;
    for (const tensor::Kernel& kernel : instances(kStdlib / module, "", {})) kernels.insert(kernel.name);
    for (const std::string& kernel : kernels) {
      std::map<std::string, std::vector<std::string>> dtypesOf;
      std::map<std::string, DeclaredParam> params;
      for (const char* dtype : {"f32", "f16", "bf16"})
        for (const auto& [param, declared] : paramsOf(kStdlib / module, kernel + "<" + dtype + ">")) {
          dtypesOf[param].push_back(dtype);
          params[param] = declared;
        }
      for (const auto& [param, declared] : params) {
        for (int64_t candidate : declared.candidates) {
          if (candidate == declared.defaultValue) continue;
          const std::vector<std::string>& dtypes = dtypesOf.at(param);
          std::string selector = kernel + "<" + dtypes[turn++ % dtypes.size()] + ">";
          INFO(selector << " with " << param << " = " << candidate);
          for (const tensor::Kernel& instance : instances(kStdlib / module, selector, {{param, candidate}})) {
            sim::SimulatedKernel program(instance, emitCudaFiles({lower(instance, PipelineOptions{})}, module));
            // Beyond three sizes, the leading ones are batch dimensions (the attentions' B and H): 2, 3.
            std::map<std::string, int64_t> sizes;
            size_t batch = instance.sizes.size() > 3 ? instance.sizes.size() - 3 : 0;
            int64_t size = 37;
            for (size_t k = 0; k < instance.sizes.size(); ++k)
              sizes[instance.sizes[k]] = k < batch ? static_cast<int64_t>(k) + 2 : (size += 8);  // 45, 53, 61, ...
            if (!instance.derivedSizes.empty()) {
              // Windows (convolutions, pools): their sizes, those the first input does not have, are 3, 5,
              // ...; the first input's are 2 and 3 for its batch and channels, then 13, 17, 21, ...
              const tensor::TensorParam& first = instance.inputs.front();
              size = 9;
              int64_t window = 1;
              for (size_t k = 0; k < instance.sizes.size(); ++k) {
                bool ofFirst = std::any_of(first.shape.begin(), first.shape.end(),
                                           [&](const tensor::Dim& dim) { return dim == tensor::Dim::size(instance.sizes[k]); });
                sizes[instance.sizes[k]] = !ofFirst ? (window += 2) : k < 2 ? static_cast<int64_t>(k) + 2 : (size += 4);
              }
              REQUIRE(testing::sizesValid(instance, sizes));
            }
            testing::checkAgainstEvaluator(instance, program, sizes, turn);
          }
        }
      }
    }
  }
}

TEST_CASE("the stdlib f32 products are block-level products on the CUDA cores: 8 x 8 a thread from 16-byte shared reads",
          "[stdlib]") {
  std::string whyNot;
  REQUIRE(nvrtcAvailable(&whyNot));
  for (const auto& [module, selector, output] : std::vector<std::tuple<const char*, const char*, std::string>>{
           {"linalg.emmy", "matmul<f32>", "c"}, {"linalg.emmy", "bmm<f32>", "c"}, {"nn.emmy", "linear<f32>", "y"},
           {"nn.emmy", "mlp<f32>", "y"}}) {
    for (const tensor::Kernel& kernel : instances(kStdlib / module, selector, {})) {
      std::string cuda = emitCudaFiles({lower(kernel, PipelineOptions{})}, module).source;
      INFO(selector << "\n" << cuda);
      CHECK(cuda.find("float " + output + "__accumulators[64];") != std::string::npos);  // 8 x 8 results per thread
      CHECK(cuda.find("dim3(32, 2, 4)") != std::string::npos);                          // 8 warps of 32 x 64
      CHECK(cuda.find("emmy_load_shared_vector<16>(&" + output + "__a_fragments[") != std::string::npos);
      CHECK(cuda.find("emmy_load_shared_vector<16>(&" + output + "__b_fragments[") != std::string::npos);
      // k contiguous in x and w: their copies transpose, an element each, into rows of 128 + 4.
      bool bTransposed = std::string(module) == "nn.emmy";
      CHECK(cuda.find("EMMY_SHARED(float, " + output + "__a_slices_0, 1056);") != std::string::npos);  // 8 x (128 + 4)
      CHECK(cuda.find("emmy_copy_async(" + output + "__a_slices_") != std::string::npos);
      CHECK(cuda.find(bTransposed ? "emmy_copy_async(" + output + "__b_slices_" : "emmy_copy_async_lanes<4>(" + output + "__b_slices_") !=
            std::string::npos);
      CHECK(cuda.find("*reinterpret_cast<uint4*>(&" + output + "[") != std::string::npos);
      for (const char* arch : {"sm_80", "sm_90"}) {
        CudaCompileResult compiled = compileCuda(cuda, "stdlib.cu", arch, true);
        INFO(arch << "\n" << compiled.log);
        REQUIRE(compiled.ok);
        CHECK(compiled.ptx.find("ld.shared.v4.f32") != std::string::npos);
        CHECK(compiled.ptx.find("fma.rn.f32") != std::string::npos);
        CHECK(compiled.ptx.find("cp.async.ca.shared.global") != std::string::npos);
        for (const KernelResources& resources : resourceUsage(compiled)) {
          CHECK(resources.spillStoreBytes == 0);
          CHECK(resources.spillLoadBytes == 0);
        }
      }
    }
  }
}

TEST_CASE("the stdlib attentions are one kernel with an online softmax over tiles of keys", "[stdlib]") {
  for (const char* selector : {"attention<f16>", "causal_attention<f32>", "attend<bf16>"}) {
    for (const tensor::Kernel& kernel : instances(kStdlib / "nn.emmy", selector, {})) {
      INFO(selector);
      Lowered lowered = lower(kernel, PipelineOptions{});
      // Two launch variants by the head's length: 16 queries by 64 features, 8 by 128 (E > 64), each one
      // kernel whose blocks take a whole head of up to their features.
      std::vector<const kernel::Function*> kernels = testing::withoutWideTwins(lowered.kernel);
      REQUIRE(kernels.size() == 2);
      CHECK(kernels[0]->name == kernel.instanceName() + "__BQ16_EB64__k0");
      CHECK(kernels[1]->name == kernel.instanceName() + "__BQ8_EB128__k0");
      CHECK(lowered.loop.temporaries.empty());  // no S x L matrix in global memory
      std::string cuda = emitCudaFiles({lowered}, "nn.emmy").source;
      INFO(cuda);
      CHECK(cuda.find("  if ((E <= (int64_t)64)) {\n") != std::string::npos);
      CHECK(cuda.find("pv__acc[4];") != std::string::npos);  // 4 features per thread, in registers
      CHECK(cuda.find(", v_tile, 4096);") != std::string::npos);  // shared: 2 x 32 keys x 64 features
      CHECK(cuda.find(", v_tile, 8192);") != std::string::npos);  // 2 x 32 keys x 128 features
      // attention's scores read the rows of q and k by 16-byte vectors where aligned (attend reads logits).
      bool scores = std::string(selector).find("attend") == std::string::npos;
      CHECK((cuda.find("*reinterpret_cast<const uint4*>(&k[") != std::string::npos) == scores);
      // Each tile: its maximum, then the factor that rescales what is summed so far, once (in f16 and
      // bf16 by the hardware's exponential); each key: its weight exp(x - max), once, and the sums.
      std::string exp = std::string(selector).find("f32") != std::string::npos ? "expf((" : "emmy_exp_approximate((";
      CHECK(cuda.find("o__rescale = " + exp) != std::string::npos);
      CHECK(cuda.find("den__acc * o__rescale);") != std::string::npos);
      CHECK(cuda.find("pv__acc[er] * o__rescale);") != std::string::npos);
      CHECK(cuda.find("o__weight = " + exp) != std::string::npos);
      CHECK(cuda.find("den__acc + o__weight);") != std::string::npos);
      CHECK(cuda.find("pv__acc[er] + (o__weight * ") != std::string::npos);
      // Causal attention's sums are bounded, l < s + 1: in the tiles on the diagonal, their terms where
      // that holds, else 0 (the tiles below it run without the condition).
      bool causal = std::string(selector).find("causal") != std::string::npos;
      CHECK((cuda.find("den__acc + ((l < emmy_add(s, (emmy_index_t)1)) ? o__weight : 0.0f));") != std::string::npos) == causal);
      // The shared tiles (the scores or logits a word longer a row, v) are read and written without bank
      // conflicts, and the copy of v a tile ahead stops at the last tile.
      sim::SimulationOptions options;
      options.profile = true;
      sim::SimulatedKernel program(kernel, emitCudaFiles({lowered}, "nn.emmy"), options);
      for (int64_t features : {64, 80}) {  // each variant
        INFO("E = " << features);
        KernelRun run = program.run(testing::randomInputs(kernel, {{"B", 1}, {"H", 1}, {"S", 48}, {"L", 80}, {"E", features}}, 3));
        INFO(run.failure.value_or(""));
        CHECK(!run.failure);
        REQUIRE(run.profile.has_value());
        REQUIRE(run.profile->kernels.size() == 1);
        CHECK(run.profile->kernels[0].name == (features <= 64 ? kernels[0] : kernels[1])->name);
        for (const sim::AccessSite& site : run.profile->kernels[0].sites) {
          if (site.global) continue;
          INFO(site.line << ": " << site.code);
          CHECK(site.counters.wavefronts == site.counters.idealWavefronts);
        }
      }
    }
  }
}

TEST_CASE("the stdlib row kernels read a row once where it fits in shared memory, by vectors without bank conflicts",
          "[stdlib][profile]") {
  for (const char* selector : {"softmax<f32>", "log_softmax<f16>", "layernorm<bf16>", "rmsnorm<f32>"}) {
    for (const tensor::Kernel& kernel : instances(kStdlib / "nn.emmy", selector, {})) {
      INFO(selector);
      Lowered lowered = lower(kernel, PipelineOptions{});
      // Three launch variants (LANES = 32 if D <= 2048 else 128 if D <= 8192 else 256), one CUDA kernel each.
      std::vector<const kernel::Function*> kernels = testing::withoutWideTwins(lowered.kernel);
      REQUIRE(kernels.size() == 3);
      CHECK(kernels[0]->name == kernel.instanceName() + "__LANES32__k0");
      CHECK(kernels[1]->name == kernel.instanceName() + "__LANES128__k0");
      CHECK(kernels[2]->name == kernel.instanceName() + "__LANES256__k0");
      std::string cuda = emitCudaFiles({lowered}, "nn.emmy").source;
      // Each variant's kernel with 32-bit indices where they fit, its twin where not.
      CHECK(cuda.find("  if ((D <= (int64_t)2048)) {\n    if (") != std::string::npos);
      CHECK(cuda.find("EMMY_LAUNCH_SIZED(" + kernel.instanceName() + "__LANES32__k0") != std::string::npos);
      CHECK(cuda.find("  if (((D >= (int64_t)2049) && (D <= (int64_t)8192))) {\n    if (") != std::string::npos);
      CHECK(cuda.find("EMMY_LAUNCH_SIZED(" + kernel.instanceName() + "__LANES128__k0") != std::string::npos);
      bool half = kernel.typeArguments.at(0).second != DType::F32;
      int elementBytes = half ? 2 : 4, lanes = 16 / elementBytes;
      // A copy sized at launch to the row (in whole vectors), of at most the variant's longest row where
      // that is at most 32 KiB (every launch gives it: the kernel has no second path), else up to the
      // 227 KiB a block may have; where the device gives less, the kernel reads the row from global memory
      // (the launcher asks the device, and the kernel tests what the launch gave).
      std::string type = half ? (kernel.typeArguments.at(0).second == DType::F16 ? "__half" : "__nv_bfloat16") : "float";
      CHECK(cuda.find(fmt::format("EMMY_SHARED_SIZED_AT_LAUNCH({}, x_row, 2048, ", type)) != std::string::npos);
      CHECK(cuda.find(fmt::format("EMMY_SHARED_SIZED_AT_LAUNCH({}, x_row, 8192, ", type)) != std::string::npos);
      // Only the variant for long rows tests what the launch gave (its two paths).
      size_t launchTests = 0;
      for (size_t at = cuda.find("<= (emmy_index_t)emmy_launch_shared_bytes()"); at != std::string::npos;
           at = cuda.find("<= (emmy_index_t)emmy_launch_shared_bytes()", at + 1))
        ++launchTests;
      CHECK(launchTests == 2);
      std::string sized = fmt::format("EMMY_SHARED_SIZED_AT_LAUNCH({}, x_row, {}, 0, (((D + {}) / {}) * {}));",
                                      type, 227 * 1024 / elementBytes, lanes - 1, lanes, lanes);
      CHECK(cuda.find(sized) != std::string::npos);
      CHECK(cuda.find("  if ((D >= (int64_t)8193)) {\n    if (") != std::string::npos);
      CHECK(cuda.find("    } else {\n      {\n        int64_t emmy_shared_bytes = ") != std::string::npos);
      CHECK(cuda.find("EMMY_LAUNCH_SIZED(" + kernel.instanceName() + "__LANES256__k0") != std::string::npos);
      // The launcher's tests of D are its variants'; the kernel's test of whether a row fits reads the launch's.
      size_t tests = 0;
      for (size_t at = cuda.find("if ((D <= (int64_t)"); at != std::string::npos; at = cuda.find("if ((D <= (int64_t)", at + 1))
        ++tests;
      CHECK(tests == 1);
      CHECK(cuda.find(fmt::format(" * {}) <= (emmy_index_t)emmy_launch_shared_bytes())) {{", elementBytes)) !=
            std::string::npos);
      CHECK(cuda.find(half ? "emmy_copy_async_lanes<8>(x_row, " : "emmy_copy_async_lanes<4>(x_row, ") != std::string::npos);
      // Every path gives the reference's values: short rows, the end of the short variant, the start of the
      // long one, a row of 40000 bytes read through the copy, and that row where the device holds one
      // vector less, which the kernel then reads from global memory.
      sim::SimulationOptions options;
      options.profile = true;
      sim::SimulatedKernel program(kernel, emitCudaFiles({lowered}, "nn.emmy"), options);
      uint64_t seed = 1;
      int64_t longRow = 40000 / elementBytes;
      for (int64_t D : {int64_t{1001}, int64_t{2048}, int64_t{2049}, int64_t{8192}, int64_t{8193}, longRow + 3})
        testing::checkAgainstEvaluator(kernel, program, {{"N", D > 2048 ? 2 : 3}, {"D", D}}, seed++);
      // Global memory requested over the least traffic, for one row (so that layernorm's w and b are read
      // once too): 1.00x through the copy; beyond what the device holds, the second path reads x once per
      // pass (rmsnorm's 2 of x, w and y: 1.33x; the others' 3: 1.50x and more).
      auto requestedOverLeast = [&](int64_t D) {
        KernelRun run = program.run(testing::randomInputs(kernel, {{"N", 1}, {"D", D}}, 5));
        INFO(run.failure.value_or(""));
        REQUIRE(run.profile.has_value());
        REQUIRE(run.profile->kernels.size() == 1);
        const sim::KernelProfile& profile = run.profile->kernels[0];
        return static_cast<double>(profile.requestedGlobalBytes()) / static_cast<double>(profile.distinctGlobalBytes);
      };
      CHECK(requestedOverLeast(longRow) < 1.01);
      {
        testing::ScopedEnvironment limit("EMMY_SIM_SHARED_BYTES", std::to_string(longRow * elementBytes));
        CHECK(requestedOverLeast(longRow) < 1.01);  // exactly what the device holds
        CHECK(requestedOverLeast(longRow + 1) > 1.3);  // one element more is one vector more
        testing::checkAgainstEvaluator(kernel, program, {{"N", 2}, {"D", longRow + 1}}, seed++);
      }
      // In every variant every pass reads the cached row by 16-byte vectors (VEC = 4 lanes of f32, 8 of f16
      // and bf16) without bank conflicts, at rows of whole vectors that each start on a 16-byte boundary.
      for (int64_t D : {2048, 4096, half ? 16384 : 8192}) {
        KernelRun run = program.run(testing::randomInputs(kernel, {{"N", 2}, {"D", D}}, 4));
        INFO(run.failure.value_or(""));
        REQUIRE(run.profile.has_value());
        int vectorReads = 0;
        for (const sim::KernelProfile& profile : run.profile->kernels)
          for (const sim::AccessSite& site : profile.sites) {
            if (site.global || site.store || site.code.find("x_row") == std::string::npos) continue;
            INFO(site.line << ": " << site.code);
            CHECK(site.counters.wavefronts == site.counters.idealWavefronts);
            CHECK(site.bytes == 16u);
            vectorReads += 1;
          }
        CHECK(vectorReads >= 2);  // softmax: the max, the sum and the output
      }
    }
  }
}


namespace emmy {

TEST_CASE("linalg.transpose reads and stores 16 bytes at a time and fills and reads its shared tile without bank "
          "conflicts, in every dtype", "[stdlib][profile]") {
  for (const tensor::Kernel& kernel : instances(kStdlib / "linalg.emmy", "transpose", {})) {
    INFO(kernel.instanceName());
    // Tiles of 32 x 33 f32 or 64 x 65 halves (TILE + 1 elements a row).
    bool f32 = kernel.typeArguments.at(0).second == DType::F32;
    std::string cuda = emitCudaFiles({lower(kernel, PipelineOptions{})}, "linalg.emmy").source;
    CHECK(cuda.find(f32 ? "x_tile, 1056);" : "x_tile, 4160);") != std::string::npos);
    sim::SimulationOptions options;
    options.profile = true;
    sim::SimulatedKernel program(kernel, emitCudaFiles({lower(kernel, PipelineOptions{})}, "linalg.emmy"), options);
    KernelRun run = program.run(testing::randomInputs(kernel, {{"M", 64}, {"N", 96}}, 3));
    INFO(run.failure.value_or(""));
    REQUIRE(run.profile.has_value());
    int sharedSites = 0, vectorStores = 0;
    for (const sim::KernelProfile& profile : run.profile->kernels)
      for (const sim::AccessSite& site : profile.sites) {
        INFO(site.line << ": " << site.code);
        if (site.global) {
          // The rows of x (96 elements) and y (64) are whole vectors: every load and store is one of 16
          // bytes, a store 4 sectors a request (of x's last tile of columns only the first half is inside).
          CHECK(site.bytes == 16u);
          if (site.store) CHECK(site.counters.sectors == 4 * site.counters.requests);
          vectorStores += site.store ? 1 : 0;
          continue;
        }
        // The column reads and the fill's stores are free of conflicts (in 16-bit types each warp of the
        // fill takes every other row: the padded rows put two consecutive ones in the same banks).
        CHECK(site.counters.wavefronts == site.counters.idealWavefronts);
        ++sharedSites;
      }
    CHECK(sharedSites >= 2);  // the tile's fill and its column reads
    CHECK(vectorStores == 1);
  }
}

}  // namespace emmy
