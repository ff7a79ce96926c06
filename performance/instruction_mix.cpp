#include "performance/instruction_mix.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <set>
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
  std::vector<std::string> writes, reads;  // registers ("%rd12")
  bool guarded = false;  // by a predicate ("@%p1 bra ...")
  bool startsBlock = false;  // a label's, or the one after a branch
};

// The registers `text` names, in order ("%r1", "%rd7"; not "%tid.x").
std::vector<std::string> registersIn(const std::string& text) {
  std::vector<std::string> found;
  for (size_t at = text.find('%'); at != std::string::npos; at = text.find('%', at + 1)) {
    size_t end = at + 1;
    while (end < text.size() && std::isalpha(static_cast<unsigned char>(text[end]))) ++end;
    size_t digits = end;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
    if (end > digits && (end == text.size() || text[end] != '.')) found.push_back(text.substr(at, end - at));
  }
  return found;
}

// The registers an instruction writes (its first operand, unless it only reads: stores, branches, barriers,
// asynchronous copies, reductions to memory) and those it reads (the rest, and a predicate guarding it).
void readRegisters(Instruction& instruction, const std::string& guard) {
  const std::string& op = instruction.opcode;
  std::string operands = instruction.text.substr(std::min(instruction.text.size(), op.size()));
  auto starts = [&](const char* prefix) { return op.rfind(prefix, 0) == 0; };
  bool onlyReads = starts("st.") || starts("bra") || starts("bar") || starts("cp.async") || starts("red.") ||
                   starts("prefetch") || starts("ret") || starts("exit") || starts("stmatrix");
  size_t firstEnd = 0;
  if (!onlyReads) {
    size_t open = operands.find_first_not_of(" \t");
    firstEnd = open != std::string::npos && operands[open] == '{' ? operands.find('}', open) : operands.find(',');
    firstEnd = firstEnd == std::string::npos ? 0 : firstEnd;
  }
  instruction.writes = registersIn(operands.substr(0, firstEnd));
  instruction.reads = registersIn(guard + " " + operands.substr(firstEnd));
}

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
  // Conversions that sm_80 and later run without the conversion unit: a 16-bit float widened to f32 is a
  // half-precision add (HADD2.F32) or, for bf16, a shift into the upper half; a saturating f32 "conversion"
  // is the clamp of the FMA that computes its operand (FFMA.SAT).
  if (starts("cvt.f32.f16") || starts("cvt.sat.f32.f32")) return {InstructionClass::Fp32, 1};
  if (starts("cvt.f32.bf16")) return {InstructionClass::Integer, 1};
  // Between integer widths a conversion is a shift or a move on the integer pipe (a 32-bit index widened
  // for an address: SHF.R.S32.HI).
  if (starts("cvt") && !has(op, ".f") && !has(op, ".bf")) return {InstructionClass::Integer, 1};
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

// LoopMix::loadBytesInFlight of the instructions `body` (indices in PTX order).
std::optional<double> bytesInFlight(const std::vector<Instruction>& instructions, const std::vector<size_t>& body) {
  std::set<std::string> pending;  // the destination registers of the global loads in flight
  std::set<std::string> loaded;   // and of those since the thread last waited
  double outstanding = 0, most = 0, copying = 0;
  bool waitedForCopies = false;
  bool waits = false;  // at the end of the block: it uses a load's result
  for (int pass = 0; pass < 2; ++pass)
    for (size_t i : body) {
      const Instruction& instruction = instructions[i];
      const std::string& op = instruction.opcode;
      if (instruction.startsBlock && waits) {
        // The thread waited in the last block for its loads (they return about in order): none stays in
        // flight. Within a block ptxas issues the loads before the uses, so they were in flight together.
        pending.clear();
        loaded.clear();
        outstanding = 0;
        waits = false;
      }
      bool readsPending = std::any_of(instruction.reads.begin(), instruction.reads.end(),
                                      [&](const std::string& r) { return pending.count(r) > 0; });
      if (readsPending && op.rfind("mov", 0) == 0) {
        // A move (unpacking halves from a loaded word, say) renames the register, which ptxas does without
        // an instruction: what it writes is still in flight.
        for (const std::string& r : instruction.writes) pending.insert(r), loaded.insert(r);
        continue;
      }
      waits = waits || readsPending;
      // A register written again holds something else (another path's value, in PTX order).
      if (op.rfind("ld.global", 0) != 0)
        for (const std::string& r : instruction.writes) pending.erase(r);
      if (op.rfind("cp.async.wait", 0) == 0) {
        waitedForCopies = true;
        copying = 0;
      } else if (op.rfind("cp.async.c", 0) == 0 && op.rfind("cp.async.commit", 0) != 0) {
        copying += instruction.text.find("], 16") != std::string::npos ? 16 : instruction.text.find("], 8") != std::string::npos ? 8 : 4;
      } else if (op.rfind("ld.global", 0) == 0) {
        // A load into a register another load of this window filled is another path's (the elements one
        // by one where the vector could not be read): it adds no bytes in flight.
        bool again = std::any_of(instruction.writes.begin(), instruction.writes.end(),
                                 [&](const std::string& r) { return loaded.count(r) > 0; });
        if (!again) outstanding += accessBytes(op);
        for (const std::string& r : instruction.writes) pending.insert(r), loaded.insert(r);
      }
      most = std::max(most, outstanding + copying);
    }
  if (copying > 0 && !waitedForCopies) return std::nullopt;
  return most;
}

