// Applying a checked schedule to one nest (applySchedule in apply_schedule.h), shared by the files that
// build it: apply_schedule.cpp (the nest's loops, its core and its names) and primitives/*.cpp, where
// each primitive's application sits next to its check (schedule_checker.h).
#pragma once

#include <algorithm>
#include <array>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "ir/tensor/build.h"
#include "ir/tensor/printer.h"
#include "ir/tensor/rewrite.h"
#include "ir/tensor/scalar_ops.h"
#include "ir/tensor/simplify.h"
#include "ir/tile/nest_parts.h"
#include "ir/tile/nodes.h"
#include "ir/tile/schedule_model.h"
#include "support/diagnostics.h"
#include "support/text.h"

namespace emmy::tile {

using namespace tensor;

inline ExprPtr i64(int64_t value) { return std::make_shared<IntImm>(DType::I64, value); }
inline ExprPtr var(const std::string& name) { return std::make_shared<AxisVar>(name); }
inline ExprPtr arithmetic(BinaryOp op, ExprPtr a, ExprPtr b) {
  return simplifyIndex(std::make_shared<Binary>(DType::I64, op, std::move(a), std::move(b)));
}
inline ExprPtr compare(BinaryOp op, ExprPtr a, ExprPtr b) { return std::make_shared<Binary>(DType::Bool, op, std::move(a), std::move(b)); }
inline ExprPtr conjunction(const std::vector<ExprPtr>& terms) {
  ExprPtr all;
  for (const ExprPtr& term : terms) all = all ? std::make_shared<Binary>(DType::Bool, BinaryOp::And, all, term) : term;
  return all;
}
inline StmtPtr block(std::vector<StmtPtr> stmts) { return std::make_shared<Block>(std::move(stmts)); }

inline ExprPtr substitute(const ExprPtr& expr, const std::map<std::string, ExprPtr>& values) {
  return simplifyIndex(rewrite(expr, [&](const Expr& node) -> ExprPtr {
    const auto* axis = node.as<AxisVar>();
    if (!axis) return nullptr;
    auto value = values.find(axis->name);
    return value == values.end() ? nullptr : value->second;
  }));
}

// The block size of a kernel that initialises an output.
constexpr int kInitThreads = 256;

// Thrown after a diagnostic to give up on the current nest.
struct NestAbandoned {};

// A stage's loops after its schedule.
struct FinalLoop {
  const ScheduledLoop* scheduled;
  std::string var;
  ExprPtr extent;
};

// A split that does not divide: `condition` (value < extent) holds in the iterations that exist.
struct Tail {
  std::string parent;
  bool isAxis;          // the parent is an axis of the stage
  bool reduction;
  ExprPtr condition;
  std::set<std::string> loops;  // the final loops it depends on
  // The innermost of them: a tail is tested at every loop, and until this one is open the test fails at
  // once (testing the whole set each time would make a chain of splits cubic).
  std::string innermost;
};

struct StageLoops {
  std::vector<FinalLoop> loops;
  std::map<std::string, ExprPtr> values;              // axes and intermediate loops, over final loop variables
  std::map<std::string, ExprPtr> extents;             // of every axis and loop
  std::map<std::string, std::set<std::string>> loopsOf;  // the final loops each value depends on
  std::map<std::string, size_t> innermostOf;             // the position of the innermost of them
  std::vector<Tail> tails;
  std::map<std::string, std::string> axisVars;        // each axis's Loop IR variable
  std::vector<std::string> axisOrder;                 // pure axes, then reduction axes
};

// Stage loops from `schedule`. `axisVars` names the Loop IR variable of each axis; `uniqueVar` names a
// final loop that is not an axis.
StageLoops buildStageLoops(const StageSchedule& schedule, const Stage& stage, std::map<std::string, std::string> axisVars,
                           const std::function<std::string(const std::string&)>& uniqueVar);

inline bool includes(const std::set<std::string>& open, const std::set<std::string>& needed) {
  return std::includes(open.begin(), open.end(), needed.begin(), needed.end());
}


class NestScheduler {
public:
  NestScheduler(const loop::Program& program, const loop::LoopNest& nest, const ScheduleModel& model, Diagnostics& diagnostics);
  TileNest run();
  std::optional<TileNest> outputInit() const;

private:
  // What has been emitted in the enclosing scopes: axis Lets and tails, by name.
  using Defined = std::set<std::string>;
  // The Lets of the root's axes that `open` completes, and the conditions of its tails (as Guards
  // around `rest`, or, with `clamp`, as clamps and masks).
  struct Ready {
    std::vector<StmtPtr> lets;
    std::vector<ExprPtr> guards;
  };
  struct PlacedCache {
    const CacheStage* cache;
    size_t position;
    std::vector<ExprPtr> base;     // the copy's first element, over the loops open at `position`
    std::vector<ExprPtr> baseRead;  // per dimension, the root's read index that starts the copy there
    ExprPtr padValue;               // what the copy holds outside the source (a padded read's), or null
    DType dtype;
    std::string stageVar;          // the variable of the loop it is cached at (double buffering)
    std::map<std::string, ExprPtr> atStart;  // the loops that vary within it, at 0
    const WholeMember* computes = nullptr;  // a stage computed there rather than copied
  };

