// The CUDA-on-CPU simulation (backend/sim/emmy_cuda_sim.h). Each case compiles hand-written `.cu` files
// of tests/sim (kernels and host functions in the shape the backend emits) with a small harness main,
// exactly as `emmy check` compiles generated code, runs the program and checks what it printed. The
// mains compare with scalar computations themselves and exit 1 on a mismatch; the reports of failing
// launches are compared here, word for word.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace {

namespace fs = std::filesystem;

const fs::path kSimTestsDir = fs::path(EMMY_SOURCE_DIR) / "tests" / "sim";
const fs::path kSimHeader = fs::path(EMMY_SOURCE_DIR) / "backend" / "sim" / "emmy_cuda_sim.h";

struct Outcome {
  int exitCode;
  std::string output;  // stdout and stderr together
};

std::string quoted(const std::string& text) {
  std::string result = "'";
  for (char c : text) result += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return result + "'";
}

Outcome runShell(const std::string& command) {
  Outcome outcome{-1, ""};
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return outcome;
  char buffer[4096];
  size_t bytes;
  while ((bytes = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) outcome.output.append(buffer, bytes);
  const int status = pclose(pipe);
  outcome.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return outcome;
}

// A folder of its own under the system's temporary folder, removed with its contents.
class TemporaryFolder {
public:
  TemporaryFolder() {
    std::string pattern = (fs::temp_directory_path() / "emmy-sim-test-XXXXXX").string();
    path_ = mkdtemp(pattern.data()) != nullptr ? fs::path(pattern) : fs::path();
  }
  TemporaryFolder(const TemporaryFolder&) = delete;
  TemporaryFolder& operator=(const TemporaryFolder&) = delete;
  ~TemporaryFolder() {
    std::error_code ignored;
    if (!path_.empty()) fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

private:
  fs::path path_;
};

// The named files of tests/sim compiled as `emmy check` compiles a generated file and its harness ($CXX
// or c++), plus `extraFlags`.
class SimProgram {
public:
  explicit SimProgram(const std::vector<std::string>& sources, const std::string& extraFlags = "") {
    REQUIRE_FALSE(folder_.path().empty());
    const char* compiler = std::getenv("CXX");
    std::string command = std::string(compiler != nullptr && *compiler != '\0' ? compiler : "c++") +
                          " -std=c++17 -O1 -DEMMY_SIMULATE " + extraFlags + " -include " +
                          quoted(kSimHeader.string()) + " -x c++";
    for (const std::string& source : sources) command += " " + quoted((kSimTestsDir / source).string());
    command += " -o " + quoted(program().string());
    compilation_ = runShell(command);
    compilation_.output = command + "\n" + compilation_.output;
  }

  // Runs the program; a compiler failure comes back as the outcome. A hang would be a bug of the
  // simulation: `timeout` turns it into a failure.
  Outcome run(const std::string& arguments = "") const {
    if (compilation_.exitCode != 0) return {compilation_.exitCode, "compilation failed: " + compilation_.output};
    return runShell("timeout 120 " + quoted(program().string()) + " " + arguments);
  }

private:
  fs::path program() const { return folder_.path() / "program"; }

  TemporaryFolder folder_;
  Outcome compilation_;
};

Outcome compileAndRun(const std::vector<std::string>& sources, const std::string& extraFlags = "") {
  return SimProgram(sources, extraFlags).run();
}

// The seconds a main reported on its line "speed: S s, ...".
double reportedSeconds(const std::string& output) {
  std::smatch match;
  REQUIRE(std::regex_search(output, match, std::regex("speed: ([0-9.]+) s")));
  return std::stod(match[1]);
}

const char* const kDeadlockReports =
    "diverged_barrier: 1: deadlock in kernel diverged_barrier_k0: thread (0,0,0) of block (0,0,0) waits at "
    "__syncthreads() but threads (32..63,0,0) have exited\n"
    "blocks started: 1 0 0\n"
    "early_exit_barrier 1-D: 1: deadlock in kernel early_exit_barrier_k0: thread (0,0,0) of block (0,0,0) waits at "
    "__syncthreads() but threads (37..39,0,0) have exited\n"
    "early_exit_barrier 2-D: 1: deadlock in kernel early_exit_barrier_k0: thread (0,0,0) of block (0,0,0) waits at "
    "__syncthreads() but threads (0..31,1,0), (0..31,2,0) have exited\n"
    "early_exit_barrier runs: 1: deadlock in kernel early_exit_barrier_k0: thread (0,0,0) of block (0,0,0) waits at "
    "__syncthreads() but threads (2..3,2,0), (0..3,3,0), (0..3,4,0) and 12 more have exited\n"
    "leading_exit_barrier: 1: deadlock in kernel leading_exit_barrier_k0: thread (3,0,0) of block (0,0,0) waits at "
    "__syncthreads() but threads (0..2,0,0) have exited\n"
    "half_warp_shuffle: 1: deadlock in kernel half_warp_shuffle_k0: thread (0,0,0) of block (0,0,0) waits at "
    "__shfl_xor_sync() but threads (16..31,0,0) of its warp have exited\n"
    "shuffle_or_barrier: 1: deadlock in kernel shuffle_or_barrier_k0: thread (0,0,0) of block (0,0,0) waits at "
    "__shfl_down_sync() but threads (16..31,0,0) of its warp wait at __syncthreads()\n"
    "barrier_or_shuffle: 1: deadlock in kernel barrier_or_shuffle_k0: thread (0,0,0) of block (0,0,0) waits at "
    "__syncthreads() but threads (48..63,0,0) have exited and threads (32..47,0,0) wait in a warp shuffle\n"
    "bad_width: 1: kernel bad_width_k0: thread (0,0,0) of block (0,0,0) calls __shfl_xor_sync() with width 12, "
    "which is not a power of 2 from 1 to 32\n"
    "partial_mask: 1: kernel partial_mask_k0: thread (0,0,0) of block (0,0,0) calls __shfl_xor_sync() with mask "
    "0x0000ffff, which leaves out lanes of its warp: the simulation runs only whole-warp shuffles\n"
    "cudaGetLastError after the report was read: 0\n"
    "a good launch afterwards: 0, 0 wrong\n";

const char* const kSafetyReports =
    "broadcast with a barrier: 0: ok\n"
    "broadcast without a barrier: 1: data race on shared buffer value in kernel broadcast_k0: thread (1,0,0) of "
    "block (0,0,0) reads value[0], which thread (0,0,0) wrote, with no __syncthreads() between\n"
    "read then write with a barrier: 0: ok\n"
    "read then write without a barrier: 1: data race on shared buffer staged in kernel read_then_write_k0: thread "
    "(1,0,0) of block (0,0,0) writes staged[1], which thread (0,0,0) read, with no __syncthreads() between\n"
    "write write: 1: data race on shared buffer flag in kernel write_write_k0: thread (9,0,0) of block (0,0,0) "
    "writes flag[0], which thread (5,0,0) wrote, with no __syncthreads() between\n"
    "own elements: 0: ok\n"
    "tree sum with barriers: 0: ok\n"
    "tree sum without barriers: 1: data race on shared buffer partial in kernel tree_sum_k0: thread (1,0,0) of "
    "block (0,0,0) writes partial[1], which thread (0,0,0) read, with no __syncthreads() between\n"
    "shared overflow: 1: out-of-bounds access in kernel shared_overflow_k0: thread (32,0,0) of block (0,0,0) "
    "writes staged[32] but shared buffer staged has 32 elements\n"
    "shared underflow: 1: out-of-bounds access in kernel shared_underflow_k0: thread (0,0,0) of block (0,0,0) "
    "reads staged[-1] but shared buffer staged has 32 elements\n"
    "sized at launch: 0: ok\n"
    "sized beyond the launch: 1: shared memory beyond the launch's in kernel sized_at_launch_k0: thread (0,0,0) of "
    "block (0,0,0) declares shared buffer row of 128 bytes from byte 0, but the launch sized 96 bytes\n"
    "past what the launch sized: 1: out-of-bounds access in kernel sized_at_launch_k0: thread (32,0,0) of block "
    "(0,0,0) writes row[32] but shared buffer row has 32 elements\n"
    "more than a block may have: 1: invalid argument: kernel sized_at_launch_k0 launched with 232464 bytes of "
    "shared memory sized at launch, more than the 232448 a block may have\n"
    "shifted copy: 1: out-of-bounds access in kernel shifted_copy_k0: thread (35,0,0) of block (1,0,0) reads "
    "x[100] but global buffer x has 100 elements\n"
    "write before: 1: out-of-bounds access in kernel write_before_k0: thread (0,0,0) of block (0,0,0) writes "
    "y[-1000] but global buffer y has 100 elements\n"
    "wild read: 1: invalid memory access in kernel wild_read_k0: thread (0,0,0) of block (0,0,0) reads address "
    "0x10, which is in no buffer\n"
    "deep stack: 1: stack overflow in kernel deep_stack_k0: thread (0,0,0) of block (0,0,0) used more than its "
    "65536 bytes of stack (raise EMMY_SIM_STACK_BYTES)\n"
    "fill temporary: 1: out-of-bounds access in kernel fill_temporary_k0: thread (44,0,0) of block (2,0,0) writes "
    "scratch[300] but global buffer scratch has 300 elements\n"
    "broadcast afterwards: 0: ok\n"
    "cudaFree: 0, twice: 1\n";

const char* const kTensorCoreReports =
    "own rows without a barrier: 0: ok\n"
    "rows of others with a barrier: 0: ok\n"
    "rows written before without a barrier: 1: data race on shared buffer tile in kernel ldmatrix_race_k0: thread "
    "(1,0,0) of block (0,0,0) reads tile[0], which thread (0,0,0) wrote, with no __syncthreads() between\n"
    "rows written after without a barrier: 1: data race on shared buffer tile in kernel ldmatrix_race_k0: thread "
    "(1,0,0) of block (0,0,0) writes tile[8], which thread (0,0,0) read, with no __syncthreads() between\n"
    "a write to a row another lane read: 1: data race on shared buffer tile in kernel ldmatrix_then_write_k0: thread "
    "(30,0,0) of block (0,0,0) writes tile[240], which thread (29,0,0) read, with no __syncthreads() between\n"
    "misaligned row: 1: misaligned access in kernel ldmatrix_misaligned_k0: thread (5,0,0) of block (0,0,0) reads a "
    "row of emmy_ldmatrix() at tile[44], byte 88 of shared buffer tile, which is not a multiple of 16\n"
    "row out of bounds: 1: out-of-bounds access in kernel ldmatrix_out_of_bounds_k0: thread (31,0,0) of block "
    "(0,0,0) reads tile[256] but shared buffer tile has 256 elements\n"
    "partial warp: 1: kernel mma_partial_warp_k0: thread (32,0,0) of block (0,0,0) calls emmy_mma_m16n8k16() in a "
    "warp of 16 threads (the block's last, partial warp): it needs all 32 lanes of a warp\n"
    "exited lanes: 1: deadlock in kernel ldmatrix_exited_k0: thread (0,0,0) of block (0,0,0) waits at "
    "emmy_ldmatrix() but threads (16..31,0,0) of its warp have exited\n"
    "mma or shuffle: 1: kernel mma_or_shuffle_k0: thread (31,0,0) of block (0,0,0) calls __shfl_xor_sync() but "
    "threads (0..15,0,0) of its warp call emmy_mma_m16n8k16(): the lanes of a warp must all execute the same "
    "instruction\n"
    "ldmatrix and ldmatrix.trans: 1: kernel ldmatrix_mixed_k0: thread (31,0,0) of block (0,0,0) calls "
    "emmy_ldmatrix() but threads (0..15,0,0) of its warp call emmy_ldmatrix() with other template arguments: the "
    "lanes of a warp must all execute the same instruction\n"
    "barrier or ldmatrix: 1: deadlock in kernel barrier_or_ldmatrix_k0: thread (0,0,0) of block (0,0,0) waits at "
    "__syncthreads() but threads (48..63,0,0) have exited and threads (32..47,0,0) wait in emmy_ldmatrix()\n"
    "own rows afterwards: 0: ok\n";

}  // namespace

TEST_CASE("simulation: elementwise kernel with a grid-stride loop and a ragged tail", "[sim]") {
  const Outcome outcome = compileAndRun({"elementwise.cu", "elementwise_main.cpp"});
  INFO(outcome.output);
  CHECK(outcome.exitCode == 0);
}

TEST_CASE("simulation: row softmax with shared memory, barriers and warp shuffles, and its speed", "[sim]") {
  const Outcome outcome = compileAndRun({"softmax.cu", "softmax_main.cpp"});
  INFO(outcome.output);
  REQUIRE(outcome.exitCode == 0);
  // 1000 blocks of 1024 threads, each through 4 barriers and 10 shuffles: about 0.4 s on one core.
  CHECK(reportedSeconds(outcome.output) < 5.0);
}

TEST_CASE("simulation: float4 vector loads and stores with a scalar tail", "[sim]") {
  const Outcome outcome = compileAndRun({"vector_access.cu", "vector_access_main.cpp"});
  INFO(outcome.output);
  CHECK(outcome.exitCode == 0);
}

TEST_CASE("simulation: warp shuffles with width, partial warps and 2-D blocks", "[sim]") {
  const Outcome outcome = compileAndRun({"shuffles.cu", "shuffles_main.cpp"});
  INFO(outcome.output);
  CHECK(outcome.exitCode == 0);
}

TEST_CASE("simulation: f16 and bf16 conversions are CUDA's, bit for bit", "[sim]") {
  const Outcome outcome = compileAndRun({"conversions.cu", "conversions_main.cpp"});
  INFO(outcome.output);
  CHECK(outcome.exitCode == 0);
}

TEST_CASE("simulation: deadlocks and invalid shuffles are reported, and later launches still work", "[sim]") {
  const Outcome outcome = compileAndRun({"deadlocks.cu", "elementwise.cu", "deadlocks_main.cpp"});
  CHECK(outcome.exitCode == 0);
  CHECK(outcome.output == kDeadlockReports);
}

// The race detector of EMMY_SHARED arrays (accesses between barriers: many readers, a thread with its
// own element, a barrier between are fine; a write and another thread's access are not), their bounds,
// and the guard pages of global buffers.
TEST_CASE("simulation: data races, out-of-bounds accesses and stack overflows stop the launch with a report",
          "[sim]") {
  const Outcome outcome = compileAndRun({"safety.cu", "safety_main.cpp"});
  CHECK(outcome.exitCode == 0);
  CHECK(outcome.output == kSafetyReports);
}

// The tensor-core built-ins against the PTX ISA (9.1: 9.7.14.5.8 "Matrix Fragments for mma.m16n8k16 with
// floating point type", 9.7.14.5.14 "mma", 9.7.14.5.15 "ldmatrix"), whose fragment layouts
// tensor_cores_main.cpp holds as tables: every lane's fragments of ldmatrix .x1/.x2/.x4 with and without
// .trans and of mma with f16 and bf16 (exact small integers), a matmul through shared tiles and its speed,
// and the reports of launches that break the rules (races through ldmatrix's rows, a misaligned or
// out-of-bounds row, a partial warp, exited lanes, lanes in different instructions). Under
// AddressSanitizer too: the last lane to arrive reads and writes the other lanes' fragments on their
// stacks.
TEST_CASE("simulation: ldmatrix and mma.m16n8k16 hold the PTX ISA's fragments, and their misuse is reported",
          "[sim]") {
  for (const char* flags : {"", "-fsanitize=address -fno-omit-frame-pointer"}) {
    INFO("flags: " << flags);
    const SimProgram program({"tensor_cores.cu", "tensor_cores_main.cpp"}, flags);
    const Outcome layouts = program.run("layouts");
    INFO(layouts.output);
    REQUIRE(layouts.exitCode == 0);
    CHECK(layouts.output.rfind("ldmatrix: 1792 elements checked; mma: 512 elements checked\n", 0) == 0);
    // 65536 warp mma and 32768 ldmatrix.x4: about 0.3 s on one core, 0.6 s under AddressSanitizer.
    CHECK(reportedSeconds(layouts.output) < 5.0);
    const Outcome reports = program.run("reports");
    CHECK(reports.exitCode == 0);
    CHECK(reports.output == kTensorCoreReports);
  }
}

TEST_CASE("simulation: several kernels and launches reuse shared memory", "[sim]") {
  const Outcome outcome = compileAndRun({"shared_memory.cu", "shared_memory_main.cpp"});
  INFO(outcome.output);
  CHECK(outcome.exitCode == 0);
}

TEST_CASE("simulation: 1000 blocks of 1024 threads with 11 barriers each", "[sim]") {
  const Outcome outcome = compileAndRun({"block_1024.cu", "block_1024_main.cpp"});
  INFO(outcome.output);
  REQUIRE(outcome.exitCode == 0);
  CHECK(reportedSeconds(outcome.output) < 5.0);
}

TEST_CASE("simulation: launch order, atomics and invalid launch configurations", "[sim]") {
  const Outcome outcome = compileAndRun({"launch_config.cu", "launch_config_main.cpp"});
  CHECK(outcome.exitCode == 0);
  CHECK(outcome.output ==
        "3-D launch: 288 threads ran, 0 out of order, total 144.0\n"
        "1: invalid configuration argument: kernel record_order_k0 launched with grid (1,1,1) and block (1025,1,1): "
        "a block dimension is over its limit (1024,1024,64) (0 threads ran)\n"
        "1: invalid configuration argument: kernel record_order_k0 launched with grid (1,1,1) and block (32,32,2): "
        "the block has 2048 threads, more than 1024 (0 threads ran)\n"
        "1: invalid configuration argument: kernel record_order_k0 launched with grid (1,1,1) and block (1,1,65): "
        "a block dimension is over its limit (1024,1024,64) (0 threads ran)\n"
        "1: invalid configuration argument: kernel record_order_k0 launched with grid (0,1,1) and block (32,1,1): "
        "a grid or block dimension is 0 (0 threads ran)\n"
        "1: invalid configuration argument: kernel record_order_k0 launched with grid (1,65536,1) and block "
        "(32,1,1): a grid dimension is over its limit (2147483647,65535,65535) (0 threads ran)\n"
        "1: invalid configuration argument: kernel record_order_k0 launched with grid (1,1,1) and block (32,0,1): "
        "a grid or block dimension is 0 (0 threads ran)\n"
        "peek 9, peek 9, get 9, get 0\n"
        "cudaGetErrorString(cudaErrorInvalidValue): invalid argument\n");
}

// Building the simulated program with AddressSanitizer catches the out-of-bounds accesses that the
// simulation does not see itself (in memory that is not from cudaMalloc, in plain `__shared__` arrays),
// as long as the simulation tells ASan about its fibers' stacks.
TEST_CASE("simulation: under AddressSanitizer, good kernels run clean and bad accesses name the thread", "[sim]") {
  const std::string flags = "-fsanitize=address -fno-omit-frame-pointer";
  const Outcome clean = compileAndRun({"deadlocks.cu", "elementwise.cu", "deadlocks_main.cpp"}, flags);
  CHECK(clean.exitCode == 0);
  CHECK(clean.output == kDeadlockReports);

  const SimProgram outOfBounds({"out_of_bounds.cu", "out_of_bounds_main.cpp"}, flags);
  const Outcome global = outOfBounds.run("global");
  INFO(global.output);
  CHECK(global.exitCode != 0);
  CHECK(global.output.find("AddressSanitizer: heap-buffer-overflow") != std::string::npos);
  CHECK(global.output.find("emmy simulation: the error above happened in kernel shifted_copy_k0, thread (35,0,0) of "
                           "block (1,0,0)\n") != std::string::npos);
  const Outcome shared = outOfBounds.run("shared");
  INFO(shared.output);
  CHECK(shared.exitCode != 0);
  CHECK(shared.output.find("AddressSanitizer: global-buffer-overflow") != std::string::npos);
  CHECK(shared.output.find("emmy simulation: the error above happened in kernel shared_overflow_k0, thread (32,0,0) "
                           "of block (0,0,0)\n") != std::string::npos);

  // Buffers from cudaMalloc are the simulation's own, between guard pages: its fault handler reports
  // accesses past them under AddressSanitizer too.
  const Outcome safety = compileAndRun({"safety.cu", "safety_main.cpp"}, flags);
  CHECK(safety.exitCode == 0);
  CHECK(safety.output == kSafetyReports);
}

// The portable context switch, which non-x86-64 machines and CET shadow stacks use, behaves the same.
TEST_CASE("simulation: the ucontext fibers give the same results and reports", "[sim]") {
  const Outcome reports =
      compileAndRun({"deadlocks.cu", "elementwise.cu", "deadlocks_main.cpp"}, "-DEMMY_SIM_USE_UCONTEXT");
  CHECK(reports.exitCode == 0);
  CHECK(reports.output == kDeadlockReports);
  const Outcome results = compileAndRun({"shared_memory.cu", "shared_memory_main.cpp"}, "-DEMMY_SIM_USE_UCONTEXT");
  INFO(results.output);
  CHECK(results.exitCode == 0);
  // A fault handler that switches back to the host: swapcontext from the signal's stack.
  const Outcome safety = compileAndRun({"safety.cu", "safety_main.cpp"}, "-DEMMY_SIM_USE_UCONTEXT");
  CHECK(safety.exitCode == 0);
  CHECK(safety.output == kSafetyReports);
}
