#include "ir/loop/printer.h"

#include <fmt/format.h>

#include "ir/tensor/printer.h"
#include "support/text.h"

namespace emmy::loop {

namespace {

std::string indices(const std::vector<ExprPtr>& index) {
  std::string out = "[";
  for (size_t k = 0; k < index.size(); ++k) out += (k ? ", " : "") + tensor::printExpr(*index[k]);
  return out + "]";
}

std::string shapeText(const std::vector<Dim>& shape) { return shape.empty() ? "" : tensor::shapeToString(shape); }

struct Printer {
  std::string out;

  void line(int indent, const std::string& text) { out += std::string(2 * indent, ' ') + text + "\n"; }

  void print(const Stmt& stmt, int indent) {
    dispatch(stmt, [&](const auto& node) { printNode(node, indent); });
  }

  void printNode(const For& node, int indent) {
    line(indent, fmt::format("for {} < {}:  # {}.{}", node.var, node.extent.toString(), node.stage, node.axis));
    print(*node.body, indent + 1);
  }
  void printNode(const Allocate& node, int indent) {
    line(indent, fmt::format("local {}: {}{}", node.buffer, dtypeName(node.dtype), shapeText(node.shape)));
    print(*node.body, indent);
  }
  void printNode(const Store& node, int indent) {
    line(indent, fmt::format("{}{} = {}", node.buffer, indices(node.indices), tensor::printExpr(*node.value)));
  }
  void printNode(const Block& node, int indent) {
    for (const StmtPtr& stmt : node.stmts) print(*stmt, indent);
  }
};

}  // namespace

std::string printProgramHeader(const tensor::Kernel& source, const std::vector<Temporary>& temporaries) {
  std::string out = fmt::format("program {}\n", source.instanceName());
  for (const Temporary& temporary : temporaries)
    out += fmt::format("  temporary {}: {}{}\n", temporary.name, dtypeName(temporary.dtype),
                       tensor::shapeToString(temporary.shape));
  return out;
}

std::string printProgram(const Program& program) {
  Printer printer;
  printer.out = printProgramHeader(program.source, program.temporaries);
  for (const LoopNest& nest : program.kernels) {
    printer.line(1, fmt::format("kernel {} computes {}", nest.name, join(nest.stages, ", ")));
    printer.print(*nest.body, 2);
  }
  return printer.out;
}

}  // namespace emmy::loop
