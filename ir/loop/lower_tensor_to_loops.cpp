// Tensor IR -> Loop IR: the default fusion policy and the kernel boundaries.
//
//  1. Stages no output depends on are dropped.
//  2. An elementwise stage that is not an output is inlined into every read of it.
//  3. A reduction that is not an output, whose every read (after inlining) is by stages of one loop
//     nest and indexes exactly that nest's leading k loops (k >= 1), is computed inside loop k of the
//     nest, into a local buffer: a row reduction feeding work over the same rows (softmax, layernorm).
//  4. Every other stage is the root of a loop nest of its own: one CUDA kernel, storing to global
//     memory (an output, or a temporary between kernels).
//  5. An elementwise output whose nest computes nothing else, over the same extents and of elements of
//     the same size as a later such output, reading only inputs and stages stored before that output's nest, and read by no stage,
//     is stored beside it, element by element, in its nest (a *companion*): one kernel reads their
//     common inputs once (gelu.emmy's exact and tanh forms). So does `compute O at R.a` for an output
//     O; without it, a schedule that names O keeps O's own kernel.
// A `root S` directive of the kernel's schedule makes S a root whatever 2 and 3 would do. A `compute S
// at T.a` directive for a stage that 2 and 3 would not compute in T's nest makes it a **whole** member
// of the nest of T (a root): in Loop IR, computed whole into a local buffer before the root's loops,
// for Tile IR to compute, per iteration of loop a, only the part T reads there.
#include "ir/loop/lower_tensor_to_loops.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "ir/tensor/build.h"
#include "ir/tensor/rewrite.h"
#include "ir/tensor/scalar_ops.h"
#include "support/diagnostics.h"

