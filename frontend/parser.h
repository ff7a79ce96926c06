// .emmy text to AST, through the ANTLR-generated parser. ANTLR types stay inside parser.cpp.
#pragma once

#include <memory>

#include "frontend/ast.h"
#include "support/diagnostics.h"

namespace emmy {

// Later passes walk expressions recursively; a chain of operators nests one level per operator. The
// parser bounds the nesting of what is written, the inlining of fns the nesting of what they expand to.
inline constexpr int kMaxExpressionDepth = 1000;

// Parses a whole file. Every syntax error is reported to `diagnostics`; the result is null when there
// was any (the tree of a file with syntax errors is never elaborated).
std::unique_ptr<ast::Module> parseModule(std::shared_ptr<const SourceFile> source, Diagnostics& diagnostics);

}  // namespace emmy
