// Stable, readable text of Tensor IR (`emmy build --emit tensor`); golden files compare against it.
//
//   kernel softmax_f32 = softmax<T = f32>
//     input x: f32[N, D]
//     scalar eps: f32 = 1e-05
//     output y: f32[N, D]
//     sizes N, D
//     m: f32[N] (n: N) = max over (d: D) of x[n, d]
//     s: f16[N] (n: N) = sum over (d: D) in f32 of f32(h[n, d])     (accumulator shown when it differs)
//     y: f32[N, D] (n: N, d: D) = e[n, d] / s[n]
//
// Expressions are infix with the language's precedence (or < and < not < comparisons < + - < * / % <
// unary minus) and only the parentheses it needs; `pad(x, 0)[i - 1]` is a padded load, `where(c, a, b)` a
// select, `f16(v)` a cast, and min, max, pow and the unary functions are calls.
//
// Immediates: a float prints as the shortest decimal that reads back as the same value of its dtype
// (`0.1`, `2.0`, `inf`), an integer as itself. An immediate prints bare when a reader can tell its dtype
// from where it stands: from the other operand of its operator or the other branch of `where` when that
// is not an immediate itself, and otherwise from its position (a stage body has the stage's dtype, or the
// accumulator's under a reduction; a pad value the tensor's; a subscript i64; a scalar default the
// scalar's; an operand of arithmetic or of a dtype-preserving function what its parent has). Where
// nothing tells, bare means i64 for integers and f32 for floats. Any other immediate carries its dtype as
// a suffix: `2_i32`, `0.5_f16`.
#pragma once

#include <string>

#include "ir/tensor/nodes.h"

namespace emmy::tensor {

std::string printExpr(const Expr& expr);
// Whether two index expressions (i64 arithmetic over variables and constants) are the same: their text
// names every operand, so the same text is the same expression.
bool sameIndex(const Expr& a, const Expr& b);
std::string printKernel(const Kernel& kernel);

}  // namespace emmy::tensor
