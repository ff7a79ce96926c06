// The instruction mix of generated code, read from its PTX (NVRTC): per CUDA kernel, the instructions of
// each of its loops by class, and the cycles a warp's iteration of each takes to issue on one SM of
// sm_90 at the pipe rates below. What `emmy build --stats` prints, `emmy check --profile` prints beside the
// counters, and `emmy tune --cost-model` ranks by (the issue time).
//
// sm_90 pipe rates, in results per clock per SM (CUDA C++ Programming Guide, "Arithmetic Instructions",
// throughput table, compute capability 9.0; the load/store and issue rates from the Hopper tuning guide's
// SM description: 4 schedulers each issuing one warp instruction per clock, 32 load/store units per SM):
//   issue (any instruction)                  4 warp instructions
//   FP32 add, multiply, fma (and f16/bf16)   128
//   FP64 arithmetic                          64
//   32-bit integer add, compare, logic,      64   (a 64-bit integer operation counts as two)
//     shift, multiply, mad
//   conversions (cvt)                        16   (but f16 or bf16 to f32, and an f32 clamp: the FP32
//                                                  and integer pipes, classify in instruction_mix.cpp)
//   special functions (ex2, lg2, rcp, rsqrt, 16   (MUFU; a correctly rounded f32 division also takes ~8
//     sqrt, sin, cos, tanh)                        FP32 instructions)
//   warp shuffles                            32
//   loads and stores (global, shared, local) 32
//   tensor-core mma.sync                     1024 f16/bf16 multiply-adds
// A warp instruction of a class whose rate is R results per clock keeps its pipe busy 32 / R cycles; a loop
// iteration issues in the largest of its pipes' busy cycles and its instruction count / 4.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace emmy {

// What a 4-byte word of DRAM traffic costs one SM of an H200 (4.8 TB/s shared by 132 SMs at 1.98 GHz), in
// cycles: a memory-bound loop should issue in less than this per word.
constexpr double kDramCyclesPerWord = 4.0 / (4.8e12 / (132 * 1.98e9));

enum class InstructionClass {
  TensorCore,
  Fp32,  // and f16/bf16 arithmetic
  Fp64,
  Integer,
  Conversion,
  SpecialFunction,
  GlobalMemory,
  SharedMemory,
  LocalMemory,  // spills
  Shuffle,
  Barrier,
  Control,  // branches
  Other,    // moves, address conversions, parameter loads
};
const char* instructionClassName(InstructionClass c);

struct LoopMix {
  int ptxLine = 0;  // the loop's first instruction in the PTX
  bool innermost = false;  // it holds no other loop
  std::map<InstructionClass, double> instructions;  // per thread iteration (64-bit integer ops count twice)
  std::map<int, int> globalBytes;  // global loads and stores by width in bytes: how many
  double words = 0;         // 4-byte words of global memory loaded and stored per thread iteration
  double issueCycles = 0;   // per warp iteration on one SM
  std::string boundBy;      // the pipe (or "issue") that takes the most cycles
  // The most bytes of global loads a thread has issued and not yet used, at any point of an iteration (two
  // iterations walked in PTX order, so that a load issued for the next one counts): a thread stalls at the
  // first use of a load's result, so this is what it keeps in flight. 0 without global loads; none where
  // asynchronous copies are not waited for within the loop (they stay in flight across its iterations).
  std::optional<double> loadBytesInFlight = 0;
  double loadBytes = 0;  // of global loads (and asynchronous copies) per thread iteration
  double memoryInstructions() const;  // global and shared loads and stores per thread iteration
};

struct KernelMix {
  std::string name;
  // Every loop (a backward branch), in PTX order, with its own instructions: those of the loops inside it
  // are theirs. None for a kernel without loops.
  std::vector<LoopMix> loops;
  LoopMix whole;  // every instruction of the kernel, once: for a kernel without loops
  // Issue cycles per global or shared access of a warp in its loops (in the whole kernel when they make
  // none): the static model's issue time is this times the accesses its threads make.
  double cyclesPerMemoryInstruction() const;
  // The global-load bytes a thread keeps in flight in the innermost loop of loads it waits for that loads
  // the most per iteration (its main loop: not a loop of the last few elements; a loop of asynchronous
  // copies paces nothing, they stay in flight), or in the whole kernel where no loop loads so, with that
  // loop's PTX line (0 for the whole kernel); none where the kernel only copies asynchronously or loads
  // nothing.
  struct InFlight {
    double bytes;
    int ptxLine;
  };
  std::optional<InFlight> loadBytesInFlight() const;
  bool usesTensorCores() const { return whole.instructions.count(InstructionClass::TensorCore) > 0; }
};

// Every `.entry` of `ptx`, in order.
std::vector<KernelMix> instructionMix(const std::string& ptx);

// "4 ld.global 16 B, 16 FP32, 12 integer, ...; 8.5 issue cycles per warp iteration (bound by MUFU), 0.017 per element"
std::string describeLoop(const LoopMix& loop);

}  // namespace emmy
