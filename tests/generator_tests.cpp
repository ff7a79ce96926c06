// Random well-formed programs with random schedules (program_generator.h): each is built, run in the
// simulation (races and out-of-bounds accesses are checked there) against the reference evaluator at
// ragged sizes, and its .cu compiled with `nvcc -c -arch=sm_90` where nvcc is present. A schedule with
// directives drawn without regard to legality may end in a clean diagnostic, never an internal error.
//
// CI runs seeds 1..kCiCount with the features the language does not have yet left out (see ciOptions).
// On demand:
//   EMMY_GENERATOR_SEED=S (first seed, default 1) EMMY_GENERATOR_COUNT=N (default kCiCount)
//   EMMY_GENERATOR_FULL=1 (every feature) EMMY_GENERATOR_KEEP=DIR (writes each program as DIR/S.emmy)
//   build/bin/emmy_unit_tests "[generator]"
#include <cstdlib>
#include <fstream>
#include <future>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "backend/sim/simulator.h"
#include "compiler/pipeline.h"
#include "frontend/frontend.h"
#include "program_generator.h"
#include "schedule_round_trip.h"
#include "support/diagnostics.h"
#include "support/process.h"
#include "test_kernels.h"

namespace {

using namespace emmy;
namespace fs = std::filesystem;

// About 60 s of CI time on two cores.
constexpr int kCiCount = 12;

// The language features of issue 18 that the frontend does not have yet (argmax/argmin/logsumexp,
// reductions with bounded indices) are left out of CI; EMMY_GENERATOR_FULL=1 puts them back. Widen this
// when they land.
testing::GeneratorOptions ciOptions() { return testing::GeneratorOptions(); }

int64_t environmentNumber(const char* name, int64_t fallback) {
  const char* value = std::getenv(name);
  return value && *value ? std::stoll(value) : fallback;
}

fs::path nvccPath() {
  if (const char* path = std::getenv("EMMY_NVCC")) return path;
  return "/usr/local/cuda/bin/nvcc";
}

// `nvcc -c -arch=sm_90` of the generated files, host and device code: "" when it compiled without a
// warning (a user's build shows them), else what nvcc said.
std::string compileWithNvcc(const cuda::GeneratedCuda& cuda) {
  TemporaryFolder folder;
  std::ofstream(folder.path() / (cuda.baseName + ".cu")) << cuda.source;
  std::ofstream(folder.path() / (cuda.baseName + ".h")) << cuda.header;
  ProcessOutcome outcome = runProcess({nvccPath().string(), "-c", "-arch=sm_90", cuda.baseName + ".cu", "-o", "out.o"},
                                      folder.path(), folder.path() / "nvcc.log", std::chrono::minutes(5));
  if (outcome.kind != ProcessOutcome::Kind::Exited || outcome.code != 0) return "nvcc failed:\n" + outcome.output;
  if (outcome.output.find("warning") != std::string::npos) return "nvcc warned:\n" + outcome.output;
  return "";
}

}  // namespace

TEST_CASE("random programs with random schedules agree with the reference, and nvcc compiles them", "[generator]") {
  const bool full = environmentNumber("EMMY_GENERATOR_FULL", 0) != 0;
  const int64_t first = environmentNumber("EMMY_GENERATOR_SEED", 1);
  const int64_t count = environmentNumber("EMMY_GENERATOR_COUNT", kCiCount);
  const uint64_t seed = GENERATE_COPY(range(first, first + count));
  testing::GeneratedProgram program = testing::generateProgram(seed, full ? testing::GeneratorOptions{} : ciOptions());
  if (const char* keep = std::getenv("EMMY_GENERATOR_KEEP")) {
    fs::create_directories(keep);
    std::ofstream(fs::path(keep) / fmt::format("{}.emmy", seed)) << program.source;
  }
  std::string sizeText;
  for (const auto& sizes : program.sizes) {
    sizeText += "\n   ";
    for (const auto& [name, value] : sizes) sizeText += fmt::format(" --size {}={}", name, value);
  }
  INFO("seed " << seed << ", reproduce with: EMMY_GENERATOR_SEED=" << seed << " EMMY_GENERATOR_COUNT=1"
               << (full ? " EMMY_GENERATOR_FULL=1" : "") << " build/bin/emmy_unit_tests \"[generator]\"\n"
               << program.source << "sizes:" << sizeText);

  Diagnostics diagnostics;
  Frontend frontend(diagnostics, {Frontend::defaultStdlibDir()});
  std::vector<tensor::Kernel> kernels;
  if (const ast::Module* module = frontend.loadText("generated.emmy", program.source, Frontend::defaultStdlibDir()))
    kernels = frontend.elaborateAll(*module);
  INFO(diagnostics.render());
  REQUIRE_FALSE(diagnostics.hasErrors());
  auto kernel = std::find_if(kernels.begin(), kernels.end(), [&](const tensor::Kernel& k) { return k.name == program.kernel; });
  REQUIRE(kernel != kernels.end());

  Lowered lowered;
  try {
    lowered = lower(*kernel, PipelineOptions{});
  } catch (const CompilationFailed& failed) {
    INFO(failed.diagnostics.render());
    // Only a schedule drawn without regard to legality may be refused, with a diagnostic.
    REQUIRE(program.scheduleMayBeRefused);
    REQUIRE(failed.diagnostics.hasErrors());
    return;
  }
  // The schedule --emit schedule prints builds the same code.
  testing::checkScheduleRoundTrip(program.source, Frontend::defaultStdlibDir() / "generated.emmy", program.kernel);
  cuda::GeneratedCuda cuda = emitCudaFiles({lowered}, "generated.emmy");
  std::future<std::string> nvcc;
  if (fs::exists(nvccPath())) nvcc = std::async(std::launch::async, compileWithNvcc, cuda);
  sim::SimulatedKernel simulated(*kernel, cuda);
  for (size_t k = 0; k < program.sizes.size(); ++k)
    testing::checkAgainstEvaluator(*kernel, simulated, program.sizes[k], seed * 10 + k);
  if (nvcc.valid()) {
    std::string failure = nvcc.get();
    INFO(failure);
    CHECK(failure.empty());
  }
}
