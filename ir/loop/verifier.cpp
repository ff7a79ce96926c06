#include "ir/loop/verifier.h"

#include <map>
#include <set>

#include <fmt/format.h>

#include "ir/tensor/printer.h"
#include "ir/tensor/rewrite.h"
#include "support/diagnostics.h"

namespace emmy::loop {

using namespace tensor;

namespace {

struct BufferInfo {
  DType dtype;
  size_t rank;
  bool writable;
};

class Verifier {
public:
  Verifier(const Program& program, const LoopNest& nest) : program_(program), nest_(nest) {
    const Kernel& source = program.source;
    for (const TensorParam& input : source.inputs) buffers_[input.name] = {input.dtype, input.shape.size(), false};
    for (const TensorParam& output : source.outputs) buffers_[output.name] = {output.dtype, output.shape.size(), true};
    for (const Temporary& temporary : program.temporaries)
      buffers_[temporary.name] = {temporary.dtype, temporary.shape.size(), true};
    for (const ScalarParamDecl& scalar : source.scalars) scalars_[scalar.name] = scalar.dtype;
    for (const std::string& size : source.allSizes()) sizes_.insert(size);
  }

  void check(const Stmt& stmt) {
    dispatch(stmt, [&](const auto& node) { checkNode(node); });
  }

  std::set<std::string> stored;

private:
  [[noreturn]] void fail(const std::string& message) const {
    throw InternalError(fmt::format("invalid Loop IR in {}, kernel {}: {}", program_.source.instanceName(), nest_.name,
                                    message));
  }

  void checkDim(const Dim& dim) const {
    for (const std::string& size : dim.sizes)
      if (!sizes_.count(size)) fail(fmt::format("unknown size {}", size));
  }

  void checkExpr(const Expr& expr) const {
    forEachNode(expr, [&](const Expr& node) {
      if (const auto* axis = node.as<AxisVar>(); axis && !loopVars_.count(axis->name))
        fail(fmt::format("{} uses loop variable {} outside its loop", printExpr(expr), axis->name));
      if (const auto* size = node.as<SizeVar>(); size && !sizes_.count(size->name))
        fail(fmt::format("unknown size {}", size->name));
      if (const auto* scalar = node.as<ScalarParam>()) {
        auto it = scalars_.find(scalar->name);
        if (it == scalars_.end() || it->second != scalar->dtype) fail(fmt::format("unknown scalar {}", scalar->name));
      }
      if (const auto* load = node.as<Load>()) {
        auto it = buffers_.find(load->tensor);
        if (it == buffers_.end()) fail(fmt::format("{} reads {}, which is not in scope", printExpr(expr), load->tensor));
        if (it->second.rank != load->indices.size() || it->second.dtype != load->dtype)
          fail(fmt::format("{} does not match {}'s rank or dtype", printExpr(node), load->tensor));
      }
    });
  }

  void checkNode(const For& node) {
    if (loopVars_.count(node.var)) fail(fmt::format("loop variable {} shadows another", node.var));
    checkDim(node.extent);
    loopVars_.insert(node.var);
    check(*node.body);
    loopVars_.erase(node.var);
  }

  void checkNode(const Allocate& node) {
    if (buffers_.count(node.buffer)) fail(fmt::format("local {} shadows another buffer", node.buffer));
    for (const Dim& dim : node.shape) checkDim(dim);
    buffers_[node.buffer] = {node.dtype, node.shape.size(), true};
    check(*node.body);
    buffers_.erase(node.buffer);
  }

  void checkNode(const Store& node) {
    auto it = buffers_.find(node.buffer);
    if (it == buffers_.end() || !it->second.writable) fail(fmt::format("stores to {}, which it may not write", node.buffer));
    if (it->second.rank != node.indices.size()) fail(fmt::format("the store to {} has the wrong rank", node.buffer));
    if (it->second.dtype != node.value->dtype)
      fail(fmt::format("stores a {} value to {} of type {}", dtypeName(node.value->dtype), node.buffer,
                       dtypeName(it->second.dtype)));
    for (const ExprPtr& index : node.indices) checkExpr(*index);
    checkExpr(*node.value);
    stored.insert(node.buffer);
  }

  void checkNode(const Block& node) {
    for (const StmtPtr& stmt : node.stmts) check(*stmt);
  }

  const Program& program_;
  const LoopNest& nest_;
  std::map<std::string, BufferInfo> buffers_;
  std::map<std::string, DType> scalars_;
  std::set<std::string> sizes_;
  std::set<std::string> loopVars_;
};

}  // namespace

void verifyProgram(const Program& program) {
  std::map<std::string, int> storedBy;
  for (const LoopNest& nest : program.kernels) {
    EMMY_INTERNAL_ASSERT(!nest.stages.empty(), "kernel {} computes nothing", nest.name);
    Verifier verifier(program, nest);
    verifier.check(*nest.body);
    EMMY_INTERNAL_ASSERT(verifier.stored.count(nest.stages.back()), "kernel {} never stores its root {}", nest.name,
                         nest.stages.back());
    // The root, and the outputs stored beside it.
    for (const std::string& stage : nest.stages)
      if (verifier.stored.count(stage)) ++storedBy[stage];
  }
  for (const TensorParam& output : program.source.outputs)
    EMMY_INTERNAL_ASSERT(storedBy[output.name] == 1, "output {} is computed by {} kernels", output.name,
                         storedBy[output.name]);
}

}  // namespace emmy::loop
