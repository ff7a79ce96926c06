// The simulation's ldmatrix and mma.sync.m16n8k16 against the PTX ISA, element by element. The ISA's
// fragment layouts are written below as data, in the shape of its figures (PTX ISA 9.1; the section
// numbers shift between versions, the anchors of docs.nvidia.com/cuda/parallel-thread-execution do not):
//   9.7.14.5.8  "Matrix Fragments for mma.m16n8k16 with floating point type"
//               (#warp-level-matrix-fragment-mma-16816-float): Figures 79 (A), 81 (B), 83 (C/D);
//   9.7.14.5.14 "Multiply-and-Accumulate Instruction: mma" (#warp-level-matrix-instructions-mma);
//   9.7.14.5.15 "Warp-level matrix load instruction: ldmatrix" (#warp-level-matrix-instructions-ldmatrix):
//               the table of which threads give the rows of which matrix, and Figure 104
//               (#mma-ldmatrix-fragments).
// `layouts` checks every lane's fragments from ldmatrix (x1, x2, x4, with and without .trans) and every
// lane's D from mma (f16 and bf16, small integers whose products and sums are exact), then a matmul
// through shared tiles, and prints its speed. `reports` prints what each launch that breaks a rule
// reports (the test compares the text).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"

extern "C" int ldmatrix_layout(int count, int transpose, const unsigned short* values, const int64_t* rowStarts,
                               uint32_t* fragments, cudaStream_t stream);
extern "C" int mma_fragments(int bf16, const uint32_t* a, const uint32_t* b, const float* c, float* d,
                             cudaStream_t stream);
extern "C" int matmul_f16(const __half* A, const __half* B, float* C, int64_t M, int64_t N, int64_t K,
                          cudaStream_t stream);
extern "C" int matmul_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C, int64_t M, int64_t N, int64_t K,
                           cudaStream_t stream);
extern "C" int ldmatrix_race(int barrier, int shift, uint32_t* out, cudaStream_t stream);
extern "C" int ldmatrix_then_write(cudaStream_t stream);
extern "C" int ldmatrix_misaligned(cudaStream_t stream);
extern "C" int ldmatrix_out_of_bounds(cudaStream_t stream);
extern "C" int mma_partial_warp(float* out, cudaStream_t stream);
extern "C" int ldmatrix_exited(cudaStream_t stream);
extern "C" int mma_or_shuffle(float* out, cudaStream_t stream);
extern "C" int ldmatrix_mixed(uint32_t* out, cudaStream_t stream);
extern "C" int barrier_or_ldmatrix(cudaStream_t stream);
extern "C" const char* emmy_last_error(void);