namespace emmy::loop {

using namespace tensor;

namespace {

const Directive* directiveFor(const Kernel& kernel, const std::string& name, DirectiveKind kind) {
  for (const Directive& directive : kernel.schedule)
    if (directive.kind == kind && directive.stage.text == name) return &directive;
  return nullptr;
}

bool placedAtRoot(const Kernel& kernel, const std::string& name) {
  return directiveFor(kernel, name, DirectiveKind::Root) != nullptr;
}

ExprPtr replaceAxes(const ExprPtr& expr, const std::map<std::string, ExprPtr>& replacements) {
  return rewrite(expr, [&](const Expr& node) -> ExprPtr {
    if (const auto* axis = node.as<AxisVar>())
      if (auto it = replacements.find(axis->name); it != replacements.end()) return it->second;
    return nullptr;
  });
}

// 0 <= index[k] < extent[k] for every k, as one bool expression.
ExprPtr inBounds(const std::vector<ExprPtr>& indices, const std::vector<Axis>& axes) {
  ExprPtr all;
  for (size_t k = 0; k < indices.size(); ++k) {
    ExprPtr low = std::make_shared<Binary>(DType::Bool, BinaryOp::Ge, indices[k], std::make_shared<IntImm>(DType::I64, 0));
    ExprPtr high = std::make_shared<Binary>(DType::Bool, BinaryOp::Lt, indices[k], dimValue(axes[k].extent));
    ExprPtr both = std::make_shared<Binary>(DType::Bool, BinaryOp::And, low, high);
    all = all ? std::make_shared<Binary>(DType::Bool, BinaryOp::And, all, both) : both;
  }
  return all;
}

// A stage that survives inlining, with its body rewritten.
struct ComputeStage {
  const Stage* stage;
  ExprPtr body;
};

// Step 2: every read of an inlined stage becomes its expression at the read's indices. An elementwise
// stage that `compute S at T.a` places is computed for T, and inlined into every other reader (into a
// stage inlined into T too, where it is expanded last, in every computed stage but T).
std::vector<ComputeStage> inlineElementwise(const Kernel& kernel, const std::vector<const Stage*>& stages) {
  using Bodies = std::map<std::string, std::pair<const Stage*, ExprPtr>>;  // name -> (stage, rewritten body)
  Bodies inlined, placed;
  // `expr` with the reads of `producers` replaced by their bodies, but for those placed in `consumer`.
  std::function<ExprPtr(const ExprPtr&, const Bodies&, const std::string&)> expand = [&](const ExprPtr& expr,
                                                                                         const Bodies& producers,
                                                                                         const std::string& consumer) {
    return rewrite(expr, [&](const Expr& node) -> ExprPtr {
      const auto* load = node.as<Load>();
      if (!load) return nullptr;
      std::vector<ExprPtr> indices;
      for (const ExprPtr& index : load->indices) indices.push_back(expand(index, producers, consumer));
      ExprPtr pad = load->padValue ? expand(load->padValue, producers, consumer) : nullptr;
      auto it = producers.find(load->tensor);
      const Directive* computeAt = directiveFor(kernel, load->tensor, DirectiveKind::ComputeAt);
      if (it == producers.end() || (computeAt && computeAt->atStage.text == consumer))
        return std::make_shared<Load>(load->dtype, load->tensor, indices, pad);
      const auto& [producer, producerBody] = it->second;
      std::map<std::string, ExprPtr> at;
      for (size_t k = 0; k < indices.size(); ++k) at[producer->axes[k].name] = indices[k];
      ExprPtr value = replaceAxes(producerBody, at);
      if (&producers == &placed) value = expand(value, producers, consumer);  // it may read other placed stages
      return pad ? std::make_shared<Select>(inBounds(indices, producer->axes), value, pad) : value;
    });
  };
  std::vector<ComputeStage> computed;
  for (const Stage* stage : stages) {
    ExprPtr body = expand(stage->body, inlined, "");
    bool elementwise = !kernel.isOutput(stage->name) && !stage->reduction && !placedAtRoot(kernel, stage->name);
    bool computedAt = directiveFor(kernel, stage->name, DirectiveKind::ComputeAt) != nullptr;
    if (elementwise && !computedAt) {
      inlined[stage->name] = {stage, body};
      continue;
    }
    if (elementwise) placed[stage->name] = {stage, body};
    computed.push_back({stage, body});
  }
  for (ComputeStage& stage : computed) stage.body = expand(stage.body, placed, stage.stage->name);
  return computed;
}

// Step 3: where each computed stage goes. A root has depth = its rank; a member of a root's nest is
// computed inside the root's loop `depth`.
struct Placement {
  std::string root;
  size_t depth;
  bool whole = false;      // computed whole before the root's loops (`compute ... at`)
  bool companion = false;  // an output stored beside the root's store (step 5)
};

// True when every read of `producer` in `body` is producer[a0, ..., a(k-1)] with a the axes named by
// `leading` (a stage's own axes, which the nest identifies with the root's leading loops).
bool readsOnlyLeadingRow(const Expr& body, const std::string& producer, const std::vector<Axis>& leading, size_t k) {
  bool ok = true;
  forEachNode(body, [&](const Expr& node) {
    const auto* load = node.as<Load>();
    if (!load || load->tensor != producer) return;
    if (load->padValue || load->indices.size() != k || leading.size() < k) {
      ok = false;
      return;
    }
    for (size_t d = 0; d < k; ++d) {
      const auto* axis = load->indices[d]->as<AxisVar>();
      if (!axis || axis->name != leading[d].name) ok = false;
    }
  });
  return ok;
}

std::map<std::string, Placement> placeStages(const Kernel& kernel, const std::vector<ComputeStage>& computed) {
  std::map<std::string, Placement> placement;
  for (auto it = computed.rbegin(); it != computed.rend(); ++it) {
    const Stage& stage = *it->stage;
    size_t rank = stage.axes.size();
    placement[stage.name] = Placement{stage.name, rank};
    if (kernel.isOutput(stage.name) || !stage.reduction || rank == 0 || placedAtRoot(kernel, stage.name)) continue;
    std::set<std::string> roots;
    bool fusable = true;
    for (const ComputeStage& user : computed) {
      if (!tensorsRead(*user.body).count(stage.name)) continue;
      const Placement& where = placement.at(user.stage->name);
      const Stage& root = *std::find_if(computed.begin(), computed.end(), [&](const ComputeStage& c) {
                            return c.stage->name == where.root;
                          })->stage;
      roots.insert(where.root);
      bool rowsMatch = rank <= where.depth && rank <= root.axes.size();
      for (size_t d = 0; rowsMatch && d < rank; ++d) rowsMatch = stage.axes[d].extent == root.axes[d].extent;
      fusable = fusable && rowsMatch && readsOnlyLeadingRow(*user.body, stage.name, user.stage->axes, rank);
    }
    if (fusable && roots.size() == 1) placement[stage.name] = Placement{*roots.begin(), rank};
  }
  for (auto it = computed.rbegin(); it != computed.rend(); ++it) {
    const Stage& stage = *it->stage;
    const Directive* computeAt = directiveFor(kernel, stage.name, DirectiveKind::ComputeAt);
    if (!computeAt || kernel.isOutput(stage.name) || placement.at(stage.name).root != stage.name) continue;
    // Computed whole before the root's loops, it cannot read what is computed inside them.
    bool readsMembers = false;
    for (const std::string& read : tensorsRead(*it->body))
      if (auto where = placement.find(read); where != placement.end() && where->second.root != read && !where->second.whole)
        readsMembers = true;
    auto consumer = placement.find(computeAt->atStage.text);
    // Other kernels that read it need it stored by a kernel of its own.
    bool readElsewhere = false;
    for (const ComputeStage& user : computed)
      if (user.stage != it->stage && tensorsRead(*user.body).count(stage.name) &&
          placement.at(user.stage->name).root != computeAt->atStage.text)
        readElsewhere = true;
    if (!readsMembers && !readElsewhere && consumer != placement.end() && consumer->second.root == computeAt->atStage.text)
      placement[stage.name] = Placement{consumer->second.root, 0, true};
  }
  return placement;
}

bool namedBySchedule(const Kernel& kernel, const std::string& name) {
  return std::any_of(kernel.schedule.begin(), kernel.schedule.end(), [&](const Directive& directive) {
    return directive.stage.text == name || directive.atStage.text == name;
  });
}

// Step 5: why `output` cannot be stored beside `root` in its nest, or nullopt when it can.
std::optional<std::string> whyNotCompanion(const Kernel& kernel, const std::vector<ComputeStage>& computed,
                                           const std::map<std::string, Placement>& placement, const std::string& output,
                                           const std::string& root) {
  auto position = [&](const std::string& name) {
    return std::find_if(computed.begin(), computed.end(), [&](const ComputeStage& c) { return c.stage->name == name; });
  };
  auto outputAt = position(output), rootAt = position(root);
  if (outputAt == computed.end() || rootAt == computed.end()) return fmt::format("no output depends on {}", output);
  const Stage& stage = *outputAt->stage;
  const Stage& with = *rootAt->stage;
  if (!kernel.isOutput(root)) return fmt::format("{} is not an output", root);
  if (output == root) return fmt::format("{} is {} itself", root, output);
  for (const Stage* one : {&stage, &with})
    if (one->reduction) return fmt::format("{} is a reduction; an output is stored beside an elementwise output", one->name);
  if (placedAtRoot(kernel, output)) return fmt::format("root {} gives it a kernel of its own", output);
  if (const Directive* computeAt = directiveFor(kernel, root, DirectiveKind::ComputeAt); computeAt && kernel.isOutput(root))
    return fmt::format("{} is computed at {} itself", root, computeAt->atStage.text);
  bool sameExtents = stage.axes.size() == with.axes.size();
  for (size_t d = 0; sameExtents && d < stage.axes.size(); ++d) sameExtents = stage.axes[d].extent == with.axes[d].extent;
  if (dtypeBytes(stage.dtype) != dtypeBytes(with.dtype))
    return fmt::format("{} is {} and {} is {}, and an output is stored beside one of elements of its size (a vector "
                       "group is one 16-byte access of each)", output, dtypeName(stage.dtype), root, dtypeName(with.dtype));
  if (!sameExtents)
    return fmt::format("{} is {} and {} is {}, and an output is stored beside one of the same extents", output,
                       shapeToString(stage.shape()), root, shapeToString(with.shape()));
  for (const ComputeStage& user : computed)
    if (tensorsRead(*user.body).count(output)) return fmt::format("{} reads {}", user.stage->name, output);
  for (const auto& [name, where] : placement)
    if (name != where.root && !where.companion && (where.root == output || where.root == root))
      return fmt::format("{} is computed in the loops of {}", name, where.root);
  for (const std::string& read : tensorsRead(*outputAt->body))
    if (auto producer = position(read); producer != computed.end() && producer >= rootAt)
      return fmt::format("{} reads {}, which is stored after the kernel of {} starts", output, read, root);
  return std::nullopt;
}

// Step 5: each companion's root. Those `compute O at R` asks for first; then, last output first, each
// output no directive names beside the last later output that stays a root.
void placeCompanions(const Kernel& kernel, const std::vector<ComputeStage>& computed, std::map<std::string, Placement>& placement) {
  auto besides = [&](const ComputeStage& stage, const std::string& root) {
    placement[stage.stage->name] = Placement{root, stage.stage->axes.size(), false, true};
  };
  for (const ComputeStage& stage : computed)
    if (const Directive* computeAt = directiveFor(kernel, stage.stage->name, DirectiveKind::ComputeAt);
        computeAt && kernel.isOutput(stage.stage->name) &&
        !whyNotCompanion(kernel, computed, placement, stage.stage->name, computeAt->atStage.text))
      besides(stage, computeAt->atStage.text);
  for (auto it = computed.rbegin(); it != computed.rend(); ++it) {
    const std::string& output = it->stage->name;
    if (!kernel.isOutput(output) || placement.at(output).root != output || namedBySchedule(kernel, output)) continue;
    for (auto later = computed.rbegin(); later.base() != it.base(); ++later)
      if (placement.at(later->stage->name).root == later->stage->name &&
          !whyNotCompanion(kernel, computed, placement, output, later->stage->name)) {
        besides(*it, later->stage->name);
        break;
      }
  }
}

// Builds the loop nest of one root and the members placed in it.
class NestBuilder {
public:
  NestBuilder(const ComputeStage& root, std::vector<const ComputeStage*> members, std::set<std::string> whole,
              std::vector<const ComputeStage*> companions)
      : root_(root), members_(std::move(members)), companions_(std::move(companions)), whole_(std::move(whole)) {
    for (const Axis& axis : root.stage->axes) loopVars_.push_back(axis.name);
    for (const ComputeStage* member : members_)
      if (!whole_.count(member->stage->name)) local_.insert(member->stage->name);
  }