  // ---- apply_schedule.cpp: positions, the root's loops and core, names ----
  [[noreturn]] void unsupported(const SourceLoc& loc, const std::string& message);
  // The root's `index_bits`, 32 without one.
  int narrowestIndexBits() const;
  [[noreturn]] void cannot(const SourceLoc& loc, const std::string& message);
  void refuseOtherWork(const std::function<void(const std::string&)>& refuse, const std::string& kind,
                       const std::string& staged) const;
  SourceLoc directiveAbout(const std::string& stage) const;
  SourceLoc directiveShaping(const std::string& stage) const;
  size_t positionAfter(const std::string& name) const;
  size_t positionDefining(const std::vector<std::string>& axes) const;
  std::set<std::string> openAt(size_t position) const;
  StmtPtr generate(size_t position, Defined defined, std::vector<ExprPtr> masks);
  StmtPtr inner(size_t position, const Defined& defined, const std::vector<ExprPtr>& masks);
  ExprPtr rootExpr(const ExprPtr& expr) const;
  StmtPtr core(const std::vector<ExprPtr>& masks);
  void collectTaken(const loop::Stmt& stmt);
  std::string uniqueVar(const std::string& base);

  // ---- primitives/loops.cpp: the axes' Lets and the ragged tails ----
  Ready emitReady(const StageLoops& loops, const std::set<std::string>& open, Defined& defined, bool cooperative,
                  std::vector<ExprPtr>& masks, bool overrunSafe = false);
  static StmtPtr wrap(const Ready& ready, StmtPtr rest);
  bool threadDependent(const Tail& tail, const StageLoops& loops) const;

  // ---- primitives/bind.cpp ----
  static Binding bindingOf(const FinalLoop& loop);
  static int dimensionOf(const ScheduledLoop& loop);
  StmtPtr loop(size_t position, const Defined& defined, const std::vector<ExprPtr>& masks);
  StmtPtr globalStore(StmtPtr store, const std::vector<ExprPtr>& masks) const;

  // ---- primitives/unroll_vectorize.cpp ----
  static int vectorWidthOf(const ScheduledLoop& loop);

