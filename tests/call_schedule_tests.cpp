// The schedules of called kernels (docs/call_schedules.md): a call of a scheduled kernel builds its
// stages with the callee's directives under their new names, the same CUDA as the callee alone; the
// elementwise work after a call joins the callee's schedule as its epilogue; a result read otherwise is
// a kernel of its own; the callee's params are set with -D; the caller's directives replace the
// callee's. Each is run in the simulation against the evaluator at ragged sizes.
#include <regex>

#include <catch2/catch.hpp>

#include "backend/sim/simulator.h"
#include "compiler/pipeline.h"
#include "frontend/frontend.h"
#include "ir/tile/printer.h"
#include "schedule_round_trip.h"
#include "test_kernels.h"

namespace {

using namespace emmy;
using Sizes = std::map<std::string, int64_t>;

struct CallBuild {
  tensor::Kernel kernel;
  std::string schedule;  // as --emit schedule prints it
  std::string cuda;
  cuda::GeneratedCuda files;
};

// The kernel `selector` of `source` (or of the file `path` when `source` is empty) with -D `params`.
CallBuild buildWith(const std::string& source, const std::string& selector, const Sizes& params = {},
                    const std::filesystem::path& path = {}) {
  Diagnostics diagnostics;
  Frontend frontend(diagnostics, {Frontend::defaultStdlibDir()});
  frontend.setParamValues(params);
  const ast::Module* module = source.empty() ? frontend.loadFile(path) : frontend.loadText("test.emmy", source);
  INFO(diagnostics.render());
  REQUIRE(module != nullptr);
  std::vector<tensor::Kernel> kernels = frontend.elaborateSelected(*module, selector, true);
  INFO(diagnostics.render());
  REQUIRE(kernels.size() == 1);
  for (const auto& [param, value] : params) CHECK(frontend.declaredParams().count(param));
  CallBuild built{kernels[0], {}, {}, {}};
  try {
    Lowered lowered = lower(built.kernel, PipelineOptions{});
    built.schedule = tile::printSchedule(lowered.tile);
    built.files = emitCudaFiles({lowered}, "test.emmy");
    built.cuda = built.files.source;
  } catch (const CompilationFailed& failed) {
    FAIL(source << failed.diagnostics.render());
  }
  return built;
}

CallBuild callerOf(const std::string& source, const Sizes& params = {}) { return buildWith(source, "k", params); }

void checkRuns(const CallBuild& built, const std::vector<Sizes>& sizes) {
  sim::SimulatedKernel program(built.kernel, built.files);
  uint64_t seed = 11;
  for (const Sizes& size : sizes) testing::checkAgainstEvaluator(built.kernel, program, size, seed++);
}

bool has(const std::string& text, const std::string& line) { return text.find(line) != std::string::npos; }

size_t count(const std::string& text, const std::string& pattern) {
  std::regex regex(pattern);
  return std::distance(std::sregex_iterator(text.begin(), text.end(), regex), std::sregex_iterator());
}

// The CUDA kernels a file defines, but the 64-bit twins (`NAME__i64`) of those with 32-bit indices.
size_t kernelsIn(const std::string& cuda) { return count(cuda, "__global__") - count(cuda, R"(__i64\()"); }

const std::vector<Sizes> kRows{{{"N", 3}, {"D", 1001}}, {{"N", 1}, {"D", 1}}, {{"N", 2}, {"D", 4100}}};
const std::vector<Sizes> kProducts{{{"M", 67}, {"K", 33}, {"N", 45}}, {{"M", 1}, {"K", 1}, {"N", 1}}};

const char* const kSoftmaxCall = R"(
import nn
kernel k(x: f32[N, D]) -> (y: f32[N, D]) {
    y = nn.softmax(x)
}
)";

}  // namespace