  StmtPtr build() { return level(0); }

private:
  // The statements at `depth`: the members placed there, then the loop over the root's axis `depth`
  // (or, below the last one, the companions' stores and the root's).
  StmtPtr level(size_t depth) {
    StmtPtr inner;
    const Stage& root = *root_.stage;
    if (depth == root.axes.size()) {
      std::vector<ExprPtr> index;
      for (const std::string& var : loopVars_) index.push_back(std::make_shared<AxisVar>(var));
      inner = compute(root_, root.name, index, loopVars_);
      if (!companions_.empty()) {
        std::vector<StmtPtr> stores;
        for (const ComputeStage* companion : companions_)
          stores.push_back(compute(*companion, companion->stage->name, index, loopVars_));
        stores.push_back(inner);
        inner = std::make_shared<Block>(stores);
      }
    } else {
      const Axis& axis = root.axes[depth];
      inner = std::make_shared<For>(loopVars_[depth], axis.extent, root.name, axis.name, level(depth + 1));
    }
    for (auto it = members_.rbegin(); it != members_.rend(); ++it) {
      const Stage& member = *(*it)->stage;
      if (whole_.count(member.name) || member.axes.size() != depth) continue;
      StmtPtr computeMember = compute(**it, member.name, {}, loopVars_);
      inner = std::make_shared<Allocate>(member.name, member.dtype, std::vector<Dim>{},
                                         std::make_shared<Block>(std::vector<StmtPtr>{computeMember, inner}));
    }
    if (depth == 0)
      for (auto it = members_.rbegin(); it != members_.rend(); ++it)
        if (whole_.count((*it)->stage->name)) inner = computeWhole(**it, inner);
    return inner;
  }

