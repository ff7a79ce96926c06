// The static performance report of `emmy build --stats --size ...` (performance/performance.h): occupancy
// from ptxas's registers and shared memory, the least bytes a kernel moves, its flops and the roofline
// bound, for a memory-bound softmax and a compute-bound matmul; and the instruction mix read from PTX
// (performance/instruction_mix.h), on hand-written PTX whose counts and cycles are known by arithmetic.
#include <fstream>
#include <regex>

#include <catch2/catch.hpp>

#include "backend/nvrtc.h"
#include "performance/instruction_mix.h"
#include "performance/performance.h"
#include "test_kernels.h"

namespace {

using namespace emmy;

// The --stats report of every kernel of `file` whose instance name is `instance` (all when empty).
std::vector<std::string> reportOfFile(const std::filesystem::path& file, const std::map<std::string, int64_t>& sizes,
                                  const std::string& instance = "", const std::string& arch = "sm_90") {
  std::vector<Lowered> lowered;
  for (const tensor::Kernel& kernel : testing::kernelsOf(file))
    if (instance.empty() || kernel.instanceName() == instance) lowered.push_back(lower(kernel, PipelineOptions{}));
  std::string example = file.stem().string();
  cuda::GeneratedCuda files = emitCudaFiles(lowered, example + ".emmy");
  std::string whyNot;
  REQUIRE(nvrtcAvailable(&whyNot));
  CudaCompileResult compiled = compileCuda(files.source, example + ".cu", arch, true);
  REQUIRE(compiled.ok);
  // One report per CUDA kernel, but the 64-bit twins' (which these sizes do not launch: index_width_tests.cpp).
  std::vector<std::string> all = performanceReport(lowered, resourceUsage(compiled), compiled.ptx, arch, sizes), report;
  size_t next = 0;
  for (const Lowered& instance : lowered)
    for (const kernel::Function& function : instance.kernel.functions)
      if (const std::string& kernel = all.at(next++); !function.isWideTwin()) report.push_back(kernel);
  return report;
}

std::vector<std::string> reportOf(const std::string& example, const std::map<std::string, int64_t>& sizes) {
  return reportOfFile(std::filesystem::path(EMMY_SOURCE_DIR) / "examples" / (example + ".emmy"), sizes);
}

// The microseconds of a term of the report: "shared-memory wavefronts", "issue time".
double microsecondsOf(const std::string& report, const std::string& term) {
  std::smatch match;
  REQUIRE(std::regex_search(report, match, std::regex(term + R"( ([0-9.]+) (us|ms))")));
  return std::stod(match[1]) * (match[2] == "ms" ? 1000 : 1);
}
double sharedMicroseconds(const std::string& report) { return microsecondsOf(report, "shared-memory wavefronts"); }

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
  // The instruction mix of each loop, and the issue time beside the memory time.
  CHECK(std::regex_search(softmax[0], std::regex(R"(innermost loop at PTX line \d+, per thread iteration: .*issue cycles per warp iteration on sm_90 \(bound by )")));
  CHECK(std::regex_search(softmax[0], std::regex(R"(issue time .* against memory time)")));
  CHECK(std::regex_search(matmul[0], std::regex(R"(\d+ FP32, .*shared)")));
  // Without sizes, only the block, the occupancy and the mix.
  std::string unsized = reportOf("softmax", {})[0];
  CHECK(unsized.find("moved") == std::string::npos);
  CHECK(unsized.find("innermost loop") != std::string::npos);
  CHECK(unsized.find("issue time") == std::string::npos);
}

