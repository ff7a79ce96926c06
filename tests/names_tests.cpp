// Name hygiene (LANGUAGE.md section 1): every identifier without '__' that is not an Emmy keyword may name
// a tensor, size, scalar, index or loop, and the generated code spells it so that it meets neither C++,
// CUDA and the headers nor a name of the compiler's own. A list of hostile names is put into every role
// of six kernels (elementwise by the default policy, a row reduction combined across threads and one the
// default policy schedules, a scheduled matmul with shared and register caches, a running sum as a
// block-level scan, attention through a call), the directive words LANGUAGE.md does not reserve (`scan`,
// `threads`, `mma`) among the names, in schedules too; each instance is checked
// in the simulation against the reference, and its `.cu` compiled by nvcc for host and device where nvcc
// is present. EMMY_NAMES_ALL=1 puts every name into every role; by default each name goes into a few
// roles of each kernel (seeded). Also: kernel names that C cannot take are refused with the reason, and
// the header macros the reserved list must hold.
#include <cstdlib>
#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <sstream>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "backend/cuda/emit_cuda.h"
#include "backend/sim/simulator.h"
#include "compiler/pipeline.h"
#include "support/cpp_names.h"
#include "support/diagnostics.h"
#include "support/process.h"
#include "test_kernels.h"

namespace {

using namespace emmy;
using Sizes = std::map<std::string, int64_t>;

// Names the compiler generates or generated once, C++ keywords, CUDA's names and types, the C library,
// header macros, the generated code's own helpers, names that differ only in case, and names shaped like
// the ones calls and caches make.
const std::vector<std::string> kHostileNames = {
    "row", "element", "part", "kk", "jj", "ii", "m_acc", "m_acc_partials", "k_k0", "y_k0", "tile_i", "thread_row", "slice",
    "e", "r", "c", "x_shared", "C_acc", "D_local", "D_acc", "int", "float", "new", "class", "do", "auto", "delete",
    "this", "template", "signed", "long", "char", "goto", "union", "typename", "blockIdx", "threadIdx", "warpSize",
    "dim3", "half", "uint4", "size_t", "int64_t", "cudaStream_t", "cudaGetLastError", "stream", "error", "expf",
    "sqrtf", "printf", "malloc", "main", "fabs", "assert", "errno", "stdout", "INFINITY", "NAN", "EOF", "NULL",
    "INT32_MAX", "CHAR_BIT", "emmy_max", "emmy_f32", "EMMY_SHARED", "emmy_harness_arguments", "Row", "ROW", "Int",
    "o_1", "s_t", "As", "in_x", "out_y", "scalar_s", "first", "lane", "partials", "scan", "threads", "mma", "item",
    "carry"};

struct Template {
  std::string name;
  std::vector<std::string> roles;         // placeholders in `source`, each replaced by a name
  std::set<std::string> builtinsUsed;     // names the body calls, which a local name would shadow
  std::string source;
  Sizes sizes;                            // by role
};

// Placeholders are `$ROLE`; each instance gives every role a distinct name.
const std::vector<Template>& templates() {
  static const std::vector<Template> all = {
      {"elementwise",
       {"A", "B", "C", "S1", "S2", "I", "J", "T", "D"},
       {},
       R"(
kernel $KERNEL($A: f32[$S1, $S2], $B: f32[$S2], $C: f32 = 2.0) -> ($D: f32[$S1, $S2]) {
    $T[$I, $J] = $A[$I, $J] * $C + $B[$J]
    $D[$I, $J] = $T[$I, $J] * $T[$I, $J] - $A[$I, $J]
}
)",
       {{"S1", 3}, {"S2", 37}}},
      {"row",
       {"A", "C", "S1", "S2", "I", "J", "M", "E", "T", "D", "L1", "L2"},
       {"exp", "max", "sum"},
       R"(
kernel $KERNEL($A: f32[$S1, $S2], $C: f32 = 1.5) -> ($D: f32[$S1, $S2]) {
    $M[$I] = max[$J]($A[$I, $J])
    $E[$I, $J] = exp($A[$I, $J] * $C - $M[$I] * $C)
    $T[$I] = sum[$J]($E[$I, $J])
    $D[$I, $J] = $E[$I, $J] / $T[$I]
}
schedule $KERNEL {
    bind $D.$I to block.x
    compute $M at $D.$I
    compute $T at $D.$I
    split $M.$J by 64 -> ($L1, $L2)
    reorder $M ($L2, $L1)
    bind $M.$L2 to thread.x
    split $T.$J by 64 -> ($L1, $L2)
    reorder $T ($L2, $L1)
    bind $T.$L2 to thread.x
    split $D.$J by 64 -> ($L1, $L2)
    reorder $D ($I, $L2, $L1)
    bind $D.$L2 to thread.x
}
)",
       {{"S1", 3}, {"S2", 45}}},
      {"row by the default policy",
       {"A", "S1", "S2", "I", "J", "M", "E", "T", "D"},
       {"exp", "max", "sum"},
       R"(
kernel $KERNEL($A: f32[$S1, $S2]) -> ($D: f32[$S1, $S2]) {
    $M[$I] = max[$J]($A[$I, $J])
    $E[$I, $J] = exp($A[$I, $J] - $M[$I])
    $T[$I] = sum[$J]($E[$I, $J])
    $D[$I, $J] = $E[$I, $J] / $T[$I]
}
)",
       {{"S1", 3}, {"S2", 45}}},
      {"matmul",
       {"A", "B", "C", "S1", "S2", "S3", "I", "J", "K", "T", "D", "N1", "L1", "L2", "L3", "L4", "L5", "L6", "L7"},
       {"sum"},
       R"(
kernel $KERNEL($A: f32[$S1, $S3], $B: f32[$S3, $S2], $C: f32[$S2]) -> ($D: f32[$S1, $S2]) {
    $T[$I, $J] = sum[$K]($A[$I, $K] * $B[$K, $J])
    $D[$I, $J] = $T[$I, $J] + $C[$J]
}
schedule $KERNEL {
    tile $D ($I, $J) by (16, 16) -> ($L1, $L2, $L3, $L4)
    bind $D.$L1 to block.y
    bind $D.$L2 to block.x
    tile $D ($L3, $L4) by (2, 2) -> ($L5, $L6, p7, p8)
    bind $D.$L5 to thread.y
    bind $D.$L6 to thread.x
    split $D.$K by 8 -> ($L7, p10)
    reorder $D ($L1, $L2, $L5, $L6, $L7, p10, p7, p8)
    cache $A in shared at $D.$L7 -> $N1
    cache $B in shared at $D.$L7
    cache $D in registers at $D.$L6
    unroll $D.p10
}
)",
       {{"S1", 13}, {"S2", 17}, {"S3", 11}}},
      {"running sum",
       {"A", "S1", "S2", "I", "J", "K", "D"},
       {"sum"},
       R"(
kernel $KERNEL($A: f32[$S1, $S2]) -> ($D: f32[$S1, $S2]) {
    $D[$I, $J] = sum[$K < $J + 1]($A[$I, $K])
}
schedule $KERNEL {
    scan $D.$J by (32, 3)
    bind $D.$I to block.x
}
)",
       {{"S1", 3}, {"S2", 200}}},
      {"attention",
       {"A", "B", "C", "F", "S1", "S2", "S3", "S4", "S5", "D"},
       {"nn"},
       R"(
import nn
kernel $KERNEL($A: f32[$S1, $S2, $S3, $S4], $B: f32[$S1, $S2, $S5, $S4], $C: f32[$S1, $S2, $S5, $S4], $F: f32 = 0.125) -> ($D: f32[$S1, $S2, $S3, $S4]) {
    $D = nn.attention($A, $B, $C, $F)
}
)",
       {{"S1", 1}, {"S2", 2}, {"S3", 5}, {"S4", 9}, {"S5", 7}}},
  };
  return all;
}

