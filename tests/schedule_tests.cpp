// Schedules applied: the matmul schedule of section 5 and a cooperative softmax run correctly at ragged
// sizes and their CUDA has what the directives ask for; schedules drawn at random from the legal space
// of five kernels all agree with the reference; every schedule block of the stdlib, with directives
// dropped and bindings moved, is completed by the default policy or refused with a diagnostic; a cache
// of whole rows serves the rows that fit; an attention's softmax is computed online in one pass;
// `--emit schedule` fed back gives the same CUDA; every generated file compiles with NVRTC for sm_80 and
// sm_90.
#include <array>
#include <chrono>
#include <random>
#include <regex>
#include <sstream>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "backend/nvrtc.h"
#include "backend/sim/simulator.h"
#include "compiler/pipeline.h"
#include "frontend/frontend.h"
#include "ir/tile/printer.h"
#include "ir/tile/schedule_model.h"
#include "golden_files.h"
#include "random_schedules.h"
#include "schedule_round_trip.h"
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

// kLayernorm's mean and variance, each reduced across `lanes` threads.
std::string layernormMembers(int lanes) {
  return fmt::format(R"(    split mu.d by {0} -> (d_step, d_lane)
    reorder mu (d_lane, d_step)
    bind mu.d_lane to thread.x
    split var.d by {0} -> (d_step, d_lane)
    reorder var (d_lane, d_step)
    bind var.d_lane to thread.x
)", lanes);
}

}  // namespace

TEST_CASE("the matmul schedule of section 5 runs correctly at ragged sizes, with shared tiles and register accumulators",
          "[schedule]") {
  Built built = build(specMatmul());
  checkRuns(built, {{{"M", 67}, {"K", 33}, {"N", 70}}, {{"M", 1}, {"K", 1}, {"N", 1}}, {{"M", 64}, {"K", 16}, {"N", 128}}});
  const std::string& cu = built.cuda.source;
  CHECK(contains(cu, R"(EMMY_SHARED\(float, As, 1088\);)"));  // 64 x (16 + 1 of padding)
  CHECK(contains(cu, R"(EMMY_SHARED\(float, Bs, 1024\);)"));
  CHECK(contains(cu, R"(float C__acc\[16\];)"));  // 4 x 4 accumulators per thread
  CHECK(contains(cu, R"(__syncthreads\(\);)"));
  CHECK(contains(cu, R"(#pragma unroll\n\s*for \(emmy_index_t ki)"));
  CHECK(contains(cu, R"(const emmy_index_t it = \(emmy_index_t\)threadIdx.y;)"));
  CHECK(contains(cu, R"(EMMY_LAUNCH\(matmul__k0, dim3\(.*\), dim3\(16, 16, 1\))"));
  CHECK(contains(cu, R"(\*reinterpret_cast<uint4\*>\(&C\[)"));  // vectorize C.jr: 16-byte stores of C
  // The block's copies read A and B 16 bytes a thread (K = 16 and 128 columns: aligned).
  CHECK(contains(cu, R"(\*reinterpret_cast<const uint4\*>\(&A\[)"));
  CHECK(contains(cu, R"(\*reinterpret_cast<const uint4\*>\(&B\[)"));
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
      CHECK(contains(built.cuda.source, R"(= \*reinterpret_cast<const uint4\*>\(&y__lanes\[4\]\);)"));
    checkCompiles(built);
  }
}

// A vector read happens before its lanes: one that a `where` keeps inside only where it takes that branch
// is made whole only where it takes it at every lane (x has K columns, fewer than y's D, and its rows stay
// 16-byte aligned, so that reading past K would take the next row's elements, or past the end).
TEST_CASE("a vectorized read under a where is read whole only where the where takes it at every lane", "[schedule]") {
  std::string schedule;
  for (const char* output : {"y", "w"})
    schedule += fmt::format(R"(
    bind {0}.n to block.x
    split {0}.d by 4 -> (d_vector, d_element)
    split {0}.d_vector by 32 -> (d_step, d_lane)
    reorder {0} (n, d_lane, d_step, d_element)
    bind {0}.d_lane to thread.x
    vectorize {0}.d_element)", output);
  Built built = build(R"(
kernel clipped(x: f32[N, K], z: f32[N, D]) -> (y: f32[N, D], w: f32[N, D]) {
    y[n, d] = where(d < K, x[n, d], z[n, d])
    w[n, d] = where(d >= K, z[n, d], x[n, d])
}

schedule clipped {)" + schedule + "\n}\n");
  checkRuns(built, {{{"N", 3}, {"K", 12}, {"D", 16}}, {{"N", 2}, {"K", 16}, {"D", 16}}, {{"N", 3}, {"K", 10}, {"D", 17}},
                    {{"N", 2}, {"K", 0}, {"D", 8}}});
  CHECK(contains(built.cuda.source, R"(\*reinterpret_cast<const uint4\*>\(&x\[)"));
  CHECK(contains(built.cuda.source, R"(\*reinterpret_cast<const uint4\*>\(&z\[)"));
  checkCompiles(built);
}

// Every input dtype next to every output dtype: the inputs as wide as the output are read by vectors
// (into local arrays of their own dtype, not the output's), the others element by element; under
// `vectorize` and under the default policy's vectorized grid-strided loop.
TEST_CASE("vectorize reads each input in its own dtype, whatever the output's", "[schedule]") {
  std::string inputs, sum;
  for (DType input : kAllDTypes) {
    std::string name = fmt::format("x_{}", dtypeName(input));
    inputs += fmt::format("{}: {}[N, D], ", name, dtypeName(input));
    sum += fmt::format("{}f64({}[n, d])", sum.empty() ? "" : " + ", name);
  }
  for (DType output : kAllDTypes) {
    std::string type(dtypeName(output));
    INFO("output " << type);
    int width = std::min(8, std::max(2, 16 / dtypeBytes(output)));
    std::string kernel = fmt::format("kernel mixed({}) -> (y: {}[N, D]) {{\n    y[n, d] = {}({})\n}}\n",
                                     inputs.substr(0, inputs.size() - 2), type, type, sum);
    std::string schedule = fmt::format(R"(
schedule mixed {{
    split y.d by {} -> (d_out, d_in)
    split y.d_in by {} -> (d_thread, d_vector)
    bind y.n to block.x
    bind y.d_thread to thread.x
    vectorize y.d_vector
}}
)", 32 * width, width);
    Built scheduled = build(kernel + schedule);
    // 128 columns take the vector path, 45 the vector path and then the elements after the last group.
    checkRuns(scheduled, {{{"N", 3}, {"D", 128}}, {{"N", 7}, {"D", 45}}});
    auto readsByVectors = [&](const Built& built, const std::string& vector) {
      for (DType input : kAllDTypes)
        if (dtypeBytes(input) == dtypeBytes(output))
          CHECK(contains(built.cuda.source, fmt::format("reinterpret_cast<const {}\\*>\\(&x_{}\\[", vector, dtypeName(input))));
    };
    readsByVectors(scheduled, "uint[24]");
    // The default policy's grid-strided loop of 16-byte groups (the issue's i32 next to f32, bf16 next to f16).
    if (output == DType::F32 || output == DType::F16) {
      Built grouped = build(kernel);
      checkRuns(grouped, {{{"N", 3}, {"D", 128}}, {{"N", 7}, {"D", 45}}});
      readsByVectors(grouped, "uint4");
    }
  }
}

TEST_CASE("what a partial schedule leaves open is filled by the default policy, as printed directives", "[schedule]") {
  Built built = build(softmaxKernel() + "schedule softmax {\n    compute m at y.n\n}\n");
  checkRuns(built, {{{"N", 3}, {"D", 300}}, {{"N", 2}, {"D", 1}}});
  std::string printed = tile::printSchedule(built.lowered.tile);
  CHECK(contains(printed, R"(param y_threads in \[32, 64, 128, 256, 512, 1024\] = 256\n    param y_index_bits in \[32, 64\] = 32\n)"
                         R"(    compute m at y.n\n    bind y.n to block.x\n)"));
  CHECK(contains(printed, R"(    index_bits y y_index_bits\n\}\n)"));
  CHECK(contains(printed, R"(split m.d by y_threads -> \(d_step, d_lane\)\n    reorder m \(d_lane, d_step\)\n    bind m.d_lane to thread.x)"));
  CHECK(contains(built.cuda.source, "__shfl_xor_sync"));  // m and s are combined across the block
}

namespace {

// Every kernel of `text` named `kernel` (each type of a generic one) through the pipeline to CUDA. A
// schedule's errors and the elaborator's are diagnostics; anything else escaping (an InternalError) is a bug.
void compileOrDiagnose(const std::string& text, const std::string& kernel) {
  Diagnostics diagnostics;
  Frontend frontend(diagnostics, {Frontend::defaultStdlibDir()});
  const ast::Module* module = frontend.loadText("variant.emmy", text, Frontend::defaultStdlibDir());
  if (!module) return;
  std::vector<Lowered> lowered;
  try {
    for (const tensor::Kernel& each : frontend.elaborateSelected(*module, kernel, false))
      lowered.push_back(lower(each, PipelineOptions{}));
    emitCudaFiles(lowered, "variant.emmy");
  } catch (const CompilationFailed&) {
  }
}

}  // namespace

