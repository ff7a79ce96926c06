// The checker of a kernel's schedule (checkSchedule in schedule_model.h), shared by the files that
// check it: schedule_model.cpp (names, the dispatch of directives, the limits of a whole kernel) and
// primitives/*.cpp, where each primitive's check sits next to its application (nest_scheduler.h).
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "ir/tensor/printer.h"
#include "ir/tensor/rewrite.h"
#include "ir/tile/nest_parts.h"
#include "ir/tile/schedule_model.h"
#include "support/text.h"

namespace emmy::tile {

using namespace tensor;

// "a, b, c": the names of `loops`.
std::string loopNames(const std::vector<ScheduledLoop>& loops);

// An index as sum(coefficient * axis) + constant, when it is one; the constant under the name "".
std::optional<std::map<std::string, int64_t>> affineTerms(const Expr& e);

class ScheduleChecker {
public:
  ScheduleChecker(const loop::Program& program, Diagnostics& diagnostics);
  ScheduleModel run();

private:
  // ---- schedule_model.cpp: the dispatch, names ----
  bool aboutUncomputedStage(const Directive& d);
  void apply(const Directive& d);
  std::vector<std::string> stageNames() const;
  StageSchedule* findStage(const Name& name);
  CacheStage* findCache(const std::string& name);
  std::optional<size_t> findLoop(const StageSchedule& stage, const Name& name);
  std::pair<StageSchedule*, ScheduledLoop*> namedLoop(const Directive& d);
  bool freshLoopNames(const StageSchedule& stage, const std::vector<Name>& results);
  bool unmarked(const StageSchedule& stage, const ScheduledLoop& loop, const Directive& d, const Name& where);

  // ---- primitives/loops.cpp: split, tile, reorder, fuse ----
  bool roomForLoops(const StageSchedule& stage, size_t added, const Directive& d);
  static ScheduledLoop outerPart(const ScheduledLoop& loop, const std::string& name, int64_t factor);
  static ScheduledLoop innerPart(const ScheduledLoop& loop, const std::string& name, const tensor::Number& factor);
  bool positiveFactor(const Number& factor, const std::string& verb);
  void split(const Directive& d);
  void tile(const Directive& d);
  void reorder(const Directive& d);
  bool accumulatorsFit(const StageSchedule& stage, const std::vector<ScheduledLoop>& loops, const Directive& d);
  void fuse(const Directive& d);

  // ---- primitives/bind.cpp: bind, threads, index_bits, the blocks of a whole kernel ----
  void bind(const Directive& d);
  std::optional<std::string> whyNoAtomic(const StageSchedule& schedule) const;
  void threads(const Directive& d);
  void indexBits(const Directive& d);
  void checkIndexBitsOfRoots();
  void checkBlockLoopsOutermost(const StageSchedule& stage);
  void checkThreadsPerKernel();
  void checkGridKernels();
  SourceLoc lastThreadBind(const loop::LoopNest& nest) const;

  // ---- primitives/unroll_vectorize.cpp ----
  void unroll(const Directive& d);
  void vectorize(const Directive& d);
  void vectorizeGroups(const Directive& d);
  static std::vector<std::string> fusedAxes(const StageSchedule& stage, const std::string& name);
  bool readsAlongLastDimension(const Stage& stage, const std::string& axis) const;

  // ---- primitives/compute_at.cpp: compute ... at, inline, root ----
  std::set<std::string> readsOf(const Stage& stage) const;
  bool isOutput(const std::string& name) const;
  bool isInlinedByDefault(const Stage& stage) const;
  bool readThrough(const Stage& producer, const Stage& consumer) const;
  const loop::LoopNest* nestRootedAt(const std::string& stage) const;
  std::optional<std::string> whyNotComputedIn(const std::string& stage, const std::string& consumer) const;
  std::optional<std::string> computedWith(const std::string& source, const std::string& consumer) const;
  std::string legalPlaces(const std::string& stage);
  std::optional<std::string> readerCombinesInside(const std::string& stage, const StageSchedule& at, size_t loopAt) const;
  static Directive placement(DirectiveKind kind, const std::string& stage, const std::string& atStage, const std::string& atLoop);
  void place(const Directive& d);
  void placeBeside(StageSchedule& stage, const Directive& d);

  // ---- primitives/cache.cpp: cache, pad, double_buffer, and the copies compute ... at makes ----
  struct CopyFit {
    std::vector<int64_t> extents;  // one per dimension of the source
    CacheMemory memory = CacheMemory::Shared;
    bool wholeRows = false;
  };
  std::string legalCachePlaces(const Directive& d);
  void refitCopies();
  static size_t finalLoop(const StageSchedule& stage, const std::string& name);
  static std::vector<const ScheduledLoop*> varyingLoops(const StageSchedule& stage, size_t loopAt, CacheMemory memory);
  static CacheMemory memoryAt(const StageSchedule& at, size_t loopAt);
  std::optional<CopyFit> fitCopy(const Directive& d, const StageSchedule& at, size_t loopAt, bool report);
  static bool readsWhole(const Expr& index, const StageSchedule& stage, const std::vector<const ScheduledLoop*>& varying);
  std::vector<std::vector<ExprPtr>> readsOf(const Stage& stage, const std::string& source) const;
  void cache(const Directive& d);
  bool nameTaken(const std::string& name);
  void shapeCache(const Directive& d);
  void checkSharedMemory();

  // ---- primitives/mma.cpp ----
  void mma(const Directive& d);
  std::set<std::string> globalTensors() const;

  // ---- primitives/scan.cpp ----
  void scan(const Directive& d);

  const loop::Program& program_;
  const Kernel& kernel_;
  Diagnostics& diagnostics_;
  std::set<std::string> live_;           // the stages some output depends on
  std::set<std::string> skippedCaches_;  // of uncomputed stages; a callee's the caller rules out
  ScheduleModel model_;
  // The accepted `compute ... at` and `cache` directives (and each cache's name), sized again at the end.
  std::vector<std::pair<Directive, std::string>> copies_;
};

}  // namespace emmy::tile
