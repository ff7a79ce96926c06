// The default policy for what a kernel's schedule leaves open, as directives (section 5: "partial
// schedules are filled by the default policy, consistently with the directives given"). In every nest
// the schedule names:
//  - a root with no loop bound to blocks binds its outermost pure loop to block.x;
//  - a root with no loop bound to threads splits its innermost pure loop by the block's x size (or,
//    when nothing in the nest binds threads, by 256 or the loop's constant extent) and binds the lanes to
//    thread.x;
//  - a member whose reduction binds no thread does the same with its reduction loop, so that it is
//    combined across the block.
// The directives are appended to the kernel's own (and printed by --emit schedule, so that feeding the
// printed schedule back gives the same kernels).
#pragma once

#include <vector>

#include "ir/loop/nodes.h"
#include "ir/tile/schedule_model.h"

namespace emmy::tile {

std::vector<tensor::Directive> defaultDirectives(const loop::Program& program, const ScheduleModel& model);

}  // namespace emmy::tile