TEST_CASE("a call of a scheduled kernel builds its stages with the callee's schedule: the callee's CUDA", "[call-schedule]") {
  struct Case {
    std::string call, callee, output;
    std::vector<std::string> directives;
    std::vector<Sizes> sizes;
  };
  std::vector<Case> cases{
      {"import nn\nkernel k(x: f32[N, D]) -> (y: f32[N, D]) {\n    y = nn.softmax(x)\n}\n", "nn", "y",
       {"param LANES in [32, 64, 128, 256, 512, 1024] = 32 if D <= 2048 else 128 if D <= 8192 else 256", "bind y.n to block.x",
        "split y__m.d_vector by LANES -> (d_step, d_lane)", "bind y__s.d_lane to thread.x",
        "cache x in shared at y.n -> y__x_row"},
       kRows},
      {"import linalg\nkernel k(a: f32[M, K], b: f32[K, N]) -> (c: f32[M, N]) {\n    c = linalg.matmul(a, b)\n}\n",
       "linalg", "c",
       {"tile c (m, n) by (128, 128) -> (mo, no, mi, ni)", "split c.k by 8 -> (ko, ki)",
        "mma c (mi, ni, ki) by (32, 64) stages 2"},
       kProducts},
      {"import linalg\nkernel k(x: f32[M, N]) -> (y: f32[N, M]) {\n    y = linalg.transpose(x)\n}\n", "linalg", "y",
       {"bind y.mt to thread.x", "vectorize y.mv", "cache x in shared at y.mo -> y__x_tile", "pad y__x_tile by 1"},
       {{{"M", 35}, {"N", 70}}, {{"M", 1}, {"N", 1}}}},
  };
  for (const Case& c : cases) {
    INFO(c.call);
    CallBuild caller = callerOf(c.call);
    for (const std::string& directive : c.directives) CHECK(has(caller.schedule, "    " + directive + "\n"));
    CHECK_FALSE(has(caller.schedule, "the default schedule"));
    std::string calleeName = c.call.substr(c.call.find('.') + 1, c.call.find('(', c.call.find('.')) - c.call.find('.') - 1);
    CallBuild alone = buildWith("", calleeName + "<f32>", {},
                                Frontend::defaultStdlibDir() / (c.callee + ".emmy"));
    // The same CUDA up to names: the callee's stages are prefixed with the result's name, and the
    // kernel is k rather than the instance's name.
    std::regex prefix(c.output + "__");
    CHECK(std::regex_replace(caller.cuda, prefix, "") ==
          std::regex_replace(std::regex_replace(alone.cuda, std::regex(calleeName + "_f32"), "k"), prefix, ""));
    checkRuns(caller, c.sizes);
  }
}

TEST_CASE("the elementwise work after a call joins the callee's schedule as its epilogue", "[call-schedule]") {
  SECTION("softmax, then a scale") {
    CallBuild built = callerOf("import nn\nkernel k(x: f32[N, D]) -> (z: f32[N, D]) {\n    z = nn.softmax(x) * 2.0\n}\n");
    CHECK(has(built.schedule, "    bind z.i0 to block.x\n"));
    CHECK(has(built.schedule, "    split z.i1 by 4 -> (d_vector, d_element)\n"));
    CHECK(has(built.schedule, "    cache x in shared at z.i0 -> z__x_row\n"));
    CHECK(kernelsIn(built.cuda) == 3);  // one per launch variant of softmax's LANES
    checkRuns(built, kRows);
  }
  SECTION("a product, then a bias: matmul's reduction loops stay the root's") {
    CallBuild built = callerOf(
        "import linalg\nkernel k(a: f32[M, K], b: f32[K, N], t: f32[N]) -> (z: f32[M, N]) {\n    z = linalg.matmul(a, b) + t\n}\n");
    CHECK(has(built.schedule, "    tile z (i0, i1) by (128, 128) -> (mo, no, mi, ni)\n"));
    CHECK(has(built.schedule, "    split z.k by 8 -> (ko, ki)\n"));
    CHECK(has(built.schedule, "    mma z (mi, ni, ki) by (32, 64) stages 2\n"));
    CHECK(kernelsIn(built.cuda) == 1);
    checkRuns(built, kProducts);
  }
  SECTION("a local result, through two elementwise statements") {
    CallBuild built = callerOf(
        "import nn\nkernel k(x: f32[N, D]) -> (z: f32[N, D]) {\n    t = nn.softmax(x)\n    u = t * 3.0\n    z = u + 1.0\n}\n");
    CHECK(has(built.schedule, "    bind z.d_lane to thread.x\n"));
    CHECK(has(built.schedule, "    bind t__m.d_lane to thread.x\n"));
    CHECK(kernelsIn(built.cuda) == 3);  // one per launch variant
    checkRuns(built, kRows);
  }
  SECTION("an argument expression: the callee's copy of its input is not made of a stage computed in place") {
    CallBuild built = callerOf("import nn\nkernel k(x: f32[N, D]) -> (z: f32[N, D]) {\n    z = nn.softmax(x * 2.0)\n}\n");
    CHECK(has(built.schedule, "    bind z.d_lane to thread.x\n"));
    CHECK_FALSE(has(built.schedule, "cache"));
    checkRuns(built, kRows);
  }
}

