// Kernel IR: barriers where shared memory needs them. Threads of a block share a shared buffer, so a
// read of it must wait for every write before it (read after write), and a write must wait for every
// read before it (write after read), across loop iterations too. An asynchronous copy writes when it
// starts (it may land at once) and again at every wait that may complete it: a read needs a barrier
// after the writing thread's wait, since only the wait makes the copy visible to the thread, and only a
// barrier after it to the others. Barriers go only where every thread of
// the block is, that is, outside any loop or condition that depends on the thread's index; such a
// thread-dependent statement counts as one access with everything it reads and writes.
#include "ir/kernel/place_barriers.h"

#include <set>

#include <fmt/format.h>

#include "ir/tensor/rewrite.h"
#include "support/diagnostics.h"

namespace emmy::kernel {

using namespace tensor;

namespace {

struct Accesses {
  std::set<std::string> reads, writes;
  // The buffers whose asynchronous copies a wait may complete: written for the reads after it (the
  // copy's start already counted against the reads before it).
  std::set<std::string> landed;

  bool conflictsWith(const Accesses& later) const {
    for (const std::string& buffer : later.reads)
      if (writes.count(buffer) || landed.count(buffer)) return true;
    for (const std::string& buffer : later.writes)
      if (reads.count(buffer)) return true;
    return false;
  }
  void add(const Accesses& other) {
    reads.insert(other.reads.begin(), other.reads.end());
    writes.insert(other.writes.begin(), other.writes.end());
    landed.insert(other.landed.begin(), other.landed.end());
  }
};

// The shared buffers `stmt` copies into asynchronously.
void collectCopyTargets(const Stmt& stmt, std::set<std::string>& targets) {
  dispatch(stmt, [&](const auto& node) {
    using Node = std::decay_t<decltype(node)>;
    if constexpr (std::is_same_v<Node, CopyAsync>) targets.insert(node.buffer);
    if constexpr (std::is_same_v<Node, For> || std::is_same_v<Node, If>) collectCopyTargets(*node.body, targets);
    if constexpr (std::is_same_v<Node, Block>)
      for (const StmtPtr& inner : node.stmts) collectCopyTargets(*inner, targets);
    if constexpr (std::is_same_v<Node, IfAligned>) collectCopyTargets(*node.aligned, targets), collectCopyTargets(*node.otherwise, targets);
  });
}

class BarrierPlacement {
public:
  // `function`: the body barriers are placed in (its asynchronous copies are what its waits complete).
  explicit BarrierPlacement(const Stmt& function) { collectCopyTargets(function, copyTargets_); }

  // Only the statements between the last barrier and the current point matter: `pending`.
  StmtPtr place(const StmtPtr& stmt, Accesses& pending) {
    // A loop or condition whose body is one statement may need a barrier before it too.
    auto asBlock = [](const StmtPtr& body) -> StmtPtr {
      return body->as<Block>() ? body : std::make_shared<Block>(std::vector<StmtPtr>{body});
    };
    if (!dependsOnThread(*stmt) && !stmt->as<Barrier>()) {
      if (const auto* block = stmt->as<Block>()) {
        std::vector<StmtPtr> stmts;
        for (const StmtPtr& inner : block->stmts) {
          StmtPtr placed = place(inner, pending, stmts);
          if (placed) stmts.push_back(placed);
        }
        return std::make_shared<Block>(stmts);
      }
      if (const auto* loop = stmt->as<For>(); loop && containsShared(*loop->body)) {
        // The body as the first iteration sees it, then again as the next iteration sees what the
        // previous one left pending; the second version is right for every iteration.
        Accesses first = pending;
        place(asBlock(loop->body), first);
        Accesses looped = pending;
        looped.add(first);
        StmtPtr body = place(asBlock(loop->body), looped);
        pending.add(looped);
        return std::make_shared<For>(loop->var, loop->begin, loop->end, loop->step, body, loop->unroll, loop->rolled);
      }
      if (const auto* branch = stmt->as<If>(); branch && containsShared(*branch->body)) {
        Accesses inside = pending;
        StmtPtr body = place(asBlock(branch->body), inside);
        pending.add(inside);
        return std::make_shared<If>(branch->condition, body);
      }
    }
    return stmt;
  }

private:
  // Places `stmt` in a block being built (`out`), adding a barrier before it when it conflicts with
  // what is pending. Returns the statement to append.
  StmtPtr place(const StmtPtr& stmt, Accesses& pending, std::vector<StmtPtr>& out) {
    if (stmt->as<Barrier>()) {
      pending = {};
      return stmt;
    }
    bool atomic = dependsOnThread(*stmt) || (!stmt->as<Block>() && !stmt->as<For>() && !stmt->as<If>());
    if (atomic) {
      Accesses own = accessesOf(*stmt);
      if (pending.conflictsWith(own)) {
        out.push_back(std::make_shared<Barrier>());
        pending = {};
      }
      pending.add(own);
      return stmt;
    }
    // A loop that conflicts with what is pending before it may need fewer barriers inside when one
    // comes before it (run once rather than at every iteration).
    if (stmt->as<For>() && pending.conflictsWith(accessesOf(*stmt))) {
      Accesses kept = pending, fresh;
      StmtPtr asIs = place(stmt, kept), afterBarrier = place(stmt, fresh);
      if (barrierCount(*afterBarrier) < barrierCount(*asIs)) {
        out.push_back(std::make_shared<Barrier>());
        pending = fresh;
        return afterBarrier;
      }
      pending = kept;
      return asIs;
    }
    return place(stmt, pending);
  }