  // A whole member: every element, in loops over its own axes (named STAGE_AXIS), into a local buffer
  // of its shape that `inner` reads.
  StmtPtr computeWhole(const ComputeStage& member, StmtPtr inner) const {
    const Stage& stage = *member.stage;
    std::vector<std::string> vars;
    std::vector<ExprPtr> index;
    for (const Axis& axis : stage.axes) {
      vars.push_back(stage.name + "__" + axis.name);
      index.push_back(std::make_shared<AxisVar>(vars.back()));
    }
    StmtPtr element = compute(member, stage.name, index, vars);
    for (size_t d = stage.axes.size(); d-- > 0;)
      element = std::make_shared<For>(vars[d], stage.axes[d].extent, stage.name, stage.axes[d].name, element);
    return std::make_shared<Allocate>(stage.name, stage.dtype, stage.shape(),
                                      std::make_shared<Block>(std::vector<StmtPtr>{element, inner}));
  }

  // The body of `computed` in the nest: its axes are the loops `axisVars` (the root's leading loops, or
  // a whole member's own), and reads of members computed in place read their local buffer.
  ExprPtr bodyInNest(const ComputeStage& computed, const std::vector<std::string>& axisVars) const {
    std::map<std::string, ExprPtr> axes;
    for (size_t d = 0; d < computed.stage->axes.size(); ++d)
      axes[computed.stage->axes[d].name] = std::make_shared<AxisVar>(axisVars[d]);
    if (computed.stage->reduction)
      for (const Axis& axis : computed.stage->reduction->axes)
        axes[axis.name] = std::make_shared<AxisVar>(reductionVar(*computed.stage, axis));
    ExprPtr body = replaceAxes(computed.body, axes);
    return rewrite(body, [&](const Expr& node) -> ExprPtr {
      const auto* load = node.as<Load>();
      if (!load || !local_.count(load->tensor)) return nullptr;
      return std::make_shared<Load>(load->dtype, load->tensor, std::vector<ExprPtr>{});
    });
  }