// The mix of the instructions `body` (indices in PTX order), `first` the loop's header.
LoopMix mixOf(const std::vector<Instruction>& instructions, const std::vector<size_t>& body, size_t first) {
  LoopMix mix;
  mix.ptxLine = first < instructions.size() ? instructions[first].line : 0;
  std::map<std::string, double> pipeCycles;
  double issue = 0;
  for (size_t i : body) {
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
      if (op.rfind("ld.", 0) == 0 || op.rfind("cp.async", 0) == 0) mix.loadBytes += bytes;
    }
  }
  mix.loadBytesInFlight = bytesInFlight(instructions, body);
  mix.issueCycles = issue;
  mix.boundBy = "issue";
  for (const auto& [pipe, cycles] : pipeCycles)
    if (cycles > mix.issueCycles) {
      mix.issueCycles = cycles;
      mix.boundBy = pipe;
    }
  return mix;
}

// A loop of the control-flow graph: a header that dominates the blocks with a branch back to it.
struct NaturalLoop {
  size_t header;              // its first instruction
  std::vector<size_t> body;   // its instructions, in PTX order
  std::vector<size_t> inner;  // those of the loops inside it, in PTX order
};

// The natural loops of a kernel's instructions (`labels`: label -> index of the instruction after it). A
// backward branch is not always a loop (the CUDA compiler lays blocks out in any order), so the loops are
// the back edges of the control-flow graph: a branch to a block that dominates it.
std::vector<NaturalLoop> naturalLoops(const std::vector<Instruction>& instructions, const std::map<std::string, size_t>& labels) {
  size_t count = instructions.size();
  if (count == 0) return {};
  // Basic blocks: each starts at a label or after a branch.
  std::vector<bool> starts(count + 1, false);
  starts[0] = true;
  for (const auto& [label, at] : labels) starts[at] = true;
  auto target = [&](const Instruction& branch) -> std::optional<size_t> {
    std::string name = branch.text.substr(branch.text.find_last_of(" \t") + 1);
    name.erase(std::remove(name.begin(), name.end(), ';'), name.end());
    auto found = labels.find(name);
    return found == labels.end() ? std::nullopt : std::optional<size_t>(found->second);
  };
  auto isBranch = [&](const Instruction& i) { return i.opcode.rfind("bra", 0) == 0; };
  auto ends = [&](const Instruction& i) { return i.opcode == "ret" || i.opcode == "exit"; };
  for (size_t i = 0; i < count; ++i)
    if (isBranch(instructions[i]) || ends(instructions[i])) starts[i + 1] = true;
  std::vector<size_t> first, blockOf(count);
  for (size_t i = 0; i < count; ++i) {
    if (starts[i]) first.push_back(i);
    blockOf[i] = first.size() - 1;
  }
  size_t blocks = first.size();
  std::vector<std::vector<size_t>> successors(blocks), predecessors(blocks);
  for (size_t b = 0; b < blocks; ++b) {
    size_t last = (b + 1 < blocks ? first[b + 1] : count) - 1;
    const Instruction& end = instructions[last];
    bool unconditional = isBranch(end) && !end.guarded;
    if (isBranch(end))
      if (std::optional<size_t> to = target(end); to && *to < count) successors[b].push_back(blockOf[*to]);
    if (!unconditional && !ends(end) && b + 1 < blocks) successors[b].push_back(b + 1);
    for (size_t to : successors[b]) predecessors[to].push_back(b);
  }
  // Dominators by the iterative data-flow equations, over the blocks reachable from the entry.
  std::vector<bool> reachable(blocks, false);
  for (std::vector<size_t> work{0}; !work.empty();) {
    size_t at = work.back();
    work.pop_back();
    if (reachable[at]) continue;
    reachable[at] = true;
    for (size_t to : successors[at]) work.push_back(to);
  }
  std::vector<std::vector<bool>> dominators(blocks, std::vector<bool>(blocks, true));
  dominators[0].assign(blocks, false);
  dominators[0][0] = true;
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t b = 1; b < blocks; ++b) {
      if (!reachable[b]) continue;
      std::vector<bool> meet(blocks, true);
      for (size_t p : predecessors[b])
        if (reachable[p])
          for (size_t d = 0; d < blocks; ++d) meet[d] = meet[d] && dominators[p][d];
      meet[b] = true;
      if (meet != dominators[b]) {
        dominators[b] = std::move(meet);
        changed = true;
      }
    }
  }
  // Each header's loop: the blocks that reach one of its back edges without passing through it.
  std::map<size_t, std::set<size_t>> bodies;
  for (size_t b = 0; b < blocks; ++b)
    for (size_t to : successors[b]) {
      if (!reachable[b] || !dominators[b][to]) continue;
      std::set<size_t>& body = bodies[to];
      body.insert(to);
      std::vector<size_t> work{b};
      while (!work.empty()) {
        size_t at = work.back();
        work.pop_back();
        if (!body.insert(at).second) continue;
        for (size_t p : predecessors[at]) work.push_back(p);
      }
    }
  auto instructionsOf = [&](const std::set<size_t>& body) {
    std::vector<size_t> indices;
    for (size_t b : body)
      for (size_t i = first[b]; i < (b + 1 < blocks ? first[b + 1] : count); ++i) indices.push_back(i);
    return indices;
  };
  std::vector<NaturalLoop> loops;
  for (const auto& [header, body] : bodies) {
    std::set<size_t> inner;
    for (const auto& [other, otherBody] : bodies)
      if (other != header && body.count(other)) inner.insert(otherBody.begin(), otherBody.end());
    loops.push_back({first[header], instructionsOf(body), instructionsOf(inner)});
  }
  return loops;
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

