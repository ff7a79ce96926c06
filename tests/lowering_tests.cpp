// The whole lowering, checked on the CPU: the generated CUDA of every example, stdlib and
// tests/lowering kernel instance runs in the simulation (backend/sim) and agrees with the reference evaluator within the
// dtype's tolerance, at ragged sizes and at one size over 10^5 elements; every generated file compiles
// with NVRTC for sm_80 and sm_90 without spills.
#include <catch2/catch.hpp>

#include "backend/nvrtc.h"
#include "backend/sim/simulator.h"
#include "driver/compare.h"
#include "driver/pipeline.h"
#include "test_kernels.h"

namespace {

namespace fs = std::filesystem;
using namespace emmy;

sim::CudaSource cudaOf(const Lowered& lowered, const fs::path& source) {
  return emitCudaFiles({lowered}, source.string());
}

// Runs `program` on random inputs with every size `size` and compares every output.
void checkAgainstEvaluator(const tensor::Kernel& kernel, const sim::SimulatedKernel& program, int64_t size) {
  std::map<std::string, int64_t> sizes;
  for (const std::string& name : kernel.sizes) sizes[name] = size;
  testing::checkAgainstEvaluator(kernel, program, sizes, 1000 + size);
}

}  // namespace

// The empty sizes run here, on the programs compiled for the ragged ones, since compiling is most of the time.
TEST_CASE("every example, stdlib and construct kernel passes the simulated check at ragged sizes and with each size 0 "
          "in turn",
          "[lowering][empty]") {
  for (const fs::path& source : testing::loweringSources()) {
    for (const tensor::Kernel& kernel : testing::kernelsOf(source)) {
      sim::SimulatedKernel program(kernel, cudaOf(lower(kernel, PipelineOptions{}), source));
      for (int64_t size : {1, 7, 13}) checkAgainstEvaluator(kernel, program, size);
      for (const std::map<std::string, int64_t>& sizes : testing::sizesWithOneEmpty(kernel))
        testing::checkAgainstEvaluator(kernel, program, sizes, 11);
    }
  }
}

TEST_CASE("large sizes: over 10^5 elements, not a multiple of any block", "[lowering]") {
  const fs::path dir = EMMY_SOURCE_DIR;
  struct Case {
    fs::path file;
    std::string instance;
    int64_t size;
  };
  for (const Case& c : {Case{dir / "examples/gelu.emmy", "bias_gelu", 331}, Case{dir / "stdlib/nn.emmy", "softmax_f16", 347},
                        Case{dir / "stdlib/nn.emmy", "layernorm_bf16", 317}}) {
    for (const tensor::Kernel& kernel : testing::kernelsOf(c.file)) {
      if (kernel.instanceName() != c.instance) continue;
      sim::SimulatedKernel program(kernel, cudaOf(lower(kernel, PipelineOptions{}), c.file));
      checkAgainstEvaluator(kernel, program, c.size);
    }
  }
}

TEST_CASE("elementwise loops move 16-byte groups, four of them in flight per thread", "[lowering]") {
  const fs::path file = fs::path(EMMY_SOURCE_DIR) / "examples/gelu.emmy";
  for (const tensor::Kernel& kernel : testing::kernelsOf(file)) {
    std::string cuda = cudaOf(lower(kernel, PipelineOptions{}), file).source;
    INFO(cuda);
    CHECK(cuda.find("alignas(16) float x__vector[16];") != std::string::npos);
    CHECK(cuda.find("*reinterpret_cast<uint4*>(&x__vector[(element__slot * (int64_t)4)]) = "
                    "*reinterpret_cast<const uint4*>(&x[(element__group * (int64_t)4)]);") != std::string::npos);
    // Two blocks of 256 threads for 4109 elements: groups one, two and three grid strides on, a tail.
    sim::SimulatedKernel program(kernel, cudaOf(lower(kernel, PipelineOptions{}), file));
    testing::checkAgainstEvaluator(kernel, program, {{"N", 1}, {"D", 4109}}, 5);
  }
}

TEST_CASE("every generated file compiles with NVRTC for sm_80 and sm_90, examples and stdlib without spills",
          "[lowering][nvrtc]") {
  std::string whyNot;
  INFO(whyNot);
  REQUIRE(nvrtcAvailable(&whyNot));  // the set-up requires the CUDA toolkit
  std::vector<fs::path> accepted = testing::acceptedSources();
  for (const fs::path& source : testing::loweringSources()) {
    bool example = std::find(accepted.begin(), accepted.end(), source) != accepted.end();
    std::vector<Lowered> lowered;
    for (const tensor::Kernel& kernel : testing::kernelsOf(source)) lowered.push_back(lower(kernel, PipelineOptions{}));
    cuda::GeneratedCuda files = emitCudaFiles(lowered, source.string());
    for (const char* arch : {"sm_80", "sm_90"}) {
      INFO(source.filename().string() << " for " << arch);
      CudaCompileResult compiled = compileCuda(files.source, files.baseName + ".cu", arch, true);
      INFO(compiled.log);
      REQUIRE(compiled.ok);
      for (const KernelResources& resources : resourceUsage(compiled)) {
        if (!example) break;  // the construct tests are there for correctness
        INFO(resources.kernel);
        CHECK(resources.spillStoreBytes == 0);
        CHECK(resources.spillLoadBytes == 0);
      }
    }
  }
}
