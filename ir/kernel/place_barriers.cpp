// Kernel IR: barriers where shared memory needs them. Threads of a block share a shared buffer, so a
// read of it must wait for every write before it (read after write), and a write must wait for every
// read before it (write after read), across loop iterations too. An asynchronous copy writes when it
// starts (it may land at once) and again at every wait that may complete it: a read needs a barrier
// after the writing thread's wait, since only the wait makes the copy visible to the thread, and only a
// barrier after it to the others. Barriers go only where every thread of
// the block is, that is, outside any loop or condition that depends on the thread's index; such a
// thread-dependent statement counts as one access with everything it reads and writes.
//
// Accesses to a thread's own elements need no barrier between them: where two accesses' indices give
// every element the same owning thread (ownKey), only that thread touches it through either (a row's
// passes over its copy, one of which writes a term over the elements: keptTerms in ir/tile).
#include "ir/kernel/place_barriers.h"

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "ir/tensor/rewrite.h"
#include "support/diagnostics.h"

namespace emmy::kernel {

using namespace tensor;

namespace {

struct Accesses {
  // Per shared buffer, the keys of the threads' own elements it is accessed at ("": elements any thread
  // may touch).
  std::map<std::string, std::set<std::string>> reads, writes;
  // The buffers whose asynchronous copies a wait may complete, with the keys of the copies: written for
  // the reads after it (the copy's start already counted against the reads before it). A copy lands
  // for its own thread at the wait, so that the owner's reads need no barrier.
  std::map<std::string, std::set<std::string>> landed;
  // The buffers an asynchronous copy writes into: it is not ordered with any read before it, the
  // thread's own included, so it waits for every one.
  std::set<std::string> copiedInto;

  bool conflictsWith(const Accesses& later) const {
    // Accesses at one owner's elements are apart: each element is only ever its owner's.
    auto apart = [](const std::set<std::string>& a, const std::set<std::string>& b) {
      return a.size() == 1 && a == b && !a.begin()->empty();
    };
    for (const auto& [buffer, keys] : later.reads) {
      auto written = writes.find(buffer);
      auto copied = landed.find(buffer);
      if ((written != writes.end() && !apart(written->second, keys)) || (copied != landed.end() && !apart(copied->second, keys)))
        return true;
    }
    for (const auto& [buffer, keys] : later.writes)
      if (auto read = reads.find(buffer); read != reads.end() && !apart(read->second, keys)) return true;
    for (const std::string& buffer : later.copiedInto)
      if (reads.count(buffer)) return true;
    return false;
  }
  void add(const Accesses& other) {
    for (const auto& [buffer, keys] : other.reads) reads[buffer].insert(keys.begin(), keys.end());
    for (const auto& [buffer, keys] : other.writes) writes[buffer].insert(keys.begin(), keys.end());
    for (const auto& [buffer, keys] : other.landed) landed[buffer].insert(keys.begin(), keys.end());
    copiedInto.insert(other.copiedInto.begin(), other.copiedInto.end());
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
  BarrierPlacement(const Stmt& function, const std::array<int, 3>& blockThreads) : blockThreads_(blockThreads) {
    collectCopyTargets(function, copyTargets_);
  }

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
        noteLoop(*loop);
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
      if (const auto* load = node.as<Load>(); load && shared_.count(load->tensor))
        accesses.reads[load->tensor].insert(load->indices.size() == 1 ? ownKey(load->indices[0], 1) : "");
    });
  }

