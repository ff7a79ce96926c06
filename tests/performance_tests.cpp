// The static performance report of `emmy build --stats --size ...` (performance/performance.h): occupancy
// from ptxas's registers and shared memory, the least bytes a kernel moves, its flops and the roofline
// bound, for a memory-bound softmax and a compute-bound matmul.
#include <regex>

#include <catch2/catch.hpp>

#include "backend/nvrtc.h"
#include "performance/performance.h"
#include "test_kernels.h"

namespace {

using namespace emmy;

std::vector<std::string> reportOf(const std::string& example, const std::map<std::string, int64_t>& sizes) {
  std::vector<Lowered> lowered;
  for (const tensor::Kernel& kernel : testing::kernelsOf(std::filesystem::path(EMMY_SOURCE_DIR) / "examples" / (example + ".emmy")))
    lowered.push_back(lower(kernel, PipelineOptions{}));
  cuda::GeneratedCuda files = emitCudaFiles(lowered, example + ".emmy");
  std::string whyNot;
  REQUIRE(nvrtcAvailable(&whyNot));
  CudaCompileResult compiled = compileCuda(files.source, example + ".cu", "sm_90", true);
  REQUIRE(compiled.ok);
  return performanceReport(lowered, resourceUsage(compiled), compiled.ptx, "sm_90", sizes);
}

}  // namespace

TEST_CASE("the --stats report: occupancy, bytes, flops and the roofline bound", "[stats]") {
  std::vector<std::string> softmax = reportOf("softmax", {{"N", 4096}, {"D", 1024}});
  REQUIRE(softmax.size() == 1);
  INFO(softmax[0]);
  CHECK(std::regex_search(softmax[0], std::regex(R"(block 256 threads; occupancy \d+% on sm_90 \(\d+ blocks per SM)")));
  // x read once and y written once: 2 x 4096 x 1024 x 4 bytes.
  CHECK(std::regex_search(softmax[0], std::regex(R"(N=4096 D=1024: grid 4096x1x1; 33\.55 MB moved, .* memory-bound)")));
  std::vector<std::string> matmul = reportOf("matmul", {{"M", 4096}, {"K", 4096}, {"N", 4096}});
  REQUIRE(matmul.size() == 1);
  INFO(matmul[0]);
  // 2 x 4096^3 flops for the multiply-adds.
  CHECK(std::regex_search(matmul[0], std::regex(R"(grid 64x64x1; 201\.33 MB moved, 137\.44 GFLOP; roofline bound 2\.05 ms .* compute-bound)")));
  CHECK(std::regex_search(matmul[0], std::regex(R"(block 16x16x1 threads; occupancy)")));
  // Without sizes, only the block and the occupancy.
  CHECK(reportOf("softmax", {})[0].find("moved") == std::string::npos);
}
