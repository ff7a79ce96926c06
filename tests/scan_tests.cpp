// Running reductions as block-level scans (`scan`, ir/tile/prefix_scan.h): a generator of running
// reductions and scan shapes checked in the simulation (race and bounds checks on) against the reference
// evaluator across several tiles of every shape, the default policy's choice, and the work it saves.
#include <random>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "backend/sim/simulator.h"
#include "compiler/pipeline.h"
#include "test_kernels.h"

using namespace emmy;

namespace {

sim::CudaSource cudaOf(const tensor::Kernel& kernel) { return emitCudaFiles({lower(kernel, PipelineOptions{})}, "scan.emmy"); }

}  // namespace

TEST_CASE("generated running reductions and scan shapes match the evaluator over several tiles", "[scan][sweep]") {
  // Each case draws the reduction (its op, inclusive or exclusive, its dtype and its axis among three),
  // the block (THREADS, ITEMS) and sizes that take the row over one to three tiles with a ragged last one,
  // and a row count from 0 to 3. Sums fold |x| (a float sum that cancels to near 0 is held to a tolerance
  // the reference's own rounding misses) and products 1 + x / 64, so that values stay in range.
  std::mt19937_64 random(20261204);
  auto pick = [&](auto... options) {
    std::array values{options...};
    return values[std::uniform_int_distribution<size_t>(0, values.size() - 1)(random)];
  };
  for (int trial = 0; trial < 24; ++trial) {
    std::string op = pick("sum", "prod", "max", "min");
    std::string dtype = pick("f32", "f16", "bf16", "i32", "i64");
    bool inclusive = pick(true, false);
    int axis = pick(0, 1, 2);
    int64_t threads = pick(32, 64, 128, 256), items = std::uniform_int_distribution<int64_t>(1, 16)(random);
    bool integer = dtype[0] == 'i';
    // Within the 48 KiB of shared memory: two copies of the tile and two of the threads' totals.
    int64_t accumulatorBytes = dtype == "i64" ? 8 : 4;
    while (accumulatorBytes * (2 * (threads * items + threads * items / 32 + 1) + 2 * threads) > 48 * 1024) --items;
    std::string read = "x[" + std::string(axis == 0 ? "k, a, b" : axis == 1 ? "a, k, b" : "a, b, k") + "]";
    std::string term = op == "sum"    ? (integer ? read + " % 7" : "abs(" + read + ")")
                       : op == "prod" ? (integer ? read + " % 2 + 1" : "1 + " + read + " / 64")
                                      : read;
    std::string left = axis == 0 ? "t, a, b" : axis == 1 ? "a, t, b" : "a, b, t";
    std::string source = fmt::format(
        "kernel running(x: {0}[P, Q, R]) -> (y: {0}[P, Q, R]) {{\n"
        "    y[{1}] = {2}[k < t{3}]({4})\n}}\n"
        "schedule running {{\n    scan y.t by ({5}, {6})\n}}\n",
        dtype, left, op, inclusive ? " + 1" : "", term, threads, items);
    INFO(source);
    tensor::Kernel kernel = testing::kernelsOfText(source).at(0);
    sim::SimulatedKernel program(kernel, cudaOf(kernel));
    int64_t tile = threads * items;
    int64_t length = std::uniform_int_distribution<int64_t>(1, std::min<int64_t>(3 * tile, 3000))(random);
    int64_t rows = std::uniform_int_distribution<int64_t>(0, 3)(random);
    std::map<std::string, int64_t> sizes{{"P", rows}, {"Q", 2}, {"R", 1}};
    sizes[std::string(1, "PQR"[axis])] = length;
    if (axis != 0) sizes["P"] = std::max<int64_t>(rows, 1);
    CAPTURE(sizes);
    testing::checkAgainstEvaluator(kernel, program, sizes, 100 + trial);
    testing::checkAgainstEvaluator(kernel, program, {{"P", 0}, {"Q", 0}, {"R", 0}}, 7);
  }
}

TEST_CASE("the default policy runs a running reduction as a scan: one read of each element instead of one per later "
          "element", "[scan][profile]") {
  tensor::Kernel kernel = testing::kernelsOfText("kernel running(x: f32[N, T]) -> (y: f32[N, T]) {\n"
                                                 "    y[n, t] = sum[k < t + 1](abs(x[n, k]))\n}\n").at(0);
  Lowered lowered = lower(kernel, PipelineOptions{});
  std::string schedule = fmt::format("{}", fmt::join(lowered.tile.schedule, "\n"));
  CHECK_THAT(schedule, Catch::Contains("scan y.t by (y_scan_threads, y_scan_items)"));
  CHECK_THAT(schedule, Catch::Contains("bind y.n to block.x"));
  sim::SimulationOptions options;
  options.profile = true;
  sim::SimulatedKernel program(kernel, emitCudaFiles({lowered}, "running.emmy"), options);
  // Three rows of just over two tiles of 256 x 8, each row starting a whole number of 128-byte lines in.
  KernelRun run = program.run(testing::randomInputs(kernel, {{"N", 3}, {"T", 4128}}, 3));
  INFO(run.failure.value_or(""));
  REQUIRE_FALSE(run.failure);
  REQUIRE(run.profile.has_value());
  REQUIRE(run.profile->kernels.size() == 1);
  const sim::KernelProfile& profile = run.profile->kernels[0];
  CHECK(profile.requestedGlobalBytes() == profile.distinctGlobalBytes);
  CHECK(profile.blocks == 3);
  // A tile's barriers: after its loads, before each of the log2(256) steps over the threads' totals and
  // after the last, and before its stores.
  CHECK(profile.barriers == 3 * 3 * (1 + 8 + 1 + 1));
  testing::checkAgainstEvaluator(kernel, program, {{"N", 3}, {"T", 4099}}, 3);
}