  // A loop from 0 by 1 runs its variable over [0, end): a constant extent, or one known at run time. A
  // thread-strided loop (from the thread's linear index, by the block's threads) runs it over that index
  // plus the threads times its trips (trips from 0, their number known at run time).
  void noteLoop(const For& loop) {
    const auto* begin = loop.begin->as<IntImm>();
    const auto* step = loop.step->as<IntImm>();
    const auto* end = loop.end->as<IntImm>();
    letValues_.erase(loop.var);
    loopExtents_.erase(loop.var);
    if (begin && step && begin->value == 0 && step->value == 1) {
      loopExtents_[loop.var] = end ? std::optional<int64_t>(end->value) : std::nullopt;
      return;
    }
    int64_t threads = int64_t{blockThreads_[0]} * blockThreads_[1] * blockThreads_[2];
    const auto* blockSize = loop.step->as<AxisVar>();
    bool byBlock = (step && step->value == threads) ||
                   (blockSize && blockSize->name == "blockDim.x" && blockThreads_[1] == 1 && blockThreads_[2] == 1);
    std::map<std::string, int64_t> terms;
    int64_t constant = 0;
    if (!byBlock || !linear(*loop.begin, 1, terms, constant) || constant != 0) return;
    for (const auto& [name, coefficient] : terms)
      if (!isThreadIndex(name)) return;
    std::string trips = loop.var + "#trips";
    loopExtents_[trips] = std::nullopt;
    letValues_[loop.var] = std::make_shared<Binary>(DType::I64, BinaryOp::Add, loop.begin,
                                                    std::make_shared<Binary>(DType::I64, BinaryOp::Mul, std::make_shared<AxisVar>(trips),
                                                                             std::make_shared<IntImm>(DType::I64, threads)));
  }

  // `scale` times `e` as a constant plus a sum of the thread's indices and of loop variables from 0, each
  // times a constant (into `terms`); false where `e` is not such a sum.
  bool linear(const Expr& e, int64_t scale, std::map<std::string, int64_t>& terms, int64_t& constant) const {
    if (const auto* imm = e.as<IntImm>()) return constant += scale * imm->value, true;
    if (const auto* var = e.as<AxisVar>()) {
      if (auto let = letValues_.find(var->name); let != letValues_.end()) return linear(*let->second, scale, terms, constant);
      if (!isThreadIndex(var->name) && !loopExtents_.count(var->name)) return false;
      return terms[var->name] += scale, true;
    }
    const auto* binary = e.as<Binary>();
    if (!binary) return false;
    switch (binary->op) {
      case BinaryOp::Add: return linear(*binary->lhs, scale, terms, constant) && linear(*binary->rhs, scale, terms, constant);
      case BinaryOp::Sub: return linear(*binary->lhs, scale, terms, constant) && linear(*binary->rhs, -scale, terms, constant);
      case BinaryOp::Mul:
        if (const auto* factor = binary->rhs->as<IntImm>()) return linear(*binary->lhs, scale * factor->value, terms, constant);
        if (const auto* factor = binary->lhs->as<IntImm>()) return linear(*binary->rhs, scale * factor->value, terms, constant);
        return false;
      default: return false;
    }
  }

  // Which thread owns the element `index` and the `lanes` after it, for an index that is a constant plus
  // terms (linear) with positive coefficients, each larger than the most the smaller ones reach, and with
  // every thread index of more than one thread among them: the terms' values, the thread's indices among
  // them, come back from the element, so that it is only ever that thread's. The key lists the offset
  // and the terms (loops unnamed): indices with one key give an element one owner. "" for other indices.
  std::string ownKey(const ExprPtr& index, int64_t lanes) const {
    std::map<std::string, int64_t> terms;
    int64_t constant = 0;
    if (!linear(*index, 1, terms, constant)) return "";
    struct Term {
      int64_t coefficient;
      std::optional<int64_t> extent;
      std::string thread;  // the thread index, or "" for a loop
    };
    std::vector<Term> sorted;
    if (lanes > 1) sorted.push_back({1, lanes, ""});
    for (const auto& [name, coefficient] : terms) {
      if (coefficient == 0) continue;
      if (coefficient < 0) return "";
      bool thread = isThreadIndex(name);
      sorted.push_back({coefficient, thread ? std::optional<int64_t>(blockThreads_[name.back() - 'x']) : loopExtents_.at(name),
                        thread ? name : ""});
    }
    for (int dimension = 0; dimension < 3; ++dimension)
      if (blockThreads_[dimension] > 1 && !terms.count(std::string("threadIdx.") + "xyz"[dimension])) return "";
    std::sort(sorted.begin(), sorted.end(), [](const Term& a, const Term& b) { return a.coefficient < b.coefficient; });
    int64_t reach = 0;  // the most the smaller terms add up to
    std::string key = std::to_string(constant);
    for (const Term& term : sorted) {
      if (term.coefficient <= reach) return "";
      if (&term != &sorted.back() && !term.extent) return "";
      reach += term.extent ? term.coefficient * (*term.extent - 1) : 0;
      key += fmt::format(" {}x{}{}", term.coefficient, term.extent ? std::to_string(*term.extent) : "?", term.thread);
    }
    return key;
  }

