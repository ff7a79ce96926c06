#include "performance/instruction_mix.h"

#include <algorithm>
#include <sstream>

#include <fmt/format.h>

namespace emmy {

const char* instructionClassName(InstructionClass c) {
  switch (c) {
    case InstructionClass::TensorCore: return "tensor-core";
    case InstructionClass::Fp32: return "FP32";
    case InstructionClass::Fp64: return "FP64";
    case InstructionClass::Integer: return "integer";
    case InstructionClass::Conversion: return "conversion";
    case InstructionClass::SpecialFunction: return "special-function";
    case InstructionClass::GlobalMemory: return "global";
    case InstructionClass::SharedMemory: return "shared";
    case InstructionClass::LocalMemory: return "local (spill)";
    case InstructionClass::Shuffle: return "shuffle";
    case InstructionClass::Barrier: return "barrier";
    case InstructionClass::Control: return "branch";
    case InstructionClass::Other: return "other";
  }
  return "?";
}

namespace {

// Cycles one warp instruction of a class keeps its pipe busy on one SM: 32 / (results per clock), the
// rates of instruction_mix.h. Load/store-unit classes share the LSU, conversions and special functions the
// MUFU/XU pipe, the integer classes the INT pipe.
struct Pipe {
  const char* name;
  double cycles;
};
Pipe pipeOf(InstructionClass c) {
  switch (c) {
    case InstructionClass::TensorCore: return {"tensor core", 0};  // counted from the shape (tensorCycles)
    case InstructionClass::Fp32: return {"FMA", 32.0 / 128};
    case InstructionClass::Fp64: return {"FP64", 32.0 / 64};
    case InstructionClass::Integer:
    case InstructionClass::Control: return {"INT", 32.0 / 64};
    case InstructionClass::Conversion:
    case InstructionClass::SpecialFunction: return {"MUFU", 32.0 / 16};
    case InstructionClass::GlobalMemory:
    case InstructionClass::SharedMemory:
    case InstructionClass::LocalMemory:
    case InstructionClass::Shuffle: return {"LSU", 32.0 / 32};
    case InstructionClass::Barrier:
    case InstructionClass::Other: return {"issue", 0};
  }
  return {"issue", 0};
}

constexpr double kIssueCyclesPerInstruction = 0.25;  // 4 schedulers per SM
constexpr double kTensorMultiplyAddsPerCycle = 1024;

bool has(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }

// The width in bytes of a load or store: its vector count times its element type.
int accessBytes(const std::string& opcode) {
  int lanes = has(opcode, ".v4") ? 4 : has(opcode, ".v2") ? 2 : 1;
  int bytes = 4;
  for (const auto& [suffix, size] : {std::pair{".b8", 1}, {".u8", 1}, {".s8", 1}, {".b16", 2}, {".u16", 2}, {".s16", 2},
                                     {".f16", 2}, {".b64", 8}, {".u64", 8}, {".s64", 8}, {".f64", 8}, {".b128", 16}})
    if (opcode.size() >= std::string(suffix).size() &&
        opcode.compare(opcode.size() - std::string(suffix).size(), std::string::npos, suffix) == 0)
      bytes = size;
  return lanes * bytes;
}

struct Instruction {
  std::string opcode;  // with its type suffixes: "ld.global.nc.v4.u32"
  std::string text;
  int line;
};

// A class and a weight (64-bit integer operations and f32 divisions are several hardware instructions).
std::pair<InstructionClass, double> classify(const std::string& op) {
  auto starts = [&](const char* prefix) { return op.rfind(prefix, 0) == 0; };
  if (starts("mma") || starts("wgmma")) return {InstructionClass::TensorCore, 1};
  if (starts("bar") || starts("barrier")) return {InstructionClass::Barrier, 1};
  if (starts("shfl")) return {InstructionClass::Shuffle, 1};
  if (starts("bra") || starts("ret") || starts("exit")) return {InstructionClass::Control, 1};
  if (starts("cp.async.c") && !starts("cp.async.commit") && !starts("cp.async.wait")) return {InstructionClass::GlobalMemory, 1};
  if (starts("ld.global") || starts("st.global") || starts("atom.global") || starts("red.global") || starts("atom") ||
      starts("red."))
    return {InstructionClass::GlobalMemory, 1};
  if (starts("ld.shared") || starts("st.shared") || starts("ldmatrix") || starts("stmatrix")) return {InstructionClass::SharedMemory, 1};
  if (starts("ld.local") || starts("st.local")) return {InstructionClass::LocalMemory, 1};
  if (starts("cvt")) return {InstructionClass::Conversion, 1};
  if (starts("ex2") || starts("lg2") || starts("rcp") || starts("rsqrt") || starts("sqrt") || starts("sin") ||
      starts("cos") || starts("tanh"))
    return {InstructionClass::SpecialFunction, 1};
  if (starts("div") && has(op, ".f32") && !has(op, ".approx") && !has(op, ".full")) return {InstructionClass::Fp32, 8};
  bool floating = has(op, ".f32") || has(op, ".f16") || has(op, ".bf16");
  if (has(op, ".f64")) return {InstructionClass::Fp64, 1};
  if (floating && (starts("fma") || starts("add") || starts("sub") || starts("mul") || starts("neg") || starts("abs") ||
                   starts("min") || starts("max") || starts("setp") || starts("selp") || starts("div")))
    return {InstructionClass::Fp32, 1};
  if (starts("add") || starts("sub") || starts("mul") || starts("mad") || starts("shl") || starts("shr") || starts("and") ||
      starts("or") || starts("xor") || starts("not") || starts("setp") || starts("selp") || starts("min") || starts("max") ||
      starts("neg") || starts("abs") || starts("div") || starts("rem") || starts("popc") || starts("clz") || starts("bfe") ||
      starts("prmt") || starts("shf"))
    return {InstructionClass::Integer, has(op, "64") ? 2 : 1};
  return {InstructionClass::Other, 1};
}

// The multiply-adds of an mma.sync shape ("mma.sync.aligned.m16n8k16..."), for its tensor-core cycles.
double tensorMultiplyAdds(const std::string& op) {
  size_t m = op.find(".m"), n = op.find('n', m + 2), k = op.find('k', n + 1);
  if (m == std::string::npos || n == std::string::npos || k == std::string::npos) return 0;
  try {
    return std::stod(op.substr(m + 2, n - m - 2)) * std::stod(op.substr(n + 1, k - n - 1)) * std::stod(op.substr(k + 1));
  } catch (const std::exception&) {
    return 0;
  }
}

// The mix of the instructions from `first` to `last` but those in `excluded` ranges (the loops inside).
LoopMix mixOf(const std::vector<Instruction>& instructions, size_t first, size_t last,
              const std::vector<std::pair<size_t, size_t>>& excluded = {}) {
  LoopMix mix;
  mix.ptxLine = first < instructions.size() ? instructions[first].line : 0;
  std::map<std::string, double> pipeCycles;
  double issue = 0;
  for (size_t i = first; i <= last && i < instructions.size(); ++i) {
    if (std::any_of(excluded.begin(), excluded.end(), [&](const auto& range) { return i >= range.first && i <= range.second; }))
      continue;
    const std::string& op = instructions[i].opcode;
    auto [c, weight] = classify(op);
    mix.instructions[c] += weight;
    issue += weight * kIssueCyclesPerInstruction;
    Pipe pipe = pipeOf(c);
    if (c == InstructionClass::TensorCore) pipeCycles["tensor core"] += tensorMultiplyAdds(op) / kTensorMultiplyAddsPerCycle;
    else if (pipe.cycles > 0) pipeCycles[pipe.name] += weight * pipe.cycles;
    if (c == InstructionClass::GlobalMemory) {
      // cp.async's width is its operand after the addresses (4, 8 or 16 bytes).
      const std::string& text = instructions[i].text;
      int bytes = op.rfind("cp.async", 0) != 0                   ? accessBytes(op)
                  : text.find("], 16") != std::string::npos ? 16
                  : text.find("], 8") != std::string::npos  ? 8
                                                            : 4;
      ++mix.globalBytes[bytes];
      mix.words += bytes / 4.0;
    }
  }
  mix.issueCycles = issue;
  mix.boundBy = "issue";
  for (const auto& [pipe, cycles] : pipeCycles)
    if (cycles > mix.issueCycles) {
      mix.issueCycles = cycles;
      mix.boundBy = pipe;
    }
  return mix;
}

}  // namespace

double LoopMix::memoryInstructions() const {
  double total = 0;
  for (InstructionClass c : {InstructionClass::GlobalMemory, InstructionClass::SharedMemory})
    if (auto found = instructions.find(c); found != instructions.end()) total += found->second;
  return total;
}

double KernelMix::cyclesPerMemoryInstruction() const {
  double cycles = 0, memory = 0;
  for (const LoopMix& loop : loops) {
    cycles += loop.issueCycles;
    memory += loop.memoryInstructions();
  }
  if (memory == 0) {  // no loop, or loops without memory accesses
    cycles = whole.issueCycles;
    memory = whole.memoryInstructions();
  }
  return memory > 0 ? cycles / memory : 0;
}

std::vector<KernelMix> instructionMix(const std::string& ptx) {
  std::vector<KernelMix> kernels;
  std::istringstream text(ptx);
  std::vector<Instruction> instructions;
  std::map<std::string, size_t> labels;  // label -> index of the instruction after it
  bool inBody = false;
  auto finish = [&] {
    KernelMix& kernel = kernels.back();
    // Loops: backward branches; the innermost are those that hold no other.
    std::vector<std::pair<size_t, size_t>> loops;
    for (size_t i = 0; i < instructions.size(); ++i) {
      if (instructions[i].opcode.rfind("bra", 0) != 0) continue;
      std::string target = instructions[i].text.substr(instructions[i].text.find_last_of(" \t") + 1);
      target.erase(std::remove(target.begin(), target.end(), ';'), target.end());
      if (auto label = labels.find(target); label != labels.end() && label->second <= i) loops.push_back({label->second, i});
    }
    for (const auto& loop : loops) {
      std::vector<std::pair<size_t, size_t>> inner;
      for (const auto& other : loops)
        if (other != loop && other.first >= loop.first && other.second <= loop.second) inner.push_back(other);
      LoopMix mix = mixOf(instructions, loop.first, loop.second, inner);
      mix.innermost = inner.empty();
      kernel.loops.push_back(std::move(mix));
    }
    std::sort(kernel.loops.begin(), kernel.loops.end(), [](const LoopMix& a, const LoopMix& b) { return a.ptxLine < b.ptxLine; });
    if (!instructions.empty()) kernel.whole = mixOf(instructions, 0, instructions.size() - 1);
    instructions.clear();
    labels.clear();
  };
  int number = 0;
  int depth = 0;
  for (std::string line; std::getline(text, line);) {
    ++number;
    size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos) continue;
    std::string trimmed = line.substr(start);
    if (trimmed.rfind("//", 0) == 0) continue;
    if (trimmed.rfind(".entry", 0) == 0 || trimmed.rfind(".visible .entry", 0) == 0) {
      std::string name = trimmed.substr(trimmed.find(".entry") + 7);
      name = name.substr(0, name.find_first_of("( \t"));
      kernels.push_back({name, {}, {}});
      inBody = false;
      depth = 0;
      continue;
    }
    if (kernels.empty()) continue;
    if (trimmed == "{") {
      ++depth;
      inBody = true;
      continue;
    }
    if (trimmed == "}") {
      if (--depth == 0 && inBody) {
        finish();
        inBody = false;
      }
      continue;
    }
    if (!inBody) continue;
    if (trimmed.back() == ':') {
      labels[trimmed.substr(0, trimmed.size() - 1)] = instructions.size();
      continue;
    }
    if (trimmed[0] == '.') continue;  // declarations
    std::string instruction = trimmed;
    if (instruction[0] == '@') instruction = instruction.substr(instruction.find_first_of(" \t") + 1);
    size_t opcodeStart = instruction.find_first_not_of(" \t");
    std::string opcode = instruction.substr(opcodeStart, instruction.find_first_of(" \t;", opcodeStart) - opcodeStart);
    instructions.push_back({opcode, instruction, number});
  }
  return kernels;
}

std::string describeLoop(const LoopMix& loop) {
  std::vector<std::string> parts;
  for (const auto& [bytes, count] : loop.globalBytes) parts.push_back(fmt::format("{} global {}-byte", count, bytes));
  for (const auto& [c, count] : loop.instructions)
    if (c != InstructionClass::GlobalMemory && count > 0) parts.push_back(fmt::format("{:g} {}", count, instructionClassName(c)));
  std::string text;
  for (const std::string& part : parts) text += (text.empty() ? "" : ", ") + part;
  text += fmt::format("; {:.2f} issue cycles per warp iteration on sm_90 (bound by {})", loop.issueCycles, loop.boundBy);
  if (loop.words > 0) text += fmt::format(", {:.3f} per 4-byte word of global memory", loop.issueCycles / (32 * loop.words));
  return text;
}

}  // namespace emmy