TEST_CASE("any part of a schedule, its bindings moved, is completed by the default policy or refused with a diagnostic",
          "[schedule][sweep]") {
  // Each schedule block of the standard library, the examples and a block-level scan, with directives
  // dropped and bindings retargeted at random: whatever the user's directives leave open, the policy fills
  // with legal directives, or the user's are refused (never "the default policy wrote illegal directives").
  const std::filesystem::path source = EMMY_SOURCE_DIR;
  std::vector<std::string> texts;
  for (const char* file : {"stdlib/nn.emmy", "stdlib/linalg.emmy", "examples/matmul.emmy"})
    texts.push_back(testing::readFile(source / file));
  texts.push_back(R"(
kernel running(x: f32[N, T]) -> (y: f32[N, T]) {
    y[n, t] = sum[k < t + 1](x[n, k])
}

schedule running {
    split y.n by 4 -> (no, ni)
    bind y.no to block.x
    bind y.ni to block.y
    scan y.t by (64, 4)
}
)");
  const std::vector<std::string> indices = {"block.x", "block.y", "block.z", "thread.x", "thread.y", "thread.z", "warp.x", "grid.x"};
  const std::regex target(R"(to (block|thread|warp|grid)\.[xyz])");
  std::mt19937_64 random(20261205);
  int variants = 0;
  for (const std::string& text : texts) {
    std::vector<std::string> lines;
    std::istringstream stream(text);
    for (std::string line; std::getline(stream, line);) lines.push_back(line);
    for (size_t open = 0; open < lines.size(); ++open) {
      std::smatch header;
      if (!std::regex_search(lines[open], header, std::regex(R"(^schedule (\w+))"))) continue;
      size_t close = open + 1;
      while (close < lines.size() && lines[close].find('}') == std::string::npos) ++close;
      REQUIRE(close < lines.size());
      for (int variant = 0; variant < 16; ++variant, ++variants) {
        std::string mutated;
        for (size_t k = 0; k < lines.size(); ++k) {
          std::string line = lines[k];
          // (A block may end on its last directive's line: the brace stays.)
          bool directive = k > open && k <= close && line.find_first_not_of(" }") != std::string::npos &&
                           line.find("param ") == std::string::npos;
          if (directive && random() % 3 == 0) line = line.find('}') == std::string::npos ? "" : "}";
          else if (directive && random() % 3 == 0) line = std::regex_replace(line, target, "to " + testing::pick(random, indices));
          mutated += line + "\n";
        }
        INFO(mutated);
        CHECK_NOTHROW(compileOrDiagnose(mutated, header[1]));
      }
      open = close;
    }
  }
  CHECK(variants >= 16 * 40);
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
  CHECK(contains(cu, R"(EMMY_SHARED\(float, m__acc__partials, 4\);)"));
  CHECK(contains(cu, R"(const emmy_index_t d_lane = \(emmy_index_t\)threadIdx.x;)"));
  CHECK(contains(cu, R"(__launch_bounds__\(128, 1\))"));
  checkCompiles(built);
}

TEST_CASE("a cache of whole rows reads a row once where it fits, and from memory where it does not", "[schedule]") {
  // The layer norm's mean, variance and output all read x: through the copy of its row where the launch
  // gives the kernel the row's bytes of shared memory (sized at launch), from x itself elsewhere.
  Built built = build(std::string(kLayernorm) + R"(
schedule layernorm {
    bind y.n to block.x
    split y.d by 64 -> (d_step, d_lane)
    reorder y (n, d_lane, d_step)
    bind y.d_lane to thread.x
)" + layernormMembers(64) + R"(
    cache x in shared at y.n -> x_row
}
)");
  checkRuns(built, {{{"N", 3}, {"D", 45}}, {{"N", 2}, {"D", 8192}}, {{"N", 2}, {"D", 8193}}, {{"N", 1}, {"D", 1}}});
  {
    // A device with 4 KiB for the row: 1024 floats fit, 1025 do not.
    testing::ScopedEnvironment smallDevice("EMMY_SIM_SHARED_BYTES", "4096");
    checkRuns(built, {{{"N", 2}, {"D", 1024}}, {{"N", 2}, {"D", 1025}}});
  }
  const std::string& cu = built.cuda.source;
  CHECK(contains(cu, R"(if \(\(\(\(\(\(D \+ 3\) / 4\) \* 4\) \* 4\) <= \(emmy_index_t\)emmy_launch_shared_bytes\(\)\)\) \{)"));
  CHECK(contains(cu, R"(EMMY_SHARED_SIZED_AT_LAUNCH\(float, x_row, 58112, 0, )"));
  CHECK(contains(cu, R"(emmy_copy_async_lanes<4>\(x_row, )"));
  CHECK(contains(cu, R"(mu__acc = \(mu__acc \+ x_row\[)"));
  CHECK(contains(cu, R"(mu__acc = \(mu__acc \+ x\[)"));  // the path for longer rows
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
  CHECK(contains(mirrored.cuda.source, R"(s__acc = \(s__acc \+ \(x_row\[d_1\] \* x\[)"));
}

