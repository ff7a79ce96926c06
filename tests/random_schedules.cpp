#include "random_schedules.h"

#include <algorithm>

#include <fmt/format.h>

namespace emmy::testing {

std::string randomMatmulSchedule(std::mt19937_64& random, const MatmulNames& names) {
  const std::string &C = names.C, &i = names.i, &j = names.j, &k = names.k;
  int64_t bm = pick<int64_t>(random, {8, 16, 32, 64}), bn = pick<int64_t>(random, {8, 16, 32, 64});
  int64_t tm = pick<int64_t>(random, {1, 2, 4}), tn = pick<int64_t>(random, {1, 2, 4});
  while ((bm / tm) * (bn / tn) > 1024) tm *= 2;
  int64_t bk = pick<int64_t>(random, {4, 8, 16});
  std::string s = fmt::format("schedule {} {{\n  tile {} ({}, {}) by ({}, {}) -> ({}o, {}o, {}i, {}i)\n", names.kernel, C, i, j,
                              bm, bn, i, j, i, j);
  s += coin(random) ? fmt::format("  bind {0}.{1}o to block.y\n  bind {0}.{2}o to block.x\n", C, i, j)
                    : fmt::format("  bind {0}.{1}o to block.x\n  bind {0}.{2}o to block.y\n", C, i, j);
  s += fmt::format("  tile {0} ({1}i, {2}i) by ({3}, {4}) -> ({1}t, {2}t, {1}r, {2}r)\n", C, i, j, tm, tn);
  s += fmt::format("  bind {0}.{1}t to thread.y\n  bind {0}.{2}t to thread.x\n", C, i, j);
  s += fmt::format("  split {0}.{1} by {2} -> ({1}o, {1}i)\n", C, k, bk);
  bool registerBlocked = coin(random);
  if (registerBlocked) {
    s += fmt::format("  reorder {0} ({1}o, {2}o, {1}t, {2}t, {3}o, {3}i, {1}r, {2}r)\n", C, i, j, k);
    if (coin(random))
      s += fmt::format("  cache {0} in {1} at {0}.{2}t\n", C, coin(random) ? "registers" : "shared", j);
    if (coin(random)) {
      s += fmt::format("  cache {0} in shared at {1}.{2}o -> {0}s\n", names.A, C, k);
      if (!coin(random)) s += fmt::format("  double_buffer {}s\n", names.A);
    }
    if (coin(random)) {
      s += fmt::format("  cache {0} in shared at {1}.{2}o\n  pad {0}_shared by {3}\n", names.B, C, k,
                       pick<int64_t>(random, {0, 1, 4}));
      if (coin(random)) s += fmt::format("  double_buffer {}_shared\n", names.B);
    }
  } else if (coin(random)) {
    s += fmt::format("  cache {} in registers at {}.{}o\n", names.A, C, k);
  }
  if (coin(random)) s += fmt::format("  unroll {}.{}i\n", C, k);
  if (coin(random)) s += fmt::format("  unroll {}.{}r\n", C, i);
  if (tn > 1 && coin(random)) s += fmt::format("  vectorize {}.{}r\n", C, j);
  return s + "}\n";
}

std::string randomRowSchedule(std::mt19937_64& random, const RowNames& names) {
  const std::string &root = names.root, &n = names.n, &d = names.d;
  int64_t rows = pick<int64_t>(random, {1, 1, 2, 4});
  int64_t lanes = pick<int64_t>(random, {8, 32, 64, 128, 256});
  std::string s = fmt::format("schedule {} {{\n", names.kernel);
  // The lanes as a param chosen at launch: two variants, each checked at sizes on both sides of the bound.
  std::string lanesText = std::to_string(lanes);
  if (!names.size.empty() && coin(random)) {
    int64_t longRows = pick<int64_t>(random, {8, 32, 64, 128, 256});
    s += fmt::format("  param LANES in [8, 32, 64, 128, 256] = {} if {} <= {} else {}\n", lanes, names.size,
                     pick<int64_t>(random, {1, 3, 40, 60}), longRows);
    lanes = std::max(lanes, longRows);  // (a warp's lanes only where both are)
    lanesText = "LANES";
  }
  std::string rowLoop = n;
  if (rows > 1) {
    s += fmt::format("  split {0}.{1} by {2} -> ({1}_block, {1}_row)\n  bind {0}.{1}_block to block.x\n"
                     "  bind {0}.{1}_row to thread.y\n", root, n, rows);
    rowLoop = n + "_row";
  } else {
    s += fmt::format("  bind {}.{} to block.x\n", root, n);
  }
  // d split across the lanes (after `outer`, the loops before them), in vectors where names.vector says.
  auto acrossLanes = [&](const std::string& stage, const std::string& outer, const std::string& scope) {
    if (names.vector == 1)
      return fmt::format("  split {0}.{1} by {2} -> ({1}_step, {1}_lane)\n  reorder {0} ({3}{1}_lane, {1}_step)\n"
                         "  bind {0}.{1}_lane to {4}.x\n", stage, d, lanesText, outer, scope);
    return fmt::format("  split {0}.{1} by {5} -> ({1}_vector, {1}_element)\n  split {0}.{1}_vector by {2} -> ({1}_step, {1}_lane)\n"
                       "  reorder {0} ({3}{1}_lane, {1}_step, {1}_element)\n  bind {0}.{1}_lane to {4}.x\n"
                       "  vectorize {0}.{1}_element\n", stage, d, lanesText, outer, scope, names.vector);
  };
  for (const std::string& member : names.members) {
    if (coin(random)) s += fmt::format("  compute {} at {}.{}\n", member, root, rowLoop);
    if (coin(random) || coin(random)) s += acrossLanes(member, "", lanes <= 32 && coin(random) ? "warp" : "thread");
  }
  if (coin(random)) s += acrossLanes(root, rowLoop + ", ", "thread");
  return s + "}\n";
}

std::string randomChainSchedule(std::mt19937_64& random, const ChainNames& names) {
  const std::string &y = names.y, &n = names.n, &d = names.d;
  std::string s = fmt::format("schedule {} {{\n", names.kernel);
  switch (random() % 3) {
    case 0: {
      int64_t threads = pick<int64_t>(random, {32, 100, 256});
      // The fused loop's name is never a directive word (`i` and `n` would make `in`).
      s += fmt::format("  fuse {0} ({1}, {2}) -> {1}{2}_fused\n  split {0}.{1}{2}_fused by {3} -> ({1}{2}_block, {1}{2}_thread)\n",
                       y, n, d, threads);
      s += fmt::format("  bind {0}.{1}{2}_block to block.x\n  bind {0}.{1}{2}_thread to thread.x\n", y, n, d);
      break;
    }
    case 1: {
      int64_t ty = pick<int64_t>(random, {1, 4, 8}), tx = pick<int64_t>(random, {16, 32, 64});
      s += fmt::format("  tile {0} ({1}, {2}) by ({3}, {4}) -> ({1}_out, {2}_out, {1}_in, {2}_in)\n", y, n, d, ty, tx);
      s += fmt::format("  bind {0}.{1}_out to block.y\n  bind {0}.{2}_out to block.x\n  bind {0}.{1}_in to thread.y\n"
                       "  bind {0}.{2}_in to thread.x\n", y, n, d);
      if (coin(random))
        return s + fmt::format("  compute {} at {}.{}_{}\n", names.t, y, d, pick<std::string>(random, {"out", "in"})) + "}\n";
      break;
    }
    default: {
      int64_t width = pick<int64_t>(random, {2, 4, 8});
      s += fmt::format("  split {0}.{1} by {2} -> ({1}_out, {1}_in)\n  split {0}.{1}_in by {3} -> ({1}_thread, {1}_vector)\n",
                       y, d, 32 * width, width);
      s += fmt::format("  bind {0}.{1} to block.x\n  bind {0}.{2}_thread to thread.x\n  vectorize {0}.{2}_vector\n", y, n, d);
      if (coin(random)) s += fmt::format("  reorder {0} ({1}, {2}_thread, {2}_out, {2}_vector)\n", y, n, d);
      break;
    }
  }
  if (coin(random)) s += fmt::format("  root {}\n", names.t);
  return s + "}\n";
}

}  // namespace emmy::testing
