#include "ir/kernel/nodes.h"

#include <algorithm>
#include <cstring>
#include <set>

#include <fmt/format.h>

#include "ir/tensor/printer.h"
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

// Where the shared buffers sized at launch lie: each after the ones placed before it, but for the two
// sides of a launch variant (`if c` then `if !c`, c a condition on the launch's shared bytes, which is
// the same for the whole launch), of which a block runs one: both start at the same offset, and each
// side's paths are paths of the kernel.
struct SizedAtLaunchLayout {
  std::vector<Function::SizedAtLaunch> found;
  // The end of one path's buffers: the first byte after them (an i64 expression of the sizes), and at most.
  struct End {
    ExprPtr bytes;
    int64_t most = 0;
  };
  using Paths = std::vector<End>;

  Paths place(const Stmt& stmt, Paths paths) {
    dispatch(stmt, [&](const auto& node) {
      using Node = std::decay_t<decltype(node)>;
      if constexpr (std::is_same_v<Node, Declare>) {
        if (!node.sizedAtLaunch) return;
        // Where paths have parted before it (no kernel Emmy makes has such a buffer), after the longest.
        End start = paths.size() == 1 ? paths[0] : longest(paths);
        found.push_back({&node, start.bytes});
        paths = {{tensor::simplifyIndex(std::make_shared<tensor::Binary>(DType::I64, tensor::BinaryOp::Add, start.bytes,
                                                                         bytesAtLaunch(node))),
                  start.most + node.count * dtypeBytes(node.dtype)}};
      } else if constexpr (std::is_same_v<Node, For> || std::is_same_v<Node, If>) {
        paths = place(*node.body, paths);
      } else if constexpr (std::is_same_v<Node, IfAligned>) {
        paths = place(*node.otherwise, place(*node.aligned, paths));
      } else if constexpr (std::is_same_v<Node, Block>) {
        for (size_t s = 0; s < node.stmts.size(); ++s) {
          if (s + 1 < node.stmts.size() && launchVariants(*node.stmts[s], *node.stmts[s + 1])) {
            Paths sides = place(*node.stmts[s], paths);
            for (const End& other : place(*node.stmts[s + 1], paths))
              if (std::none_of(sides.begin(), sides.end(), [&](const End& e) { return tensor::sameIndex(*e.bytes, *other.bytes); }))
                sides.push_back(other);
            paths = std::move(sides);
            ++s;
            continue;
          }
          paths = place(*node.stmts[s], paths);
        }
      }
    });
    return paths;
  }

  static bool none(const End& end) {
    const auto* bytes = end.bytes->as<tensor::IntImm>();
    return bytes && bytes->value == 0;
  }

  // The most any path takes (sizes are never negative: a path without buffers takes the least).
  static End longest(const Paths& paths) {
    std::optional<End> end;
    for (const End& path : paths)
      if (!none(path))
        end = !end ? path
                   : End{tensor::simplifyIndex(std::make_shared<tensor::Binary>(DType::I64, tensor::BinaryOp::Max, end->bytes,
                                                                                 path.bytes)),
                         std::max(end->most, path.most)};
    return end ? *end : paths[0];
  }

  Paths placeAll(const Function& function) {
    return place(*function.body, {{std::make_shared<tensor::IntImm>(DType::I64, 0), 0}});
  }

  static bool launchVariants(const Stmt& first, const Stmt& second) {
    const auto* taken = first.as<If>();
    const auto* other = second.as<If>();
    if (!taken || !other) return false;
    const auto* negated = other->condition->as<tensor::Unary>();
    if (!negated || negated->op != tensor::UnaryOp::Not || !tensor::sameIndex(*negated->operand, *taken->condition))
      return false;
    bool launchBytes = false, uniform = true;
    tensor::forEachNode(*taken->condition, [&](const tensor::Expr& node) {
      if (const auto* axis = node.as<tensor::AxisVar>()) {
        launchBytes = launchBytes || isLaunchSharedBytes(axis->name);
        uniform = uniform && !isThreadIndex(axis->name);
      }
      uniform = uniform && !node.as<tensor::Load>();
    });
    return launchBytes && uniform;
  }
};

}  // namespace

std::vector<Function::SizedAtLaunch> Function::sharedSizedAtLaunch() const {
  SizedAtLaunchLayout layout;
  layout.placeAll(*this);
  return layout.found;
}

std::vector<ExprPtr> Function::launchSharedChoices() const {
  SizedAtLaunchLayout layout;
  SizedAtLaunchLayout::Paths paths = layout.placeAll(*this);
  std::vector<ExprPtr> choices;
  if (layout.found.empty()) return choices;
  // A path without buffers is what the launch takes when the device cannot give the others.
  for (const SizedAtLaunchLayout::End& end : paths)
    if (!SizedAtLaunchLayout::none(end)) choices.push_back(end.bytes);
  return choices;
}

ExprPtr Function::launchSharedBytes() const {
  SizedAtLaunchLayout layout;
  SizedAtLaunchLayout::Paths paths = layout.placeAll(*this);
  return layout.found.empty() ? nullptr : SizedAtLaunchLayout::longest(paths).bytes;
}

int64_t Function::mostLaunchSharedBytes() const {
  SizedAtLaunchLayout layout;
  return SizedAtLaunchLayout::longest(layout.placeAll(*this)).most;
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
