#include "ir/loop/interpreter.h"

#include <fmt/format.h>

#include "ir/tensor/printer.h"
#include "ir/tensor/scalar_ops.h"
#include "support/diagnostics.h"

namespace emmy::loop {

using namespace tensor;

namespace {

class Interpreter {
public:
  Interpreter(const Program& program, const EvaluationInputs& inputs)
      : sizes_(bindSizes(program.source, inputs.tensors, inputs.sizes)),
        scalars_(bindScalars(program.source, inputs.scalars)) {
    for (const auto& [name, buffer] : inputs.tensors) buffers_[name] = buffer;
    auto allocate = [&](const std::string& name, DType dtype, const std::vector<Dim>& shape) {
      std::vector<int64_t> extents;
      for (const Dim& dim : shape) extents.push_back(evaluateDim(dim, sizes_));
      buffers_[name] = Buffer(dtype, extents);
    };
    for (const TensorParam& output : program.source.outputs) allocate(output.name, output.dtype, output.shape);
    for (const Temporary& temporary : program.temporaries) allocate(temporary.name, temporary.dtype, temporary.shape);
  }

  void run(const Stmt& stmt) {
    dispatch(stmt, [&](const auto& node) { runNode(node); });
  }

  Buffer take(const std::string& name) { return std::move(buffers_.at(name)); }

private:
  void runNode(const For& node) {
    int64_t extent = evaluateDim(node.extent, sizes_);
    for (int64_t i = 0; i < extent; ++i) {
      loopVars_[node.var] = i;
      run(*node.body);
    }
    loopVars_.erase(node.var);
  }

  void runNode(const Allocate& node) {
    std::vector<int64_t> extents;
    for (const Dim& dim : node.shape) extents.push_back(evaluateDim(dim, sizes_));
    buffers_[node.buffer] = Buffer(node.dtype, extents);
    run(*node.body);
    buffers_.erase(node.buffer);
  }

  void runNode(const Store& node) {
    Buffer& buffer = buffers_.at(node.buffer);
    buffer.set(flatIndex(buffer, node.indices, nullptr), evaluate(*node.value));
  }

  void runNode(const Block& node) {
    for (const StmtPtr& stmt : node.stmts) run(*stmt);
  }

  // The row-major position of `indices` in `buffer`; -1 when out of bounds and `load` may pad.
  int64_t flatIndex(const Buffer& buffer, const std::vector<ExprPtr>& indices, const Load* load) {
    int64_t flat = 0;
    for (size_t d = 0; d < indices.size(); ++d) {
      int64_t index = evaluate(*indices[d]).i;
      int64_t extent = buffer.shape()[d];
      if (index < 0 || index >= extent) {
        if (load && load->padValue) return -1;
        throw InternalError(fmt::format("Loop IR reads or writes index {} of dimension {} (extent {})", index, d, extent));
      }
      flat = flat * extent + index;
    }
    return flat;
  }

  Value evaluate(const Expr& expr) {
    return tensor::dispatch(expr, [&](const auto& node) { return evaluateNode(node); });
  }

  Value evaluateNode(const IntImm& node) { return Value::ofInt(node.dtype, node.value); }
  Value evaluateNode(const FloatImm& node) { return Value::ofFloat(node.dtype, node.value); }
  Value evaluateNode(const BoolImm& node) { return Value::ofBool(node.value); }
  Value evaluateNode(const AxisVar& node) { return Value::ofInt(DType::I64, loopVars_.at(node.name)); }
  Value evaluateNode(const SizeVar& node) { return Value::ofInt(DType::I64, sizes_.at(node.name)); }
  Value evaluateNode(const ScalarParam& node) { return scalars_.at(node.name); }
  Value evaluateNode(const Load& node) {
    const Buffer& buffer = buffers_.at(node.tensor);
    int64_t flat = flatIndex(buffer, node.indices, &node);
    return flat < 0 ? evaluate(*node.padValue) : buffer.get(flat);
  }
  Value evaluateNode(const Unary& node) { return applyUnary(node.op, node.dtype, evaluate(*node.operand)); }
  Value evaluateNode(const Binary& node) {
    if (node.op == BinaryOp::And) return evaluate(*node.lhs).i ? evaluate(*node.rhs) : Value::ofBool(false);
    if (node.op == BinaryOp::Or) return evaluate(*node.lhs).i ? Value::ofBool(true) : evaluate(*node.rhs);
    return applyBinary(node.op, node.dtype, evaluate(*node.lhs), evaluate(*node.rhs));
  }
  Value evaluateNode(const Select& node) {
    return evaluate(*node.condition).i ? evaluate(*node.ifTrue) : evaluate(*node.ifFalse);
  }
  Value evaluateNode(const Cast& node) { return evaluate(*node.operand).castTo(node.dtype); }

  std::map<std::string, int64_t> sizes_;
  std::map<std::string, Value> scalars_;
  std::map<std::string, Buffer> buffers_;
  std::map<std::string, int64_t> loopVars_;
};

}  // namespace

std::map<std::string, Buffer> interpret(const Program& program, const EvaluationInputs& inputs) {
  Interpreter interpreter(program, inputs);
  for (const LoopNest& nest : program.kernels) interpreter.run(*nest.body);
  std::map<std::string, Buffer> outputs;
  for (const TensorParam& output : program.source.outputs) outputs[output.name] = interpreter.take(output.name);
  return outputs;
}

}  // namespace emmy::loop