TEST_CASE("rows shared out a few to a block read their copy in every pass, the block copies w and b once, and a "
          "launch that cannot hold every copy holds the inner ones", "[schedule]") {
  // Each block takes R rows one after another, with w and b copied once for them all: the mean and the
  // variance, computed per row, read the row's copy too (its start is over the split rows, nb * R + nr;
  // their reads over the row n). The copies of w, b and x lie in one launch's shared memory, three rows;
  // where the launch cannot give three, the copies made further in come first: x's rows (read by three
  // passes), then b, then w, in whichever order the directives come.
  for (int rows : {2, 3, 5}) {
    std::string rowCopies = "    cache w in shared at y.nb -> w_row\n    cache b in shared at y.nb -> b_row\n";
    std::string xCopy = "    cache x in shared at y.nr -> x_row\n";
    Built built = build(std::string(kLayernorm) + fmt::format(R"(
schedule layernorm {{
    split y.n by {} -> (nb, nr)
    bind y.nb to block.x
    split y.d by 32 -> (d_step, d_lane)
    reorder y (nb, nr, d_lane, d_step)
    bind y.d_lane to thread.x
{}{}}}
)", rows, layernormMembers(32), rows == 3 ? xCopy + rowCopies : rowCopies + xCopy));
    INFO("rows per block: " << rows);
    std::string tile = tile::printProgram(built.lowered.tile);
    CHECK(contains(tile, R"(mu__acc\[\] = mu__acc\[\] \+ x_row\[0, d_1\])"));
    CHECK(contains(tile, R"(var__acc\[\] = var__acc\[\] \+ \(x_row\[0, d_1\] - mu\[\]\))"));
    // Four paths: x, b and w copied; x and b; x; none. A copy is declared once on each path it is on, in
    // the body the kernel with 32-bit indices shares with its twin.
    size_t declared = 0;
    for (size_t at = built.cuda.source.find("EMMY_SHARED_SIZED_AT_LAUNCH(float, "); at != std::string::npos;
         at = built.cuda.source.find("EMMY_SHARED_SIZED_AT_LAUNCH(float, ", at + 1))
      ++declared;
    CHECK(declared == 6);
    checkRuns(built, {{{"N", 2 * rows + 1}, {"D", 45}}, {{"N", 1}, {"D", 1}}, {{"N", rows}, {"D", 300}},
                      {{"N", 0}, {"D", 7}}, {{"N", 3}, {"D", 0}}});
    sim::SimulationOptions options;
    options.profile = true;
    sim::SimulatedKernel program(built.kernel, built.cuda, options);
    // Global memory requested over the least traffic, at one block's rows: each tensor moved once.
    auto requestedOverLeast = [&](int64_t D) {
      KernelRun run = program.run(testing::randomInputs(built.kernel, {{"N", rows}, {"D", D}}, 3));
      INFO(run.failure.value_or(""));
      REQUIRE(run.profile.has_value());
      REQUIRE(run.profile->kernels.size() == 1);
      const sim::KernelProfile& profile = run.profile->kernels[0];
      return static_cast<double>(profile.requestedGlobalBytes()) / static_cast<double>(profile.distinctGlobalBytes);
    };
    CHECK(requestedOverLeast(256) == 1.0);
    // With room for fewer rows of 256 floats than three: x and b (w read per row), x alone (w and b per
    // row), none (x read by each pass). Each path computes the same.
    const int64_t row = 256 * 4;
    double previous = 1.0;
    for (int64_t room : {3 * row, 3 * row - 1, 2 * row - 1, row - 1}) {
      testing::ScopedEnvironment limit("EMMY_SIM_SHARED_BYTES", std::to_string(room));
      INFO("shared memory a block may have: " << room);
      double requested = requestedOverLeast(256);
      CHECK(requested >= previous);
      if (room < 3 * row) CHECK(requested > previous);
      previous = requested;
      checkRuns(built, {{{"N", 2 * rows + 1}, {"D", 256}}, {{"N", 2}, {"D", 45}}});
    }
    // Without any copy each row of x is read by the three passes, and w and b by each row: 6 rows moved per
    // row where 2 and 2 / R are the least.
    CHECK(previous == Approx(3.0 * rows / (rows + 1)));
  }
}

TEST_CASE("a member's costly term of a copied row is written over the element, and the output reads it there",
          "[schedule]") {
  // A softmax's exp(x - m): its sum's pass computes it and writes it over the element of the copy, and
  // the output reads it instead of computing it again. The class: a costly term of the element (under a
  // where, inside a larger term, other functions), kept only where the output reads x in instances of
  // it alone and of the element's type. Each variant runs against the reference where the row fits (4
  // KiB for the copy: 1024 floats) and where it does not, with the output's vectors as the members'
  // (each thread reads back what it wrote: no barrier between the passes) or shorter (a barrier).
  struct Variant {
    std::string term, output;
    bool kept;
  };
  const std::vector<Variant> variants = {
      {"exp(x[n, d] - m[n])", "exp(x[n, d] - m[n]) / s[n]", true},
      {"where(g[d] > 0, exp(x[n, d] - m[n]), 0)", "where(g[d] > 0, exp(x[n, d] - m[n]), 0) / s[n]", true},
      // A masked sum's pass still visits every element of the row.
      {"where(d < n + 3, exp(x[n, d] - m[n]), 0)", "where(d < n + 3, exp(x[n, d] - m[n]), 0) / s[n]", true},
      {"sigmoid(x[n, d]) * 2", "sigmoid(x[n, d]) / s[n]", true},     // the part the output computes
      {"exp(x[n, d] - m[n])", "exp(x[n, d] - m[n]) / s[n] + x[n, d]", false},  // x read outside it
      {"exp(x[n, d] - m[n])", "x[n, d] / s[n]", false},                        // not computed again
      {"(x[n, d] - m[n]) * 2", "(x[n, d] - m[n]) * 2 / s[n]", false},          // cheaper than a store
      {"exp(x[n, d] - m[n]) * x[n, d]", "exp(x[n, d] - m[n]) * x[n, d] / s[n]", false},  // x read twice
      {"exp(x[n, d] - m[n])", "exp(x[n, d] - m[n]) / (s[n] + t[n])", false},  // a later pass reads x
  };
  for (const Variant& variant : variants)
    for (int outputVector : {4, 2}) {
      bool later = variant.output.find("t[n]") != std::string::npos;
      std::string text = fmt::format(R"(
kernel rows(x: f32[N, D], g: f32[D]) -> (y: f32[N, D]) {{
    m[n]    = max[d](x[n, d])
    s[n]    = sum[d]({})
{}    y[n, d] = {}
}}
schedule rows {{
    bind y.n to block.x
    split y.d by {} -> (d_vector, d_element)
    split y.d_vector by 32 -> (d_step, d_lane)
    reorder y (n, d_lane, d_step, d_element)
    bind y.d_lane to thread.x
    vectorize y.d_element
)", variant.term, later ? "    t[n]    = sum[d](x[n, d] * x[n, d])\n" : "", variant.output, outputVector);
      for (const char* member : {"m", "s", "t"})
        if (later || member != std::string("t"))
        text += fmt::format(R"(    split {0}.d by 4 -> (d_vector, d_element)
    split {0}.d_vector by 32 -> (d_step, d_lane)
    reorder {0} (d_lane, d_step, d_element)
    bind {0}.d_lane to thread.x
    vectorize {0}.d_element
)", member);
      text += "    cache x in shared at y.n -> x_row\n}\n";
      INFO(text);
      Built built = build(text);
      {
        testing::ScopedEnvironment smallDevice("EMMY_SIM_SHARED_BYTES", "4096");
        checkRuns(built, {{{"N", 3}, {"D", 1024}}, {{"N", 2}, {"D", 1025}}, {{"N", 3}, {"D", 7}}, {{"N", 2}, {"D", 1}}});
      }
      std::string tile = tile::printProgram(built.lowered.tile);
      CHECK(contains(tile, R"(x_row\[0, d_\d\] = )") == variant.kept);
      if (!variant.kept) continue;
      // The output's store where the row is copied reads the term from the copy.
      CHECK(contains(tile, R"(y\[n, d\] = [^\n]*x_row\[0, \(d_step \* 32 \+ d_lane\) \* )" + std::to_string(outputVector) +
                               R"( \+ d_element\][^\n]*\n)"));
      // Between the sum's pass and the output's (one warp: the sum is combined by shuffles), a barrier only
      // where a thread reads elements another wrote.
      const std::string& cu = built.cuda.source;
      size_t pass = std::min(cu.find("emmy_store_shared_vector<16>(x_row"), cu.find("x_row[d_1] = "));
      size_t output = cu.find("x_row, (((d_step * 32)", pass);
      REQUIRE(output != std::string::npos);
      CHECK((cu.substr(pass, output - pass).find("__syncthreads();") != std::string::npos) == (outputVector != 4));
      checkCompiles(built);
    }
  // The standard library's softmax<f32>: one exponential per element where the row fits (in f16 and bf16
  // the copy holds T, not the f32 term, and the hardware's exponential costs less than a store).
  for (const tensor::Kernel& each : testing::kernelsOf(std::filesystem::path(EMMY_SOURCE_DIR) / "stdlib" / "nn.emmy")) {
    std::string name = each.instanceName();
    if (name != "softmax_f32" && name != "softmax_f16") continue;
    INFO(name);
    Built stdlib{each, lower(each, PipelineOptions{}), {}};
    stdlib.cuda = emitCudaFiles({stdlib.lowered}, "nn.emmy");
    CHECK(contains(tile::printProgram(stdlib.lowered.tile), R"(x_row\[0, d_1\] = exp\(x_row\[0, d_1\] - m\[\]\))") ==
          (name == "softmax_f32"));
    // With 40000 bytes for the copy: rows of up to 8192 (the variants of 32 and 128 lanes) always fit, of
    // 9001 (256 lanes) too, of 10001 not.
    testing::ScopedEnvironment smallDevice("EMMY_SIM_SHARED_BYTES", "40000");
    checkRuns(stdlib, {{{"N", 3}, {"D", 2047}}, {{"N", 2}, {"D", 4001}}, {{"N", 2}, {"D", 9001}}, {{"N", 2}, {"D", 10001}}});
  }
}

TEST_CASE("a softmax's maximum and sum take one pass over rows no copy serves: a running maximum, the sum rescaled per "
          "vector", "[schedule]") {
  // Row n sees the elements d >= n: rows past D are -inf throughout (NaN, as in the reference), and the
  // maximum of the others moves along the row. With 4 KiB for the copy of a row, rows of 1024 floats read
  // the copy (two passes over shared memory), longer ones x itself, once for m and s together.
  const std::string kernel = R"(
kernel masked(x: f32[N, D]) -> (y: f32[N, D]) {
    z[n, d] = where(d >= n, x[n, d], -inf)
    m[n]    = max[d](z[n, d])
    s[n]    = sum[d](exp(z[n, d] - m[n]))
    y[n, d] = exp(z[n, d] - m[n]) / s[n]
}
)";
  auto schedule = [](const std::string& sumElement) {
    return R"(
schedule masked {
    bind y.n to block.x
    split y.d by 4 -> (d_vector, d_element)
    split y.d_vector by 64 -> (d_step, d_lane)
    reorder y (n, d_lane, d_step, d_element)
    bind y.d_lane to thread.x
    vectorize y.d_element
    split m.d by 4 -> (d_vector, d_element)
    split m.d_vector by 64 -> (d_step, d_lane)
    reorder m (d_lane, d_step, d_element)
    bind m.d_lane to thread.x
    vectorize m.d_element
    split s.d by 4 -> (d_vector, d_element)
    split s.d_vector by 64 -> (d_step, d_lane)
    reorder s (d_lane, d_step, d_element)
    bind s.d_lane to thread.x
    )" + sumElement + R"( s.d_element
    cache x in shared at y.n -> x_row
}
)";
  };
  Built online = build(kernel + schedule("vectorize"));
  std::vector<Sizes> sizes = {{{"N", 9}, {"D", 1025}}, {{"N", 3}, {"D", 1030}}, {{"N", 5}, {"D", 7}}, {{"N", 2}, {"D", 1}}};
  {
    testing::ScopedEnvironment smallDevice("EMMY_SIM_SHARED_BYTES", "4096");
    checkRuns(online, sizes);
    checkRuns(online, {{{"N", 4}, {"D", 1024}}});
  }
  // The path without the copy: x read once into registers per vector, its maximum, the sum rescaled once,
  // then the vector's terms; each thread's sum rescaled to the block's maximum before they are added.
  std::string tile = tile::printProgram(online.lowered.tile);
  CHECK(contains(tile, R"(register m__values: f32\[4\])"));
  CHECK(contains(tile, R"(m__values\[d_element_\d\] = where\(d_1 >= n, x\[n, d_1\], -inf\))"));
  CHECK(contains(tile, R"(s__acc\[\] = s__acc\[\] \* exp\(m__acc\[\] - where\(m__next\[\] == -inf, 0.0, m__next\[\]\)\))"));
  CHECK(contains(tile, R"(s__acc\[\] = where\(s__acc\[\] == 0.0, 0.0, s__acc\[\] \* exp\(m__own\[\] - m\[\]\)\))"));
  CHECK(contains(online.cuda.source, R"(m__values\[d_element_\d\] = x__lanes\[d_element_\d\];)"));  // one 16-byte read
  // The copy's path keeps its two passes.
  CHECK(contains(tile, R"(m__acc\[\] = max\(m__acc\[\], where\(d_1 >= n, x_row\[0, d_1\], -inf\)\))"));
  checkCompiles(online);
  // A sum scheduled otherwise than its maximum (unrolled, not vectorized) is its own pass, as written.
  Built apart = build(kernel + schedule("unroll"));
  {
    testing::ScopedEnvironment smallDevice("EMMY_SIM_SHARED_BYTES", "4096");
    checkRuns(apart, sizes);
  }
  CHECK_FALSE(contains(tile::printProgram(apart.lowered.tile), "m__values"));
  // The standard library's, in f16 and bf16 (the maximum rounded to T, each thread's sum rescaled to it),
  // in the launch variant for rows of more than 8192 elements: with 20000 bytes for the copy, rows of 9001
  // f16 fit, of 10001 f16 or 9001 f32 not.
  for (const tensor::Kernel& each : testing::kernelsOf(std::filesystem::path(EMMY_SOURCE_DIR) / "stdlib" / "nn.emmy")) {
    std::string name = each.instanceName();
    if (name != "softmax_f16" && name != "log_softmax_bf16" && name != "softmax_f32") continue;
    INFO(name);
    Built stdlib{each, lower(each, PipelineOptions{}), {}};
    stdlib.cuda = emitCudaFiles({stdlib.lowered}, "nn.emmy");
    CHECK(contains(stdlib.cuda.source, "m__values"));
    testing::ScopedEnvironment smallDevice("EMMY_SIM_SHARED_BYTES", "20000");
    checkRuns(stdlib, {{{"N", 3}, {"D", 9001}}, {{"N", 2}, {"D", 10001}}});
  }
}

// An attention over given logits in which row s sees the keys l >= s.
const char* const kMaskedAttention = R"(
kernel masked(logits: f32[S, L], v: f32[L, E]) -> (o: f32[S, E]) {
    x[s, l]  = where(l >= s, logits[s, l], -inf)
    m[s]     = max[l](x[s, l])
    p[s, l]  = exp(x[s, l] - m[s])
    den[s]   = sum[l](p[s, l])
    pv[s, e] = sum[l](p[s, l] * v[l, e])
    o[s, e]  = pv[s, e] / den[s]
}
)";

