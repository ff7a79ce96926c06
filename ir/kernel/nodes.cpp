#include "ir/kernel/nodes.h"

#include <algorithm>
#include <cstring>
#include <set>

#include <fmt/format.h>

#include "ir/tensor/rewrite.h"
#include "ir/tensor/simplify.h"
#include "ir/tile/nodes.h"

namespace emmy::kernel {

namespace {

constexpr std::array<const char*, 4> kIndexNames = {"threadIdx", "blockIdx", "blockDim", "gridDim"};

ExprPtr hardwareIndex(const char* name, int dimension) {
  return std::make_shared<tensor::AxisVar>(fmt::format("{}.{}", name, "xyz"[dimension]));
}

bool named(const std::string& name, const char* prefix) {
  return name.size() == std::strlen(prefix) + 2 && name.compare(0, std::strlen(prefix), prefix) == 0 &&
         name[name.size() - 2] == '.' && name.back() >= 'x' && name.back() <= 'z';
}

}  // namespace

bool isHardwareIndex(const std::string& name) {
  return std::any_of(kIndexNames.begin(), kIndexNames.end(), [&](const char* prefix) { return named(name, prefix); });
}

bool isThreadIndex(const std::string& name) { return named(name, kIndexNames[0]); }

ExprPtr launchSharedBytes() { return std::make_shared<tensor::AxisVar>(tile::kLaunchSharedBytes); }
bool isLaunchSharedBytes(const std::string& name) { return name == tile::kLaunchSharedBytes; }

namespace {

// The bytes of shared `declare` at launch.
ExprPtr bytesAtLaunch(const Declare& declare) {
  return std::make_shared<tensor::Binary>(DType::I64, tensor::BinaryOp::Mul, declare.sizedAtLaunch,
                                          std::make_shared<tensor::IntImm>(DType::I64, dtypeBytes(declare.dtype)));
}

}  // namespace

std::vector<Function::SizedAtLaunch> Function::sharedSizedAtLaunch() const {
  std::vector<SizedAtLaunch> found;
  ExprPtr offset = std::make_shared<tensor::IntImm>(DType::I64, 0);
  forEachStmt(*body, [&](const Stmt& stmt) {
    const auto* declare = stmt.as<Declare>();
    if (!declare || !declare->sizedAtLaunch) return;
    found.push_back({declare, offset});
    offset = tensor::simplifyIndex(std::make_shared<tensor::Binary>(DType::I64, tensor::BinaryOp::Add, offset,
                                                                    bytesAtLaunch(*declare)));
  });
  return found;
}

ExprPtr Function::launchSharedBytes() const {
  std::vector<SizedAtLaunch> buffers = sharedSizedAtLaunch();
  if (buffers.empty()) return nullptr;
  return tensor::simplifyIndex(std::make_shared<tensor::Binary>(DType::I64, tensor::BinaryOp::Add, buffers.back().offset,
                                                                bytesAtLaunch(*buffers.back().buffer)));
}

int64_t Function::mostLaunchSharedBytes() const {
  int64_t total = 0;
  for (const SizedAtLaunch& sized : sharedSizedAtLaunch()) total += sized.buffer->count * dtypeBytes(sized.buffer->dtype);
  return total;
}

int64_t Function::declaredSharedBytes() const {
  int64_t total = 0;
  forEachStmt(*body, [&](const Stmt& stmt) {
    if (const auto* declare = stmt.as<Declare>(); declare && declare->memory == Memory::Shared && !declare->sizedAtLaunch)
      total += declare->count * dtypeBytes(declare->dtype);
  });
  return total;
}

bool Function::flatGrid() const {
  auto one = [](const ExprPtr& e) {
    const auto* immediate = e->as<tensor::IntImm>();
    return immediate && immediate->value == 1;
  };
  return one(gridBlocks[1]) && one(gridBlocks[2]);
}

ExprPtr threadIndex(int dimension) { return hardwareIndex(kIndexNames[0], dimension); }
ExprPtr blockIndex(int dimension) { return hardwareIndex(kIndexNames[1], dimension); }
ExprPtr blockSize(int dimension) { return hardwareIndex(kIndexNames[2], dimension); }
ExprPtr gridSize(int dimension) { return hardwareIndex(kIndexNames[3], dimension); }

void forEachExpr(const Stmt& stmt, const std::function<void(const ExprPtr&)>& visit) {
  auto e = [&](const ExprPtr& expr) {
    if (expr) visit(expr);
  };
  dispatch(stmt, [&](const auto& node) {
    using Node = std::decay_t<decltype(node)>;
    if constexpr (std::is_same_v<Node, For>) {
      e(node.begin), e(node.end), e(node.step);
      forEachExpr(*node.body, visit);
    } else if constexpr (std::is_same_v<Node, Let>) {
      e(node.value);
    } else if constexpr (std::is_same_v<Node, Store>) {
      e(node.index), e(node.value);
    } else if constexpr (std::is_same_v<Node, If>) {
      e(node.condition);
      forEachExpr(*node.body, visit);
    } else if constexpr (std::is_same_v<Node, CopyAsync>) {
      e(node.index), e(node.sourceIndex), e(node.condition), e(node.lanesInside);
    } else if constexpr (std::is_same_v<Node, LoadMatrix>) {
      e(node.fragmentElement), e(node.element);
    } else if constexpr (std::is_same_v<Node, MultiplyAccumulate>) {
      e(node.accumulatorElement), e(node.aElement), e(node.bElement);
    } else if constexpr (std::is_same_v<Node, TransposeQuad>) {
      e(node.lane);
    } else if constexpr (std::is_same_v<Node, CombineLanes>) {
      e(node.element);
    } else if constexpr (std::is_same_v<Node, VectorLoad> || std::is_same_v<Node, VectorStore>) {
      e(node.element), e(node.localElement);
    } else if constexpr (std::is_same_v<Node, IfAligned>) {
      for (const Address& address : node.addresses) e(address.element);
      e(node.condition);
      forEachExpr(*node.aligned, visit), forEachExpr(*node.otherwise, visit);
    } else if constexpr (std::is_same_v<Node, Block>) {
      for (const StmtPtr& inner : node.stmts) forEachExpr(*inner, visit);
    } else if constexpr (std::is_same_v<Node, Declare>) {
      e(node.sizedAtLaunch);
    } else {
      static_assert(std::is_same_v<Node, Barrier> ||
                        std::is_same_v<Node, ShuffleCombine> || std::is_same_v<Node, WaitForCopies>,
                    "a statement with expressions that forEachExpr does not visit");
    }
  });
}

void forEachStmt(const Stmt& stmt, const std::function<void(const Stmt&)>& visit) {
  visit(stmt);
  dispatch(stmt, [&](const auto& node) {
    using Node = std::decay_t<decltype(node)>;
    if constexpr (std::is_same_v<Node, For> || std::is_same_v<Node, If>) {
      forEachStmt(*node.body, visit);
    } else if constexpr (std::is_same_v<Node, IfAligned>) {
      forEachStmt(*node.aligned, visit), forEachStmt(*node.otherwise, visit);
    } else if constexpr (std::is_same_v<Node, Block>) {
      for (const StmtPtr& inner : node.stmts) forEachStmt(*inner, visit);
    }
  });
}

StmtPtr withChildren(const StmtPtr& stmt, const std::function<StmtPtr(const StmtPtr&)>& replace) {
  return dispatch(*stmt, [&](const auto& node) -> StmtPtr {
    using Node = std::decay_t<decltype(node)>;
    if constexpr (std::is_same_v<Node, For>) {
      return std::make_shared<For>(node.var, node.begin, node.end, node.step, replace(node.body), node.unroll, node.rolled);
    } else if constexpr (std::is_same_v<Node, If>) {
      return std::make_shared<If>(node.condition, replace(node.body));
    } else if constexpr (std::is_same_v<Node, IfAligned>) {
      StmtPtr aligned = replace(node.aligned);  // before `otherwise`: a replacement may take names in order
      StmtPtr otherwise = replace(node.otherwise);
      return std::make_shared<IfAligned>(node.addresses, node.bytes, node.condition, aligned, otherwise);
    } else if constexpr (std::is_same_v<Node, Block>) {
      std::vector<StmtPtr> stmts;
      for (const StmtPtr& inner : node.stmts) stmts.push_back(replace(inner));
      return std::make_shared<Block>(stmts);
    } else {
      return stmt;
    }
  });
}

StmtPtr withoutUnusedLets(const StmtPtr& stmt) {
  const auto* block = stmt->as<Block>();
  if (!block) return withChildren(stmt, withoutUnusedLets);
  // From the end: a Let is kept when a statement after it reads its variable (a read inside a scope that
  // binds the name again counts too, which only keeps more).
  std::set<std::string> read;
  std::vector<StmtPtr> kept;
  for (auto inner = block->stmts.rbegin(); inner != block->stmts.rend(); ++inner) {
    if (const auto* let = (*inner)->as<Let>(); let && !read.count(let->var)) continue;
    StmtPtr cleaned = withoutUnusedLets(*inner);
    forEachExpr(*cleaned, [&](const ExprPtr& expr) {
      tensor::forEachNode(*expr, [&](const tensor::Expr& e) {
        if (const auto* var = e.as<tensor::AxisVar>()) read.insert(var->name);
      });
    });
    kept.push_back(cleaned);
  }
  std::reverse(kept.begin(), kept.end());
  return std::make_shared<Block>(kept);
}

}  // namespace emmy::kernel