TEST_CASE("a callee's param chosen at launch tests the caller's size that the callee's is at the call", "[call-schedule]") {
  SECTION("another name: the case tests it") {
    CallBuild built = callerOf("import nn\nkernel k(x: f32[B, L]) -> (y: f32[B, L]) {\n    y = nn.softmax(x)\n}\n");
    CHECK(has(built.schedule, "    param LANES in [32, 64, 128, 256, 512, 1024] = 32 if L <= 2048 else 128 if L <= 8192 else 256\n"));
    CHECK(has(built.cuda, "  if ((L <= (int64_t)2048)) {\n    if ("));
    CHECK(has(built.cuda, "      {\n        int64_t emmy_shared_bytes = ((((L + (int64_t)3)"));
    CHECK(kernelsIn(built.cuda) == 3);
    checkRuns(built, {{{"B", 3}, {"L", 2048}}, {{"B", 2}, {"L", 2049}}, {{"B", 1}, {"L", 1}}});
  }
  SECTION("a constant: the case is decided at the call") {
    CallBuild built = callerOf("import nn\nkernel k(x: f32[B, 3000]) -> (y: f32[B, 3000]) {\n    y = nn.softmax(x)\n}\n");
    CHECK(has(built.schedule, "    split y__m.d_vector by 128 -> (d_step, d_lane)\n"));
    CHECK_FALSE(has(built.schedule, "param LANES"));
    CHECK(kernelsIn(built.cuda) == 1);
    checkRuns(built, {{{"B", 3}}});
  }
}

TEST_CASE("a call's result read other than elementwise is a kernel of its own, scheduled as the callee", "[call-schedule]") {
  SECTION("two calls in one statement, each with its own copy of the directives") {
    CallBuild built = callerOf(
        "import nn\nkernel k(x: f32[N, D], w: f32[N, D]) -> (z: f32[N, D]) {\n    z = nn.softmax(x) + nn.softmax(w)\n}\n");
    for (const char* line : {"    root z__y\n", "    root z_1__y\n", "    cache x in shared at z__y.n -> z__x_row\n",
                             "    cache w in shared at z_1__y.n -> z_1__x_row\n", "    bind z_1__m.d_lane to thread.x\n"})
      CHECK(has(built.schedule, line));
    CHECK(kernelsIn(built.cuda) == 9);  // 3 for each launch variant (the calls' LANES test the same D)
    checkRuns(built, kRows);
  }
  SECTION("a product read by a softmax") {
    CallBuild built = callerOf(
        "import nn\nimport linalg\nkernel k(a: f32[M, K], b: f32[K, N]) -> (z: f32[M, N]) {\n"
        "    z = nn.softmax(linalg.matmul(a, b))\n}\n");
    CHECK(has(built.schedule, "    root z_1__c\n"));
    CHECK(has(built.schedule, "    cache z_1__c in shared at z.n -> z__x_row\n"));
    checkRuns(built, kProducts);
  }
  SECTION("a callee that calls: the prefixes nest") {
    CallBuild built = callerOf(R"(
import nn
kernel inner(x: f32[N, D]) -> (y: f32[N, D]) {
    t = nn.softmax(x)
    y = t * 2.0
}
kernel k(x: f32[N, D]) -> (z: f32[N, D]) {
    z = inner(x) + inner(x)
}
)");
    CHECK(has(built.schedule, "    bind z_1__t__s.d_lane to thread.x\n"));
    CHECK(has(built.schedule, "    cache x in shared at z__y.i0 -> z__t__x_row\n"));
    checkRuns(built, kRows);
  }
}

TEST_CASE("the -D option sets a called kernel's param and changes its code", "[call-schedule]") {
  CallBuild standard = callerOf(kSoftmaxCall);
  CallBuild narrow = callerOf(kSoftmaxCall, {{"LANES", 64}});
  CHECK(has(standard.cuda, "__launch_bounds__(256"));
  CHECK(has(narrow.cuda, "__launch_bounds__(64"));
  CHECK(has(narrow.schedule, "    split y__s.d_vector by 64 -> (d_step, d_lane)\n"));
  checkRuns(narrow, kRows);
  // Two calls of one callee share the param by name.
  CallBuild two = callerOf("import nn\nkernel k(x: f32[N, D]) -> (z: f32[N, D]) {\n    z = nn.softmax(x) + nn.softmax(x)\n}\n",
                           {{"VEC", 2}});
  CHECK(count(two.schedule, R"(split z(_1)?__m\.d by 2 )") == 2);
  checkRuns(two, kRows);
}