TEST_CASE("an online softmax runs in one pass over the keys, masked prefixes and masked rows included", "[schedule]") {
  // Row s sees the keys l >= s: its running maximum starts at -inf for s > 0, and the rows past L see
  // no key at all (NaN, as in the reference).
  Built built = build(std::string(kMaskedAttention) + R"(
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
  CHECK(testing::withoutWideTwins(built.lowered.kernel).size() == 1);
  CHECK(contains(built.cuda.source, R"(o__rescale = expf\(\(m__acc - \(\(m__next == -INFINITY\) \? 0.0f : m__next\)\)\);)"));
  checkCompiles(built);
}

TEST_CASE("an online softmax over tiles of keys moves its maximum once per tile where the tile is a copy, else once per key",
          "[schedule]") {
  // Row s sees the keys l >= s, so the tiles of the first rows are masked whole (a maximum of -inf).
  const std::string kernel = kMaskedAttention;
  auto schedule = [](const std::string& keys, const std::string& order, const std::string& copies) {
    return "schedule masked {\n    split o.s by 8 -> (so, si)\n    bind o.so to block.x\n    bind o.si to thread.y\n"
           "    split o.e by 8 -> (eo, ei)\n    split o.ei by 2 -> (et, er)\n    bind o.et to thread.x\n" + keys +
           "    reorder o " + order + "\n" + copies + "    cache o in registers at o.eo\n}\n";
  };
  const std::string split = "    split o.l by 8 -> (lo, li)\n    split o.li by 2 -> (lm, ln)\n";
  const std::string bothCopies = "    cache logits in shared at o.lo\n    cache v in shared at o.lo\n";
  struct Variant {
    std::string schedule;
    bool perTile;
  };
  for (const Variant& variant : std::vector<Variant>{
           // Tiles of 8 keys, each a run of two loops, read from copies: the maximum moves per tile.
           {schedule(split, "(so, eo, lo, si, et, lm, ln, er)", bothCopies), true},
           // The maximum's pass would read logits from memory a second time: once per key.
           {schedule(split, "(so, eo, lo, si, et, lm, ln, er)", "    cache v in shared at o.lo\n"), false},
           // No tiles: one pass over the keys, once per key.
           {schedule("", "(so, eo, si, et, l, er)", ""), false}}) {
    INFO(variant.schedule);
    Built built = build(kernel + variant.schedule);
    checkRuns(built, {{{"S", 21}, {"L", 13}, {"E", 20}}, {{"S", 5}, {"L", 30}, {"E", 3}}, {{"S", 1}, {"L", 1}, {"E", 1}},
                      {{"S", 9}, {"L", 8}, {"E", 8}}});
    INFO(built.cuda.source);
    // Per tile: a pass of its own takes the tile's maximum, and each key only adds its terms.
    CHECK(contains(built.cuda.source, R"(m__next = emmy_max\(m__next, )") == variant.perTile);
    CHECK(contains(built.cuda.source, R"(den__acc = \(den__acc \+ o__weight\);)") == variant.perTile);
    CHECK(contains(built.cuda.source, R"(den__acc = \(\(den__acc \* o__rescale\) \+ o__weight\);)") == !variant.perTile);
    // The weight exp(x - max) once per key, read by the denominator and each accumulator.
    CHECK(contains(built.cuda.source, R"(o__weight = expf\()"));
    CHECK(contains(built.cuda.source, R"(pv__acc\[er\] = \(pv__acc\[er\] \+ \(o__weight \* )") == variant.perTile);
  }
}

TEST_CASE("a stage computed into a copy element by element takes its reduction loops' schedule: split, vectorized reads, "
          "unrolled", "[schedule]") {
  const std::string kernel = R"(
kernel att(q: T[S, E], k: T[L, E], v: T[L, E]) -> (o: T[S, E]) {
    scores[i, j] = sum[e](f32(q[i, e]) * f32(k[j, e]))
    m[s]     = max[l](scores[s, l] * 0.125)
    p[s, l]  = exp(scores[s, l] * 0.125 - m[s])
    den[s]   = sum[l](p[s, l])
    pv[s, e] = sum[l](p[s, l] * f32(v[l, e]))
    o[s, e]  = T(pv[s, e] / den[s])
}
schedule att {
    split o.s by 16 -> (so, si)
    bind o.so to block.x
    split o.e by 64 -> (eo, ei)
    split o.ei by 4 -> (et, er)
    split o.l by 32 -> (lo, li)
    bind o.si to thread.y
    bind o.et to thread.x
    reorder o (so, eo, lo, si, et, li, er)
    compute scores at o.lo
    cache v in shared at o.lo
    cache o in registers at o.eo
)";
  struct Variant {
    std::string directives, expected;  // the loops over e the CUDA has (a regular expression)
  };
  for (const std::string dtype : {"f16", "f32"}) {
    std::string typed = std::regex_replace(kernel, std::regex(R"(\bT\b)"), dtype);
    int lanes = dtype == "f16" ? 8 : 4;
    for (const Variant& variant : std::vector<Variant>{
             {"", R"(for \(emmy_index_t e_1 = 0; e_1 < E; e_1 \+= 1\))"},
             {fmt::format("    split scores.e by {} -> (ev, el)\n    vectorize scores.el\n", lanes),
              R"(reinterpret_cast<const uint4\*>\(&k\[)"},
             {"    split scores.e by 4 -> (ev, el)\n    unroll scores.el\n", R"(for \(emmy_index_t ev = 0; ev < )"}}) {
      std::string source = typed + variant.directives + "}\n";
      INFO(source);
      Built built = build(source);
      INFO(built.cuda.source);
      CHECK(contains(built.cuda.source, variant.expected));
      checkRuns(built, {{{"S", 37}, {"L", 45}, {"E", 20}}, {{"S", 1}, {"L", 1}, {"E", 3}}, {{"S", 19}, {"L", 33}, {"E", 64}},
                        {{"S", 5}, {"L", 70}, {"E", 17}}});
    }
  }
}

TEST_CASE("a user's attention (causal as bounded sums, with a bias, plain) is an online softmax over tiles of keys, "
          "scheduled or by the default policy, and agrees with the reference", "[schedule]") {
  // Bounded sums are Tensor IR's where(l < s + 1, term, identity): the online softmax takes them too.
  const std::string causal = R"(
kernel causal(q: T[B, S, E], k: T[B, S, E], v: T[B, S, E]) -> (o: T[B, S, E]) {
    scores[b, i, j] = sum[e](f32(q[b, i, e]) * f32(k[b, j, e]))
    m[b, s]     = max[l < s + 1](scores[b, s, l] * 0.125)
    p[b, s, l]  = exp(scores[b, s, l] * 0.125 - m[b, s])
    den[b, s]   = sum[l < s + 1](p[b, s, l])
    pv[b, s, e] = sum[l < s + 1](p[b, s, l] * f32(v[b, l, e]))
    o[b, s, e]  = T(pv[b, s, e] / den[b, s])
}
)";
  const std::string biased = R"(
kernel biased(q: T[B, S, E], k: T[B, L, E], v: T[B, L, E], bias: f32[S, L]) -> (o: T[B, S, E]) {
    logits[b, s, l] = sum[e](f32(q[b, s, e]) * f32(k[b, l, e])) * 0.125 + bias[s, l]
    m[b, s]     = max[l](logits[b, s, l])
    p[b, s, l]  = exp(logits[b, s, l] - m[b, s])
    den[b, s]   = sum[l](p[b, s, l])
    o[b, s, e]  = T(sum[l](p[b, s, l] * f32(v[b, l, e])) / den[b, s])
}
)";
  const std::string tiles = R"(