std::optional<KernelMix::InFlight> KernelMix::loadBytesInFlight() const {
  const LoopMix* main = nullptr;
  for (const LoopMix& loop : loops)
    if (loop.innermost && loop.loadBytes > 0 && loop.loadBytesInFlight && *loop.loadBytesInFlight > 0 &&
        (!main || loop.loadBytes > main->loadBytes))
      main = &loop;
  const LoopMix& measured = main ? *main : whole;
  if (!measured.loadBytesInFlight || *measured.loadBytesInFlight == 0) return std::nullopt;
  return InFlight{*measured.loadBytesInFlight, main ? main->ptxLine : 0};
}

std::vector<KernelMix> instructionMix(const std::string& ptx) {
  std::vector<KernelMix> kernels;
  std::istringstream text(ptx);
  std::vector<Instruction> instructions;
  std::map<std::string, size_t> labels;  // label -> index of the instruction after it
  bool inBody = false;
  auto finish = [&] {
    KernelMix& kernel = kernels.back();
    for (const NaturalLoop& loop : naturalLoops(instructions, labels)) {
      std::vector<size_t> own;  // the loop's instructions but those of the loops inside it
      for (size_t i : loop.body)
        if (!std::binary_search(loop.inner.begin(), loop.inner.end(), i)) own.push_back(i);
      LoopMix mix = mixOf(instructions, own, loop.header);
      mix.innermost = loop.inner.empty();
      kernel.loops.push_back(std::move(mix));
    }
    std::sort(kernel.loops.begin(), kernel.loops.end(), [](const LoopMix& a, const LoopMix& b) { return a.ptxLine < b.ptxLine; });
    std::vector<size_t> all(instructions.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    if (!instructions.empty()) kernel.whole = mixOf(instructions, all, 0);
    instructions.clear();
    labels.clear();
  };
  int number = 0;
  int depth = 0;
  size_t labelledAt = std::string::npos;  // the instruction after the last label
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
      labelledAt = std::string::npos;
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
      labels[trimmed.substr(0, trimmed.size() - 1)] = labelledAt = instructions.size();
      continue;
    }
    // An inline asm block's braces share lines with its instructions (`{  cvt.f32.f16 %f1, %rs1;}`, or
    // `{max.NaN.f16x2 %r5, %r1, %r2;` and `}` alone), which are instructions like any other.
    if (trimmed[0] == '{') {
      ++depth;
      trimmed = trimmed.substr(std::min(trimmed.size(), trimmed.find_first_not_of(" \t", 1)));
    }
    if (!trimmed.empty() && trimmed.back() == '}' && trimmed.find(';') != std::string::npos) {
      --depth;
      trimmed.pop_back();
    }
    if (trimmed.empty() || trimmed[0] == '.') continue;  // declarations
    std::string instruction = trimmed, guard;
    if (instruction[0] == '@') {
      guard = instruction.substr(0, instruction.find_first_of(" \t"));
      instruction = instruction.substr(instruction.find_first_of(" \t") + 1);
    }
    size_t opcodeStart = instruction.find_first_not_of(" \t");
    instruction = instruction.substr(opcodeStart);
    std::string opcode = instruction.substr(0, instruction.find_first_of(" \t;"));
    bool afterBranch = !instructions.empty() && instructions.back().opcode.rfind("bra", 0) == 0;
    bool labelled = labelledAt == instructions.size();
    instructions.push_back({opcode, instruction, number, {}, {}, !guard.empty(), afterBranch || labelled});
    readRegisters(instructions.back(), guard);
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