TEST_CASE("the caller's directives replace the callee's on the same target", "[call-schedule]") {
  const std::string softmaxCall = "import nn\nkernel k(x: f32[N, D]) -> (z: f32[N, D]) {\n    z = nn.softmax(x)\n}\n";
  SECTION("a bind and a cache of the same tensor at the same stage") {
    CallBuild built = callerOf(softmaxCall + "schedule k {\n    bind z.n to block.y\n    cache x in shared at z.n -> row\n}\n");
    CHECK_FALSE(has(built.schedule, "bind z.n to block.x"));
    CHECK_FALSE(has(built.schedule, "z__x_row"));
    CHECK(has(built.cuda, "blockIdx.y"));
    CHECK_FALSE(has(built.cuda, "blockIdx.x"));
    CHECK(has(built.cuda, "row"));
    checkRuns(built, kRows);
  }
  SECTION("a split of the same loop takes the callee's place: the same code as the param") {
    CallBuild built = callerOf(softmaxCall + R"(schedule k {
    split z.d_vector by 64 -> (d_step, d_lane)
    split z__m.d_vector by 64 -> (d_step, d_lane)
    split z__s.d_vector by 64 -> (d_step, d_lane)
}
)");
    CallBuild param = callerOf(softmaxCall, {{"LANES", 64}});
    CHECK(built.cuda == param.cuda);
    checkRuns(built, kRows);
    const std::string product = "import linalg\nkernel k(a: f32[M, K], b: f32[K, N], t: f32[N]) -> (z: f32[M, N]) {\n"
                                "    z = linalg.matmul(a, b) + t\n}\n";
    CallBuild slices = callerOf(product + "schedule k {\n    split z.k by 16 -> (ko, ki)\n}\n");
    CHECK(slices.cuda == callerOf(product, {{"TILE_K", 16}}).cuda);
    checkRuns(slices, kProducts);
  }
  SECTION("a cut loop drops what the callee made of it, and what depended on that") {
    CallBuild built = callerOf(softmaxCall + R"(schedule k {
    split z.d by 2 -> (d_pair, d_element)
    vectorize z.d_element
}
)");
    CHECK_FALSE(has(built.schedule, "split z.d by 4"));
    CHECK_FALSE(has(built.schedule, "split z.d_vector"));
    CHECK_FALSE(has(built.schedule, "reorder z (n, "));
    CHECK_FALSE(has(built.schedule, "bind z.d_lane"));
    CHECK(has(built.schedule, "    bind z__m.d_lane to thread.x\n"));  // the other stages keep theirs
    checkRuns(built, kRows);
  }
}

// A call whose result nothing reads is never computed (Loop IR drops it): its callee's directives,
// and a user's about its stages, have nothing to apply to and are no error (generator seeds 1558, 1632).
TEST_CASE("the directives of a call whose result nothing reads are no error", "[call-schedule]") {
  for (const char* call : {"linalg.matmul(a, b)", "linalg.transpose(linalg.transpose(a * 2))", "nn.softmax(a)"}) {
    std::string source = fmt::format("import nn\nimport linalg\nkernel k(a: f32[N, N], b: f32[N, N]) -> (y: f32[N, N]) {{\n"
                                     "    u = {}\n    y = a + b\n}}\n", call);
    INFO(source);
    CallBuild built = callerOf(source);
    checkRuns(built, {{{"N", 5}}, {{"N", 0}}});
    CallBuild scheduled = callerOf(source + "schedule k {\n    split u.n by 4 -> (no, ni)\n}\n");
    CHECK(scheduled.cuda == built.cuda);
  }
}

TEST_CASE("a callee's cache the caller's epilogue rules out is passed over, with its pad", "[call-schedule]") {
  // The epilogue reads a at (i, j) as well as the transpose's a at (j, i): no one copy of a serves both
  // (generator seed 460 found it in matmul's a_tile, when matmul still cached its operands, with a
  // log_softmax's elementwise part as that read).
  for (const char* epilogue : {"a", "nn.log_softmax(a)"}) {
    std::string source = fmt::format("import nn\nimport linalg\nkernel k(a: f32[N, N], b: f32[N, N]) -> (y: f32[N, N]) {{\n"
                                     "    y = tanh(linalg.transpose(a) + {})\n}}\n", epilogue);
    INFO(source);
    CallBuild built = callerOf(source);
    checkRuns(built, {{{"N", 37}}, {{"N", 1}}});
    CHECK(has(built.schedule, ".mt to thread.x\n"));  // the callee's other directives stay
    if (std::string(epilogue) == "a") {
      CHECK_FALSE(has(built.cuda, "y__x_tile"));
      CHECK_FALSE(has(built.schedule, "x_tile"));  // nor printed: pasted as the caller's own, it would be an error
    }
    CHECK(testing::checkScheduleRoundTrip(source, Frontend::defaultStdlibDir() / "test.emmy") == 1);
  }
}