  // ---- primitives/compute_at.cpp: members ----
  void placeMembers();
  void placeMembersOfResults();
  bool memberIsCooperative(const Member& member) const;
  ExprPtr memberExpr(const ExprPtr& expr, size_t position) const;
  // A member's loops as its schedule makes them (all of them its reduction loops: its other axes are the
  // root's), the positions of those in `loops.loops`, and the thread indices its partial results are
  // combined across.
  struct MemberLoops {
    StageLoops loops;
    std::vector<size_t> reductions;
    std::vector<int> combined;
  };
  MemberLoops memberLoops(const Member& placed);
  MemberLoops reductionLoopsOf(const Computation& computation, const std::vector<std::string>& axisVars, bool elementwise);
  StmtPtr memberLoopNest(const MemberLoops& loops, const std::string& stage, size_t k, size_t end, std::set<std::string> open,
                         Defined defined, const std::function<StmtPtr(const std::set<std::string>&, const Defined&)>& leaf);
  StmtPtr member(const Member& placed, size_t position, StmtPtr rest);
  const PlacedCache* rowCopyOf(const Load& read, size_t position, bool inUseOnly) const;
  // A member's term that the root computes again from the same element of a copy of whole rows (a
  // softmax's exp(x - m), in its sum and in its output): the member's pass writes it over the element,
  // and the root reads it there.
  struct KeptTerm {
    size_t member;
    const PlacedCache* cache;
    ExprPtr term;          // over the member's reduction variable
    std::string variable;  // that variable: the element's position in the row
  };
  void placeKeptTerms();
  const Load* keptInstance(const Expr& expr, const KeptTerm& kept) const;
  std::optional<size_t> onlineSumOf(size_t maxIndex, size_t position) const;
  StmtPtr onlineMembers(const Member& maxMember, const Member& sumMember, size_t position, StmtPtr rest);

  // ---- primitives/cache.cpp: copies ----
  void placeCaches();
  PlacedCache placeCopy(const CacheStage& cache, size_t position);
  std::vector<const Load*> rootReadsOf(const std::string& tensor) const;
  StmtPtr rowVariants(const PlacedCache& cache, const Defined& defined, const std::vector<ExprPtr>& masks);
  bool inUse(const PlacedCache& cache) const;
  ExprPtr elementsAtLaunch(const PlacedCache& placed) const;
  StmtPtr cacheCopy(const PlacedCache& placed, StmtPtr rest);
  static std::vector<Dim> cacheShape(const PlacedCache& placed);
  static bool single(const PlacedCache& placed);
  static int copyLanes(const PlacedCache& placed);
  static int readLanes(const PlacedCache& placed);
  static ExprPtr vectorStart(const PlacedCache& placed, const ExprPtr& vector, int lanes);
  static int64_t rowStep(const PlacedCache& placed, int lanes);
  static int64_t vectorOrderPeriod(const PlacedCache& placed, int lanes);
  static ExprPtr copiedValue(const PlacedCache& placed, const std::vector<ExprPtr>& global, const std::vector<ExprPtr>& inside);
  StmtPtr fill(const PlacedCache& placed, const std::vector<ExprPtr>& base, const ExprPtr& stage, bool async);
  int64_t vectorsInFlight(int64_t vectors) const;
  ExprPtr inBounds(const PlacedCache& placed, size_t d, const ExprPtr& index, const Shape& shape) const;
  StmtPtr computeElement(const PlacedCache& placed, const std::vector<ExprPtr>& local, const std::vector<ExprPtr>& global,
                         const Shape& shape);
  StmtPtr doubleBufferedCopies(const std::vector<const PlacedCache*>& caches, StmtPtr loop);
  StmtPtr prefetchNext(const std::vector<const PlacedCache*>& caches, size_t loop, StmtPtr rest);
  Shape sourceShape(const PlacedCache& placed) const;