  static int barrierCount(const Stmt& stmt) {
    int count = 0;
    dispatch(stmt, [&](const auto& node) {
      using Node = std::decay_t<decltype(node)>;
      if constexpr (std::is_same_v<Node, Barrier>) count = 1;
      if constexpr (std::is_same_v<Node, For> || std::is_same_v<Node, If>) count = barrierCount(*node.body);
      if constexpr (std::is_same_v<Node, Block>)
        for (const StmtPtr& inner : node.stmts) count += barrierCount(*inner);
      if constexpr (std::is_same_v<Node, IfAligned>) count = barrierCount(*node.aligned) + barrierCount(*node.otherwise);
    });
    return count;
  }

  // True when the statement's control flow depends on the thread's index (a thread-strided loop, a
  // condition on the lane), so that not every thread runs it alike.
  bool dependsOnThread(const Stmt& stmt) {
    auto dependent = [&](const ExprPtr& expr) {
      bool found = false;
      forEachNode(*expr, [&](const Expr& node) {
        if (const auto* var = node.as<AxisVar>())
          found |= isThreadIndex(var->name) || threadVars_.count(var->name);
      });
      return found;
    };
    if (const auto* loop = stmt.as<For>()) {
      bool result = dependent(loop->begin) || dependent(loop->end) || dependent(loop->step);
      if (result) threadVars_.insert(loop->var);
      return result;
    }
    if (const auto* let = stmt.as<Let>()) {
      if (dependent(let->value)) threadVars_.insert(let->var);
      return false;
    }
    if (const auto* branch = stmt.as<If>()) return dependent(branch->condition);
    return false;
  }

  Accesses accessesOf(const Stmt& stmt) {
    Accesses accesses;
    collect(stmt, accesses);
    return accesses;
  }

  void readsIn(const ExprPtr& expr, Accesses& accesses) {
    forEachNode(*expr, [&](const Expr& node) {
      if (const auto* load = node.as<Load>(); load && shared_.count(load->tensor)) accesses.reads.insert(load->tensor);
    });
  }

  void collect(const Stmt& stmt, Accesses& accesses) {
    dispatch(stmt, [&](const auto& node) {
      using Node = std::decay_t<decltype(node)>;
      if constexpr (std::is_same_v<Node, For>) {
        dependsOnThread(node);
        readsIn(node.begin, accesses), readsIn(node.end, accesses), readsIn(node.step, accesses);
        collect(*node.body, accesses);
      } else if constexpr (std::is_same_v<Node, Let>) {
        dependsOnThread(node);
        readsIn(node.value, accesses);
      } else if constexpr (std::is_same_v<Node, Declare>) {
        if (node.memory == Memory::Shared) shared_.insert(node.buffer);
      } else if constexpr (std::is_same_v<Node, Store>) {
        if (shared_.count(node.buffer)) accesses.writes.insert(node.buffer);
        if (node.index) readsIn(node.index, accesses);
        readsIn(node.value, accesses);
      } else if constexpr (std::is_same_v<Node, CopyAsync>) {
        // Written when it starts, and when a wait completes it (below).
        accesses.writes.insert(node.buffer);
        readsIn(node.index, accesses), readsIn(node.sourceIndex, accesses), readsIn(node.condition, accesses);
        if (node.lanesInside) readsIn(node.lanesInside, accesses);
      } else if constexpr (std::is_same_v<Node, WaitForCopies>) {
        accesses.landed = copyTargets_;  // which groups it completes is not tracked: any of them
      } else if constexpr (std::is_same_v<Node, LoadMatrix>) {
        accesses.reads.insert(node.buffer);
        readsIn(node.element, accesses), readsIn(node.fragmentElement, accesses);
      } else if constexpr (std::is_same_v<Node, VectorLoad>) {
        if (shared_.count(node.buffer)) accesses.reads.insert(node.buffer);
        readsIn(node.element, accesses);
        if (node.localElement) readsIn(node.localElement, accesses);
      } else if constexpr (std::is_same_v<Node, VectorStore>) {
        if (shared_.count(node.buffer)) accesses.writes.insert(node.buffer);
        readsIn(node.element, accesses);
        if (node.localElement) readsIn(node.localElement, accesses);
      } else if constexpr (std::is_same_v<Node, If>) {
        readsIn(node.condition, accesses);
        collect(*node.body, accesses);
      } else if constexpr (std::is_same_v<Node, Block>) {
        for (const StmtPtr& inner : node.stmts) collect(*inner, accesses);
      } else if constexpr (std::is_same_v<Node, IfAligned>) {
        collect(*node.aligned, accesses);
        collect(*node.otherwise, accesses);
      }
    });
  }

