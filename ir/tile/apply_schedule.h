// Loop IR -> Tile IR following a kernel's schedule (section 5 of the language), as checked into a
// ScheduleModel. A nest that no directive names gets the default schedule; in a named nest, what the
// directives leave open is filled by defaults (the root's outermost loop runs across blocks when no loop
// is bound to blocks). Combinations the lowering cannot build yet are diagnostics on the directive that
// asks for them.
#pragma once

#include "ir/loop/nodes.h"
#include "ir/tile/nodes.h"
#include "ir/tile/schedule_model.h"
#include "support/diagnostics.h"

namespace emmy::tile {

Program applySchedule(const loop::Program& program, const ScheduleModel& model, Diagnostics& diagnostics);

}  // namespace emmy::tile