namespace {

// Figure 104, "ldmatrix fragment layout for one 8x8 Matrix with 16-bit elements": the element at (row,
// column) is the n-th of the fragment of thread T, written "T:n"; n = 0 is the first element, in the low
// 16 bits of the register. ("A group of four threads loads an entire row of the matrix.") With .trans
// the matrix is "loaded in column-major format": this layout holds for its transpose.
const char* const kLdmatrixFigure[8] = {
    "T0:0  T0:1  T1:0  T1:1  T2:0  T2:1  T3:0  T3:1",
    "T4:0  T4:1  T5:0  T5:1  T6:0  T6:1  T7:0  T7:1",
    "T8:0  T8:1  T9:0  T9:1  T10:0 T10:1 T11:0 T11:1",
    "T12:0 T12:1 T13:0 T13:1 T14:0 T14:1 T15:0 T15:1",
    "T16:0 T16:1 T17:0 T17:1 T18:0 T18:1 T19:0 T19:1",
    "T20:0 T20:1 T21:0 T21:1 T22:0 T22:1 T23:0 T23:1",
    "T24:0 T24:1 T25:0 T25:1 T26:0 T26:1 T27:0 T27:1",
    "T28:0 T28:1 T29:0 T29:1 T30:0 T30:1 T31:0 T31:1",
};

// 9.7.14.5.15's table: the threads whose addresses are the rows 0..7 of each matrix ("addresses addr0-addr7
// correspond to the rows of the first matrix, addresses addr8-addr15 correspond to the rows of the second
// matrix, and so on"); .x1 uses the first line, .x2 two, .x4 all four. The other threads' addresses are
// not used.
const int kRowAddressThreads[4][8] = {
    {0, 1, 2, 3, 4, 5, 6, 7},
    {8, 9, 10, 11, 12, 13, 14, 15},
    {16, 17, 18, 19, 20, 21, 22, 23},
    {24, 25, 26, 27, 28, 29, 30, 31},
};

// Figure 79, "MMA .m16n8k16 fragment layout for matrix A with .f16/.bf16 type": the element at (row, k)
// is a_i of thread T, "T:ai". a0..a7 are "low to high" in four .f16x2 registers: a0, a1 in the first.
const char* const kFigureA[16] = {
    "T0:a0  T0:a1  T1:a0  T1:a1  T2:a0  T2:a1  T3:a0  T3:a1  T0:a4  T0:a5  T1:a4  T1:a5  T2:a4  T2:a5  T3:a4  T3:a5",
    "T4:a0  T4:a1  T5:a0  T5:a1  T6:a0  T6:a1  T7:a0  T7:a1  T4:a4  T4:a5  T5:a4  T5:a5  T6:a4  T6:a5  T7:a4  T7:a5",
    "T8:a0  T8:a1  T9:a0  T9:a1  T10:a0 T10:a1 T11:a0 T11:a1 T8:a4  T8:a5  T9:a4  T9:a5  T10:a4 T10:a5 T11:a4 T11:a5",
    "T12:a0 T12:a1 T13:a0 T13:a1 T14:a0 T14:a1 T15:a0 T15:a1 T12:a4 T12:a5 T13:a4 T13:a5 T14:a4 T14:a5 T15:a4 T15:a5",
    "T16:a0 T16:a1 T17:a0 T17:a1 T18:a0 T18:a1 T19:a0 T19:a1 T16:a4 T16:a5 T17:a4 T17:a5 T18:a4 T18:a5 T19:a4 T19:a5",
    "T20:a0 T20:a1 T21:a0 T21:a1 T22:a0 T22:a1 T23:a0 T23:a1 T20:a4 T20:a5 T21:a4 T21:a5 T22:a4 T22:a5 T23:a4 T23:a5",
    "T24:a0 T24:a1 T25:a0 T25:a1 T26:a0 T26:a1 T27:a0 T27:a1 T24:a4 T24:a5 T25:a4 T25:a5 T26:a4 T26:a5 T27:a4 T27:a5",
    "T28:a0 T28:a1 T29:a0 T29:a1 T30:a0 T30:a1 T31:a0 T31:a1 T28:a4 T28:a5 T29:a4 T29:a5 T30:a4 T30:a5 T31:a4 T31:a5",
    "T0:a2  T0:a3  T1:a2  T1:a3  T2:a2  T2:a3  T3:a2  T3:a3  T0:a6  T0:a7  T1:a6  T1:a7  T2:a6  T2:a7  T3:a6  T3:a7",
    "T4:a2  T4:a3  T5:a2  T5:a3  T6:a2  T6:a3  T7:a2  T7:a3  T4:a6  T4:a7  T5:a6  T5:a7  T6:a6  T6:a7  T7:a6  T7:a7",
    "T8:a2  T8:a3  T9:a2  T9:a3  T10:a2 T10:a3 T11:a2 T11:a3 T8:a6  T8:a7  T9:a6  T9:a7  T10:a6 T10:a7 T11:a6 T11:a7",
    "T12:a2 T12:a3 T13:a2 T13:a3 T14:a2 T14:a3 T15:a2 T15:a3 T12:a6 T12:a7 T13:a6 T13:a7 T14:a6 T14:a7 T15:a6 T15:a7",
    "T16:a2 T16:a3 T17:a2 T17:a3 T18:a2 T18:a3 T19:a2 T19:a3 T16:a6 T16:a7 T17:a6 T17:a7 T18:a6 T18:a7 T19:a6 T19:a7",
    "T20:a2 T20:a3 T21:a2 T21:a3 T22:a2 T22:a3 T23:a2 T23:a3 T20:a6 T20:a7 T21:a6 T21:a7 T22:a6 T22:a7 T23:a6 T23:a7",
    "T24:a2 T24:a3 T25:a2 T25:a3 T26:a2 T26:a3 T27:a2 T27:a3 T24:a6 T24:a7 T25:a6 T25:a7 T26:a6 T26:a7 T27:a6 T27:a7",
    "T28:a2 T28:a3 T29:a2 T29:a3 T30:a2 T30:a3 T31:a2 T31:a3 T28:a6 T28:a7 T29:a6 T29:a7 T30:a6 T30:a7 T31:a6 T31:a7",
};

// Figure 81, "MMA .m16n8k16 fragment layout for matrix B with .f16/.bf16 type": the element at (k, column).
// b0..b3 low to high in two .f16x2 registers.
const char* const kFigureB[16] = {
    "T0:b0  T4:b0  T8:b0  T12:b0 T16:b0 T20:b0 T24:b0 T28:b0",
    "T0:b1  T4:b1  T8:b1  T12:b1 T16:b1 T20:b1 T24:b1 T28:b1",
    "T1:b0  T5:b0  T9:b0  T13:b0 T17:b0 T21:b0 T25:b0 T29:b0",
    "T1:b1  T5:b1  T9:b1  T13:b1 T17:b1 T21:b1 T25:b1 T29:b1",
    "T2:b0  T6:b0  T10:b0 T14:b0 T18:b0 T22:b0 T26:b0 T30:b0",
    "T2:b1  T6:b1  T10:b1 T14:b1 T18:b1 T22:b1 T26:b1 T30:b1",
    "T3:b0  T7:b0  T11:b0 T15:b0 T19:b0 T23:b0 T27:b0 T31:b0",
    "T3:b1  T7:b1  T11:b1 T15:b1 T19:b1 T23:b1 T27:b1 T31:b1",
    "T0:b2  T4:b2  T8:b2  T12:b2 T16:b2 T20:b2 T24:b2 T28:b2",
    "T0:b3  T4:b3  T8:b3  T12:b3 T16:b3 T20:b3 T24:b3 T28:b3",
    "T1:b2  T5:b2  T9:b2  T13:b2 T17:b2 T21:b2 T25:b2 T29:b2",
    "T1:b3  T5:b3  T9:b3  T13:b3 T17:b3 T21:b3 T25:b3 T29:b3",
    "T2:b2  T6:b2  T10:b2 T14:b2 T18:b2 T22:b2 T26:b2 T30:b2",
    "T2:b3  T6:b3  T10:b3 T14:b3 T18:b3 T22:b3 T26:b3 T30:b3",
    "T3:b2  T7:b2  T11:b2 T15:b2 T19:b2 T23:b2 T27:b2 T31:b2",
    "T3:b3  T7:b3  T11:b3 T15:b3 T19:b3 T23:b3 T27:b3 T31:b3",
};

// Figure 83, "MMA .m16n8k16 fragment layout for accumulator matrix C/D": the element at (row, column);
// c0..c3 in four .f32 registers.
const char* const kFigureC[16] = {
    "T0:c0  T0:c1  T1:c0  T1:c1  T2:c0  T2:c1  T3:c0  T3:c1",
    "T4:c0  T4:c1  T5:c0  T5:c1  T6:c0  T6:c1  T7:c0  T7:c1",
    "T8:c0  T8:c1  T9:c0  T9:c1  T10:c0 T10:c1 T11:c0 T11:c1",
    "T12:c0 T12:c1 T13:c0 T13:c1 T14:c0 T14:c1 T15:c0 T15:c1",
    "T16:c0 T16:c1 T17:c0 T17:c1 T18:c0 T18:c1 T19:c0 T19:c1",
    "T20:c0 T20:c1 T21:c0 T21:c1 T22:c0 T22:c1 T23:c0 T23:c1",
    "T24:c0 T24:c1 T25:c0 T25:c1 T26:c0 T26:c1 T27:c0 T27:c1",
    "T28:c0 T28:c1 T29:c0 T29:c1 T30:c0 T30:c1 T31:c0 T31:c1",
    "T0:c2  T0:c3  T1:c2  T1:c3  T2:c2  T2:c3  T3:c2  T3:c3",
    "T4:c2  T4:c3  T5:c2  T5:c3  T6:c2  T6:c3  T7:c2  T7:c3",
    "T8:c2  T8:c3  T9:c2  T9:c3  T10:c2 T10:c3 T11:c2 T11:c3",
    "T12:c2 T12:c3 T13:c2 T13:c3 T14:c2 T14:c3 T15:c2 T15:c3",
    "T16:c2 T16:c3 T17:c2 T17:c3 T18:c2 T18:c3 T19:c2 T19:c3",
    "T20:c2 T20:c3 T21:c2 T21:c3 T22:c2 T22:c3 T23:c2 T23:c3",
    "T24:c2 T24:c3 T25:c2 T25:c3 T26:c2 T26:c3 T27:c2 T27:c3",
    "T28:c2 T28:c3 T29:c2 T29:c3 T30:c2 T30:c3 T31:c2 T31:c3",
};

struct Place {
  int row = -1, column = -1;
};

// A figure read back: place[lane][n], where element n of the lane's fragment lies in the matrix. Checks
// that the figure has `columns` cells a row and names every element of every lane exactly once.
std::vector<std::vector<Place>> readFigure(const char* name, const char* const* rows, int rowCount, int columns,
                                           const char* prefix, int elements, Checks& checks) {
  std::vector<std::vector<Place>> place(32, std::vector<Place>(elements));
  for (int row = 0; row < rowCount; ++row) {
    const char* cell = rows[row];
    for (int column = 0; column < columns; ++column) {
      // "T<lane>:<prefix><n>"
      while (*cell == ' ') ++cell;
      char* end = nullptr;
      const long lane = *cell == 'T' ? std::strtol(cell + 1, &end, 10) : -1;
      bool ok = end != nullptr && *end == ':' && std::strncmp(end + 1, prefix, std::strlen(prefix)) == 0;
      const long n = ok ? std::strtol(end + 1 + std::strlen(prefix), &end, 10) : -1;
      ok = ok && lane >= 0 && lane < 32 && n >= 0 && n < elements && place[lane][n].row < 0;
      while (*cell != ' ' && *cell != '\0') ++cell;
      checks.expect(ok, std::string(name) + ": bad or repeated cell in row " + std::to_string(row) + " column " +
                            std::to_string(column));
      if (ok) place[lane][n] = {row, column};
    }
  }
  for (int lane = 0; lane < 32; ++lane)
    for (int n = 0; n < elements; ++n)
      checks.expect(place[lane][n].row >= 0,
                    std::string(name) + ": T" + std::to_string(lane) + " element " + std::to_string(n) + " missing");
  return place;
}

unsigned short halfBits(float value, bool bf16) {
  return bf16 ? __bfloat16_as_ushort(__float2bfloat16(value)) : __half_as_ushort(__float2half(value));
}

// ldmatrix of every kind by two warps: shared memory holds 1024 distinct 16-bit patterns, each lane that
// gives a row passes one of 128 16-byte units, all different, and the others pass addresses that would
// be misaligned or out of bounds (unused, so harmless). Returns the elements checked.
int checkLdmatrix(const std::vector<std::vector<Place>>& figure, Checks& checks) {
  std::vector<unsigned short> values(1024);
  for (int i = 0; i < 1024; ++i) values[i] = static_cast<unsigned short>(i * 40503 + 12345);  // odd factor: distinct
  int checked = 0;
  for (int count : {1, 2, 4})
    for (int transpose : {0, 1}) {
      std::vector<int64_t> rowStarts(64);
      for (int t = 0; t < 64; ++t) rowStarts[t] = t % 32 < 8 * count ? 8 * ((t * 37 + 11) % 128) : t % 2 ? 3 : 1 << 20;
      std::vector<uint32_t> fragments(64 * 4, 0);
      const int status = ldmatrix_layout(count, transpose, values.data(), rowStarts.data(), fragments.data(), nullptr);
      const std::string kind = "ldmatrix.x" + std::to_string(count) + (transpose ? ".trans" : "");
      checks.expect(status == 0, kind + ": " + emmy_last_error());
      for (int t = 0; t < 64; ++t)
        for (int m = 0; m < count; ++m)
          for (int n = 0; n < 2; ++n) {
            const Place at = figure[t % 32][n];
            const int row = transpose ? at.column : at.row, column = transpose ? at.row : at.column;  // as stored
            const int giver = t / 32 * 32 + kRowAddressThreads[m][row];
            const unsigned expected = values[rowStarts[giver] + column];
            const unsigned actual = fragments[t * 4 + m] >> (16 * n) & 0xffffu;
            checks.expect(actual == expected, kind + ": thread " + std::to_string(t) + " register " +
                                                  std::to_string(m) + " element " + std::to_string(n) + " is " +
                                                  std::to_string(actual) + ", not " + std::to_string(expected));
            ++checked;
          }
    }
  return checked;
}

// mma of distinct small integers by two warps, each with its own A (in [-128, 127]), B (in [-64, 63])
// and C: every value is exact in f16 and bf16, every product and sum exact in float. Returns the
// elements of D checked.
int checkMma(const std::vector<std::vector<Place>>& figureA, const std::vector<std::vector<Place>>& figureB,
             const std::vector<std::vector<Place>>& figureC, Checks& checks) {
  const auto A = [](int warp, int row, int k) { return warp == 0 ? row * 16 + k - 128 : 127 - (k * 16 + row); };
  const auto B = [](int warp, int k, int column) { return warp == 0 ? k * 8 + column - 64 : 63 - (column * 16 + k); };
  const auto C = [](int warp, int row, int column) { return warp == 0 ? row * 8 + column + 1000 : -3 * (row * 8 + column); };
  int checked = 0;
  for (int bf16 : {0, 1}) {
    std::vector<uint32_t> a(64 * 4, 0), b(64 * 2, 0);
    std::vector<float> c(64 * 4), d(64 * 4, 0.0f);
    for (int t = 0; t < 64; ++t) {
      const int warp = t / 32, lane = t % 32;
      for (int i = 0; i < 8; ++i) {
        const Place at = figureA[lane][i];
        a[t * 4 + i / 2] |= uint32_t{halfBits(static_cast<float>(A(warp, at.row, at.column)), bf16)} << (16 * (i % 2));
      }
      for (int i = 0; i < 4; ++i) {
        const Place at = figureB[lane][i];
        b[t * 2 + i / 2] |= uint32_t{halfBits(static_cast<float>(B(warp, at.row, at.column)), bf16)} << (16 * (i % 2));
        const Place out = figureC[lane][i];
        c[t * 4 + i] = static_cast<float>(C(warp, out.row, out.column));
      }
    }
    const int status = mma_fragments(bf16, a.data(), b.data(), c.data(), d.data(), nullptr);
    const std::string kind = bf16 ? "mma bf16" : "mma f16";
    checks.expect(status == 0, kind + ": " + emmy_last_error());
    for (int t = 0; t < 64; ++t)
      for (int i = 0; i < 4; ++i) {
        const int warp = t / 32;
        const Place at = figureC[t % 32][i];
        long long expected = C(warp, at.row, at.column);
        for (int k = 0; k < 16; ++k) expected += A(warp, at.row, k) * B(warp, k, at.column);
        checks.expect(d[t * 4 + i] == static_cast<float>(expected),
                      kind + ": thread " + std::to_string(t) + " d" + std::to_string(i) + " is " +
                          std::to_string(d[t * 4 + i]) + ", not " + std::to_string(expected));
        ++checked;
      }
  }
  return checked;
}

// A matmul of small integers (exact) against the scalar product.
template <class T>
void checkMatmul(const char* kind, int (*matmul)(const T*, const T*, float*, int64_t, int64_t, int64_t, cudaStream_t),
                 int64_t M, int64_t N, int64_t K, Checks& checks) {
  std::vector<T> a(M * K), b(K * N);
  for (int64_t i = 0; i < M * K; ++i) a[i] = T(static_cast<float>((i * 7 + i / K * 3) % 9 - 4));
  for (int64_t i = 0; i < K * N; ++i) b[i] = T(static_cast<float>((i * 5 + i / N * 11) % 9 - 4));
  std::vector<float> c(M * N, -1.0f);
  const int status = matmul(a.data(), b.data(), c.data(), M, N, K, nullptr);
  checks.expect(status == 0, std::string(kind) + ": " + emmy_last_error());
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float expected = 0.0f;
      for (int64_t k = 0; k < K; ++k) expected += static_cast<float>(a[i * K + k]) * static_cast<float>(b[k * N + j]);
      checks.expect(c[i * N + j] == expected, std::string(kind) + ": C[" + std::to_string(i) + "][" +
                                                  std::to_string(j) + "] is " + std::to_string(c[i * N + j]) +
                                                  ", not " + std::to_string(expected));
    }
}

