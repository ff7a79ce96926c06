// The default policy: what a kernel's schedule leaves open, written as directives of section 5 of the
// language ("partial schedules are filled by the default policy, consistently with the directives
// given"; "no schedule: the compiler picks a default schedule"). Its directives are checked and applied
// like the kernel's own, so whatever the default does a schedule can say, and `emmy build --emit
// schedule` prints it (a copy of the file with that schedule builds the same CUDA).
//
// A nest that no directive names gets a whole schedule by the kind of work it does:
//  - elementwise (one stage, no reduction): its loops fused into one, bound to grid.x and vectorized in
//    16-byte groups;
//  - a contraction (`sum[k](a(i, k) * b(k, j))` and any elementwise epilogue): 64 x 64 tiles of the
//    output per block, 4 x 4 per thread in registers, over 16-deep slices of a and b copied into shared
//    memory;
//  - any other, a row kernel: the root's loops above its members (all its pure loops, for a reduction
//    without members) fused into rows, one block per row; the loops below the rows and each reduction's
//    loops fused.
// Then every nest gets what its schedule lacks: a loop bound to blocks (the root's outermost, in a nest
// the schedule names), and threads: the root's innermost free pure loop (else its reduction loop) and
// each member's reduction loop split over the block's threads, combined across them.
//
// The block's size, the rows per block and the vector group are params the policy declares
// (`ROOT_threads`, `ROOT_rows`, `ROOT_vector`), so that `-D` sets them and `emmy tune` searches them. By
// default a row kernel's lanes are the fewest warps that cover its longest loop over threads, or 256
// threads when that length is not a constant; short rows go several to a block, 256 threads in all.
#pragma once

#include <vector>

#include "ir/loop/nodes.h"
#include "ir/tile/schedule_model.h"

namespace emmy::tile {

// Appends the default policy's directives to `program.source.schedule`, and the params they use to
// `params`, and returns the model of the completed schedule. `model` is the model of the kernel's own
// (legal) schedule. A `-D` value (program.source.paramValues) for one of the policy's params that is not
// one of its candidates is a UsageError.
ScheduleModel completeSchedule(loop::Program& program, const ScheduleModel& model,
                               std::vector<tensor::ScheduleParam>& params);

}  // namespace emmy::tile