  // A reduction variable named apart from the root's loops around it.
  std::string reductionVar(const Stage& stage, const Axis& axis) const {
    std::string name = axis.name;
    for (int k = 1; std::find(loopVars_.begin(), loopVars_.end(), name) != loopVars_.end(); ++k)
      name = fmt::format("{}_{}", axis.name, k);
    return name;
  }

  // target[index] = the stage's value; a reduction accumulates in a local buffer first.
  StmtPtr compute(const ComputeStage& computed, const std::string& target, std::vector<ExprPtr> index,
                  const std::vector<std::string>& axisVars) const {
    const Stage& stage = *computed.stage;
    ExprPtr body = bodyInNest(computed, axisVars);
    if (!stage.reduction) return std::make_shared<Store>(target, index, body);
    const Reduction& reduction = *stage.reduction;
    std::string accumulator = target + "__acc";
    ExprPtr current = std::make_shared<Load>(reduction.accumulator, accumulator, std::vector<ExprPtr>{});
    StmtPtr update = std::make_shared<Store>(
        accumulator, std::vector<ExprPtr>{},
        std::make_shared<Binary>(reduction.accumulator, reductionStep(reduction.op), current, body));
    for (auto axis = reduction.axes.rbegin(); axis != reduction.axes.rend(); ++axis)
      update = std::make_shared<For>(reductionVar(stage, *axis), axis->extent, stage.name, axis->name, update);
    ExprPtr result = current;
    if (reduction.op == ReduceOp::Mean) {
      Dim count = Dim::constant(1);
      for (const Axis& axis : reduction.axes) count = count * axis.extent;
      result = std::make_shared<Binary>(reduction.accumulator, BinaryOp::Div, current,
                                        castTo(dimValue(count), reduction.accumulator));
    }
    std::vector<StmtPtr> steps{
        std::make_shared<Store>(accumulator, std::vector<ExprPtr>{},
                                immediateOf(reductionIdentity(reduction.op, reduction.accumulator))),
        update, std::make_shared<Store>(target, index, castTo(result, stage.dtype))};
    return std::make_shared<Allocate>(accumulator, reduction.accumulator, std::vector<Dim>{},
                                      std::make_shared<Block>(steps));
  }

  const ComputeStage& root_;
  std::vector<const ComputeStage*> members_;
  std::vector<const ComputeStage*> companions_;
  std::vector<std::string> loopVars_;
  std::set<std::string> whole_;  // whole members
  std::set<std::string> local_;  // members computed in place, into rank-0 locals
};

}  // namespace

std::optional<std::string> whyNotStoredBeside(const Kernel& kernel, const std::string& output, const std::string& root) {
  std::vector<ComputeStage> computed = inlineElementwise(kernel, liveStages(kernel));
  return whyNotCompanion(kernel, computed, placeStages(kernel, computed), output, root);
}

Program lowerTensorToLoops(const Kernel& kernel) {
  Program program;
  program.source = kernel;
  std::vector<ComputeStage> computed = inlineElementwise(kernel, liveStages(kernel));
  std::map<std::string, Placement> placement = placeStages(kernel, computed);
  placeCompanions(kernel, computed, placement);
  for (const ComputeStage& stage : computed) {
    if (placement.at(stage.stage->name).root != stage.stage->name) continue;
    std::vector<const ComputeStage*> members, companions;
    std::set<std::string> whole;
    LoopNest nest;
    std::string variant = kernel.launchVariant.empty() ? "" : "__" + kernel.launchVariant;
    nest.name = fmt::format("{}{}__k{}", kernel.instanceName(), variant, program.kernels.size());
    for (const ComputeStage& other : computed) {
      if (&other == &stage || placement.at(other.stage->name).root != stage.stage->name) continue;
      (placement.at(other.stage->name).companion ? companions : members).push_back(&other);
      nest.stages.push_back(other.stage->name);
      if (placement.at(other.stage->name).whole) whole.insert(other.stage->name);
    }
    nest.stages.push_back(stage.stage->name);
    nest.body = NestBuilder(stage, members, whole, companions).build();
    program.kernels.push_back(std::move(nest));
    if (!kernel.isOutput(stage.stage->name))
      program.temporaries.push_back(Temporary{stage.stage->name, stage.stage->dtype, stage.stage->shape()});
  }
  return program;
}

}  // namespace emmy::loop
