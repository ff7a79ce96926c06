// The schedules of called kernels (section 3 of the language: "the callee's schedule applies to those
// stages under their new names; the caller's directives come after it and win"). The rules, with
// examples, are in docs/call_schedules.md; in short:
//  - a call brings its callee's schedule (itself composed from the callee's calls) with every stage and
//    cache renamed as the call renamed them;
//  - a result of the call that the caller does not output is computed where the caller computes it: in
//    the one elementwise stage that reads it element for element (its epilogue), which then takes its
//    directives, or else in a kernel of its own (`root`), as the callee alone would compute it;
//  - the caller's directives come last, and replace the callee's on the same target.
#include <set>
#include <utility>

#include "frontend/elaborator.h"
#include "ir/tensor/rewrite.h"

namespace emmy {

using namespace tensor;

namespace {

// A number of the callee's schedule, in the caller: a param chosen at launch by the callee's sizes tests the
// caller's sizes they are (D for D, or a renamed one), takes its value where they are constants, and its
// `else` value where they are products of sizes (which a case cannot test).
Number atCall(const Number& number, const std::map<std::string, Dim>& sizes) {
  if (!number.atLaunch) return number;
  auto inCaller = std::make_shared<LaunchParam>(*number.atLaunch);
  bool constant = true, renames = true;
  std::map<std::string, int64_t> constants;
  for (SizeCase& sizeCase : inCaller->cases) {
    const Dim& dim = sizes.at(sizeCase.size.text);
    constant = constant && dim.isConstant();
    if (dim.isConstant()) constants[sizeCase.size.text] = dim.factor;
    renames = renames && dim.factor == 1 && dim.sizes.size() == 1;
    if (renames) sizeCase.size.text = dim.sizes[0];
  }
  if (constant) return Number{number.atLaunch->valueAt(constants), number.loc, "", nullptr};
  if (!renames) return Number{number.atLaunch->otherwise, number.loc, "", nullptr};
  return Number{number.value, number.loc, number.param, inCaller};
}

}  // namespace

std::vector<Directive> KernelElaboration::calleeDirectives(const Kernel& instance, const std::string& prefix,
                                                           const std::map<std::string, std::string>& renamed,
                                                           const std::map<std::string, Dim>& sizes) {
  std::map<std::string, std::string> names = renamed;
  std::set<std::string> calleeCaches;
  std::vector<Directive> directives;
  for (Directive d : instance.schedule) {
    if (d.kind == DirectiveKind::Cache) {
      // Named as the callee alone would name it, then prefixed like the call's stages, so that two calls'
      // caches do not collide.
      std::string name = d.results.empty() ? defaultCacheName(d.stage.text, d.memory, [&](const std::string& taken) {
        return instance.findStage(taken) || instance.findInput(taken) || calleeCaches.count(taken);
      }) : d.results[0].text;
      calleeCaches.insert(name);
      names[name] = prefix + "__" + name;
      d.results = {Name{names[name], d.results.empty() ? d.loc : d.results[0].loc}};
    }
    for (Name* named : {&d.stage, &d.atStage})
      if (auto it = names.find(named->text); it != names.end()) named->text = it->second;
    for (Number& factor : d.factors) factor = atCall(factor, sizes);
    d.fromCallee = true;
    directives.push_back(std::move(d));
  }
  return directives;
}

namespace {

bool namesStage(const Directive& d, const std::string& stage) { return d.stage.text == stage || d.atStage.text == stage; }

bool makesLoops(const Directive& d) {
  return d.kind == DirectiveKind::Split || d.kind == DirectiveKind::Tile || d.kind == DirectiveKind::Fuse;
}

// The loops a directive names, as (stage, loop).
std::vector<std::pair<std::string, std::string>> loopsNamed(const Directive& d) {
  std::vector<std::pair<std::string, std::string>> loops;
  for (const Name& axis : d.axes) loops.emplace_back(d.stage.text, axis.text);
  if (!d.atStage.text.empty()) loops.emplace_back(d.atStage.text, d.atAxis.text);
  return loops;
}

// What a directive decides, as keys: a later directive replaces the earlier ones it shares a key with.
// Loops a later split, tile or fuse consumes are handled apart (every earlier directive naming them
// goes), since a loop can be cut in only one way.
std::vector<std::string> decides(const Directive& d) {
  const std::string& stage = d.stage.text;
  switch (d.kind) {
    case DirectiveKind::Split:
    case DirectiveKind::Tile:
    case DirectiveKind::Fuse: return {};
    case DirectiveKind::Reorder: return {"reorder " + stage};
    case DirectiveKind::Bind: return {"bind " + stage + "." + d.axes[0].text, "bind " + stage + " to " + hardwareIndexName(d.target)};
    case DirectiveKind::Inline:
    case DirectiveKind::ComputeAt:
    case DirectiveKind::Root: return {"place " + stage};
    case DirectiveKind::Cache: return {"cache " + stage + " at " + d.atStage.text};
    case DirectiveKind::Threads: return {"threads " + stage};
    case DirectiveKind::IndexBits: return {"index_bits " + stage};
    case DirectiveKind::Mma: return {"mma " + stage};
    case DirectiveKind::Scan: return {"scan " + stage};
    case DirectiveKind::Vectorize:
    case DirectiveKind::Unroll:
    case DirectiveKind::Pad:
    case DirectiveKind::DoubleBuffer: {
      std::string key = std::string(directiveWord(d.kind)) + " " + stage;
      return {d.axes.empty() ? key : key + "." + d.axes[0].text};
    }
  }
  return {};
}

// The loops a split, tile or fuse cuts, as (stage, loops in order of name).
std::pair<std::string, std::set<std::string>> cutLoops(const Directive& d) {
  std::set<std::string> loops;
  for (const Name& axis : d.axes) loops.insert(axis.text);
  return {d.stage.text, loops};
}

// `earlier` then `later`, where later wins: an earlier directive is dropped when a later one decides the
// same thing, cuts a loop it names, or inlines a stage it names, or when it caches one of `uncached`, and
// so is every earlier directive that names a loop or cache only a dropped one made. A later split, tile
// or fuse that cuts the same loops as an earlier one takes its place, so that what follows it there
// still finds the loops it names.
std::vector<Directive> overridden(const std::vector<Directive>& earlier, const std::vector<Directive>& later,
                                  const std::set<std::string>& uncached) {
  std::set<std::string> decided, inlined;
  std::set<std::pair<std::string, std::string>> cut;
  std::map<std::pair<std::string, std::set<std::string>>, size_t> cuts;  // -> index in later
  for (size_t k = 0; k < later.size(); ++k) {
    const Directive& d = later[k];
    for (std::string& key : decides(d)) decided.insert(std::move(key));
    if (makesLoops(d)) {
      for (const Name& axis : d.axes) cut.emplace(d.stage.text, axis.text);
      cuts.emplace(cutLoops(d), k);
    }
    if (d.kind == DirectiveKind::Inline) inlined.insert(d.stage.text);
  }
  std::set<std::pair<std::string, std::string>> danglingLoops;
  std::set<std::string> danglingCaches;
  std::set<size_t> movedUp;  // later directives placed where the earlier ones they replace were
  std::vector<Directive> kept;
  for (const Directive& d : earlier) {
    const Directive* replacement = nullptr;
    if (auto same = makesLoops(d) ? cuts.find(cutLoops(d)) : cuts.end(); same != cuts.end() && !movedUp.count(same->second)) {
      replacement = &later[same->second];
      movedUp.insert(same->second);
    }
    bool dropped = replacement != nullptr || (d.kind == DirectiveKind::Cache && uncached.count(d.stage.text));
    for (const std::string& key : decides(d)) dropped = dropped || decided.count(key);
    for (const auto& loop : loopsNamed(d)) dropped = dropped || cut.count(loop) || danglingLoops.count(loop);
    for (const std::string& stage : {d.stage.text, d.atStage.text})
      dropped = dropped || inlined.count(stage) || danglingCaches.count(stage);
    for (const Name& result : d.results) {
      if (d.kind == DirectiveKind::Cache) {
        if (dropped) danglingCaches.insert(result.text);
      } else if (dropped) {
        danglingLoops.emplace(d.stage.text, result.text);
      } else {
        danglingLoops.erase({d.stage.text, result.text});
      }
    }
    if (replacement) {
      for (const Name& result : replacement->results) danglingLoops.erase({d.stage.text, result.text});
      kept.push_back(*replacement);
    } else if (!dropped) {
      kept.push_back(d);
    }
  }
  for (size_t k = 0; k < later.size(); ++k)
    if (!movedUp.count(k)) kept.push_back(later[k]);
  return kept;
}

bool readsAtOwnAxes(const Load& load, const Stage& reader) {
  if (load.indices.size() != reader.axes.size()) return false;
  for (size_t k = 0; k < load.indices.size(); ++k) {
    const auto* axis = load.indices[k]->as<AxisVar>();
    if (!axis || axis->name != reader.axes[k].name) return false;
  }
  return true;
}

}  // namespace

std::vector<Directive> KernelElaboration::composeSchedule(const std::vector<Directive>& own) const {
  std::set<std::string> carriers;  // stages that carry a call's directives
  for (const CalleeSchedule& call : calleeSchedules) carriers.insert(call.results.begin(), call.results.end());
  auto isOutput = [&](const std::string& name) {
    for (const TensorParam& output : kernel.outputs)
      if (output.name == name) return true;
    return false;
  };
  // The one stage that reads `carrier`, when it is elementwise, reads it element for element and reads no
  // other carrier: the default policy computes `carrier` there (inlined, or as the reduction the stage
  // applies its expression to), so its directives apply to that stage.
  auto epilogueOf = [&](const Stage& carrier) -> const Stage* {
    const Stage* consumer = nullptr;
    for (const Stage& stage : kernel.stages) {
      bool reads = false, elementwise = !stage.reduction && stage.shape() == carrier.shape();
      std::set<std::string> carriersRead;
      forEachNode(*stage.body, [&](const Expr& node) {
        const auto* load = node.as<Load>();
        if (!load) return;
        if (carriers.count(load->tensor)) carriersRead.insert(load->tensor);
        if (load->tensor != carrier.name) return;
        reads = true;
        elementwise = elementwise && readsAtOwnAxes(*load, stage);
      });
      if (!reads) continue;
      if (consumer || !elementwise || carriersRead.size() != 1) return nullptr;
      consumer = &stage;
    }
    return consumer;
  };

  std::vector<Directive> inherited;
  for (const CalleeSchedule& call : calleeSchedules) {
    std::vector<Directive> directives = call.directives;
    for (const std::string& result : call.results) {
      std::string at = result;
      for (;;) {
        auto naming = std::find_if(directives.begin(), directives.end(), [&](const Directive& d) { return namesStage(d, at); });
        if (naming == directives.end() || isOutput(at)) break;
        const Stage& carrier = *kernel.findStage(at);
        const Stage* consumer = epilogueOf(carrier);
        if (!consumer) {
          Directive root;
          root.kind = DirectiveKind::Root;
          root.loc = naming->loc;
          root.stage = Name{at, naming->loc};
          directives.push_back(root);
          break;
        }
        std::map<std::string, std::string> axes;
        for (size_t k = 0; k < carrier.axes.size(); ++k) axes[carrier.axes[k].name] = consumer->axes[k].name;
        auto moveAxis = [&](Name& axis) {
          if (auto it = axes.find(axis.text); it != axes.end()) axis.text = it->second;
        };
        for (Directive& d : directives) {
          if (d.stage.text == at) {
            d.stage.text = consumer->name;
            for (Name& axis : d.axes) moveAxis(axis);
          }
          if (d.atStage.text == at) {
            d.atStage.text = consumer->name;
            moveAxis(d.atAxis);
          }
        }
        carriers.erase(at);
        carriers.insert(consumer->name);
        at = consumer->name;
      }
    }
    inherited.insert(inherited.end(), directives.begin(), directives.end());
  }
  // A callee's cache of its input copies a tensor in memory; in the caller, that input may be a stage
  // computed in the same kernel (an argument expression), which is not copied: the cache is dropped
  // unless the stage is stored by a kernel of its own.
  std::set<std::string> stored;
  for (const TensorParam& output : kernel.outputs) stored.insert(output.name);
  for (const std::vector<Directive>* directives : {&std::as_const(inherited), &own})
    for (const Directive& d : *directives)
      if (d.kind == DirectiveKind::Root) stored.insert(d.stage.text);
  std::set<std::string> uncached;
  for (const Stage& stage : kernel.stages)
    if (!stored.count(stage.name)) uncached.insert(stage.name);
  return overridden(inherited, own, uncached);
}

}  // namespace emmy
