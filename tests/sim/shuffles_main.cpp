// Warp shuffles against CUDA's documented semantics: each group of `width` lanes exchanges within
// itself; down and up give a lane its own value when the source falls outside its group; xor may read
// an earlier group but not a later one; a lane past the end of the partial second warp reads all ones.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "check.h"

extern "C" int shuffles(int* ints, float* floats, double* doubles, int64_t* longs, unsigned* unsigneds, int* ints_2d,
                        cudaStream_t stream);
extern "C" const char* emmy_last_error(void);

namespace {

constexpr int kThreads = 48;
enum class Kind { Down, Up, Xor, Index };

// The linear index of the thread that thread t reads from, or -1 for a lane that does not exist.
int sourceThread(Kind kind, int t, int operand, int width) {
  const int warpStart = t / 32 * 32, lane = t % 32, lanes = std::min(32, kThreads - warpStart);
  const int groupStart = lane / width * width;
  int source = lane;
  switch (kind) {
    case Kind::Down: source = lane % width + operand < width ? lane + operand : lane; break;
    case Kind::Up: source = lane % width >= operand ? lane - operand : lane; break;
    case Kind::Xor: source = (lane ^ operand) < groupStart + width ? lane ^ operand : lane; break;
    case Kind::Index: source = groupStart + operand % width; break;
  }
  return source < lanes ? warpStart + source : -1;
}

}  // namespace

int main() {
  Checks checks;
  std::vector<int> ints(kThreads * 7), ints2d(2 * kThreads);
  std::vector<float> floats(kThreads);
  std::vector<double> doubles(kThreads);
  std::vector<int64_t> longs(kThreads);
  std::vector<unsigned> unsigneds(kThreads);
  checks.expect(
      shuffles(ints.data(), floats.data(), doubles.data(), longs.data(), unsigneds.data(), ints2d.data(), nullptr) == 0,
      emmy_last_error());

  const struct {
    Kind kind;
    int operand, width;
  } cases[] = {{Kind::Down, 3, 8}, {Kind::Down, 5, 32},  {Kind::Up, 2, 16},
               {Kind::Xor, 9, 16}, {Kind::Index, 35, 8}, {Kind::Xor, 8, 8}};
  for (int t = 0; t < kThreads; ++t) {
    for (int k = 0; k < 6; ++k) {
      const int source = sourceThread(cases[k].kind, t, cases[k].operand, cases[k].width);
      const int expected = source < 0 ? -1 : 100 + source;
      checks.expect(ints[t * 7 + k] == expected, "shuffle " + std::to_string(k) + " of thread " + std::to_string(t) +
                                                     ": " + std::to_string(ints[t * 7 + k]) + ", expected " +
                                                     std::to_string(expected));
    }
    checks.expect(static_cast<unsigned>(ints[t * 7 + 6]) == (t < 32 ? 0xffffffffu : 0xffffu),
                  "__activemask() of thread " + std::to_string(t));
    checks.expect(floats[t] == 0.5f * (t ^ 1), "float shuffle of thread " + std::to_string(t));
    const int below = sourceThread(Kind::Down, t, 1, 32);
    checks.expect(below < 0 ? std::isnan(doubles[t]) : doubles[t] == 0.25 * below,
                  "double shuffle of thread " + std::to_string(t));
    checks.expect(longs[t] == static_cast<int64_t>(t % 32 == 0 ? t : t - 1) << 33,
                  "int64_t shuffle of thread " + std::to_string(t));
    checks.expect(unsigneds[t] == 7u * (t / 32 * 32), "unsigned shuffle of thread " + std::to_string(t));
    checks.expect(ints2d[2 * t] == (t ^ 8), "2-D block xor of thread " + std::to_string(t));
    const int source = sourceThread(Kind::Down, t, 8, 32);  // blockDim.x = 8: y is the linear index / 8
    checks.expect(ints2d[2 * t + 1] == (source < 0 ? -1 : source / 8), "2-D block down of thread " + std::to_string(t));
  }
  // A few by hand, as a check on the expectations above.
  checks.expect(ints[4 * 7 + 0] == 107 && ints[5 * 7 + 0] == 105, "down 3 width 8 at lanes 4 and 5");
  checks.expect(ints[8 * 7 + 5] == 100 && ints[0 * 7 + 5] == 100, "xor 8 width 8 at lanes 8 and 0");
  checks.expect(ints[43 * 7 + 1] == -1 && ints[42 * 7 + 1] == 147, "down 5 at lanes 11 and 10 of the partial warp");
  checks.expect(ints[33 * 7 + 4] == 3 + 132, "index 35 width 8 at lane 1 of the second warp");
  for (int t : {0, 5, 8, 43})
    std::printf("thread %d: %d %d %d %d %d %d\n", t, ints[t * 7], ints[t * 7 + 1], ints[t * 7 + 2], ints[t * 7 + 3],
                ints[t * 7 + 4], ints[t * 7 + 5]);
  return checks.exitCode();
}