schedule causal {
    split o.s by 16 -> (so, si)
    bind o.so to block.x
    bind o.b to block.y
    split o.e by 64 -> (eo, ei)
    split o.ei by 4 -> (et, er)
    split o.l by 32 -> (lo, li)
    bind o.si to thread.y
    bind o.et to thread.x
    reorder o (b, so, eo, lo, si, et, li, er)
    compute scores at o.lo
    cache v in shared at o.lo -> v_tile
    double_buffer v_tile
    cache o in registers at o.eo
}
)";
  auto typed = [](std::string text, const std::string& dtype) {
    for (size_t at = text.find('T'); at != std::string::npos; at = text.find('T', at + dtype.size()))
      if ((at == 0 || !std::isalnum(static_cast<unsigned char>(text[at - 1]))) && !std::isalnum(static_cast<unsigned char>(text[at + 1])))
        text.replace(at, 1, dtype);
    return text;
  };
  for (const std::string dtype : {"f16", "bf16", "f32"}) {
    for (const auto& [source, kernels] : std::vector<std::pair<std::string, size_t>>{
             {causal + tiles, 1}, {causal, 2}, {biased, 2}}) {
      std::string text = typed(source, dtype);
      INFO(text);
      Built built = build(text);
      std::string schedule;
      for (const std::string& line : built.lowered.tile.schedule) schedule += line + "\n";
      INFO(schedule);
      // The scores a kernel of their own where the default policy cuts them off (a product), then read a
      // tile at a time by the softmax's kernel.
      CHECK(testing::withoutWideTwins(built.lowered.kernel).size() == kernels);
      // In f16 and bf16 the exponentials take the hardware's approximation (approximate_exponentials.h).
      CHECK(contains(built.cuda.source, dtype == "f32" ? R"(o__rescale = expf)" : R"(o__rescale = emmy_exp_approximate)"));
      if (kernels == 2) CHECK(schedule.find("double_buffer v_shared") != std::string::npos);
      checkRuns(built, {{{"B", 2}, {"S", 37}, {"L", 21}, {"E", 80}}, {{"B", 1}, {"S", 1}, {"L", 1}, {"E", 17}},
                        {{"B", 1}, {"S", 5}, {"L", 70}, {"E", 3}}});
    }
  }
}

TEST_CASE("a serial loop over a masked reduction's tiles ends after the last tile its mask keeps for some element of the "
          "block, and the results agree with the reference", "[schedule][sweep]") {
  // Each condition, whether it bounds l from above (so that the loop over the tiles of l ends early), and
  // whether it holds from l = 0 up to that bound (so that the tiles before the first where it fails for
  // some element of the block run without it).
  struct Condition {
    std::string text;
    bool bounded, holdsBelow;
  };
  const std::vector<Condition> conditions{
      {"l < s + 1", true, true},      {"l <= 2 * s", true, true},     {"s + 2 >= l", true, true},
      {"l < S - s", true, true},      {"l + 3 < 2 * s", true, true},  {"l < s + 1 and l >= s - 5", true, false},
      {"l > s", false, false},        {"l < s + 1 or l == 0", false, false}};
  std::mt19937_64 random(41);
  for (const auto& [condition, bounded, holdsBelow] : conditions)
    for (const bool maximum : {false, true}) {
      int64_t queries = std::vector<int64_t>{4, 16, 32}[random() % 3], keys = std::vector<int64_t>{1, 3, 8}[random() % 3];
      int copy = static_cast<int>(random() % 3);  // none, a copy per tile, or one a tile ahead
      std::string source = fmt::format(R"(
kernel masked(x: f32[L], w: f32[S]) -> (y: f32[S]) {{
    y[s] = {}[l](where({}, x[l] * w[s], {}))
}}
schedule masked {{
    split y.s by {} -> (so, si)
    bind y.so to block.x
    split y.l by {} -> (lo, li)
    reorder y (so, lo, si, li)
    bind y.si to thread.x
    cache y in registers at y.so
)", maximum ? "max" : "sum", condition, maximum ? "-inf" : "0", queries, keys);
      if (copy > 0) source += "    cache x in shared at y.lo -> x_tile\n";
      if (copy > 1) source += "    double_buffer x_tile\n";
      source += "}\n";
      INFO(source);
      Built built = build(source);
      std::string tile = tile::printProgram(built.lowered.tile);
      INFO(tile);
      CHECK(contains(tile, R"(for lo < min\()") == bounded);
      CHECK(contains(tile, R"(if lo >= )") == holdsBelow);
      std::vector<Sizes> sizes{{{"S", 37}, {"L", 50}}, {{"S", 70}, {"L", 9}}, {{"S", 1}, {"L", 1}}, {{"S", 5}, {"L", 130}}};
      for (const Sizes& empty : testing::sizesWithOneEmpty(built.kernel)) sizes.push_back(empty);
      checkRuns(built, sizes);
    }
}

TEST_CASE("schedules drawn at random from the legal space all agree with the reference", "[schedule][empty][sweep]") {
  std::mt19937_64 random(2026);
  struct Family {
    std::string kernel;
    std::function<std::string(std::mt19937_64&)> draw;
    std::vector<Sizes> sizes;
  };
  std::vector<Family> families{
      {kMatmul, [](std::mt19937_64& r) { return testing::randomMatmulSchedule(r); }, {{{"M", 37}, {"K", 19}, {"N", 45}}, {{"M", 1}, {"K", 3}, {"N", 2}}}},
      {kMatmulEpilogue, [](std::mt19937_64& r) { return testing::randomMatmulSchedule(r); }, {{{"M", 29}, {"K", 23}, {"N", 41}}}},
      {softmaxKernel(),
       [](std::mt19937_64& r) { return testing::randomRowSchedule(r, RowNames{"softmax", "y", {"m", "s"}, "n", "d", "D"}); },
       {{{"N", 5}, {"D", 77}}, {{"N", 2}, {"D", 1}}, {{"N", 3}, {"D", 40}}}},
      // In vectors: where m and s are scheduled alike, one pass computes both (onlineMembers).
      {softmaxKernel(),
       [](std::mt19937_64& r) { return testing::randomRowSchedule(r, RowNames{"softmax", "y", {"m", "s"}, "n", "d", "D", 4}); },
       {{{"N", 5}, {"D", 77}}, {{"N", 2}, {"D", 1}}, {{"N", 3}, {"D", 41}}}},
      {kLayernorm,
       [](std::mt19937_64& r) { return testing::randomRowSchedule(r, RowNames{"layernorm", "y", {"mu", "var"}, "n", "d", "D"}); },
       {{{"N", 6}, {"D", 45}}, {{"N", 1}, {"D", 3}}, {{"N", 2}, {"D", 60}}}},
      {kChain, [](std::mt19937_64& r) { return testing::randomChainSchedule(r); }, {{{"N", 7}, {"D", 45}}, {{"N", 3}, {"D", 1}}}},
  };
  constexpr int kPerFamily = 15;
  int tried = 0, onePass = 0;
  for (const Family& family : families)
    for (int k = 0; k < kPerFamily; ++k) {
      std::string source = family.kernel + family.draw(random);
      INFO(source);
      Built built = build(source);
      std::vector<Sizes> sizes = family.sizes;  // and each size 0 in turn: empty tiles, an empty reduction
      for (const Sizes& empty : testing::sizesWithOneEmpty(built.kernel)) sizes.push_back(empty);
      checkRuns(built, sizes);
      checkCompiles(built);
      ++tried;
      onePass += contains(tile::printProgram(built.lowered.tile), "m__values") ? 1 : 0;
    }
  WARN("schedules tried: " << tried << ", of which a softmax's m and s in one pass: " << onePass);
  CHECK(onePass > 0);
  CHECK(tried == kPerFamily * static_cast<int>(families.size()));
}

TEST_CASE("the printed schedule, fed back, gives the same CUDA byte for byte", "[schedule]") {
  std::mt19937_64 random(11);
  std::vector<std::string> sources{specMatmul(),
                                   softmaxKernel() + kCooperativeSoftmaxSchedule, softmaxKernel(), kMatmul,
                                   std::string(kChain) + testing::randomChainSchedule(random),
                                   std::string(kLayernorm) + testing::randomRowSchedule(random, RowNames{"layernorm", "y", {"mu", "var"}, "n", "d", ""}),
                                   std::string(kLayernorm) +
                                       testing::randomRowSchedule(random, RowNames{"layernorm", "y", {"mu", "var"}, "n", "d", "D"})};
  for (const std::string& source : sources) CHECK(testing::checkScheduleRoundTrip(source, "test.emmy") == 1);
}

namespace {

// The diagnostics of lowering `source`, which must fail.
std::string loweringErrors(const std::string& source) {
  std::vector<tensor::Kernel> kernels = testing::kernelsOfText(source);
  REQUIRE(kernels.size() == 1);
  try {
    lower(kernels[0], PipelineOptions{});
  } catch (const CompilationFailed& failed) {
    return failed.diagnostics.render();
  }
  FAIL("lowering succeeded:\n" << source);
  return "";
}

// The places that "legal places to WHAT: a.b, c.d, root" lists in `message`, less `root`.
std::vector<std::string> listedPlaces(const std::string& message, const std::string& what) {
  std::smatch match;
  INFO(message);
  REQUIRE(std::regex_search(message, match, std::regex("legal places to " + what + ": ([^;\\n]*)")));
  std::vector<std::string> places;
  std::string list = match[1].str();
  for (size_t start = 0; start < list.size();) {
    size_t end = std::min(list.find(", ", start), list.size());
    std::string place = list.substr(start, end - start);
    if (place != "root" && place != "none") places.push_back(place);
    start = end + 2;
  }
  return places;
}

}  // namespace

TEST_CASE("every place the legality messages list for compute and cache applies, and agrees with the reference",
          "[schedule][sweep]") {
  const std::string softmax = softmaxKernel();
  const std::string rowsOverThreads = R"(
    bind y.n to block.x
    split m.d by 32 -> (d_step, d_lane)
    reorder m (d_lane, d_step)
    bind m.d_lane to thread.x
    split s.d by 32 -> (d_step, d_lane)
    reorder s (d_lane, d_step)
    bind s.d_lane to thread.x
    split y.d by 32 -> (d_step, d_lane)
    reorder y (n, d_lane, d_step)
    bind y.d_lane to thread.x
)";
  const std::string tiles = R"(
    tile y (n, d) by (4, 32) -> (n_out, d_out, n_in, d_in)
    bind y.n_out to block.y
    bind y.d_out to block.x
    bind y.n_in to thread.y
    bind y.d_in to thread.x
)";
  const std::string matmulTiles = R"(
    tile C (i, j) by (16, 16) -> (io, jo, ii, ji)
    bind C.io to block.y
    bind C.jo to block.x
    tile C (ii, ji) by (2, 2) -> (it, jt, ir, jr)
    bind C.it to thread.y
    bind C.jt to thread.x
    split C.k by 8 -> (ko, ki)
    reorder C (io, jo, it, jt, ko, ki, ir, jr)
)";
  const std::string twoReaders = R"(