TEST_CASE("the instruction mix: loops from backward branches, classes, and sm_90 issue cycles", "[stats]") {
  // An outer loop around an inner one; the inner one moves 2 x 16 bytes, does 4 FMAs, 64-bit index
  // arithmetic, a conversion and an exp.
  const char* ptx = R"(
.visible .entry scale(
	.param .u64 scale_param_0
)
{
	.reg .b64 	%rd<9>;
	ld.param.u64 	%rd1, [scale_param_0];
	mov.u64 	%rd2, 0;
$L__BB0_1:
	mov.u64 	%rd3, 0;
$L__BB0_2:
	ld.global.nc.v4.f32 	{%f1, %f2, %f3, %f4}, [%rd1];
	fma.rn.f32 	%f5, %f1, %f2, %f3;
	fma.rn.f32 	%f6, %f1, %f2, %f4;
	fma.rn.f32 	%f7, %f5, %f2, %f3;
	fma.rn.f32 	%f8, %f6, %f2, %f4;
	ex2.approx.f32 	%f9, %f8;
	cvt.rn.f16.f32 	%rs1, %f9;
	st.global.v4.f32 	[%rd1], {%f5, %f6, %f7, %f8};
	add.s64 	%rd3, %rd3, 1;
	setp.lt.s64 	%p1, %rd3, 8;
	@%p1 bra 	$L__BB0_2;
	add.s64 	%rd2, %rd2, 1;
	setp.lt.s64 	%p2, %rd2, 8;
	@%p2 bra 	$L__BB0_1;
	bar.sync 	0;
	ret;
}
)";
  std::vector<KernelMix> mixes = instructionMix(ptx);
  REQUIRE(mixes.size() == 1);
  const KernelMix& mix = mixes[0];
  CHECK(mix.name == "scale");
  REQUIRE(mix.loops.size() == 2);
  const LoopMix& outer = mix.loops[0];
  const LoopMix& inner = mix.loops[1];
  CHECK_FALSE(outer.innermost);
  CHECK(inner.innermost);
  // The inner loop: 2 global 16-byte accesses (8 words), 4 FP32, 2 + 2 integer (64-bit, twice each), 1
  // conversion, 1 special function, 1 branch: 11 instructions, 13 issue slots with the 64-bit weight.
  CHECK(inner.globalBytes.at(16) == 2);
  CHECK(inner.words == 8);
  CHECK(inner.instructions.at(InstructionClass::Fp32) == 4);
  CHECK(inner.instructions.at(InstructionClass::Integer) == 4);
  CHECK(inner.instructions.at(InstructionClass::Conversion) == 1);
  CHECK(inner.instructions.at(InstructionClass::SpecialFunction) == 1);
  CHECK(inner.instructions.at(InstructionClass::Control) == 1);
  // Pipes per warp iteration: MUFU (conversion + ex2) 2 x 2 = 4 cycles; issue 13 / 4 = 3.25; INT (4 + 1
  // branch) x 0.5 = 2.5; LSU 2; FMA 1. MUFU bounds it.
  CHECK(inner.issueCycles == Approx(4.0));
  CHECK(inner.boundBy == "MUFU");
  // The outer loop's own instructions: its move, add, setp and branch (the inner loop's are not its).
  CHECK(outer.instructions.at(InstructionClass::Integer) == 4);
  CHECK(outer.instructions.at(InstructionClass::Control) == 1);
  CHECK(mix.usesTensorCores() == false);
  // Per 4-byte word of global memory, a warp's iteration: 4 / (32 x 8).
  CHECK(describeLoop(inner).find("0.016 per 4-byte word") != std::string::npos);
  // Issue cycles per memory access over the loops: (outer + inner) / 2 accesses.
  CHECK(mix.cyclesPerMemoryInstruction() == Approx((outer.issueCycles + inner.issueCycles) / 2));
}