int layouts() {
  Checks checks;
  const auto ldmatrix = readFigure("Figure 104", kLdmatrixFigure, 8, 8, "", 2, checks);
  const auto figureA = readFigure("Figure 79", kFigureA, 16, 16, "a", 8, checks);
  const auto figureB = readFigure("Figure 81", kFigureB, 16, 8, "b", 4, checks);
  const auto figureC = readFigure("Figure 83", kFigureC, 16, 8, "c", 4, checks);
  const int loaded = checkLdmatrix(ldmatrix, checks);
  const int multiplied = checkMma(figureA, figureB, figureC, checks);
  std::printf("ldmatrix: %d elements checked; mma: %d elements checked\n", loaded, multiplied);
  checkMatmul<__half>("matmul f16", matmul_f16, 128, 192, 256, checks);
  checkMatmul<__nv_bfloat16>("matmul bf16", matmul_bf16, 64, 64, 48, checks);

  // The speed of a larger one: 512^3 is 65536 warp mma and 32768 ldmatrix.x4.
  const int64_t n = 512;
  std::vector<__half> a(n * n, __half(1.0f)), b(n * n, __half(0.5f));
  std::vector<float> c(n * n);
  const auto start = std::chrono::steady_clock::now();
  const int status = matmul_f16(a.data(), b.data(), c.data(), n, n, n, nullptr);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int wrong = 0;
  for (float value : c) wrong += value != 256.0f;
  checks.expect(status == 0 && wrong == 0, "512^3 matmul: " + std::to_string(wrong) + " wrong");
  std::printf("speed: %.2f s for a %lldx%lldx%lld f16 matmul\n", seconds, (long long)n, (long long)n, (long long)n);
  return checks.exitCode();
}