kernel two(x: f32[N, D]) -> (y: f32[N, D], z: f32[N, D]) {
    t[n, d] = exp(x[n, d])
    y[n, d] = t[n, d] + 1.0
    z[n, d] = t[n, d] * 2.0
}
)";
  const std::string flat = R"(
kernel flat(x: f32[N]) -> (y: f32[N]) {
    t[i] = x[i] * 2.0
    y[i] = t[i] + 1.0
}
)";
  const std::string columns = R"(
kernel colnorm(x: f32[N, D]) -> (y: f32[N, D]) {
    c[d]    = sum[n](x[n, d])
    y[n, d] = x[n, d] / c[d]
}
)";
  const std::string columnTiles = R"(
    split y.d by 32 -> (d_out, d_in)
    reorder y (d_out, n)
    bind y.d_out to block.x
    bind y.d_in to thread.x
)";
  const std::string blur = R"(
kernel blur(x: f32[N, D]) -> (y: f32[N, D]) {
    h[n, d] = pad(x, 0.5)[n, d - 1] + x[n, d] + pad(x, 0.5)[n, d + 1]
    y[n, d] = pad(h, 0.0)[n - 1, d] + h[n, d] + pad(h, 0.0)[n + 1, d]
}
)";
  struct Case {
    std::string kernel, name, root, base;
    std::vector<std::string> computed, cached;
    std::vector<Sizes> sizes;
  };
  std::vector<Case> cases{
      {softmax, "softmax", "y", "", {"m", "s"}, {"x"}, {{{"N", 3}, {"D", 45}}, {{"N", 1}, {"D", 1}}}},
      {softmax, "softmax", "y", rowsOverThreads, {"m", "s"}, {"x"}, {{{"N", 3}, {"D", 45}}}},
      {kChain, "chain", "y", "", {"t"}, {"x", "b"}, {{{"N", 5}, {"D", 37}}}},
      {kChain, "chain", "y", tiles, {"t"}, {"x", "b"}, {{{"N", 7}, {"D", 45}}, {{"N", 1}, {"D", 1}}}},
      {kLayernorm, "layernorm", "y", "", {"mu", "var"}, {"x", "w"}, {{{"N", 3}, {"D", 45}}}},
      {kMatmul, "matmul", "C", matmulTiles, {}, {"A", "B"}, {{{"M", 21}, {"K", 19}, {"N", 35}}}},
      {twoReaders, "two", "y", "", {"t"}, {"x"}, {{{"N", 3}, {"D", 37}}}},
      {twoReaders, "two", "y", tiles, {"t"}, {"x"}, {{{"N", 6}, {"D", 37}}}},
      {flat, "flat", "y", "", {"t"}, {"x"}, {{{"N", 300}}, {{"N", 1}}}},
      {columns, "colnorm", "y", columnTiles, {"c"}, {"x"}, {{{"N", 9}, {"D", 70}}}},
      {blur, "blur", "y", tiles, {"h"}, {"x"}, {{{"N", 6}, {"D", 37}}, {{"N", 1}, {"D", 2}}}},
  };
  int applied = 0;
  for (const Case& c : cases) {
    auto schedule = [&](const std::string& directive) {
      return c.kernel + "schedule " + c.name + " {\n" + c.base + "    " + directive + "\n}\n";
    };
    std::vector<std::string> directives;
    for (const std::string& stage : c.computed)
      for (const std::string& place : listedPlaces(loweringErrors(schedule("compute " + stage + " at " + c.root + ".nowhere")),
                                                   "compute " + stage))
        directives.push_back("compute " + stage + " at " + place);
    for (const std::string& tensor : c.cached)
      for (const char* memory : {"shared", "registers"})
        for (const std::string& place : listedPlaces(loweringErrors(schedule(fmt::format("cache {} in {} at {}.nowhere", tensor,
                                                                                          memory, c.root))),
                                                     "cache " + tensor))
          directives.push_back(fmt::format("cache {} in {} at {}", tensor, memory, place));
    for (const std::string& directive : directives) {
      std::string source = schedule(directive);
      INFO(source);
      Built built = build(source);
      checkRuns(built, c.sizes);
      ++applied;
    }
  }
  WARN("places applied: " << applied);
  CHECK(applied > 60);
}