TEST_CASE("the instruction mix: inline asm's instructions count, and conversions by the pipe that runs them", "[stats]") {
  // cuda_fp16.h's conversions are inline asm, braces on the instruction's own line or around several.
  const char* ptx = R"(
.visible .entry widen(
	.param .u64 widen_param_0
)
{
	ld.param.u64 	%rd1, [widen_param_0];
$L__BB0_1:
	ld.global.u16 	%rs1, [%rd1];
	// begin inline asm
	{  cvt.f32.f16 %f1, %rs1;}

	// end inline asm
	cvt.f32.bf16 	%f2, %rs1;
	fma.rn.f32 	%f3, %f1, %f2, %f1;
	cvt.sat.f32.f32 	%f4, %f3;
	// begin inline asm
	{  cvt.rn.f16x2.f32 %r1, %f4, %f3;}

	// end inline asm
	{ .reg .b16 low;
	  cvt.rn.f16.f32 low, %f4;
	  mov.b32 %r2, {low, low};}
	st.global.v2.u32 	[%rd1], {%r1, %r2};
	// begin inline asm
	{max.NaN.f16x2 %r3,%r1,%r2;
}
	// end inline asm
	st.global.u32 	[%rd1], %r3;
	bra.uni 	$L__BB0_1;
}
)";
  std::vector<KernelMix> mixes = instructionMix(ptx);
  REQUIRE(mixes.size() == 1);
  REQUIRE(mixes[0].loops.size() == 1);
  const LoopMix& loop = mixes[0].loops[0];
  // Widening f16 (HADD2.F32), the clamp (FFMA.SAT) and the pair's max are FP32, widening bf16 a shift;
  // the two narrowings are conversions, one of them a pair. The brace alone closes the max's block, not
  // the kernel: the loop goes on to its branch.
  CHECK(loop.instructions.at(InstructionClass::Fp32) == 4);
  CHECK(loop.instructions.at(InstructionClass::Integer) == 1);
  CHECK(loop.instructions.at(InstructionClass::Conversion) == 2);
  CHECK(loop.instructions.at(InstructionClass::Other) == 1);
  CHECK(loop.instructions.at(InstructionClass::Control) == 1);
  CHECK(loop.globalBytes.at(2) == 1);
  CHECK(loop.globalBytes.at(4) == 1);
  CHECK(loop.globalBytes.at(8) == 1);
}

TEST_CASE("16-bit row kernels take their max and round their results a pair at a time, and take the hardware's exponential", "[stats]") {
  const std::filesystem::path nn = std::filesystem::path(EMMY_SOURCE_DIR) / "stdlib" / "nn.emmy";
  auto ptxOf = [&](const std::string& instance) {
    std::vector<Lowered> lowered;
    for (const tensor::Kernel& kernel : testing::kernelsOf(nn))
      if (kernel.instanceName() == instance) lowered.push_back(lower(kernel, PipelineOptions{}));
    REQUIRE(lowered.size() == 1);
    CudaCompileResult compiled = compileCuda(emitCudaFiles(lowered, "nn.emmy").source, "nn.cu", "sm_90", true);
    REQUIRE(compiled.ok);
    return compiled.ptx;
  };
  // ex2.approx.f32 (no .ftz: expf's own is .ftz) is the approximation; softmax<f32> keeps expf.
  const std::regex approximateExp(R"(ex2\.approx\.f32\s)");
  std::string f16 = ptxOf("softmax_f16"), bf16 = ptxOf("softmax_bf16"), f32 = ptxOf("softmax_f32");
  CHECK(f16.find("cvt.rn.f16x2.f32") != std::string::npos);
  CHECK(bf16.find("cvt.rn.bf16x2.f32") != std::string::npos);
  // The row's max, a pair of lanes at a time.
  CHECK(f16.find("max.NaN.f16x2") != std::string::npos);
  CHECK(bf16.find("max.NaN.bf16x2") != std::string::npos);
  CHECK(std::regex_search(f16, approximateExp));
  CHECK(std::regex_search(bf16, approximateExp));
  CHECK_FALSE(std::regex_search(f32, approximateExp));
}