  bool containsShared(const Stmt& stmt) {
    Accesses accesses = accessesOf(stmt);
    return !accesses.reads.empty() || !accesses.writes.empty() || !accesses.landed.empty() || declaresShared(stmt);
  }

  bool declaresShared(const Stmt& stmt) {
    bool found = false;
    dispatch(stmt, [&](const auto& node) {
      using Node = std::decay_t<decltype(node)>;
      if constexpr (std::is_same_v<Node, Declare>) found = node.memory == Memory::Shared;
      if constexpr (std::is_same_v<Node, For> || std::is_same_v<Node, If>) found = declaresShared(*node.body);
      if constexpr (std::is_same_v<Node, Block>)
        for (const StmtPtr& inner : node.stmts) found = found || declaresShared(*inner);
      if constexpr (std::is_same_v<Node, IfAligned>) found = declaresShared(*node.aligned) || declaresShared(*node.otherwise);
    });
    return found;
  }

  std::set<std::string> shared_;      // shared buffers declared so far
  std::set<std::string> threadVars_;  // variables that depend on the thread's index
  std::set<std::string> copyTargets_;  // the buffers the function copies into asynchronously
};

// Removes the barrier numbered `target`, counting barriers in the order of the generated code.
class BarrierDropper {
public:
  explicit BarrierDropper(int target) : target_(target) {}

  StmtPtr drop(const StmtPtr& stmt) {
    if (stmt->as<Barrier>()) return seen_++ == target_ ? std::make_shared<Block>(std::vector<StmtPtr>{}) : stmt;
    if (const auto* block = stmt->as<Block>()) {
      std::vector<StmtPtr> stmts;
      for (const StmtPtr& inner : block->stmts) stmts.push_back(drop(inner));
      return std::make_shared<Block>(stmts);
    }
    if (const auto* loop = stmt->as<For>())
      return std::make_shared<For>(loop->var, loop->begin, loop->end, loop->step, drop(loop->body), loop->unroll, loop->rolled);
    if (const auto* branch = stmt->as<If>()) return std::make_shared<If>(branch->condition, drop(branch->body));
    if (const auto* aligned = stmt->as<IfAligned>()) {
      StmtPtr vectorized = drop(aligned->aligned);  // first, as it is printed first
      return std::make_shared<IfAligned>(aligned->addresses, aligned->bytes, aligned->condition, vectorized,
                                         drop(aligned->otherwise));
    }
    return stmt;
  }

  int seen() const { return seen_; }

private:
  int target_;
  int seen_ = 0;
};

}  // namespace

Program placeBarriers(const Program& program, std::optional<int> dropBarrier) {
  Program placed = program;
  for (Function& function : placed.functions) {
    Accesses pending;
    function.body = BarrierPlacement(*function.body).place(function.body, pending);
  }
  if (!dropBarrier) return placed;
  BarrierDropper dropper(*dropBarrier);
  for (Function& function : placed.functions) function.body = dropper.drop(function.body);
  if (*dropBarrier < 0 || *dropBarrier >= dropper.seen())
    throw UsageError(fmt::format("cannot drop barrier {} of {}: its kernels have {} barrier(s)", *dropBarrier,
                                 program.source.instanceName(), dropper.seen()));
  return placed;
}

}  // namespace emmy::kernel
