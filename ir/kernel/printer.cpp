#include "ir/kernel/printer.h"

#include <fmt/format.h>

#include "ir/loop/printer.h"
#include "ir/tensor/printer.h"
#include "support/text.h"

namespace emmy::kernel {

namespace {

struct Printer {
  std::string out;

  void line(int indent, const std::string& text) { out += std::string(2 * indent, ' ') + text + "\n"; }
  static std::string e(const ExprPtr& expr) { return tensor::printExpr(*expr); }

  void print(const Stmt& stmt, int indent) {
    dispatch(stmt, [&](const auto& node) { printNode(node, indent); });
  }

  void printNode(const For& node, int indent) {
    line(indent, fmt::format("for {} = {}; {} < {}; {} += {}{}:", node.var, e(node.begin), node.var, e(node.end),
                             node.var, e(node.step), node.unroll ? " unrolled" : node.rolled ? " rolled" : ""));
    print(*node.body, indent + 1);
  }
  void printNode(const Let& node, int indent) { line(indent, fmt::format("let {} = {}", node.var, e(node.value))); }
  void printNode(const Declare& node, int indent) {
    line(indent, fmt::format("{} {}: {}{}{}", node.memory == Memory::Shared ? "shared" : "local", node.buffer,
                             dtypeName(node.dtype),
                             node.count == 1 && node.memory == Memory::Local ? "" : fmt::format("[{}]", node.count),
                             node.sizedAtLaunch ? fmt::format(", sized at launch to {}", e(node.sizedAtLaunch)) : ""));
  }
  void printNode(const Store& node, int indent) {
    std::string target = node.buffer + (node.index ? "[" + e(node.index) + "]" : "");
    if (node.atomic)
      line(indent, fmt::format("atomically {} = {}({}, {})", target, tensor::reduceOpName(*node.atomic), target, e(node.value)));
    else
      line(indent, fmt::format("{} = {}", target, e(node.value)));
  }
  void printNode(const If& node, int indent) {
    line(indent, fmt::format("if {}:", e(node.condition)));
    print(*node.body, indent + 1);
  }
  void printNode(const Barrier&, int indent) { line(indent, "barrier"); }
  void printNode(const ShuffleCombine& node, int indent) {
    line(indent, fmt::format("{} = {}({}, shuffle_xor({}, {}))", node.buffer, tensor::binaryOpName(node.op),
                             node.buffer, node.buffer, node.laneMask));
  }
  void printNode(const CopyAsync& node, int indent) {
    std::string lanes = node.lanes > 1 ? fmt::format(", {} lanes, the first {} of them", node.lanes, e(node.lanesInside)) : "";
    line(indent, fmt::format("{}[{}] = copy of {}[{}] if {}{}", node.buffer, e(node.index), node.source, e(node.sourceIndex),
                             e(node.condition), lanes));
  }
  void printNode(const WaitForCopies& node, int indent) {
    line(indent, fmt::format("wait for the copies but the last {}", node.pending));
  }
  void printNode(const LoadMatrix& node, int indent) {
    line(indent, fmt::format("{} from {} = ldmatrix x{}{} of {}, this lane's row at {}", node.fragment, e(node.fragmentElement),
                             node.count, node.transpose ? " transposed" : "", node.buffer, e(node.element)));
  }
  void printNode(const MultiplyAccumulate& node, int indent) {
    line(indent, fmt::format("{} from {} += mma m16n8k16 {} of {} from {} and {} from {}", node.accumulator,
                             e(node.accumulatorElement), dtypeName(node.dtype), node.a, e(node.aElement), node.b,
                             e(node.bElement)));
  }
  void printNode(const TransposeQuad& node, int indent) {
    line(indent, fmt::format("transpose {} across each quad of lanes (lane {})", node.local, e(node.lane)));
  }
  void printNode(const CombineLanes& node, int indent) {
    std::string accumulator = node.element ? fmt::format("{}[{}]", node.accumulator, e(node.element)) : node.accumulator;
    const char* op = binaryOpName(node.op);
    line(indent, fmt::format("{} = {}({}, {} of the {} lanes of {}, a pair at a time)", accumulator, op, accumulator, op,
                             node.lanes, node.local));
  }
  static std::string localPart(const std::string& local, const ExprPtr& element) {
    return element ? fmt::format("{} from {}", local, e(element)) : local;
  }
  void printNode(const VectorLoad& node, int indent) {
    line(indent, fmt::format("{} = {} bytes of {} from {}", localPart(node.local, node.localElement), node.bytes,
                             node.buffer, e(node.element)));
  }
  void printNode(const VectorStore& node, int indent) {
    line(indent, fmt::format("{} bytes of {} from {} = {}{}", node.bytes, node.buffer, e(node.element),
                             localPart(node.local, node.localElement), node.narrowing ? " rounded a pair at a time" : ""));
  }
  void printNode(const IfAligned& node, int indent) {
    std::vector<std::string> addresses;
    for (const Address& address : node.addresses)
      addresses.push_back(address.element ? fmt::format("&{}[{}]", address.buffer, e(address.element)) : address.buffer);
    std::string aligned = addresses.empty() ? "" : fmt::format("{} start on {}-byte boundaries", join(addresses, ", "), node.bytes);
    std::string condition = node.condition ? e(node.condition) : "";
    line(indent, fmt::format("if {}{}{}:", aligned, !aligned.empty() && !condition.empty() ? " and " : "", condition));
    print(*node.aligned, indent + 1);
    line(indent, "else:");
    print(*node.otherwise, indent + 1);
  }
  void printNode(const Block& node, int indent) {
    for (const StmtPtr& stmt : node.stmts) print(*stmt, indent);
  }
};

}  // namespace

std::string printProgram(const Program& program) {
  Printer printer;
  printer.out = loop::printProgramHeader(program.source, program.temporaries);
  const Function* previous = nullptr;
  for (const Function& function : program.functions) {
    const std::array<ExprPtr, 3>& g = function.gridBlocks;
    const std::array<int, 3>& t = function.blockThreads;
    std::string blocks = function.flatGrid() ? Printer::e(g[0]) : fmt::format("({}, {}, {})", Printer::e(g[0]), Printer::e(g[1]), Printer::e(g[2]));
    std::string threads = function.flatBlock() ? std::to_string(t[0]) : fmt::format("{}x{}x{}", t[0], t[1], t[2]);
    std::string indices = fmt::format("{}-bit indices", function.indexBits);
    if (function.indicesFit)
      indices += (function.indexBits == 32 ? " where " : " where not ") + Printer::e(function.indicesFit);
    printer.line(1, fmt::format("kernel {} computes {}: {} blocks of {} threads, {}{}", function.name,
                                join(function.stages, ", "), blocks, threads, indices,
                                function.launchWhen ? ", launched where " + Printer::e(function.launchWhen) : ""));
    // A 64-bit twin is its kernel's very statements (index_widths.h): said once.
    if (function.isWideTwin() && previous && previous->body == function.body)
      printer.line(2, fmt::format("the body of {}", previous->name));
    else
      printer.print(*function.body, 2);
    previous = &function;
  }
  return printer.out;
}

}  // namespace emmy::kernel