TEST_CASE("the instruction mix: loops are the back edges of the control-flow graph, not every backward branch", "[stats]") {
  // One loop (BB0_1 .. its branch back); BB0_9 is laid out after it but runs between, and its branch back
  // to BB0_2 is a jump forward in the program's order, not a loop.
  const char* ptx = R"(
.visible .entry laid_out(
	.param .u64 laid_out_param_0
)
{
	ld.param.u64 	%rd1, [laid_out_param_0];
	mov.u64 	%rd2, 0;
$L__BB0_1:
	setp.eq.s64 	%p1, %rd2, 3;
	@%p1 bra 	$L__BB0_9;
$L__BB0_2:
	ld.global.f32 	%f1, [%rd1];
	st.global.f32 	[%rd1+4], %f1;
	add.s64 	%rd2, %rd2, 1;
	setp.lt.s64 	%p2, %rd2, 8;
	@%p2 bra 	$L__BB0_1;
	ret;
$L__BB0_9:
	add.s64 	%rd1, %rd1, 16;
	bra.uni 	$L__BB0_2;
}
)";
  std::vector<KernelMix> mixes = instructionMix(ptx);
  REQUIRE(mixes.size() == 1);
  REQUIRE(mixes[0].loops.size() == 1);
  const LoopMix& loop = mixes[0].loops[0];
  CHECK(loop.innermost);
  // The loop's blocks: BB0_1, BB0_2 and BB0_9 (setp, bra; ld, st, add, setp, bra; add, bra), each 64-bit
  // integer operation counted twice.
  CHECK(loop.instructions.at(InstructionClass::Control) == 3);
  CHECK(loop.instructions.at(InstructionClass::Integer) == 2 * 4);
  CHECK(loop.globalBytes.at(4) == 2);
}

TEST_CASE("the instruction mix: the global loads a thread keeps in flight before it uses one", "[stats]") {
  auto inFlight = [](const std::string& body) {
    std::string ptx = ".visible .entry k(\n)\n{\n\tmov.u64 \t%rd2, 0;\n$L__BB0_1:\n" + body +
                      "\tadd.s64 \t%rd2, %rd2, 1;\n\tsetp.lt.s64 \t%p9, %rd2, 8;\n\t@%p9 bra \t$L__BB0_1;\n\tret;\n}\n";
    std::vector<KernelMix> mixes = instructionMix(ptx);
    REQUIRE(mixes.size() == 1);
    REQUIRE(mixes[0].loops.size() == 1);
    return mixes[0].loops[0].loadBytesInFlight;
  };
  // Each load used in its own block: one in flight. In one block, ptxas issues both loads first.
  CHECK(inFlight("\tld.global.v4.u32 \t{%r1, %r2, %r3, %r4}, [%rd1];\n\tst.shared.v4.u32 \t[%rd3], {%r1, %r2, %r3, %r4};\n"
                 "\t@%p1 bra \t$L__BB0_2;\n$L__BB0_2:\n"
                 "\tld.global.v4.u32 \t{%r5, %r6, %r7, %r8}, [%rd4];\n\tst.shared.v4.u32 \t[%rd3+16], {%r5, %r6, %r7, %r8};\n") == 16.0);
  CHECK(inFlight("\tld.global.v4.u32 \t{%r1, %r2, %r3, %r4}, [%rd1];\n\tst.shared.v4.u32 \t[%rd3], {%r1, %r2, %r3, %r4};\n"
                 "\tld.global.v4.u32 \t{%r5, %r6, %r7, %r8}, [%rd4];\n\tst.shared.v4.u32 \t[%rd3+16], {%r5, %r6, %r7, %r8};\n") == 32.0);
  // Both loads first: two in flight; a move that unpacks halves is no use.
  CHECK(inFlight("\tld.global.v4.u32 \t{%r1, %r2, %r3, %r4}, [%rd1];\n\tld.global.v4.u32 \t{%r5, %r6, %r7, %r8}, [%rd4];\n"
                 "\tmov.b32 \t{%rs1, %rs2}, %r1;\n\tst.shared.u16 \t[%rd3], %rs2;\n\tst.shared.v4.u32 \t[%rd3+16], {%r5, %r6, %r7, %r8};\n") == 32.0);
  // The elements one by one on the other path, into the registers the vector filled: no more bytes.
  CHECK(inFlight("\t@%p1 bra \t$L__BB0_3;\n\tld.global.v2.f32 \t{%f1, %f2}, [%rd1];\n\tbra.uni \t$L__BB0_4;\n$L__BB0_3:\n"
                 "\tmov.f32 \t%f1, 0f00000000;\n\tld.global.f32 \t%f2, [%rd1+4];\n$L__BB0_4:\n"
                 "\tld.global.v2.f32 \t{%f3, %f4}, [%rd5];\n\tadd.f32 \t%f5, %f1, %f3;\n") == 16.0);
  // Asynchronous copies not waited for in the loop stay in flight across it; waited for, they count.
  CHECK_FALSE(inFlight("\tcp.async.cg.shared.global [%r1], [%rd1], 16;\n\tcp.async.commit_group;\n").has_value());
  CHECK(inFlight("\tcp.async.cg.shared.global [%r1], [%rd1], 16;\n\tcp.async.cg.shared.global [%r2], [%rd4], 16;\n"
                 "\tcp.async.wait_all;\n") == 32.0);
}

