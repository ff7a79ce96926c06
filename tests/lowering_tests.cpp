// The whole lowering, checked on the CPU: the generated CUDA of every example, stdlib and
// tests/lowering kernel instance runs in the simulation (backend/sim) and agrees with the reference evaluator within the
// dtype's tolerance, at ragged sizes and at one size over 10^5 elements; every generated file compiles
// with NVRTC for sm_80 or sm_90 without spills.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <set>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "backend/nvrtc.h"
#include "backend/sim/simulator.h"
#include "check/compare.h"
#include "compiler/pipeline.h"
#include "support/diagnostics.h"
#include "support/dtype.h"
#include "support/text.h"
#include "test_kernels.h"

namespace {

namespace fs = std::filesystem;
using namespace emmy;

sim::CudaSource cudaOf(const Lowered& lowered, const fs::path& source) {
  return emitCudaFiles({lowered}, source.string());
}

// Runs `program` on random inputs with every size `size` (or the largest below it that the simulation affords:
// testing::everySize) and compares every output.
void checkAgainstEvaluator(const tensor::Kernel& kernel, const sim::SimulatedKernel& program, int64_t size) {
  testing::checkAgainstEvaluator(kernel, program, testing::everySize(kernel, size), 1000 + size);
}

}  // namespace

// The empty sizes and the 64-bit twins run here, on the programs compiled for the ragged sizes, since
// compiling is most of the time.
TEST_CASE("every example, stdlib and construct kernel passes the simulated check at ragged sizes and with each size 0 "
          "in turn",
          "[lowering][empty][sweep]") {
  for (const fs::path& source : testing::loweringSources()) {
    for (const tensor::Kernel& kernel : testing::kernelsOf(source)) {
      sim::SimulatedKernel program(kernel, cudaOf(lower(kernel, PipelineOptions{}), source));
      for (int64_t size : {1, 7, 13}) checkAgainstEvaluator(kernel, program, size);
      {
        // The launcher takes the kernels with 64-bit indices where those with 32 might not fit.
        testing::ScopedEnvironment wide("EMMY_SIM_INDEX_LIMIT", "0");
        checkAgainstEvaluator(kernel, program, 13);
      }
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
    CHECK(cuda.find("*reinterpret_cast<uint4*>(&x__vector[(n_d__slot * 4)]) = "
                    "*reinterpret_cast<const uint4*>(&x[(n_d__group * 4)]);") != std::string::npos);
    // Two blocks of 256 threads for 4109 elements: groups one, two and three grid strides on, a tail.
    sim::SimulatedKernel program(kernel, cudaOf(lower(kernel, PipelineOptions{}), file));
    testing::checkAgainstEvaluator(kernel, program, {{"N", 1}, {"D", 4109}}, 5);
  }
}

TEST_CASE("an elementwise loop divides its flat index by a size once a group, not once an element, and reads a row vector by groups", "[lowering]") {
  // Broadcasts along each axis, in f32 (groups of 4) and f16 (groups of 8), at extents below, at and
  // above the group, multiples of it or not: a group then lies in one row, spans two, or many (the
  // scalar path).
  const std::string source = R"(
kernel rows(x: f32[N, D], b: f32[D], c: f32[N]) -> (y: f32[N, D]) {
    y[n, d] = x[n, d] * b[d] + c[n]
}
kernel cube(x: f16[A, B, C], w: f16[B], v: f16[C]) -> (y: f16[A, B, C]) {
    y[a, i, j] = x[a, i, j] + w[i] * v[j]
}
)";
  std::vector<tensor::Kernel> kernels = testing::kernelsOfText(source);
  REQUIRE(kernels.size() == 2);
  for (const tensor::Kernel& kernel : kernels) {
    sim::CudaSource cuda = emitCudaFiles({lower(kernel, PipelineOptions{})}, "broadcast.emmy");
    INFO(cuda.source);
    bool rows = kernel.name == "rows";
    int width = rows ? 4 : 8;
    std::string flat = rows ? "n_d" : "a_i_j";
    // One remainder a group. Where the rows are whole groups, the row vector is read a group at a time;
    // otherwise the lanes carry into the next row at most once, so groups must be no longer than a row.
    std::string inner = rows ? "D" : "C", rowVector = rows ? "b" : "v";
    CHECK(cuda.source.find("const emmy_index_t " + flat + "__remainder0 = ((" + flat + "__group * " +
                           std::to_string(width) + ") % " + inner + ");") != std::string::npos);
    CHECK(cuda.source.find(fmt::format("& 15) == 0 && (({} % {}) == 0)) {{", inner, width)) != std::string::npos);
    CHECK(cuda.source.find(fmt::format("*reinterpret_cast<const uint4*>(&{}[{}__remainder0]);", rowVector, flat)) !=
          std::string::npos);
    CHECK(cuda.source.find(fmt::format("& 15) == 0 && ({} >= {})) {{", inner, width)) != std::string::npos);
    sim::SimulatedKernel program(kernel, cuda);
    int seed = 0;
    for (int64_t inner : {1, 2, 3, 4, 5, 7, 8, 9, 16, 37})
      for (int64_t outer : {1, 3, 70}) {
        std::map<std::string, int64_t> sizes = rows ? std::map<std::string, int64_t>{{"N", outer}, {"D", inner}}
                                                    : std::map<std::string, int64_t>{{"A", outer}, {"B", 3}, {"C", inner}};
        testing::checkAgainstEvaluator(kernel, program, sizes, ++seed);
      }
  }
}