  // ---- primitives/reduction.cpp: accumulators, combines, epilogue, online softmax ----
  void foldEpilogue(const Member& folded);
  void foldOnlineSoftmax();
  void foldRootTerm();
  void hoistWeights();
  ExprPtr rescaled(const ExprPtr& sum, const ExprPtr& term) const;
  std::vector<StmtPtr> maximumMoves() const;
  StmtPtr withStepLocals(std::vector<StmtPtr> stmts) const;
  StmtPtr onlineStep(StmtPtr rest);
  StmtPtr onlineTileStep(StmtPtr rest, const Defined& defined, const std::vector<ExprPtr>& masks);
  StmtPtr replayReductionLoops(size_t position, size_t end, Defined defined, std::vector<ExprPtr> masks,
                               const std::function<StmtPtr(const std::vector<ExprPtr>&)>& leaf);
  void placeOnlineSoftmax();
  void placeAccumulator();
  ExprPtr offsetWithin(const ExprPtr& index, const std::map<std::string, ExprPtr>& atStart) const;
  // The value of each of the root's Loop IR variables over the final loops, those in `atStart` set there.
  std::map<std::string, ExprPtr> rootAxisValues(const std::map<std::string, ExprPtr>& atStart = {}) const;
  bool cooperativeFrom(size_t position) const;
  bool overrunSafe(size_t position) const;
  StmtPtr reductionRegion(size_t position, const Defined& defined, const std::vector<ExprPtr>& masks);
  std::vector<std::pair<ExprPtr, ReduceOp>> reductionTerms() const;
  struct MaskedTiles {
    ExprPtr useful, whole;
  };
  std::optional<MaskedTiles> maskedTiles(size_t position) const;
  ExprPtr loopEnd(size_t position) const;
  StmtPtr unmaskedBody(size_t position, const Defined& defined, const std::vector<ExprPtr>& masks);
  StmtPtr replayPureLoops(size_t start, size_t position, Defined defined, std::vector<ExprPtr> masks,
                          const std::function<StmtPtr(const std::vector<ExprPtr>&)>& leaf);

  // ---- primitives/mma.cpp: the tensor cores ----
  void placeMatrixProduct();
  StmtPtr matrixProduct();

  // ---- primitives/scan.cpp: the block-level scan ----
  void placePrefixScan();
  StmtPtr prefixScan();

  const loop::Program& program_;
  const Kernel& kernel_;
  const loop::LoopNest& nest_;
  const ScheduleModel& model_;
  Diagnostics& diagnostics_;
  const Stage* root_ = nullptr;
  Stage rootWithReduction_;                  // the root with the reduction it applies its expression to
  std::shared_ptr<loop::Store> epilogueStore_;  // that root's store of each result
  std::optional<OnlineSoftmax> online_;         // the softmax the root's reduction computes online
  std::shared_ptr<loop::Store> onlineUpdate_;   // the root's update, rescaled
  std::string nextMax_, rescale_;               // the online step's locals
  size_t onlinePosition_ = 0;                   // where it runs: inside the last reduction loop
  std::optional<size_t> onlineTilePosition_;    // where the maximum moves, once per tile: before the tile's loops
  std::vector<std::pair<std::string, ExprPtr>> weights_;  // the exponentials the step computes once, and their locals
  std::map<const PlacedCache*, bool> wholeRowsInUse_;  // in the variant being built: where rows fit
  std::map<std::string, bool> rowsFit_;                // the tests of the variants it is inside, and their sides
  NestParts parts_;
  StageLoops root_loops_;
  std::array<int, 3> threads_{1, 1, 1};
  std::vector<std::optional<size_t>> memberPositions_;  // none: computed only before the results' stores
  std::vector<size_t> membersOfResults_;                // those computed there, the last member first
  std::vector<PlacedCache> caches_;
  std::vector<KeptTerm> keptTerms_;
  std::deque<CacheStage> computedCopies_;  // what stages computed at a root loop copy (caches_ points into it)
  std::vector<const PlacedCache*> activeCaches_;
  std::optional<size_t> ownCachePosition_;
  MemoryScope accumulatorMemory_ = MemoryScope::Registers;
  size_t accumulatorPosition_ = 0;
  bool accumulatorOpen_ = false;
  bool cooperative_ = false;
  bool atomic_ = false;                 // the root's partial results are combined by atomics in its output
  std::set<int> atomicDimensions_;      // the thread indices whose partial results are combined so
  std::vector<int> combineDimensions_;  // the thread indices the root's partial results are combined across
  std::string accumulator_;
  std::vector<Dim> accumulatorShape_;
  std::vector<ExprPtr> accumulatorIndex_;
  std::set<int> threadBound_;  // thread dimensions enclosing loops of the root take
  std::set<std::string> taken_;
  const Stage* contraction_ = nullptr;           // the stage whose reduction the root computes
  std::optional<size_t> productPosition_;    // with `mma`: where the loops it takes begin
  std::optional<size_t> scanPosition_;       // with `scan`: where the two loops it takes begin
};

}  // namespace emmy::tile