TEST_CASE("a transpose's tile copy keeps four vectors a thread in flight, which --stats reports", "[stats]") {
  const std::filesystem::path linalg = std::filesystem::path(EMMY_SOURCE_DIR) / "stdlib" / "linalg.emmy";
  // Each thread reads 4 vectors of 16 bytes of its tile before it stores them into shared memory: 32
  // threads a block, 64 bytes each, and at least 23 blocks an SM keep more than the 25 KB the bandwidth
  // needs (one vector at a time kept 12 KB: 48% of it); only the last of the waves of blocks keeps less.
  for (const char* instance : {"transpose_f32", "transpose_f16"}) {
    std::vector<std::string> report = reportOfFile(linalg, {{"M", 8192}, {"N", 8192}}, instance);
    REQUIRE(report.size() == 1);
    INFO(report[0]);
    std::smatch match;
    REQUIRE(std::regex_search(report[0], match, std::regex(R"(global loads in flight: 64 bytes a thread \(loop at PTX line \d+\), ([0-9.]+) kB per SM)")));
    CHECK(std::stod(match[1]) > 25.45);
  }
}

TEST_CASE("the static model counts the path the sizes choose: a row kernel's shared-memory path or its other", "[stats]") {
  const std::filesystem::path nn = std::filesystem::path(EMMY_SOURCE_DIR) / "stdlib" / "nn.emmy";
  // The same bytes: rows of 4096 take the shared-memory path (a shared read of each element per pass),
  // rows of 65536 (256 KiB of f32, more than a block may have) the path that reads x again from global
  // memory (only the block's partial sums shared). Rows of 4096 run in the second launch variant (LANES =
  // 128), longer rows in the third; the others say they are not launched.
  std::vector<std::string> report = reportOfFile(nn, {{"N", 65536}, {"D", 4096}}, "softmax_f32");
  REQUIRE(report.size() == 3);
  CHECK(report[0].find("N=65536 D=4096: not launched (it runs where D <= 2048)") != std::string::npos);
  CHECK(report[0].find("issue time") == std::string::npos);
  CHECK(report[2].find("N=65536 D=4096: not launched (it runs where D >= 8193)") != std::string::npos);
  std::string cached = report[1];
  std::string reread = reportOfFile(nn, {{"N", 4096}, {"D", 65536}}, "softmax_f32").at(2);
  INFO(cached << "\n" << reread);
  CHECK(sharedMicroseconds(cached) > 100);
  CHECK(sharedMicroseconds(reread) < 10);
  CHECK(reread.find("; shared memory sized at launch: 0 bytes") != std::string::npos);
}

