#include "ir/tile/printer.h"

#include <fmt/format.h>

#include "ir/loop/printer.h"
#include "ir/tensor/printer.h"
#include "support/text.h"

namespace emmy::tile {

const char* bindingName(Binding binding) {
  switch (binding) {
    case Binding::Serial: return "serial";
    case Binding::GridStrided: return "grid-strided";
    case Binding::BlockStrided: return "block-strided";
    case Binding::ThreadStrided: return "thread-strided";
    case Binding::ThreadIndex: return "thread-index";
    case Binding::Unrolled: return "unrolled";
  }
  return "?";
}

namespace {

struct Printer {
  std::string out;

  void line(int indent, const std::string& text) { out += std::string(2 * indent, ' ') + text + "\n"; }

  void print(const Stmt& stmt, int indent) {
    dispatch(stmt, [&](const auto& node) { printNode(node, indent); });
  }

  void printNode(const Loop& node, int indent) {
    std::string axes = join(node.axes, ", ");
    bool dimensioned = node.binding == Binding::ThreadIndex ||
                       (node.binding == Binding::BlockStrided && node.dimension != 0);
    line(indent, fmt::format("for {} < {} {}{}{}:{}", node.var, tensor::printExpr(*node.extent),
                             bindingName(node.binding), dimensioned ? fmt::format(" {}", "xyz"[node.dimension]) : "",
                             node.vectorWidth > 1 ? fmt::format(" vectorized by {}", node.vectorWidth) : "",
                             axes.empty() ? "" : "  # " + axes));
    print(*node.body, indent + 1);
  }
  void printNode(const Let& node, int indent) {
    line(indent, fmt::format("let {} = {}", node.var, tensor::printExpr(*node.value)));
  }
  void printNode(const Allocate& node, int indent) {
    line(indent, fmt::format("{} {}: {}{}{}", node.scope == MemoryScope::Shared ? "shared" : "register", node.buffer,
                             dtypeName(node.dtype), node.shape.empty() ? "" : tensor::shapeToString(node.shape),
                             node.sizedAtLaunch ? fmt::format(", sized at launch to {}", tensor::printExpr(*node.sizedAtLaunch)) : ""));
    print(*node.body, indent);
  }
  void printNode(const Store& node, int indent) {
    std::string index;
    for (const ExprPtr& i : node.indices) index += (index.empty() ? "" : ", ") + tensor::printExpr(*i);
    std::string target = fmt::format("{}[{}]", node.buffer, index);
    if (node.atomic)
      line(indent, fmt::format("atomically {} = {}({}, {})", target, tensor::reduceOpName(*node.atomic), target,
                               tensor::printExpr(*node.value)));
    else
      line(indent, fmt::format("{} = {}", target, tensor::printExpr(*node.value)));
  }
  void printNode(const CrossThreadReduce& node, int indent) {
    std::string along = node.dimension == 0 ? "" : fmt::format(" along {}", "xyz"[node.dimension]);
    line(indent, fmt::format("combine {} across the block{} ({})", node.buffer, along, tensor::reduceOpName(node.op)));
  }
  void printNode(const SingleThread& node, int indent) {
    std::string along;
    for (int dimension : node.dimensions) along += "xyz"[dimension];
    line(indent, along == "xyz" ? "in one thread:" : fmt::format("in the threads at index 0 along {}:", along));
    print(*node.body, indent + 1);
  }
  void printNode(const Guard& node, int indent) {
    line(indent, fmt::format("if {}:", tensor::printExpr(*node.condition)));
    print(*node.body, indent + 1);
  }
  void printNode(const CopyAsync& node, int indent) {
    std::string lanes = node.lanes > 1 ? fmt::format(", {} lanes, the first {} of them", node.lanes,
                                                     tensor::printExpr(*node.lanesInside))
                                       : "";
    line(indent, fmt::format("{}[{}] = copy of {}[{}] if {}{}", node.buffer, indexList(node.indices), node.source,
                             indexList(node.sourceIndices), tensor::printExpr(*node.condition), lanes));
  }
  void printNode(const WaitForCopies& node, int indent) {
    line(indent, fmt::format("wait for the copies but the last {}", node.pending));
  }
  void printNode(const MatrixProduct& node, int indent) {
    auto operand = [](const MatrixOperand& o) {
      return fmt::format("{}[{}] ({}, {} contiguous{}{})", o.tensor, indexList(o.indices), dtypeName(o.dtype),
                         o.kContiguous ? "k" : "rows", o.padded ? ", 0 outside" : "",
                         o.mask ? ", 0 unless " + tensor::printExpr(*o.mask) : "");
    };
    line(indent, fmt::format("tensor cores (mma.sync m16n8k16): {} = sum over {} < {} of {} * {}", node.accumulator,
                             node.k, tensor::printExpr(*node.depth), operand(node.a), operand(node.b)));
    line(indent + 1, fmt::format("for {} in {} + [0, {}) below {}, {} in {} + [0, {}) below {}", node.row,
                                 tensor::printExpr(*node.rowBase), node.blockRows, tensor::printExpr(*node.rows), node.col,
                                 tensor::printExpr(*node.colBase), node.blockCols, tensor::printExpr(*node.cols)));
    for (const auto* axes : {&node.rowAxes, &node.colAxes, &node.depthAxes})
      for (const auto& [axis, value] : *axes) line(indent + 1, fmt::format("where {} = {}", axis, tensor::printExpr(*value)));
    line(indent + 1, fmt::format("warp tiles {} x {}, slices of {} along {} in a ring of {} stages", node.warpRows,
                                 node.warpCols, node.blockDepth, node.k, node.stages));
    line(indent + 1, fmt::format("then {}[{}] = {}", node.output, indexList(node.outputIndices), tensor::printExpr(*node.value)));
  }
  void printNode(const Block& node, int indent) {
    for (const StmtPtr& stmt : node.stmts) print(*stmt, indent);
  }