  void collect(const Stmt& stmt, Accesses& accesses) {
    dispatch(stmt, [&](const auto& node) {
      using Node = std::decay_t<decltype(node)>;
      if constexpr (std::is_same_v<Node, For>) {
        dependsOnThread(node);
        noteLoop(node);
        readsIn(node.begin, accesses), readsIn(node.end, accesses), readsIn(node.step, accesses);
        collect(*node.body, accesses);
      } else if constexpr (std::is_same_v<Node, Let>) {
        dependsOnThread(node);
        letValues_[node.var] = node.value;
        loopExtents_.erase(node.var);
        readsIn(node.value, accesses);
      } else if constexpr (std::is_same_v<Node, Declare>) {
        if (node.memory == Memory::Shared) shared_[node.buffer] = node.dtype;
      } else if constexpr (std::is_same_v<Node, Store>) {
        if (shared_.count(node.buffer)) accesses.writes[node.buffer].insert(node.index ? ownKey(node.index, 1) : "");
        if (node.index) readsIn(node.index, accesses);
        readsIn(node.value, accesses);
      } else if constexpr (std::is_same_v<Node, CopyAsync>) {
        // Written when it starts, and when a wait completes it (below).
        std::string key = ownKey(node.index, node.lanes);
        accesses.writes[node.buffer].insert(key);
        accesses.copiedInto.insert(node.buffer);
        copyKeys_[node.buffer].insert(key);
        readsIn(node.index, accesses), readsIn(node.sourceIndex, accesses), readsIn(node.condition, accesses);
        if (node.lanesInside) readsIn(node.lanesInside, accesses);
      } else if constexpr (std::is_same_v<Node, WaitForCopies>) {
        // Which groups it completes is not tracked: any of them, of any copy into the buffer so far (or of
        // one not met yet, whose key is not known).
        for (const std::string& buffer : copyTargets_) {
          auto keys = copyKeys_.find(buffer);
          accesses.landed[buffer] = keys != copyKeys_.end() ? keys->second : std::set<std::string>{""};
        }
      } else if constexpr (std::is_same_v<Node, LoadMatrix>) {
        accesses.reads[node.buffer].insert("");
        readsIn(node.element, accesses), readsIn(node.fragmentElement, accesses);
      } else if constexpr (std::is_same_v<Node, VectorLoad>) {
        if (shared_.count(node.buffer)) accesses.reads[node.buffer].insert(ownKey(node.element, lanesOf(node.buffer, node.bytes)));
        readsIn(node.element, accesses);
        if (node.localElement) readsIn(node.localElement, accesses);
      } else if constexpr (std::is_same_v<Node, VectorStore>) {
        if (shared_.count(node.buffer)) accesses.writes[node.buffer].insert(ownKey(node.element, lanesOf(node.buffer, node.bytes)));
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
    return !accesses.reads.empty() || !accesses.writes.empty() || !accesses.landed.empty() || !accesses.copiedInto.empty() ||
           declaresShared(stmt);
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

  int64_t lanesOf(const std::string& buffer, int bytes) const { return bytes / dtypeBytes(shared_.at(buffer)); }

  std::array<int, 3> blockThreads_;
  std::map<std::string, DType> shared_;  // shared buffers declared so far
  std::set<std::string> threadVars_;  // variables that depend on the thread's index
  std::map<std::string, ExprPtr> letValues_;
  std::map<std::string, std::optional<int64_t>> loopExtents_;  // loops from 0 by 1: their constant extents, or none
  std::map<std::string, std::set<std::string>> copyKeys_;  // the keys of the asynchronous copies into each buffer so far
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
    function.body = BarrierPlacement(*function.body, function.blockThreads).place(function.body, pending);
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