TEST_CASE("the blocks run in waves: a last wave of few blocks keeps fewer bytes in flight", "[stats]") {
  const std::filesystem::path nn = std::filesystem::path(EMMY_SOURCE_DIR) / "stdlib" / "nn.emmy";
  // Rows of 65536 f32, a block each, 5 blocks an SM (46 registers a thread, in 32-bit indices): 700 rows
  // are a wave of 660 blocks (20.48 kB in flight an SM, 80% of the bandwidth) and one of 40, which keeps a
  // sixteenth of that in flight: 179.2 us, where the roofline says 76.5.
  std::string rows = reportOfFile(nn, {{"N", 700}, {"D", 65536}}, "softmax_f32").at(2);
  INFO(rows);
  CHECK(rows.find("memory time 179.20 us (43% of the bandwidth); the blocks run in 2 waves, the last 6% full") !=
        std::string::npos);
  // 1320 rows are two whole waves: no tail.
  std::string whole = reportOfFile(nn, {{"N", 1320}, {"D", 65536}}, "softmax_f32").at(2);
  INFO(whole);
  CHECK(whole.find("(80% of the bandwidth)") != std::string::npos);
  CHECK(whole.find("waves") == std::string::npos);
  // The cost model counts the tail once: more rows never take less time (the memory term's own waves,
  // divided again by the share of the machine the waves keep busy, made 1024 rows slower than 1320).
  tensor::Kernel softmax;
  for (const tensor::Kernel& kernel : testing::kernelsOf(nn))
    if (kernel.instanceName() == "softmax_f32") softmax = kernel;
  Lowered lowered = lower(softmax, PipelineOptions{});
  CudaCompileResult compiled = compileCuda(emitCudaFiles({lowered}, "nn.emmy").source, "nn.cu", "sm_90", true);
  REQUIRE(compiled.ok);
  double previous = 0;
  for (int64_t n : {132, 600, 1024, 1320, 2000, 2640}) {
    TimeEstimate estimate = estimateTime(lowered, &compiled, "sm_90", {{"N", n}, {"D", 65536}});
    INFO(n << " rows: " << estimate.summary);
    CHECK(estimate.seconds > previous);
    previous = estimate.seconds;
  }
}

TEST_CASE("the loads in flight pace only the loads a thread waits for, on the path the sizes choose", "[stats]") {
  const std::filesystem::path nn = std::filesystem::path(EMMY_SOURCE_DIR) / "stdlib" / "nn.emmy";
  // Rows of 65536 f16 fit in shared memory (128 KiB): they are copied asynchronously, and the loop that
  // loads the most an iteration (the path for rows that do not fit) does not run. Its 16 bytes a thread in
  // flight would have made the memory time 716.8 us; it is the roofline's. Rows of 65536 f32 do not fit
  // and take that path: their loads are paced by what is in flight.
  std::string copied = reportOfFile(nn, {{"N", 2048}, {"D", 65536}}, "softmax_f16").at(2);
  INFO(copied);
  CHECK(copied.find("roofline bound 111.85 us") != std::string::npos);
  CHECK(copied.find("memory time 111.85 us (at these sizes 0% of the bytes loaded are loads a thread waits for, the "
                    "rest asynchronous copies)") != std::string::npos);
  std::string loaded = reportOfFile(nn, {{"N", 1024}, {"D", 65536}}, "softmax_f32").at(2);
  INFO(loaded);
  CHECK(loaded.find("(62% of the bandwidth)") != std::string::npos);
  CHECK(loaded.find("asynchronous copies)") == std::string::npos);
}