TEST_CASE("the max and min of a vector's 16-bit lanes, a pair at a time, keep NaN, infinities and signed zeros", "[lowering]") {
  tensor::Kernel kernel;
  for (const tensor::Kernel& each : testing::kernelsOf(fs::path(EMMY_SOURCE_DIR) / "tests" / "lowering" / "constructs.emmy"))
    if (each.name == "extremes16") kernel = each;
  REQUIRE(kernel.name == "extremes16");
  cuda::GeneratedCuda cuda = emitCudaFiles({lower(kernel, PipelineOptions{})}, "constructs.emmy");
  CHECK(cuda.source.find("hi__acc = emmy_max(hi__acc, emmy_max_of_lanes<8>(") != std::string::npos);
  CHECK(cuda.source.find("lo__acc = emmy_min(lo__acc, emmy_min_of_lanes<8>(") != std::string::npos);
  // Rows of 24 (three vectors): a NaN in each lane of a vector in turn, infinities, signed zeros, ordinary.
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  const int64_t rows = 12, d = 24;
  Buffer x(DType::F16, {rows, d}), z(DType::BF16, {rows, d});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t e = 0; e < d; ++e) {
      double value = r < 8 && e == 8 + r ? nan : r == 8 ? -inf : r == 9 ? (e == 5 ? inf : 1.0) : r == 10 ? (e % 2 ? -0.0 : 0.0)
                                                                                                 : 0.25 * static_cast<double>((e * 7 + r) % 11) - 1;
      x.set(r * d + e, Value::ofFloat(DType::F16, value));
      z.set(r * d + e, Value::ofFloat(DType::BF16, value));
    }
  sim::SimulatedKernel program(kernel, cuda);
  testing::checkAgainstEvaluator(kernel, program, tensor::EvaluationInputs{{{"x", x}, {"z", z}}, {}, {}});
}

TEST_CASE("a loop guarded by its own variable ends where the guard fails, whole vectors apart from the tail",
          "[lowering]") {
  // The row kernels' passes: a thread's vectors of the row, up to its end. Rows shorter than a lane's
  // first vector (the bound is negative for most threads), around one vector per thread, and not a
  // multiple of the vector.
  const fs::path file = fs::path(EMMY_SOURCE_DIR) / "stdlib/nn.emmy";
  for (const char* instance : {"softmax_f32", "layernorm_f16"}) {
    for (const tensor::Kernel& kernel : testing::kernelsOf(file)) {
      if (kernel.instanceName() != instance) continue;
      sim::CudaSource cuda = cudaOf(lower(kernel, PipelineOptions{}), file);
      INFO(cuda.source);
      CHECK(cuda.source.find("d_step_2__whole") != std::string::npos);
      CHECK(cuda.source.find("if ((((d_step_2 * (int64_t)256) + d_lane_2)") == std::string::npos);
      sim::SimulatedKernel program(kernel, cuda);
      int seed = 0;
      for (int64_t d : {1, 2, 3, 5, 1023, 1024, 1025, 4099})
        testing::checkAgainstEvaluator(kernel, program, {{"N", 2}, {"D", d}}, ++seed);
    }
  }
}