// `kernelName` replaces $KERNEL.
std::string instantiate(const Template& t, const std::map<std::string, std::string>& names,
                        const std::string& kernelName) {
  std::string text = std::regex_replace(t.source, std::regex("\\$KERNEL\\b"), kernelName);
  // Longest roles first, so that $L1 is not replaced inside $L10.
  std::vector<std::string> roles = t.roles;
  std::sort(roles.begin(), roles.end(), [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  for (const std::string& role : roles) text = std::regex_replace(text, std::regex("\\$" + role + "\\b"), names.at(role));
  return text;
}

// Instance `j` of `t` over `pool`: role r takes pool[(j + r * stride) % n], so that instances 0..n-1 put
// every name into every role, distinct within an instance.
std::map<std::string, std::string> namesOfInstance(const Template& t, const std::vector<std::string>& pool, size_t j) {
  std::map<std::string, std::string> names;
  size_t n = pool.size(), stride = n / t.roles.size();
  for (size_t r = 0; r < t.roles.size(); ++r) names[t.roles[r]] = pool[(j + r * stride) % n];
  return names;
}

std::string findNvcc() {
  for (const char* candidate : {"/usr/local/cuda/bin/nvcc"})
    if (std::filesystem::exists(candidate)) return candidate;
  if (const char* home = std::getenv("CUDA_HOME"); home && std::filesystem::exists(std::string(home) + "/bin/nvcc"))
    return std::string(home) + "/bin/nvcc";
  return "";
}

// nvcc compiles the generated files for host and device (what a user's build does), without a warning.
void checkNvccCompiles(const cuda::GeneratedCuda& cuda, const std::string& nvcc, const std::string& program) {
  TemporaryFolder folder;
  std::ofstream(folder.path() / (cuda.baseName + ".cu")) << cuda.source;
  std::ofstream(folder.path() / (cuda.baseName + ".h")) << cuda.header;
  ProcessOutcome outcome = runProcess({nvcc, "-c", "-arch=sm_90", "-std=c++17", cuda.baseName + ".cu", "-o", "out.o"},
                                      folder.path(), folder.path() / "nvcc.log", std::chrono::minutes(5));
  INFO(program << "\nnvcc: " << outcome.output);
  REQUIRE(outcome.kind == ProcessOutcome::Kind::Exited);
  REQUIRE(outcome.code == 0);
  CHECK(outcome.output.find("warning") == std::string::npos);  // a user's build shows nvcc's warnings
}

}  // namespace

TEST_CASE("hostile names in every role of six kinds of kernel: correct in the simulation, compiled by nvcc",
          "[names][sweep]") {
  bool everyRole = std::getenv("EMMY_NAMES_ALL") != nullptr;
  std::string nvcc = findNvcc();
  if (nvcc.empty()) WARN("nvcc not found: the generated files are checked in the simulation only");
  std::mt19937_64 random(20261201);
  for (const Template& t : templates()) {
    std::vector<std::string> pool;
    for (const std::string& name : kHostileNames)
      if (!t.builtinsUsed.count(name)) pool.push_back(name);
    // By default: ceil(n / roles) instances, each name in at least one role, and a few more drawn.
    std::vector<size_t> instances;
    size_t n = pool.size(), cover = (n + t.roles.size() - 1) / t.roles.size();
    if (everyRole) {
      for (size_t j = 0; j < n; ++j) instances.push_back(j);
    } else {
      for (size_t j = 0; j < cover; ++j) instances.push_back(j * t.roles.size() % n);
      instances.push_back(random() % n);
    }
    // The instances are the kernels k0, k1, ... of one file, so that nvcc compiles the template once (it
    // spends most of its time on the CUDA headers); kernels side by side is also what users write.
    std::vector<std::map<std::string, std::string>> namesOf;
    std::vector<std::string> programs;
    std::string file;
    for (size_t i = 0; i < instances.size(); ++i) {
      namesOf.push_back(namesOfInstance(t, pool, instances[i]));
      programs.push_back(instantiate(t, namesOf.back(), "k" + std::to_string(i)));
      file += programs.back();
    }
    std::vector<tensor::Kernel> kernels = testing::kernelsOfText(file);
    REQUIRE(kernels.size() == instances.size());
    std::vector<Lowered> lowered;
    for (size_t i = 0; i < kernels.size(); ++i) {
      INFO(t.name << ", instance " << instances[i] << ":\n" << programs[i]);
      try {
        lowered.push_back(lower(kernels[i], PipelineOptions{}));
      } catch (const CompilationFailed& failed) {
        FAIL(failed.diagnostics.render());
      }
    }
    // The simulation compiles an instance's file of its own (a compile there costs what its file holds).
    for (size_t i = 0; i < kernels.size(); ++i) {
      INFO(t.name << ", instance " << instances[i] << ":\n" << programs[i]);
      Sizes sizes;
      for (const auto& [role, size] : t.sizes) sizes[namesOf[i].at(role)] = size;
      sim::SimulatedKernel simulated(kernels[i], emitCudaFiles({lowered[i]}, "names.emmy"));
      testing::checkAgainstEvaluator(kernels[i], simulated, sizes, 11);
    }
    if (!nvcc.empty()) checkNvccCompiles(emitCudaFiles(lowered, "names.emmy"), nvcc, file);
  }
}

TEST_CASE("a kernel name that C cannot take in the generated header is refused, with the reason", "[names]") {
  CHECK(kernelNameProblem("exp").value_or("").find("a C library function of that name is declared there") !=
        std::string::npos);
  CHECK(kernelNameProblem("int").value_or("").find("C++ keyword") != std::string::npos);
  CHECK(kernelNameProblem("EOF").value_or("").find("macro") != std::string::npos);
  CHECK(kernelNameProblem("threadIdx").has_value());
  CHECK_FALSE(kernelNameProblem("softmax").has_value());
  CHECK_FALSE(kernelNameProblem("stream").has_value());
  for (const char* name : {"row", "element", "m_acc", "x", "N", "softmax_f16"})
    CHECK_FALSE(isReservedInGeneratedCode(name));
  for (const char* name : {"m__acc", "x__"}) CHECK_FALSE(isReservedInGeneratedCode(name));
}

TEST_CASE("every macro the headers of generated code define is reserved", "[names]") {
  std::string nvcc = findNvcc();
  if (nvcc.empty()) {
    WARN("nvcc not found: the CUDA headers' macros are not listed here");
    return;
  }
  TemporaryFolder folder;
  ProcessOutcome outcome =
      runProcess({"bash", std::string(EMMY_SOURCE_DIR) + "/scripts/list_header_macros.sh", nvcc}, folder.path(),
                 folder.path() / "macros.txt", std::chrono::minutes(2));
  REQUIRE(outcome.kind == ProcessOutcome::Kind::Exited);
  REQUIRE(outcome.code == 0);
  std::istringstream lines(outcome.output);
  std::vector<std::string> missing;
  for (std::string name; std::getline(lines, name);)
    if (!name.empty() && !isReservedInGeneratedCode(name)) missing.push_back(name);
  INFO("regenerate support/header_macros.inc with scripts/list_header_macros.sh");
  CHECK(missing == std::vector<std::string>{});
}