TEST_CASE("the L2 term counts the sectors a warp's lanes touch: attention's reads of k, a row a lane, move a sector a lane",
          "[stats]") {
  const std::filesystem::path nn = std::filesystem::path(EMMY_SOURCE_DIR) / "stdlib" / "nn.emmy";
  auto sectors = [](const std::string& report) {
    std::smatch match;
    REQUIRE(std::regex_search(report, match, std::regex(R"(\(([0-9.]+) sectors per request, ideal ([0-9.]+)\))")));
    return std::pair<double, double>{std::stod(match[1]), std::stod(match[2])};
  };
  // Rows of 4096 f32, 16 bytes a lane: 4 requests of 128 bytes a warp (docs/profile.md), 4 sectors each.
  std::string softmax = reportOfFile(nn, {{"N", 16384}, {"D", 4096}}, "softmax_f32").at(1);
  INFO(softmax);
  CHECK(sectors(softmax) == std::pair<double, double>{4, 4});
  // Rows of 65536 f16 copied asynchronously, 16 bytes a lane (counted as one element before): x read once
  // and y written once, so L2 moves the least traffic.
  std::string copied = reportOfFile(nn, {{"N", 2048}, {"D", 65536}}, "softmax_f16").at(2);
  INFO(copied);
  CHECK(microsecondsOf(copied, "L2 traffic") > 0.95 * microsecondsOf(copied, "memory time") * 4.8 / 10);
  CHECK(sectors(copied).first == sectors(copied).second);
  // Attention's scores read q (one address a warp: a sector) and k (a row a lane: 32 sectors for 32 x 16
  // bytes, 4 requests) 8 features at a time: about twice the ideal, and more than anything else moves.
  std::string attention = reportOfFile(nn, {{"B", 2}, {"H", 4}, {"S", 2048}, {"L", 2048}, {"E", 64}}, "attention_f16").at(0);
  INFO(attention);
  CHECK(sectors(attention).first > 4);
  CHECK(sectors(attention).first > 1.8 * sectors(attention).second);
  CHECK(microsecondsOf(attention, "L2 traffic") > microsecondsOf(attention, "issue time"));
  CHECK(attention.find("(L2-bound: the sectors its warps touch, not the least bytes, limit it)") != std::string::npos);
  CHECK(softmax.find("L2-bound") == std::string::npos);
}

TEST_CASE("causal attention visits about half the keys of attention, which the static model and the flops see", "[stats]") {
  const std::filesystem::path nn = std::filesystem::path(EMMY_SOURCE_DIR) / "stdlib" / "nn.emmy";
  // The loop over a block's tiles of keys ends after its last query's (ir/tile/nest_scheduler.h,
  // usefulExtent): block 0 takes one tile, the last all of them, and the model takes their mean.
  std::string plain = reportOfFile(nn, {{"B", 2}, {"H", 4}, {"S", 2048}, {"L", 2048}, {"E", 64}}, "attention_f16").at(0);
  std::string causal = reportOfFile(nn, {{"B", 2}, {"H", 4}, {"S", 2048}, {"E", 64}}, "causal_attention_f16").at(0);
  INFO(plain << "\n" << causal);
  double ratio = microsecondsOf(causal, "issue time") / microsecondsOf(plain, "issue time");
  CHECK(ratio > 0.45);
  CHECK(ratio < 0.6);
  // The convention's flops: 4 * B * H * S * L * E (8.59 GFLOP here) and the softmax's few per score;
  // causal attention's scores count only where a reader needs them, l < s + 1: half.
  auto gigaflops = [](const std::string& report) {
    std::smatch match;
    REQUIRE(std::regex_search(report, match, std::regex(R"(([0-9.]+) GFLOP)")));
    return std::stod(match[1]);
  };
  CHECK(gigaflops(plain) > 8.59);
  CHECK(gigaflops(plain) < 8.59 * 1.01);
  CHECK(gigaflops(causal) / gigaflops(plain) > 0.5);
  CHECK(gigaflops(causal) / gigaflops(plain) < 0.51);
  // A masked reduction's flops count the terms its mask keeps (maskedShare): a transposed convolution of
  // stride 2 multiplies each input element by each tap once, 2 * N * C * H * W * OUT * KH * KW (with
  // output_padding 1, every output is inside: 2 * 2 * 8 * 14 * 14 * 16 * 3 * 3 = 903168).
  std::filesystem::path file = std::filesystem::temp_directory_path() / "emmy_masked_flops.emmy";
  {
    std::ofstream out(file);
    out << R"(
kernel up(x: f16[N, C, H, W], w: f16[C, OUT, 3, 3]) -> (y: f16[N, OUT, 2 * H, 2 * W]) {
    y[n, o, i, j] = f16(sum[c, kh < 3, kw < 3](where((i + 1 - kh) % 2 == 0 and (j + 1 - kw) % 2 == 0,
        f32(pad(x, 0)[n, c, (i + 1 - kh) / 2, (j + 1 - kw) / 2]) * f32(w[c, o, kh, kw]), 0)))
}
)";
  }
  std::string transposed = reportOfFile(file, {{"N", 2}, {"C", 8}, {"H", 14}, {"W", 14}, {"OUT", 16}}).at(0);
  std::filesystem::remove(file);
  INFO(transposed);
  CHECK(transposed.find("903.17 kFLOP") != std::string::npos);
}