void show(const char* name, int status) { std::printf("%s: %d: %s\n", name, status, status ? emmy_last_error() : "ok"); }

int reports() {
  uint32_t words[64];
  float floats[64];
  show("own rows without a barrier", ldmatrix_race(0, 0, words, nullptr));
  show("rows of others with a barrier", ldmatrix_race(1, 1, words, nullptr));
  // Lane t reads row t-1, which thread t-1 has just written: the read is the race. Lane t reads row t+1,
  // which thread t+1 writes after: the write is the race, with the read that ldmatrix made for lane t.
  show("rows written before without a barrier", ldmatrix_race(0, 31, words, nullptr));
  show("rows written after without a barrier", ldmatrix_race(0, 1, words, nullptr));
  show("a write to a row another lane read", ldmatrix_then_write(nullptr));
  show("misaligned row", ldmatrix_misaligned(nullptr));
  show("row out of bounds", ldmatrix_out_of_bounds(nullptr));
  show("partial warp", mma_partial_warp(floats, nullptr));
  show("exited lanes", ldmatrix_exited(nullptr));
  show("mma or shuffle", mma_or_shuffle(floats, nullptr));
  show("ldmatrix and ldmatrix.trans", ldmatrix_mixed(words, nullptr));
  show("barrier or ldmatrix", barrier_or_ldmatrix(nullptr));
  show("own rows afterwards", ldmatrix_race(0, 0, words, nullptr));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "layouts") return layouts();
  if (mode == "reports") return reports();
  std::printf("usage: %s layouts|reports\n", argv[0]);
  return 2;
}