TEST_CASE("a reduction bound to thread.y or thread.z is combined across that index", "[schedule]") {
  for (const char* index : {"y", "z"}) {
    Built built = build(fmt::format(R"(
kernel rs(x: f32[N, D]) -> (y: f32[N], z: i32[N]) {{
    y[n] = max[d](x[n, d])
    z[n] = sum[d](i32(x[n, d] * 8.0))
}}
schedule rs {{
    split y.n by 4 -> (nb, nt)
    bind y.nb to block.x
    bind y.nt to thread.x
    split y.d by 8 -> (dout, di)
    bind y.di to thread.{}
    split z.d by 16 -> (dout, di)
    bind z.di to thread.{}
}}
)", index, index));
    checkRuns(built, {{{"N", 5}, {"D", 77}}, {{"N", 1}, {"D", 1}}, {{"N", 9}, {"D", 16}}});
    CHECK(contains(tile::printProgram(built.lowered.tile), std::string("combine y__acc across the block along ") + index));
    checkCompiles(built);
  }
}

TEST_CASE("atomic after a bind accumulates with atomics into an output initialised first", "[schedule]") {
  struct Case {
    std::string type, op, schedule, atomic;
  };
  std::vector<Case> cases{
      {"f32", "sum", "split y.d by 32 -> (dout, di)\n bind y.n to block.x\n bind y.di to thread.x atomic\n", "atomicAdd"},
      {"f64", "sum", "split y.d by 8 -> (db, di)\n bind y.n to block.x\n bind y.db to block.y atomic\n", "atomicAdd"},
      {"i32", "max",
       "split y.d by 16 -> (dout, di)\n split y.dout by 4 -> (db, dt)\n reorder y (n, db, di, dt)\n bind y.n to block.x\n"
       " bind y.db to block.y atomic\n bind y.di to thread.x\n",
       "atomicMax"},
      {"i32", "min", "split y.d by 8 -> (db, di)\n bind y.n to block.x\n bind y.db to block.y atomic\n", "atomicMin"},
      {"i64", "sum",
       "split y.d by 8 -> (db, di)\n bind y.n to block.x\n bind y.db to block.y atomic\n bind y.di to thread.y atomic\n",
       "atomicAdd\\(reinterpret_cast<unsigned long long\\*>"},
  };
  for (const Case& c : cases) {
    std::string source = fmt::format("kernel rs(x: {0}[N, D]) -> (y: {0}[N]) {{\n    y[n] = {1}[d](x[n, d])\n}}\n"
                                     "schedule rs {{\n {2}}}\n", c.type, c.op, c.schedule);
    INFO(source);
    Built built = build(source);
    checkRuns(built, {{{"N", 5}, {"D", 77}}, {{"N", 1}, {"D", 1}}, {{"N", 3}, {"D", 300}}});
    CHECK(contains(built.cuda.source, c.atomic));
    CHECK(contains(built.cuda.source, R"(__global__ void .*rs__k0_init\()"));
    checkCompiles(built);
  }
}

TEST_CASE("caches of padded reads hold the pad value, and of reads at several places their union", "[schedule]") {
  Built conv = build(R"(
kernel conv3x3(img: f32[H, W], k: f32[3, 3]) -> (out: f32[H, W]) {
    out[i, j] = sum[di, dj](pad(img, 0.5)[i + di - 1, j + dj - 1] * k[di, dj])
}
schedule conv3x3 {
    tile out (i, j) by (8, 16) -> (io, jo, ii, ji)
    bind out.io to block.y
    bind out.jo to block.x
    bind out.ii to thread.y
    bind out.ji to thread.x
    cache img in shared at out.jo
    cache k in registers at out.ji
}
)");
  checkRuns(conv, {{{"H", 13}, {"W", 37}}, {{"H", 1}, {"W", 1}}});
  CHECK(contains(conv.cuda.source, R"(EMMY_SHARED\(float, img_shared, 180\);)"));  // (8 + 2) x (16 + 2)
  checkCompiles(conv);
  // A separable blur: each pass reads three places; the part computed at a block is their union.
  Built blur = build(R"(
kernel blur(x: f32[N, D]) -> (y: f32[N, D]) {
    h[n, d] = pad(x, 0.5)[n, d - 1] + x[n, d] + pad(x, 0.5)[n, d + 1]
    y[n, d] = pad(h, 0.0)[n - 1, d] + h[n, d] + pad(h, 0.0)[n + 1, d]
}
schedule blur {
    tile y (n, d) by (4, 32) -> (n_out, d_out, n_in, d_in)
    bind y.n_out to block.y
    bind y.d_out to block.x
    bind y.n_in to thread.y
    bind y.d_in to thread.x
    compute h at y.d_out
}
)");
  checkRuns(blur, {{{"N", 6}, {"D", 37}}, {{"N", 1}, {"D", 2}}});
  CHECK(contains(blur.cuda.source, R"(EMMY_SHARED\(float, h, 192\);)"));  // (4 + 2) x 32
  checkCompiles(blur);
  Built difference = build(R"(
kernel central_difference(x: f32[N]) -> (dx: f32[N]) {
    dx[i] = where(i > 0 and i < N - 1, (x[i + 1] - x[i - 1]) * 0.5, 0)
}
schedule central_difference {
    split dx.i by 64 -> (io, ii)
    bind dx.io to block.x
    bind dx.ii to thread.x
    cache x in shared at dx.io
}
)");
  checkRuns(difference, {{{"N", 150}}, {{"N", 1}}, {{"N", 64}}});
  CHECK(contains(difference.cuda.source, R"(EMMY_SHARED\(float, x_shared, 66\);)"));
  checkCompiles(difference);
}

TEST_CASE("a cache of a tensor an earlier kernel stores reads that kernel's output", "[schedule]") {
  Built built = build(R"(
kernel two(x: f32[N, D]) -> (c: f32[D], y: f32[N, D]) {
    c[d]    = sum[n](x[n, d])
    y[n, d] = x[n, d] / c[d]
}
schedule two {
    split y.d by 32 -> (dout, din)
    bind y.din to thread.x
    cache c in shared at y.dout
}
)");
  checkRuns(built, {{{"N", 5}, {"D", 77}}, {{"N", 1}, {"D", 1}}});
  CHECK(contains(built.cuda.source, R"(EMMY_SHARED\(float, c_shared, 32\);)"));
}

// A stage has at most kMaxStageLoops loops (each is a level of recursion in the lowering): the most
// chained splits there is room for build to CUDA quickly (each tail was once tested against every loop
// at every loop: cubic) and run; one more is a diagnostic.
TEST_CASE("chained splits up to a stage's most loops are applied quickly and one more is refused", "[schedule]") {
  auto chained = [](size_t splits) {
    std::string source = "kernel k(x: f32[N]) -> (y: f32[N]) {\n    y[i] = x[i] * 2.0\n}\nschedule k {\n";
    std::string loop = "i";
    for (size_t k = 0; k < splits; ++k) {
      source += fmt::format("    split y.{} by {} -> (a{}, b{})\n", loop, k == 0 ? 4 : 1, k, k);
      loop = fmt::format("a{}", k);
    }
    return source + "}\n";
  };
  auto start = std::chrono::steady_clock::now();
  Built built = build(chained(tile::kMaxStageLoops - 1));
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 10);
  checkRuns(built, {{{"N", 7}}});
  CHECK(contains(loweringErrors(chained(tile::kMaxStageLoops)), "a stage has at most 256"));
}

