// Schedules drawn at random from the legal space of three kernel shapes, for any names of the kernel,
// its stages and its loops: the matrix product, the row reduction feeding an elementwise row, and the
// elementwise chain. Shared by the random-schedule test of schedule_tests.cpp and the program
// generator (program_generator.h).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace emmy::testing {

template <typename T>
T pick(std::mt19937_64& random, const std::vector<T>& choices) {
  return choices[random() % choices.size()];
}
inline bool coin(std::mt19937_64& random) { return random() % 2 == 0; }

// `C[i, j] = sum[k](A[i, k] * B[k, j])`, possibly through an epilogue stage named C whose loops are the
// product's i, j and k.
struct MatmulNames {
  std::string kernel = "matmul", C = "C", A = "A", B = "B", i = "i", j = "j", k = "k";
};
std::string randomMatmulSchedule(std::mt19937_64& random, const MatmulNames& names = {});

// Row reductions `members` over the column loop `d` of rows `n`, read by the elementwise stage `root`
// over (n, d). Rows: one per block, or several per block on thread.y; each reduction and the output row
// across T threads (or serial, in every thread).
struct RowNames {
  std::string kernel, root;
  std::vector<std::string> members;
  std::string n = "n", d = "d";
  std::string size;  // d's extent: when set, the lanes may be a param chosen at launch by it
  // Where above 1: each thread takes d in vectors of this many elements (`vectorize`), in every stage
  // split across lanes.
  int64_t vector = 1;
};
std::string randomRowSchedule(std::mt19937_64& random, const RowNames& names);

// `t[n, d] = ...` read by `y[n, d] = ...`.
struct ChainNames {
  std::string kernel = "chain", y = "y", t = "t", n = "n", d = "d";
};
std::string randomChainSchedule(std::mt19937_64& random, const ChainNames& names = {});

}  // namespace emmy::testing