// Each file for one of sm_80 and sm_90, in turn (the sources sorted): NVRTC takes most of this test's
// time, and the tensor-core test compiles the products for both.
TEST_CASE("every generated file compiles with NVRTC for sm_80 or sm_90, examples and stdlib without spills",
          "[lowering][nvrtc][sweep]") {
  std::string whyNot;
  INFO(whyNot);
  REQUIRE(nvrtcAvailable(&whyNot));  // the set-up requires the CUDA toolkit
  std::vector<fs::path> accepted = testing::acceptedSources();
  std::vector<fs::path> sources = testing::loweringSources();
  for (size_t k = 0; k < sources.size(); ++k) {
    const fs::path& source = sources[k];
    bool example = std::find(accepted.begin(), accepted.end(), source) != accepted.end();
    std::vector<Lowered> lowered;
    for (const tensor::Kernel& kernel : testing::kernelsOf(source)) lowered.push_back(lower(kernel, PipelineOptions{}));
    cuda::GeneratedCuda files = emitCudaFiles(lowered, source.string());
    for (const char* arch : {k % 2 == 0 ? "sm_90" : "sm_80"}) {
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

// i32 and i64 arithmetic wraps (LANGUAGE.md section 3). The generated code must wrap by itself, not by
// the host compiler's leave (the simulation compiles without -fwrapv, as nvcc does), so the simulation is
// built here with the undefined-behaviour sanitizer, which aborts the run at any signed overflow, on
// inputs at the ends of each type's range.
TEST_CASE("integer arithmetic wraps in the generated code, with no undefined behaviour", "[lowering][ubsan]") {
  const std::string source = R"(
kernel wrapping(a: i32[N], b: i32[N]) -> (sum: i32[N], difference: i32[N], product: i32[N], negated: i32[N], absolute: i32[N], quotient: i32[N], power: i32[N], grows: bool[N]) {
    sum[i] = a[i] + b[i] + 2147483647
    difference[i] = a[i] - b[i] - 2147483647
    product[i] = a[i] * b[i] * 65536
    negated[i] = -a[i]
    absolute[i] = abs(a[i])
    quotient[i] = a[i] / b[i] + a[i] % b[i] + a[i] / -1
    power[i] = pow(a[i], 3) + pow(b[i], 31)
    grows[i] = a[i] + 1 > a[i]
}
kernel wide_wrapping(c: i64[N], d: i64[N]) -> (wide: i64[N], wide_negated: i64[N], wide_absolute: i64[N], wide_power: i64[N], wide_grows: bool[N], from_index: i64[N]) {
    wide[i] = c[i] * d[i] + c[i] - d[i] + 9223372036854775807
    wide_negated[i] = -c[i] - (c[i] / -1)
    wide_absolute[i] = abs(c[i])
    wide_power[i] = pow(c[i], 5)
    wide_grows[i] = c[i] + 1 > c[i]
    from_index[i] = i * 4611686018427387904 + i * N * 3037000500
}
kernel narrow_wrapping(e: i8[N], f: i8[N]) -> (narrow: i8[N]) {
    narrow[i] = e[i] * f[i] + -e[i] - f[i] + abs(e[i])
}
kernel row_sums(a: i32[N, D], c: i64[N, D]) -> (s: i32[N], t: i64[N], u: i32[D]) {
    s[n] = sum[d](a[n, d] * 3)
    t[n] = sum[d](c[n, d] * c[n, d])
    u[d] = sum[n](a[n, d])
}
)";
  // Each type's extremes and the values around them, in every pairing of a and b (c and d, e and f).
  auto extremes = [](int64_t lowest, int64_t highest) {
    return std::vector<int64_t>{lowest, lowest + 1, -65536, -3, -1, 0, 1, 2, 46341, 65536, highest - 1, highest};
  };
  const std::map<DType, std::vector<int64_t>> values{{DType::I32, extremes(INT32_MIN, INT32_MAX)},
                                                     {DType::I64, extremes(INT64_MIN, INT64_MAX)},
                                                     {DType::I8, extremes(INT8_MIN, INT8_MAX)}};
  sim::SimulationOptions sanitized;
  sanitized.extraCompilerFlags = {"-fsanitize=undefined", "-fno-sanitize-recover=all"};
  for (const tensor::Kernel& kernel : testing::kernelsOfText(source)) {
    sim::CudaSource cuda = emitCudaFiles({lower(kernel, PipelineOptions{})}, "wrapping.emmy");
    sim::SimulatedKernel program(kernel, cuda, sanitized);
    for (int64_t size : {12 * 12, 13}) {
      tensor::EvaluationInputs inputs;
      for (const std::string& name : kernel.sizes) inputs.sizes[name] = size;
      for (const tensor::TensorParam& input : kernel.inputs) {
        std::vector<int64_t> shape;
        for (const tensor::Dim& dim : input.shape) shape.push_back(tensor::evaluateDim(dim, inputs.sizes));
        Buffer buffer(input.dtype, shape);
        const std::vector<int64_t>& pool = values.at(input.dtype);
        // The second operand of each pair steps 12 times slower, so that every pair occurs.
        bool second = input.name == "b" || input.name == "d" || input.name == "f";
        for (int64_t k = 0; k < buffer.numel(); ++k)
          buffer.set(k, Value::ofInt(input.dtype, pool[(second ? k / 12 : k) % pool.size()]));
        inputs.tensors[input.name] = std::move(buffer);
      }
      INFO(kernel.instanceName() << " at " << size << "\n" << cuda.source);
      testing::checkAgainstEvaluator(kernel, program, inputs);
    }
  }
}

// The default schedule of a 4-D elementwise kernel splits each thread's flat index into 4 coordinates in
// every unrolled lane; with the division helper's tests for 0 and -1 there (the divisors are extents,
// never either), NVRTC took 16 to 28 s on it. Plain index division compiles in well under a second.
TEST_CASE("a 4-D elementwise kernel compiles with NVRTC in seconds and runs at ragged sizes", "[lowering][nvrtc]") {
  const std::string source = R"(
kernel ew(x: bf16[A, B, C, D], w: bf16[C, D], v: bf16[B, 1, 1]) -> (z: bf16[A, B, C, D]) {
    z[a, b, c, d] = x[a, b, c, d] * w[c, d] + v[b, 0, 0] + x[a, b, c, D - 1 - d]
}
)";
  std::vector<tensor::Kernel> kernels = testing::kernelsOfText(source);
  REQUIRE(kernels.size() == 1);
  sim::CudaSource cuda = emitCudaFiles({lower(kernels[0], PipelineOptions{})}, "ew.emmy");
  std::string whyNot;
  REQUIRE(nvrtcAvailable(&whyNot));
  auto start = std::chrono::steady_clock::now();
  CudaCompileResult compiled = compileCuda(cuda.source, "ew.cu", "sm_90", false);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(compiled.log);
  REQUIRE(compiled.ok);
  CHECK(seconds < 5);
  sim::SimulatedKernel program(kernels[0], cuda);
  testing::checkAgainstEvaluator(kernels[0], program, {{"A", 3}, {"B", 5}, {"C", 7}, {"D", 13}}, 1);
  testing::checkAgainstEvaluator(kernels[0], program, {{"A", 2}, {"B", 1}, {"C", 3}, {"D", 64}}, 2);
}

TEST_CASE("random elementwise outputs, stored by one kernel or apart as the schedule says, agree with the reference", "[lowering]") {
  // Programs of 2 to 4 outputs of random types and expressions, over [N, D] or [D, N], some reading an
  // earlier output or a row maximum, with no schedule, `root` of one, or `compute` of one at another
  // (refused with a diagnostic where it cannot be stored beside it).
  std::mt19937_64 random(20261204);
  auto pick = [&](const std::vector<std::string>& from) { return from[random() % from.size()]; };
  for (int trial = 0; trial < 24; ++trial) {
    int count = 2 + static_cast<int>(random() % 3);
    std::string common = pick({"f32", "f16", "bf16"});  // most outputs' type
    bool rowMax = random() % 3 == 0;
    std::vector<std::string> names, types, declarations, bodies;
    std::vector<bool> transposed;
    bool reads = rowMax;
    if (rowMax) bodies.push_back("    m[n] = max[d](x[n, d])\n");
    for (int k = 0; k < count; ++k) {
      names.push_back(fmt::format("o{}", k));
      types.push_back(random() % 3 == 0 ? pick({"f32", "f16", "bf16"}) : common);
      transposed.push_back(random() % 5 == 0);
      std::string term = fmt::format("{}(f32(x[n, d]) * {} + f32(b[d]))", pick({"tanh", "gelu", "sigmoid", "relu", "abs"}),
                                     pick({"0.5", "2", "-1.25"}));
      if (rowMax && random() % 2 == 0) term += " - m[n]";
      for (int j = 0; j < k; ++j)
        if (!transposed[j] && !transposed[k] && random() % 5 == 0) {
          term += fmt::format(" + f32({}[n, d])", names[j]);
          reads = true;
        }
      declarations.push_back(fmt::format("{}: {}[{}]", names[k], types[k], transposed[k] ? "D, N" : "N, D"));
      bodies.push_back(fmt::format("    {}[{}] = {}({})\n", names[k], transposed[k] ? "d, n" : "n, d", types[k], term));
    }
    std::string schedule;
    int form = static_cast<int>(random() % 3);
    int first = static_cast<int>(random() % count), second = (first + 1 + static_cast<int>(random() % (count - 1))) % count;
    if (form == 1) schedule = fmt::format("schedule k {{\n    root {}\n}}\n", names[first]);
    if (form == 2) schedule = fmt::format("schedule k {{\n    compute {} at {}.{}\n}}\n", names[first], names[second],
                                          transposed[second] ? "n" : "d");
    std::string source = fmt::format("kernel k(x: f32[N, D], b: f32[D]) -> ({}) {{\n{}}}\n{}", join(declarations, ", "),
                                     join(bodies, ""), schedule);
    INFO(source);
    std::vector<tensor::Kernel> kernels = testing::kernelsOfText(source);
    REQUIRE(kernels.size() == 1);
    std::optional<Lowered> lowered;
    try {
      lowered = lower(kernels[0], PipelineOptions{});
    } catch (const emmy::CompilationFailed& failed) {
      INFO(failed.diagnostics.render());
      CHECK(form == 2);  // only a `compute` of an output that cannot be stored beside the other is refused
      CHECK(failed.diagnostics.render().find("cannot compute") != std::string::npos);
      continue;
    }
    // Without a schedule and reads between them, the outputs of one extent and element size share a kernel.
    if (form == 0 && !reads) {
      std::set<std::pair<bool, int>> kinds;
      for (int k = 0; k < count; ++k) kinds.insert({transposed[k], dtypeBytes(parseDType(types[k]).value())});
      CHECK(lowered->loop.kernels.size() == kinds.size());
    }
    sim::SimulatedKernel program(kernels[0], cudaOf(*lowered, "outputs.emmy"));
    for (const std::map<std::string, int64_t>& sizes :
         std::vector<std::map<std::string, int64_t>>{{{"N", 3}, {"D", 5}}, {{"N", 1}, {"D", 1}}, {{"N", 5}, {"D", 16}}, {{"N", 0}, {"D", 3}}})
      testing::checkAgainstEvaluator(kernels[0], program, sizes, 7 + trial);
  }
}