// An epilogue that reads a row reduction whose row is known only inside a register tile's loops (inside
// the accumulators'): the reduction is computed again before each result's store, not in the reduction
// loops (found by the program generator, seed 70: "reads p, which is not in scope").
TEST_CASE("an epilogue reads a row reduction whose row is known only inside the register tile", "[schedule]") {
  for (const char* cache : {"", "    cache c in shared at out.ro\n"}) {
    Built built = build(fmt::format(R"(
kernel k(rhs: f16[N, D], c: f16[N, B], w: f16[B, D]) -> (out: bf16[N, D]) {{
    p[r] = prod[jy](1 + 0.01 * tanh(rhs[r, jy]))
    acc[j, k] = sum[r](c[j, r] * w[r, k])
    out[j, k] = bf16(acc[j, k] - exp(p[j]))
}}
schedule k {{
    tile out (j, k) by (8, 16) -> (jo, ko, ji, ki)
    bind out.jo to block.y
    bind out.ko to block.x
    tile out (ji, ki) by (2, 1) -> (jt, kt, jr, kr)
    bind out.jt to thread.y
    bind out.kt to thread.x
    split out.r by 4 -> (ro, ri)
    reorder out (jo, ko, jt, kt, ro, ri, jr, kr)
{}}}
)", cache));
    checkRuns(built, {{{"N", 13}, {"D", 37}, {"B", 9}}, {{"N", 1}, {"D", 1}, {"B", 1}}});
    std::string tiled = tile::printProgram(built.lowered.tile);
    // Computed once per result, after the reduction loops, and nowhere inside them.
    size_t rowLoop = tiled.find("for jy < D");
    REQUIRE(rowLoop != std::string::npos);
    CHECK(tiled.find("for jy < D", rowLoop + 1) == std::string::npos);
    CHECK(rowLoop > tiled.find("for ro < "));
  }
}

TEST_CASE("a tile larger than a constant extent: its copies and accumulators cover the overrun", "[schedule]") {
  // The section-5 matmul's 64x64 tiles over constant extents of 6, 16 and 32 (and of 70, 33 and 17): the
  // threads past the extents read the shared copies and keep accumulators, never stored.
  for (const auto& [m, k, n] : std::vector<std::array<int, 3>>{{6, 16, 32}, {70, 33, 17}}) {
    std::string source = specMatmul();
    source = std::regex_replace(source, std::regex(R"(A: f32\[M, K\], B: f32\[K, N\]\) -> \(C: f32\[M, N\]\))"),
                                fmt::format("A: f32[{0}, {1}], B: f32[{1}, {2}]) -> (C: f32[{0}, {2}])", m, k, n));
    INFO(source);
    checkRuns(build(source), {{}});
  }
}

TEST_CASE("a loop bound to grid.x: threads, vector groups, members computed before it", "[schedule]") {
  Built grouped = build(R"(
kernel scale(x: f16[N, D]) -> (y: f16[N, D]) {
    y[n, d] = x[n, d] * 2.0
}
schedule scale {
    fuse y (n, d) -> nd
    threads y 64
    bind y.nd to grid.x
    vectorize y.nd by 8
}
)");
  checkRuns(grouped, {{{"N", 3}, {"D", 131}}, {{"N", 0}, {"D", 5}}});
  CHECK(contains(grouped.cuda.source, R"(__launch_bounds__\(64)"));
  CHECK(contains(grouped.cuda.source, "uint4"));
  // A row's reduction, computed by each thread for its own elements inside the grid-strided loop.
  Built centered = build(R"(
kernel center(x: f32[N, D]) -> (y: f32[N, D]) {
    m[n]    = sum[d](x[n, d])
    y[n, d] = x[n, d] - m[n]
}
schedule center {
    fuse y (n, d) -> nd
    bind y.nd to grid.x
}
)");
  checkRuns(centered, {{{"N", 7}, {"D", 45}}, {{"N", 1}, {"D", 1}}});
}

// A reduction of up to 32 elements in all stays in its thread, the outputs spread over the grid as
// elementwise ones are; one element more and it is a row kernel's, split over the lanes, unless
// neighbouring outputs read neighbouring elements (a convolution, also with its bias as an epilogue) and
// there are enough outputs to fill the grid.
TEST_CASE("the default policy reduces a window in each thread: short, or read along the outputs", "[schedule]") {
  auto inThreads = [](const std::string& statement, const std::string& outputDims) {
    tensor::Kernel kernel = testing::kernelsOfText(fmt::format(R"(
kernel k(x: f32[N, M], w: f32[70, 3, 3]) -> (y: f32[{}]) {{
    {}
}}
)", outputDims, statement))[0];
    std::string schedule = tile::printSchedule(lower(kernel, PipelineOptions{}).tile);
    INFO(statement << "\n" << schedule);
    bool grid = contains(schedule, R"(to grid.x\n)"), lanes = contains(schedule, R"(to thread.x\n)");
    CHECK(grid != lanes);
    return grid;
  };
  CHECK(inThreads("y[i, j] = max[di < 4, dj < 8](pad(x, 0)[i + di, j + dj])", "N, M"));
  CHECK_FALSE(inThreads("y[i, j] = max[di < 3, dj < 11](pad(x, 0)[j + dj, i + di])", "N, M"));
  CHECK_FALSE(inThreads("y[i, j] = max[di < N, dj < 2](pad(x, 0)[i + di, j + dj])", "N, M"));
  CHECK(inThreads("y[i, j] = sum[c < 70, di < 3, dj < 3](pad(x, 0)[i + di + c, j + dj] * w[c, di, dj]) + 1.0", "N, M"));
  CHECK_FALSE(inThreads("y[i, j] = sum[c < 70, di < 3, dj < 3](pad(x, 0)[i + di + c, 2 * j + dj] * w[c, di, dj])", "N, M"));
  CHECK_FALSE(inThreads("y[i] = sum[k < 64](pad(x, 0)[i, k])", "N"));
  CHECK(inThreads("y[j] = sum[k < 64](pad(x, 0)[k, j])", "M"));
  CHECK_FALSE(inThreads("y[j < 100] = sum[k < 64](pad(x, 0)[k, j])", "100"));
}

// A row kernel no directive names is scheduled as the standard library's are: each lane takes 16 bytes
// of the row at a time in every pass (`vectorize`), and the row of an input that more than one pass reads
// is copied into shared memory where it fits (the rest read from memory by each pass).
TEST_CASE("the default policy reads a row kernel's rows by 16-byte vectors and copies a row several passes read",
          "[schedule]") {
  struct Case {
    std::string kernel;
    int vector;               // 0: no vectors
    std::string copied;       // the input copied, or ""
  };
  const std::vector<Case> cases = {
      {softmaxKernel(), 4, "x"},
      {R"(
kernel norm(x: f16[N, D], w: f16[D]) -> (y: f16[N, D]) {
    ms[n]   = sum[d](f32(x[n, d]) * f32(x[n, d])) / D
    y[n, d] = f16(f32(x[n, d]) * rsqrt(ms[n] + 1e-5) * f32(w[d]))
}
)", 8, "x"},
      {R"(
kernel centered(x: f64[N, D]) -> (y: f64[N, D]) {
    mu[n]   = sum[d](x[n, d]) / D
    y[n, d] = x[n, d] - mu[n]
}
)", 2, "x"},
      {R"(
kernel rowsum(x: f32[N, D]) -> (y: f32[N]) {
    y[n] = sum[d](x[n, d])
}
)", 4, ""},  // one pass: nothing to copy
      {R"(
kernel columns(x: f32[D, N]) -> (y: f32[N, D]) {
    m[n]    = max[d](x[d, n])
    y[n, d] = x[d, n] - m[n]
}
)", 0, ""},  // read down the columns: no vectors, and no copy of whole rows
  };
  for (const Case& each : cases) {
    Built built = build(each.kernel);
    std::string schedule = tile::printSchedule(built.lowered.tile);
    INFO(each.kernel << schedule);
    CHECK(contains(schedule, R"(\n    vectorize y\.)") == (each.vector > 0));
    if (each.vector > 0) CHECK(contains(schedule, fmt::format(R"(param y_vector in \[1, 2, 4, 8\] = {}\n)", each.vector)));
    CHECK(contains(schedule, R"(\n    cache x in shared at y\.n -> x_shared\n)") == !each.copied.empty());
    CHECK(contains(built.cuda.source, "emmy_load_shared_vector<16>") == (!each.copied.empty() && each.vector > 0));
    checkRuns(built, {{{"N", 3}, {"D", 1037}}, {{"N", 2}, {"D", 7}}, {{"N", 2}, {"D", 1}}, {{"N", 0}, {"D", 5}}});
    testing::ScopedEnvironment smallDevice("EMMY_SIM_SHARED_BYTES", "2048");
    checkRuns(built, {{{"N", 2}, {"D", 1037}}});
  }
  // -D y_vector=1: a lane takes one element at a time, as before vectors.
  tensor::Kernel kernel = testing::kernelsOfText(softmaxKernel())[0];
  kernel.paramValues = {{"y_vector", 1}};
  std::string schedule = tile::printSchedule(lower(kernel, PipelineOptions{}).tile);
  CHECK_FALSE(contains(schedule, "vectorize"));
  CHECK(contains(schedule, R"(split y\.d by y_threads -> \(d_step, d_lane\))"));
}

TEST_CASE("the default policy's params: -D sets them, and a value outside their candidates is a usage error",
          "[schedule]") {
  tensor::Kernel kernel = testing::kernelsOfText(softmaxKernel())[0];
  kernel.paramValues = {{"y_threads", 64}};
  Lowered lowered = lower(kernel, PipelineOptions{});
  CHECK(contains(tile::printSchedule(lowered.tile), R"(param y_threads in \[32, 64, 128, 256, 512, 1024\] = 256\n)"));
  CHECK(lowered.tile.kernels.at(0).threads[0] * lowered.tile.kernels.at(0).threads[1] == 64);
  kernel.paramValues = {{"y_threads", 100}};
  CHECK_THROWS_WITH(lower(kernel, PipelineOptions{}),
                    "-D y_threads=100 is not one of the candidates [32, 64, 128, 256, 512, 1024] of param 'y_threads' "
                    "of the default schedule of softmax");
  // Short rows share a block: its threads and rows together fit in one.
  tensor::Kernel rows = testing::kernelsOfText(R"(
kernel rowsum(x: f32[N, 40]) -> (y: f32[N]) {
    y[n] = sum[d](x[n, d])
}
)")[0];
  Lowered shortRows = lower(rows, PipelineOptions{});
  // 40 floats are 10 vectors of 4: a warp a row, 8 rows a block.
  CHECK(contains(tile::printSchedule(shortRows.tile), R"(param y_rows in \[1, 2, 4, 8, 16, 32\] = 8\n)"));
  CHECK(shortRows.tile.kernels.at(0).threads == std::array<int, 3>{32, 8, 1});
  rows.paramValues = {{"y_threads", 1024}, {"y_rows", 2}};
  CHECK_THROWS_WITH(lower(rows, PipelineOptions{}),
                    "-D y_threads=1024 and y_rows=2: blocks of 2048 threads, more than the 1024 a block may have");
  rows.paramValues = {{"y_threads", 64}, {"y_rows", 1}};
  checkRuns(Built{rows, lower(rows, PipelineOptions{}), emitCudaFiles({lower(rows, PipelineOptions{})}, "rowsum.emmy")},
            {{{"N", 5}}});
}