TEST_CASE("a stage's flops count the elements its readers need: reads under a condition, mapped onto its axes", "[stats]") {
  // y (a contraction, a kernel of its own: 2 * N * N * K flops in all) read by a bounded maximum. Where
  // the read gives y's axes, only y[i, j] with j < i + 1 count: (N + 1) / (2 * N) of them; a read
  // whose index is not an axis of the reader says nothing simpler, and all count.
  std::filesystem::path file = std::filesystem::temp_directory_path() / "emmy_needed_flops.emmy";
  {
    std::ofstream out(file);
    for (const auto& [name, read] : std::vector<std::pair<std::string, std::string>>{
             {"rows", "y[i, j]"}, {"columns", "y[j, i]"}, {"reversed", "y[i, N - 1 - j]"}})
      out << "kernel " << name << "(a: f32[N, K], b: f32[N, K]) -> (z: f32[N]) {\n"
          << "    y[i, j] = sum[k](a[i, k] * b[j, k])\n    z[i] = max[j < i + 1](" << read << ")\n}\n";
  }
  std::map<std::string, int64_t> sizes{{"N", 64}, {"K", 32}};
  std::vector<std::string> rows = reportOfFile(file, sizes, "rows");
  std::vector<std::string> columns = reportOfFile(file, sizes, "columns");
  std::vector<std::string> reversed = reportOfFile(file, sizes, "reversed");
  std::filesystem::remove(file);
  REQUIRE(rows.size() == 2);
  INFO(rows[0] << "\n" << columns[0] << "\n" << reversed[0]);
  // 2 * 64 * 64 * 32 = 262144, times 65 / 128.
  CHECK(rows[0].find("133.12 kFLOP") != std::string::npos);
  CHECK(columns[0].find("133.12 kFLOP") != std::string::npos);
  CHECK(reversed[0].find("262.14 kFLOP") != std::string::npos);
}

TEST_CASE("the static model sizes a row's shared copy at launch as the device allows", "[stats]") {
  const std::filesystem::path nn = std::filesystem::path(EMMY_SOURCE_DIR) / "stdlib" / "nn.emmy";
  // Rows of 32768 f32 (128 KiB): sm_90 lets a block have 227 KiB, so the row is copied once (one block
  // per SM, limited by shared memory) and read through the copy; sm_86 allows 99 KiB, and its launch
  // gives none, so the kernel reads x from global memory on each pass.
  std::string hopper = reportOfFile(nn, {{"N", 8192}, {"D", 32768}}, "softmax_f32").at(2);
  std::string ampere = reportOfFile(nn, {{"N", 8192}, {"D", 32768}}, "softmax_f32", "sm_86").at(2);
  INFO(hopper << "\n" << ampere);
  CHECK(hopper.find("(1 blocks per SM, limited by shared memory); shared memory sized at launch: 131072 bytes") !=
        std::string::npos);
  CHECK(sharedMicroseconds(hopper) > 100);
  CHECK(ampere.find("; shared memory sized at launch: 0 bytes") != std::string::npos);
  CHECK(sharedMicroseconds(ampere) < 10);
  // Without sizes, the most it may take.
  std::string unsized = reportOfFile(nn, {}, "softmax_f32").at(2);
  CHECK(unsized.find("; plus shared memory sized at launch (up to 232448 bytes)") != std::string::npos);
}