  static std::string indexList(const std::vector<ExprPtr>& indices) {
    std::vector<std::string> printed;
    for (const ExprPtr& index : indices) printed.push_back(tensor::printExpr(*index));
    return join(printed, ", ");
  }
};

}  // namespace

std::string printProgram(const Program& program) {
  Printer printer;
  printer.out = loop::printProgramHeader(program.source, program.temporaries);
  for (const TileNest& nest : program.kernels) {
    const std::array<int, 3>& t = nest.threads;
    std::string threads = t[1] == 1 && t[2] == 1 ? std::to_string(t[0]) : fmt::format("{}x{}x{}", t[0], t[1], t[2]);
    printer.line(1, fmt::format("kernel {} computes {} with {} threads per block", nest.name, join(nest.stages, ", "),
                                threads));
    printer.print(*nest.body, 2);
  }
  return printer.out;
}

std::string printSchedule(const Program& program) {
  std::string out;
  if (!program.source.typeArguments.empty() || !program.source.integerArguments.empty())
    out += fmt::format("# {}\n", program.source.instanceName());
  // An instance's schedule is typed (`schedule matmul<f16>`, `schedule conv2d<f16, GROUPS = 1, ...>`):
  // pasted, it schedules that instance only.
  std::vector<std::string> types;
  for (const auto& [param, dtype] : program.source.typeArguments) types.push_back(std::string(dtypeName(dtype)));
  for (const auto& [param, value] : program.source.integerArguments) types.push_back(fmt::format("{} = {}", param, value));
  out += fmt::format("schedule {}{} {{\n", program.source.name, types.empty() ? "" : "<" + join(types, ", ") + ">");
  for (const tensor::ScheduleParam& param : program.params) out += "    " + tensor::printParam(param) + "\n";
  for (const std::string& directive : program.schedule) out += "    " + directive + "\n";
  return out + "}\n";
}

}  // namespace emmy::tile
