// .emmy text to AST. The ANTLR-generated lexer and parser (grammar/Emmy.g4) recognise the text; this
// file reports syntax errors in the user's terms, with locations in bytes, and turns the parse tree into
// the AST of ast.h. See grammar/ARCHITECTURE.md for the lexer's newline and keyword rules.
#include "frontend/parser.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <limits>
#include <optional>
#include <set>
#include <span>
#include <string_view>

#include <antlr4-runtime.h>

#include "EmmyLexer.h"
#include "EmmyParser.h"
#include "support/text.h"

namespace emmy {

namespace ast {
const char* binaryOpSpelling(BinaryOp op) {
  switch (op) {
    case BinaryOp::Or: return "or";
    case BinaryOp::And: return "and";
    case BinaryOp::Lt: return "<";
    case BinaryOp::Le: return "<=";
    case BinaryOp::Gt: return ">";
    case BinaryOp::Ge: return ">=";
    case BinaryOp::Eq: return "==";
    case BinaryOp::Ne: return "!=";
    case BinaryOp::Add: return "+";
    case BinaryOp::Sub: return "-";
    case BinaryOp::Mul: return "*";
    case BinaryOp::Div: return "/";
    case BinaryOp::Mod: return "%";
    case BinaryOp::MatMul: return "@";
  }
  EMMY_INTERNAL_ASSERT(false, "unknown binary operator {}", static_cast<int>(op));
}
}  // namespace ast

namespace {

using antlr4::Token;
using grammar::EmmyParser;

// The parser recurses once per bracket level (through every precedence level), so nesting is bounded
// before parsing; no real program comes near this.
constexpr size_t kMaxBracketNesting = 256;

// ---------------------------------------------------------------------------------------------------
// Text: UTF-8 validation and the map from ANTLR's code-point positions to SourceLoc's byte positions.

size_t utf8SequenceLength(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// The offset of the first byte that is not part of well-formed UTF-8 (no overlong forms, surrogates or
// code points above U+10FFFF), if any.
std::optional<size_t> findInvalidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    auto lead = static_cast<unsigned char>(text[i]);
    size_t length = utf8SequenceLength(lead);
    if (length == 0 || i + length > text.size()) return i;
    for (size_t k = 1; k < length; ++k)
      if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) return i;
    if (length > 1) {
      auto second = static_cast<unsigned char>(text[i + 1]);
      bool overlong = (lead == 0xE0 && second < 0xA0) || (lead == 0xF0 && second < 0x90);
      bool surrogate = lead == 0xED && second >= 0xA0;
      bool tooLarge = lead == 0xF4 && second >= 0x90;
      if (overlong || surrogate || tooLarge) return i;
    }
    i += length;
  }
  return std::nullopt;
}

// The byte-order mark some editors write at the start of a file; the lexer never sees it.
constexpr std::string_view kByteOrderMark = "\xEF\xBB\xBF";

// ANTLR counts code points from the end of the byte-order mark; SourceLoc counts bytes from the start of
// the file (the caret line is built byte by byte).
class SourceMap {
public:
  explicit SourceMap(std::shared_ptr<const SourceFile> file) : file_(std::move(file)) {
    const std::string& text = file_->text();
    lineStarts_.push_back(0);
    for (size_t i = 0; i < text.size(); ++i)
      if (text[i] == '\n') lineStarts_.push_back(i + 1);
    for (size_t i = lexedText().data() - text.data(); i < text.size(); ++i)
      if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) byteOfCodePoint_.push_back(i);
    byteOfCodePoint_.push_back(text.size());
  }

  const std::shared_ptr<const SourceFile>& file() const { return file_; }
  std::string_view text() const { return file_->text(); }
  // What the lexer reads: the text without its byte-order mark.
  std::string_view lexedText() const {
    std::string_view text = file_->text();
    return text.starts_with(kByteOrderMark) ? text.substr(kByteOrderMark.size()) : text;
  }
  size_t byteOf(size_t codePoint) const { return byteOfCodePoint_.at(codePoint); }

  // The bytes [begin, end); a range that spans lines is cut at the end of its first line.
  SourceLoc bytes(size_t begin, size_t end) const {
    auto next = std::upper_bound(lineStarts_.begin(), lineStarts_.end(), begin);
    int line = static_cast<int>(next - lineStarts_.begin());
    size_t lineEnd = next == lineStarts_.end() ? file_->text().size() : *next - 1;
    size_t lineStart = lineStarts_[line - 1];
    int length = static_cast<int>(std::max<size_t>(1, std::min(end, lineEnd) - std::min(begin, lineEnd)));
    return SourceLoc{file_, line, static_cast<int>(begin - lineStart) + 1, length};
  }

  SourceLoc token(const Token* token) const { return range(token, token); }

  SourceLoc range(const Token* first, const Token* last) const {
    size_t begin = byteOf(first->getStartIndex());
    size_t end = last->getType() == Token::EOF ? begin : byteOf(last->getStopIndex() + 1);
    return bytes(begin, std::max(begin, end));
  }

  SourceLoc node(antlr4::ParserRuleContext* ctx) const { return range(ctx->getStart(), ctx->getStop()); }

  // The place just after `token`: where something missing from the end of a line belongs.
  SourceLoc after(const Token* token) const {
    size_t end = byteOf(token->getStopIndex() + 1);
    return bytes(end, end + 1);
  }

private:
  std::shared_ptr<const SourceFile> file_;
  std::vector<size_t> byteOfCodePoint_;  // one per code point, then the end of the text
  std::vector<size_t> lineStarts_;
};

// ---------------------------------------------------------------------------------------------------
// Syntax errors.

// Lexer and parser errors, reported in source order and at most one per line: after the first error on
// a line the parser is recovering, and what it finds next on that line is usually a consequence.
class SyntaxErrors {
public:
  void add(SourceLoc loc, std::string message) { errors_.push_back({std::move(loc), std::move(message), {}}); }
  bool empty() const { return errors_.empty(); }

  void reportTo(Diagnostics& diagnostics) {
    std::stable_sort(errors_.begin(), errors_.end(), [](const Diagnostic& a, const Diagnostic& b) {
      return std::pair(a.loc.line, a.loc.column) < std::pair(b.loc.line, b.loc.column);
    });
    int lastLine = 0;
    for (Diagnostic& error : errors_) {
      if (error.loc.line == lastLine) continue;
      lastLine = error.loc.line;
      diagnostics.error(error.loc, std::move(error.message));
    }
  }

private:
  std::vector<Diagnostic> errors_;
};

// Token groups that messages name as a whole.
constexpr std::array<size_t, 4> kTopLevelKeywords = {EmmyParser::IMPORT, EmmyParser::FN, EmmyParser::KERNEL,
                                                     EmmyParser::SCHEDULE};
constexpr std::array<size_t, 17> kDirectiveKeywords = {
    EmmyParser::PARAM,  EmmyParser::SPLIT,   EmmyParser::TILE,      EmmyParser::REORDER, EmmyParser::FUSE,
    EmmyParser::BIND,   EmmyParser::INLINE,  EmmyParser::COMPUTE,   EmmyParser::ROOT,    EmmyParser::CACHE,
    EmmyParser::VECTORIZE, EmmyParser::UNROLL, EmmyParser::PAD,     EmmyParser::DOUBLE_BUFFER,
    EmmyParser::THREADS, EmmyParser::MMA,     EmmyParser::SCAN};
// The other words that are keywords inside a schedule only.
constexpr std::array<size_t, 5> kDirectiveParticles = {EmmyParser::IN, EmmyParser::TO, EmmyParser::AT,
                                                       EmmyParser::BY, EmmyParser::ATOMIC};
constexpr std::array<size_t, 10> kExpressionStarts = {
    EmmyParser::ID,    EmmyParser::INT,    EmmyParser::FLOAT, EmmyParser::INF, EmmyParser::TRUE,
    EmmyParser::FALSE, EmmyParser::LPAREN, EmmyParser::MINUS, EmmyParser::NOT, EmmyParser::LBRACK};
// What may follow a complete operand: binary operators, and the '(' '[' '.' of calls and subscripts.
constexpr std::array<size_t, 17> kContinuations = {
    EmmyParser::OR,   EmmyParser::AND,   EmmyParser::LT,      EmmyParser::LE,     EmmyParser::GT,
    EmmyParser::GE,   EmmyParser::EQ,    EmmyParser::NE,      EmmyParser::PLUS,   EmmyParser::MINUS,
    EmmyParser::STAR, EmmyParser::SLASH, EmmyParser::PERCENT, EmmyParser::MATMUL, EmmyParser::LBRACK,
    EmmyParser::LPAREN, EmmyParser::DOT};

constexpr std::array<size_t, 3> kOpeningBrackets = {EmmyParser::LPAREN, EmmyParser::LBRACK, EmmyParser::LBRACE};
constexpr std::array<size_t, 3> kClosingBrackets = {EmmyParser::RPAREN, EmmyParser::RBRACK, EmmyParser::RBRACE};

bool isOneOf(size_t tokenType, std::span<const size_t> types) {
  return std::find(types.begin(), types.end(), tokenType) != types.end();
}

using Vocabulary = antlr4::dfa::Vocabulary;

std::vector<std::string> spellings(std::span<const size_t> keywords, const Vocabulary& vocabulary) {
  std::vector<std::string> words;
  for (size_t type : keywords) {
    std::string literal = vocabulary.getLiteralName(type);  // quoted: 'split'
    words.push_back(literal.substr(1, literal.size() - 2));
  }
  return words;
}

std::string describeToken(const Token* token) {
  if (token->getType() == Token::EOF) return "end of file";
  if (token->getType() == EmmyParser::NEWLINE) return "end of line";
  return "'" + token->getText() + "'";
}

std::string joinAlternatives(const std::vector<std::string>& parts) {
  if (parts.size() <= 1) return parts.empty() ? "" : parts[0];
  return join({parts.begin(), parts.end() - 1}, ", ") + " or " + parts.back();
}

// What the parser would have accepted, in a few words, or "" when no short description helps.
std::string describeExpected(const antlr4::misc::IntervalSet& expected, const Vocabulary& vocabulary) {
  std::set<ssize_t> rest = expected.toSet();
  auto removeAll = [&](std::span<const size_t> group) {
    for (size_t type : group) rest.erase(type);
  };
  std::vector<std::string> parts;
  if (rest.count(EmmyParser::ID) && rest.count(EmmyParser::INT) && rest.count(EmmyParser::LPAREN)) {
    removeAll(kExpressionStarts);
    parts.push_back("an expression");
  }
  // After a complete operand an operator is rarely what is missing; the other tokens say more.
  bool afterOperand = rest.count(EmmyParser::PLUS) > 0;
  if (afterOperand) removeAll(kContinuations);
  if (rest.size() > 1) rest.erase(static_cast<ssize_t>(Token::EOF));
  if (rest.count(EmmyParser::NEWLINE)) rest.erase(EmmyParser::RBRACE);
  std::vector<std::string> closers;  // listed last: "expected ',' or ')'"
  for (ssize_t type : rest) {
    if (type == static_cast<ssize_t>(Token::EOF)) parts.push_back("end of file");
    else if (type == EmmyParser::NEWLINE) parts.push_back("end of line");
    else if (type == EmmyParser::ID) parts.push_back("a name");
    else if (type == EmmyParser::INT) parts.push_back("an integer");
    else if (isOneOf(type, kClosingBrackets)) closers.push_back(vocabulary.getLiteralName(type));
    else parts.push_back(vocabulary.getLiteralName(type));
  }
  parts.insert(parts.end(), closers.begin(), closers.end());
  if (parts.empty() && afterOperand) parts.push_back("an operator");
  return parts.size() <= 4 ? joinAlternatives(parts) : "";
}

std::string unexpectedTokenMessage(const Token* offending, const antlr4::misc::IntervalSet& expected,
                                   const Vocabulary& vocabulary) {
  size_t type = offending->getType();
  if (expected.contains(size_t(EmmyParser::ID))) {
    std::string word = "'" + offending->getText() + "'";
    if (isOneOf(type, kTopLevelKeywords)) return word + " is a keyword and cannot be used as a name";
    if (isOneOf(type, kDirectiveKeywords) || isOneOf(type, kDirectiveParticles))
      return word + " is a keyword inside a schedule and cannot be used as a name there";
  }
  std::string message = "unexpected " + describeToken(offending);
  std::string wanted = describeExpected(expected, vocabulary);
  return wanted.empty() ? message : message + "; expected " + wanted;
}

// A line of a file, kernel body or schedule that starts with a token no such line can start with. The
// line rules may be empty, so ANTLR only notices once the empty line is over and only knows what may
// follow it; this says what may begin one instead. nullopt when `offending` does not begin a line.
std::optional<std::string> lineStartMessage(antlr4::Parser* parser, const Token* offending) {
  const Token* previous = parser->getTokenStream()->LT(-1);
  if (previous && previous->getType() != EmmyParser::NEWLINE && previous->getType() != EmmyParser::LBRACE)
    return std::nullopt;
  std::string text = offending->getText();
  std::string unexpected = "unexpected " + describeToken(offending);
  switch (parser->getContext()->getRuleIndex()) {
    case EmmyParser::RuleFile:
      return withSuggestion(unexpected + "; expected 'import', 'fn', 'kernel' or 'schedule'", text,
                            spellings(kTopLevelKeywords, parser->getVocabulary()));
    case EmmyParser::RuleKernelDef:
      return unexpected + "; expected a statement: NAME = ..., NAME[i, ...] = ... or (A, B) = ...";
    case EmmyParser::RuleScheduleDef: {
      std::vector<std::string> directives = spellings(kDirectiveKeywords, parser->getVocabulary());
      if (offending->getType() != EmmyParser::ID)
        return unexpected + "; expected a directive (" + join(directives, ", ") + ")";
      return withSuggestion("unknown directive '" + text + "' (directives: " + join(directives, ", ") + ")", text,
                            directives);
    }
    default:
      return std::nullopt;
  }
}

// Mistakes that someone used to Python or C makes, said in their terms: `**` for a power, `=` for a
// comparison, a bind target without its dimension. Returns the token to report at with the message, or
// nullopt when `offending` is none of them.
std::optional<std::pair<Token*, std::string>> familiarMistake(antlr4::Parser* parser, Token* offending,
                                                              const antlr4::misc::IntervalSet& expected) {
  Token* previous = parser->getTokenStream()->LT(-1);
  size_t type = offending->getType();
  if (type == EmmyParser::STAR && previous && previous->getType() == EmmyParser::STAR &&
      previous->getStopIndex() + 1 == offending->getStartIndex())
    return std::pair(previous, "there is no '**' operator: write a power as pow(x, 2)");
  // An '=' that no rule expects, right after an operand: `where(x[i] = 0, ...)`.
  constexpr std::array<size_t, 8> operandEnds = {EmmyParser::ID,   EmmyParser::INT,    EmmyParser::FLOAT,
                                                 EmmyParser::INF,  EmmyParser::TRUE,   EmmyParser::FALSE,
                                                 EmmyParser::RPAREN, EmmyParser::RBRACK};
  if (type == EmmyParser::ASSIGN && !expected.contains(size_t(EmmyParser::ASSIGN)) && previous &&
      isOneOf(previous->getType(), operandEnds))
    return std::pair(offending, "'=' assigns and cannot stand inside an expression; use '==' to compare");
  if (auto* bind = dynamic_cast<EmmyParser::BindDirectiveContext*>(parser->getContext()); bind && bind->TO())
    return std::pair(offending, "unexpected " + describeToken(offending) + "; a loop binds to " + ast::kHardwareIndices);
  return std::nullopt;
}

// ANTLR's recovery, with messages in the user's terms instead of ANTLR's token sets.
class SyntaxErrorStrategy : public antlr4::DefaultErrorStrategy {
public:
  // A bad line of a block is skipped and the block goes on. ANTLR does so itself before the second and
  // later lines, but before the first one it abandons the whole rule (the whole kernel); and a bad line
  // at the top level must be skipped with the block it opens, whose lines are no top-level lines.
  void sync(antlr4::Parser* parser) override {
    const antlr4::atn::ATN& atn = parser->getATN();
    antlr4::atn::ATNState* state = atn.states[parser->getState()];
    antlr4::misc::IntervalSet next = atn.nextTokens(state);
    bool fine = next.contains(Token::EPSILON) || next.contains(parser->getTokenStream()->LA(1));
    size_t type = state->getStateType();
    bool loop = type == antlr4::atn::ATNState::STAR_LOOP_ENTRY || type == antlr4::atn::ATNState::STAR_LOOP_BACK;
    if (inErrorRecoveryMode(parser) || fine || !loop) return DefaultErrorStrategy::sync(parser);
    if (parser->getContext()->getRuleIndex() == EmmyParser::RuleFile) {
      reportUnwantedToken(parser);
      return skipRestOfDefinition(parser, 0);
    }
    if (type == antlr4::atn::ATNState::STAR_LOOP_BACK) return DefaultErrorStrategy::sync(parser);
    // At the loop's entry: what ANTLR does at STAR_LOOP_BACK, after trying to drop a single token.
    if (singleTokenDeletion(parser)) return;
    reportUnwantedToken(parser);
    consumeUntil(parser, parser->getExpectedTokens().Or(getErrorRecoverySet(parser)));
  }

  // A kernel or schedule whose header is broken is skipped whole, for the same reason.
  void recover(antlr4::Parser* parser, std::exception_ptr e) override {
    antlr4::ParserRuleContext* ctx = parser->getContext();
    if (auto* kernel = dynamic_cast<EmmyParser::KernelDefContext*>(ctx))
      return skipRestOfDefinition(parser, kernel->LBRACE() ? 1 : 0);
    if (auto* schedule = dynamic_cast<EmmyParser::ScheduleDefContext*>(ctx))
      return skipRestOfDefinition(parser, schedule->LBRACE() ? 1 : 0);
    DefaultErrorStrategy::recover(parser, e);
  }

protected:
  void reportNoViableAlternative(antlr4::Parser* parser, const antlr4::NoViableAltException& e) override {
    // The expected set belongs to where the decision started; it only helps when it failed right there.
    bool failedAtStart = e.getStartToken() == e.getOffendingToken();
    report(parser, e.getOffendingToken(), failedAtStart ? e.getExpectedTokens() : antlr4::misc::IntervalSet());
  }
  void reportInputMismatch(antlr4::Parser* parser, const antlr4::InputMismatchException& e) override {
    report(parser, e.getOffendingToken(), e.getExpectedTokens());
  }
  void reportFailedPredicate(antlr4::Parser* parser, const antlr4::FailedPredicateException& e) override {
    report(parser, e.getOffendingToken(), {});
  }
  void reportUnwantedToken(antlr4::Parser* parser) override { reportOnce(parser); }
  void reportMissingToken(antlr4::Parser* parser) override { reportOnce(parser); }

private:
  void reportOnce(antlr4::Parser* parser) {
    if (inErrorRecoveryMode(parser)) return;
    beginErrorCondition(parser);
    report(parser, parser->getCurrentToken(), getExpectedTokens(parser));
  }
  // Consumes up to the end of the line where `depth` (the braces open) is 0; braces balance (see
  // checkBrackets), so this ends at the end of the definition.
  static void skipRestOfDefinition(antlr4::Parser* parser, int depth) {
    for (size_t type = parser->getTokenStream()->LA(1); type != Token::EOF; type = parser->getTokenStream()->LA(1)) {
      if (type == EmmyParser::NEWLINE && depth == 0) return;
      if (type == EmmyParser::LBRACE) ++depth;
      if (type == EmmyParser::RBRACE) --depth;
      parser->consume();
    }
  }

  static void report(antlr4::Parser* parser, Token* offending, const antlr4::misc::IntervalSet& expected) {
    if (auto mistake = familiarMistake(parser, offending, expected))
      return parser->notifyErrorListeners(mistake->first, mistake->second, nullptr);
    std::optional<std::string> message = lineStartMessage(parser, offending);
    parser->notifyErrorListeners(
        offending, message ? *message : unexpectedTokenMessage(offending, expected, parser->getVocabulary()), nullptr);
  }
};

class ParserErrorListener : public antlr4::BaseErrorListener {
public:
  ParserErrorListener(const SourceMap& map, antlr4::CommonTokenStream& tokens, SyntaxErrors& errors)
      : map_(map), tokens_(tokens), errors_(errors) {}

  void syntaxError(antlr4::Recognizer*, Token* offending, size_t, size_t, const std::string& message,
                   std::exception_ptr) override {
    errors_.add(locationOf(offending), message);
  }

private:
  // Something missing at the end of a line is shown right after the last token before it.
  SourceLoc locationOf(const Token* offending) const {
    bool lineEnd = offending->getType() == EmmyParser::NEWLINE || offending->getType() == Token::EOF;
    if (lineEnd && offending->getTokenIndex() > 0) {
      const Token* previous = tokens_.get(offending->getTokenIndex() - 1);
      if (previous->getType() != EmmyParser::NEWLINE) return map_.after(previous);
    }
    return map_.token(offending);
  }

  const SourceMap& map_;
  antlr4::CommonTokenStream& tokens_;
  SyntaxErrors& errors_;
};

std::string describeCharacter(std::string_view utf8) {
  auto lead = static_cast<unsigned char>(utf8[0]);
  if (lead >= 0x20 && lead < 0x7F) return fmt::format("'{}'", utf8);
  char32_t codePoint = utf8.size() == 1 ? lead : lead & (0x7F >> utf8.size());
  for (size_t i = 1; i < utf8.size(); ++i) codePoint = codePoint << 6 | (static_cast<unsigned char>(utf8[i]) & 0x3F);
  std::string name = fmt::format("U+{:04X}", static_cast<uint32_t>(codePoint));
  return codePoint >= 0xA0 ? fmt::format("'{}' ({})", utf8, name) : name;
}

void reportUnexpectedCharacters(const std::vector<Token*>& tokens, const SourceMap& map, SyntaxErrors& errors) {
  for (const Token* token : tokens) {
    if (token->getType() != EmmyParser::UNEXPECTED_CHARACTER) continue;
    size_t begin = map.byteOf(token->getStartIndex());
    std::string_view character = map.text().substr(begin, utf8SequenceLength(map.text()[begin]));
    errors.add(map.token(token), "unexpected character " + describeCharacter(character));
  }
}

// Brackets decide where lines end, so they are checked before parsing: an unclosed one is reported at
// the bracket that was opened (the parser would only notice far below), and a file whose brackets do not
// balance is not parsed, which spares the user a cascade of consequences. Returns whether they balance.
bool checkBrackets(const std::vector<Token*>& tokens, const SourceMap& map, SyntaxErrors& errors) {
  std::vector<const Token*> open;
  bool balanced = true;
  auto reportUnclosedAbove = [&](size_t keep) {
    for (size_t i = keep; i < open.size(); ++i) errors.add(map.token(open[i]), "unclosed '" + open[i]->getText() + "'");
    balanced &= open.size() == keep;
    open.resize(keep);
  };
  auto innermost = [&](size_t opener) {
    auto it = std::find_if(open.rbegin(), open.rend(), [&](const Token* t) { return t->getType() == opener; });
    return it == open.rend() ? std::nullopt : std::optional<size_t>(open.rend() - it - 1);
  };
  for (const Token* token : tokens) {
    size_t type = token->getType();
    if (type == EmmyParser::LBRACE) {
      // Blocks do not nest: a '{' while one is open means that block was never closed.
      if (auto outer = innermost(EmmyParser::LBRACE)) reportUnclosedAbove(*outer);
    }
    if (isOneOf(type, kOpeningBrackets)) {
      if (open.size() == kMaxBracketNesting) {
        errors.add(map.token(token),
                   fmt::format("brackets are nested too deeply (the limit is {})", kMaxBracketNesting));
        return false;
      }
      open.push_back(token);
      continue;
    }
    size_t opener = type == EmmyParser::RPAREN ? EmmyParser::LPAREN
                    : type == EmmyParser::RBRACK ? EmmyParser::LBRACK
                    : type == EmmyParser::RBRACE ? EmmyParser::LBRACE
                                                 : 0;
    if (opener == 0) continue;
    if (!open.empty() && open.back()->getType() == opener) {
      open.pop_back();
    } else if (auto match = innermost(opener)) {
      reportUnclosedAbove(*match + 1);
      open.pop_back();
    } else if (!open.empty() && open.back()->getType() != EmmyParser::LBRACE) {
      const Token* mismatched = open.back();
      SourceLoc at = map.token(mismatched);
      errors.add(map.token(token), fmt::format("'{}' does not match '{}' at {}:{}", token->getText(),
                                               mismatched->getText(), at.line, at.column));
      balanced = false;
      open.pop_back();
    } else {
      errors.add(map.token(token), "unmatched '" + token->getText() + "'");
      balanced = false;
    }
  }
  reportUnclosedAbove(0);
  return balanced;
}

// ---------------------------------------------------------------------------------------------------
// The parse tree (of a file without syntax errors) to the AST.

class AstBuilder {
public:
  AstBuilder(const SourceMap& map, Diagnostics& diagnostics) : map_(map), diagnostics_(diagnostics) {}

  // The module, or null when the tree holds a form the grammar accepts only to refuse it here.
  std::unique_ptr<ast::Module> module(EmmyParser::FileContext* ctx) {
    auto module = std::make_unique<ast::Module>();
    module->source = map_.file();
    for (EmmyParser::TopLevelContext* item : ctx->topLevel()) {
      // An expression too deep to build abandons its definition; the others are still checked.
      try {
        if (auto* import = item->importDecl()) module->imports.push_back(buildImport(import));
        else if (auto* fn = item->fnDef()) module->fns.push_back(buildFn(fn));
        else if (auto* kernel = item->kernelDef()) module->kernels.push_back(buildKernel(kernel));
        else if (auto* schedule = item->scheduleDef()) module->schedules.push_back(buildSchedule(schedule));
      } catch (const CompilationAborted&) {
        depth_ = 0;
      }
    }
    return failed_ ? nullptr : std::move(module);
  }

private:
  // ---- definitions ----

  ast::Import buildImport(EmmyParser::ImportDeclContext* ctx) { return {ident(ctx->module), map_.node(ctx)}; }

  ast::FnDef buildFn(EmmyParser::FnDefContext* ctx) {
    ast::FnDef fn{ident(ctx->name), {}, buildExpr(ctx->body), map_.node(ctx)};
    for (Token* param : ctx->params) fn.params.push_back(ident(param));
    return fn;
  }

  ast::KernelDef buildKernel(EmmyParser::KernelDefContext* ctx) {
    ast::KernelDef kernel;
    kernel.name = ident(ctx->name);
    kernel.loc = map_.node(ctx);
    if (ctx->typeParams())
      for (auto* typeParam : ctx->typeParams()->typeParam()) {
        if (isIntegerParam(typeParam))
          kernel.integerParams.push_back(buildIntegerParam(typeParam));
        else
          kernel.typeParams.push_back(buildTypeParam(typeParam));
      }
    if (ctx->paramList())
      for (auto* param : ctx->paramList()->param()) kernel.inputs.push_back(buildParam(param, /*isOutput=*/false));
    EmmyParser::OutputsContext* outputs = ctx->outputs();
    std::vector<EmmyParser::ParamContext*> outputParams =
        outputs->param() ? std::vector{outputs->param()} : outputs->paramList()->param();
    for (auto* param : outputParams) kernel.outputs.push_back(buildParam(param, /*isOutput=*/true));
    for (auto* line : ctx->statementLine())
      if (line->statement()) kernel.body.push_back(buildStatement(line->statement()));
    return kernel;
  }

  ast::TypeParam buildTypeParam(EmmyParser::TypeParamContext* ctx) {
    ast::TypeParam typeParam{ident(ctx->name), {}};
    for (Token* type : ctx->bound) typeParam.bound.push_back(ident(type));
    if ((ctx->defaultValue || ctx->defaultName) && !isIntegerParam(ctx))
      error(map_.token(ctx->defaultValue ? ctx->defaultValue : ctx->defaultName), fmt::format("only an integer parameter ({}: i64 = ...) has a default; a type "
                                                       "parameter's type comes from the arguments or from --kernel",
                                                       typeParam.name.name));
    return typeParam;
  }

  // `NAME: i64` among the type parameters declares a compile-time integer.
  static bool isIntegerParam(EmmyParser::TypeParamContext* ctx) {
    return ctx->bound.size() == 1 && ctx->bound[0]->getText() == "i64";
  }

  ast::IntegerParam buildIntegerParam(EmmyParser::TypeParamContext* ctx) {
    ast::IntegerParam param{ident(ctx->name), std::nullopt, std::nullopt};
    if (ctx->defaultValue) {
      std::optional<int64_t> value = integer(ctx->defaultValue);
      if (value) param.defaultValue = ctx->negative ? -*value : *value;
    }
    if (ctx->defaultName) param.defaultParam = ident(ctx->defaultName);
    return param;
  }

  ast::Param buildParam(EmmyParser::ParamContext* ctx, bool isOutput) {
    ast::Param param{ident(ctx->name), buildType(ctx->type()), nullptr, map_.node(ctx)};
    if (ctx->defaultValue) {
      param.defaultValue = buildExpr(ctx->defaultValue);
      if (isOutput) error(param.defaultValue->loc, "an output cannot have a default value");
      else if (param.type.isTensor) error(param.defaultValue->loc, "only a scalar parameter can have a default value");
    }
    return param;
  }

  ast::TypeExpr buildType(EmmyParser::TypeContext* ctx) {
    ast::TypeExpr type{ident(ctx->elementType), ctx->LBRACK() != nullptr, {}, map_.node(ctx)};
    for (auto* dim : ctx->dim()) type.dims.push_back(buildDim(dim));
    return type;
  }

  ast::DimExpr buildDim(EmmyParser::DimContext* ctx) {
    ast::ExprPtr expr = buildAdditive(ctx->additive());
    checkDimExpr(*expr);
    return {std::move(expr), map_.node(ctx)};
  }

  // A dimension is integers and names combined by + - * / (section 2), and min(a, b) and max(a, b) of
  // dimensions (docs/language_extensions.md).
  void checkDimExpr(const ast::Expr& e) {
    if (const auto* number = e.as<ast::Number>()) {
      if (!number->isInteger) error(e.loc, fmt::format("a dimension is an integer, not {}", number->text));
      return;
    }
    if (e.as<ast::Name>()) return;
    if (const auto* call = e.as<ast::Call>()) {
      bool extreme = !call->module && (call->callee.name == "min" || call->callee.name == "max");
      if (!extreme) {
        error(call->callee.loc, fmt::format("a dimension calls min(a, b) or max(a, b) only, not '{}'", call->callee.name));
        return;
      }
      if (call->args.size() != 2 || call->args[0].keyword || call->args[1].keyword) {
        error(e.loc, fmt::format("{} in a dimension takes two dimensions, as in '{}(H, 4)'", call->callee.name, call->callee.name));
        return;
      }
      for (const ast::Argument& argument : call->args) checkDimExpr(*argument.value);
      return;
    }
    if (const auto* binary = e.as<ast::Binary>()) {
      switch (binary->op) {
        case ast::BinaryOp::Add:
        case ast::BinaryOp::Sub:
        case ast::BinaryOp::Mul:
        case ast::BinaryOp::Div:
          checkDimExpr(*binary->lhs);
          checkDimExpr(*binary->rhs);
          return;
        default:
          error(binary->opLoc, fmt::format("a dimension combines sizes, integers and integer parameters with + - * / "
                                           "only, not '{}'",
                                           ast::binaryOpSpelling(binary->op)));
          return;
      }
    }
    error(e.loc, "a dimension is an integer, a size name, or an expression of those and integer parameters with "
                 "+ - * /, min, max and parentheses");
  }

  // Indices written `i` or `i < RANGE` (on the left of a statement, of a reduction): each name, and its
  // range or null; anything else is the error `message`.
  void rangedNames(EmmyParser::ExprListContext* list, const char* message, std::vector<ast::Ident>& names,
                   std::vector<ast::ExprPtr>& ranges) {
    for (auto* entry : list->expr()) {
      ast::ExprPtr built = buildExpr(entry);
      auto* comparison = built->as<ast::Binary>();
      bool ranged = comparison && comparison->op == ast::BinaryOp::Lt;
      const ast::Name* name = ranged ? comparison->lhs->as<ast::Name>() : built->as<ast::Name>();
      if (!name) {
        error(built->loc, message);
        continue;
      }
      names.push_back(ast::Ident{name->name, name->loc});
      ranges.push_back(ranged ? std::move(static_cast<ast::Binary&>(*built).rhs) : nullptr);
    }
  }

  ast::Statement buildStatement(EmmyParser::StatementContext* ctx) {
    ast::Statement statement;
    statement.loc = map_.node(ctx);
    if (auto* index = dynamic_cast<EmmyParser::IndexStatementContext*>(ctx)) {
      statement.targets.push_back(ident(index->target));
      statement.indexForm = true;
      if (index->exprList())
        rangedNames(index->exprList(), "an index on the left of '=' must be a name, or a name and its range, as in y[i < N]",
                    statement.indices, statement.indexRanges);
      statement.value = buildExpr(index->value);
    } else if (auto* tensor = dynamic_cast<EmmyParser::TensorStatementContext*>(ctx)) {
      statement.targets.push_back(ident(tensor->target));
      statement.value = buildExpr(tensor->value);
    } else {
      auto* multi = dynamic_cast<EmmyParser::MultiStatementContext*>(ctx);
      EMMY_INTERNAL_ASSERT(multi != nullptr, "unknown statement form");
      statement.targets = identList(multi->idList());
      statement.value = buildExpr(multi->value);
    }
    return statement;
  }

  // ---- schedules ----

  ast::Schedule buildSchedule(EmmyParser::ScheduleDefContext* ctx) {
    ast::Schedule schedule{ident(ctx->kernel), {}, {}, map_.node(ctx), {}, {}};
    for (auto* choice : ctx->choices) {
      if (choice->integer) {
        ast::Schedule::IntegerChoice integers{ident(choice->integer), {}};
        for (Token* value : choice->values) integers.values.push_back(integer(value).value_or(0));
        schedule.integers.push_back(std::move(integers));
        continue;
      }
      if (!schedule.integers.empty())
        error(map_.node(choice), "a schedule's lists of types come before the values of its integer parameters");
      std::vector<ast::Ident> types;
      for (Token* type : choice->types) types.push_back(ident(type));
      schedule.types.push_back(types);
    }
    for (auto* line : ctx->directiveLine()) {
      if (!line->directive()) continue;
      if (auto* param = dynamic_cast<EmmyParser::ParamDirectiveContext*>(line->directive()))
        schedule.params.push_back(buildParam(param));
      else
        schedule.directives.push_back(buildDirective(line->directive()));
    }
    return schedule;
  }

  ast::Directive buildDirective(EmmyParser::DirectiveContext* ctx) {
    ast::Directive d;
    d.loc = map_.node(ctx);
    using P = EmmyParser;
    using K = ast::DirectiveKind;
    if (auto* c = dynamic_cast<P::SplitDirectiveContext*>(ctx)) buildSplit(c, d);
    else if (auto* c = dynamic_cast<P::TileDirectiveContext*>(ctx)) buildTile(c, d);
    else if (auto* c = dynamic_cast<P::ReorderDirectiveContext*>(ctx)) buildReorder(c, d);
    else if (auto* c = dynamic_cast<P::FuseDirectiveContext*>(ctx)) buildFuse(c, d);
    else if (auto* c = dynamic_cast<P::BindDirectiveContext*>(ctx)) buildBind(c, d);
    else if (auto* c = dynamic_cast<P::InlineDirectiveContext*>(ctx)) setStage(K::Inline, c->stage, d);
    else if (auto* c = dynamic_cast<P::ComputeAtDirectiveContext*>(ctx)) buildComputeAt(c, d);
    else if (auto* c = dynamic_cast<P::RootDirectiveContext*>(ctx)) setStage(K::Root, c->stage, d);
    else if (auto* c = dynamic_cast<P::CacheDirectiveContext*>(ctx)) buildCache(c, d);
    else if (auto* c = dynamic_cast<P::VectorizeDirectiveContext*>(ctx)) buildVectorize(c, d);
    else if (auto* c = dynamic_cast<P::UnrollDirectiveContext*>(ctx)) setAxis(K::Unroll, c->axisRef(), d);
    else if (auto* c = dynamic_cast<P::PadDirectiveContext*>(ctx)) buildPad(c, d);
    else if (auto* c = dynamic_cast<P::DoubleBufferDirectiveContext*>(ctx)) setStage(K::DoubleBuffer, c->stage, d);
    else if (auto* c = dynamic_cast<P::ThreadsDirectiveContext*>(ctx)) buildThreads(c, d);
    else if (auto* c = dynamic_cast<P::IndexBitsDirectiveContext*>(ctx)) buildIndexBits(c, d);
    else if (auto* c = dynamic_cast<P::MmaDirectiveContext*>(ctx)) buildMma(c, d);
    else if (auto* c = dynamic_cast<P::ScanDirectiveContext*>(ctx)) buildScan(c, d);
    else EMMY_INTERNAL_ASSERT(false, "unknown directive '{}'", ctx->getText());
    return d;
  }

  // `param P in [c, ...] = d`
  ast::ParamDecl buildParam(EmmyParser::ParamDirectiveContext* ctx) {
    ast::ParamDecl param{ident(ctx->name), buildFactors(ctx->factorList()), {}, map_.node(ctx), {}};
    EmmyParser::ParamDefaultContext* value = ctx->paramDefault();
    for (; value->otherwise; value = value->otherwise) {
      for (auto [word, expected] : {std::pair{value->ifWord, "if"}, std::pair{value->elseWord, "else"}})
        if (word->getText() != expected)
          error(map_.token(word), fmt::format("expected '{}' in a param's default, as in 'param P in [..] = 64 if D <= "
                                              "1024 else 256'; found '{}'", expected, word->getText()));
      param.cases.push_back({buildFactor(value->value), ident(value->size), value->test->getText(),
                             buildFactor(value->bound), map_.range(value->value->getStart(), value->bound->getStop())});
    }
    param.defaultValue = buildFactor(value->value);
    return param;
  }

  // `split S.a by F -> (ao, ai)`
  void buildSplit(EmmyParser::SplitDirectiveContext* ctx, ast::Directive& d) {
    setAxis(ast::DirectiveKind::Split, ctx->axisRef(), d);
    d.factors.push_back(buildFactor(ctx->factor()));
    d.results = identList(ctx->idList());
    expectCount(d.results.size(), 2, ctx->idList(), "split makes", "loops", "split S.a by F -> (ao, ai)");
  }

  // `tile S (a, b) by (Fa, Fb) -> (ao, bo, ai, bi)`
  void buildTile(EmmyParser::TileDirectiveContext* ctx, ast::Directive& d) {
    constexpr std::string_view form = "tile S (a, b) by (Fa, Fb) -> (ao, bo, ai, bi)";
    d.kind = ast::DirectiveKind::Tile;
    d.stage = ident(ctx->stage);
    d.axes = identList(ctx->axes);
    d.factors = buildFactors(ctx->factorList());
    d.results = identList(ctx->results);
    expectCount(d.axes.size(), 2, ctx->axes, "tile takes", "axes", form);
    expectCount(d.factors.size(), 2, ctx->factorList(), "tile takes", "factors", form);
    expectCount(d.results.size(), 4, ctx->results, "tile makes", "loops", form);
  }

  // `reorder S (a, b, ...)`
  void buildReorder(EmmyParser::ReorderDirectiveContext* ctx, ast::Directive& d) {
    d.kind = ast::DirectiveKind::Reorder;
    d.stage = ident(ctx->stage);
    d.axes = identList(ctx->idList());
  }

  // `fuse S (a, b) -> ab`
  void buildFuse(EmmyParser::FuseDirectiveContext* ctx, ast::Directive& d) {
    d.kind = ast::DirectiveKind::Fuse;
    d.stage = ident(ctx->stage);
    d.axes = identList(ctx->idList());
    d.results.push_back(ident(ctx->result));
    expectCount(d.axes.size(), 2, ctx->idList(), "fuse takes", "axes", "fuse S (a, b) -> ab");
  }

  // `bind S.a to block.x [atomic]`
  void buildBind(EmmyParser::BindDirectiveContext* ctx, ast::Directive& d) {
    setAxis(ast::DirectiveKind::Bind, ctx->axisRef(), d);
    d.targetScope = ident(ctx->scope);
    d.targetDim = ident(ctx->dimension);
    d.atomic = ctx->ATOMIC() != nullptr;
  }

  // `compute S at T.a`
  void buildComputeAt(EmmyParser::ComputeAtDirectiveContext* ctx, ast::Directive& d) {
    d.kind = ast::DirectiveKind::ComputeAt;
    d.stage = ident(ctx->stage);
    setAt(ctx->axisRef(), d);
  }

  // `cache S in shared|registers at T.a [-> NAME]`
  void buildCache(EmmyParser::CacheDirectiveContext* ctx, ast::Directive& d) {
    d.kind = ast::DirectiveKind::Cache;
    d.stage = ident(ctx->stage);
    d.memory = ident(ctx->memory);
    setAt(ctx->axisRef(), d);
    if (ctx->result) d.results.push_back(ident(ctx->result));
  }

  // `pad S by N`
  void buildPad(EmmyParser::PadDirectiveContext* ctx, ast::Directive& d) {
    d.kind = ast::DirectiveKind::Pad;
    d.stage = ident(ctx->stage);
    d.factors.push_back(buildFactor(ctx->factor()));
  }

  // `vectorize S.a [by W]`
  void buildVectorize(EmmyParser::VectorizeDirectiveContext* ctx, ast::Directive& d) {
    setAxis(ast::DirectiveKind::Vectorize, ctx->axisRef(), d);
    if (ctx->factor()) d.factors.push_back(buildFactor(ctx->factor()));
  }

  // `threads S N`
  void buildThreads(EmmyParser::ThreadsDirectiveContext* ctx, ast::Directive& d) {
    setStage(ast::DirectiveKind::Threads, ctx->stage, d);
    d.factors.push_back(buildFactor(ctx->factor()));
  }

  // `index_bits S N`
  void buildIndexBits(EmmyParser::IndexBitsDirectiveContext* ctx, ast::Directive& d) {
    setStage(ast::DirectiveKind::IndexBits, ctx->stage, d);
    d.factors.push_back(buildFactor(ctx->factor()));
  }

  // `mma S (a, b, c) by (WM, WN) [stages N]`: N is 3 when not written.
  void buildMma(EmmyParser::MmaDirectiveContext* ctx, ast::Directive& d) {
    constexpr std::string_view form = "mma S (a, b, c) by (WM, WN) stages N";
    d.kind = ast::DirectiveKind::Mma;
    d.stage = ident(ctx->stage);
    d.axes = identList(ctx->axes);
    d.factors = buildFactors(ctx->factorList());
    expectCount(d.axes.size(), 3, ctx->axes, "mma takes", "loops", form);
    expectCount(d.factors.size(), 2, ctx->factorList(), "mma takes", "warp tile extents", form);
    if (ctx->word && ctx->word->getText() != "stages")
      error(map_.token(ctx->word), fmt::format("expected 'stages' after mma's warp tile, as in '{}'; found '{}'", form,
                                               ctx->word->getText()));
    if (ctx->stages) d.factors.push_back(buildFactor(ctx->stages));
    else d.factors.push_back(ast::Factor{3, {}, d.loc});
  }

  // `scan S.t by (THREADS, ITEMS)`
  void buildScan(EmmyParser::ScanDirectiveContext* ctx, ast::Directive& d) {
    setAxis(ast::DirectiveKind::Scan, ctx->axisRef(), d);
    d.factors = buildFactors(ctx->factorList());
    expectCount(d.factors.size(), 2, ctx->factorList(), "scan takes", "extents", "scan S.t by (THREADS, ITEMS)");
  }

  // `inline S`, `root S`, `double_buffer S`
  void setStage(ast::DirectiveKind kind, Token* stage, ast::Directive& d) {
    d.kind = kind;
    d.stage = ident(stage);
  }

  // The `S.a` that `split`, `bind`, `vectorize` and `unroll` act on.
  void setAxis(ast::DirectiveKind kind, EmmyParser::AxisRefContext* ctx, ast::Directive& d) {
    d.kind = kind;
    d.stage = ident(ctx->stage);
    d.axes.push_back(ident(ctx->axis));
  }

  // The `at T.a` of `compute` and `cache`.
  void setAt(EmmyParser::AxisRefContext* ctx, ast::Directive& d) {
    d.atStage = ident(ctx->stage);
    d.atAxis = ident(ctx->axis);
  }

  std::vector<ast::Factor> buildFactors(EmmyParser::FactorListContext* ctx) {
    std::vector<ast::Factor> result;
    for (auto* f : ctx->factor()) result.push_back(buildFactor(f));
    return result;
  }

  ast::Factor buildFactor(EmmyParser::FactorContext* ctx) {
    if (ctx->INT()) return {integer(ctx->INT()->getSymbol()), {}, map_.node(ctx)};
    return {std::nullopt, ident(ctx->ID()), map_.node(ctx)};
  }

  void expectCount(size_t found, size_t wanted, antlr4::ParserRuleContext* where, std::string_view verb,
                   std::string_view things, std::string_view form) {
    if (found != wanted)
      error(map_.node(where), fmt::format("{} {} {}, as in '{}'; found {}", verb, wanted, things, form, found));
  }

  // ---- expressions ----

  ast::ExprPtr buildExpr(EmmyParser::ExprContext* ctx) { return buildOr(ctx->orExpr()); }

  ast::ExprPtr buildOr(EmmyParser::OrExprContext* ctx) {
    return leftAssociative(ctx, ctx->operands, ctx->ops, [&](auto* operand) { return buildAnd(operand); });
  }

  ast::ExprPtr buildAnd(EmmyParser::AndExprContext* ctx) {
    return leftAssociative(ctx, ctx->operands, ctx->ops, [&](auto* operand) { return buildNot(operand); });
  }

  ast::ExprPtr buildNot(EmmyParser::NotExprContext* ctx) {
    return prefixed(ast::UnaryOp::Not, ctx->ops, ctx, [&] { return buildComparison(ctx->comparison()); });
  }

  // Chains are parsed so that they can be refused here with a reason.
  ast::ExprPtr buildComparison(EmmyParser::ComparisonContext* ctx) {
    if (ctx->ops.size() > 1) error(map_.token(ctx->ops[1]), "comparisons cannot be chained; combine them with 'and'");
    return leftAssociative(ctx, ctx->operands, ctx->ops, [&](auto* operand) { return buildAdditive(operand); });
  }

  ast::ExprPtr buildAdditive(EmmyParser::AdditiveContext* ctx) {
    return leftAssociative(ctx, ctx->operands, ctx->ops, [&](auto* operand) { return buildMultiplicative(operand); });
  }

  ast::ExprPtr buildMultiplicative(EmmyParser::MultiplicativeContext* ctx) {
    return leftAssociative(ctx, ctx->operands, ctx->ops, [&](auto* operand) { return buildUnary(operand); });
  }

  ast::ExprPtr buildUnary(EmmyParser::UnaryContext* ctx) {
    return prefixed(ast::UnaryOp::Neg, ctx->ops, ctx, [&] { return buildPostfix(ctx->postfix()); });
  }

  // `primary[...][...]`: subscripts, also of a call's result (`pad(x, 0)[i - 1]`); `sum[k, l](EXPR)`.
  ast::ExprPtr buildPostfix(EmmyParser::PostfixContext* ctx) {
    if (ctx->reductionBody) return buildReduction(ctx);
    std::vector<EmmyParser::SubscriptContext*> subscripts = ctx->subscript();
    Nesting nesting(*this, subscripts.size(), ctx);
    ast::ExprPtr result = buildPrimary(ctx->primary());
    for (EmmyParser::SubscriptContext* subscript : subscripts) {
      SourceLoc loc = map_.range(ctx->getStart(), subscript->getStop());
      std::vector<ast::ExprPtr> indices;
      if (subscript->exprList()) indices = buildExprs(subscript->exprList());
      result = std::make_unique<ast::Subscript>(loc, std::move(result), std::move(indices));
    }
    return result;
  }

  // `sum[k, l](EXPR)`: the grammar accepts a body after any subscripts; only this shape means something.
  ast::ExprPtr buildReduction(EmmyParser::PostfixContext* ctx) {
    Nesting nesting(*this, 1, ctx);
    auto* op = dynamic_cast<EmmyParser::NameExprContext*>(ctx->primary());
    if (!op || ctx->subscript().size() != 1) {
      error(map_.token(ctx->LPAREN()->getSymbol()), "unexpected '('; a reduction is written OP[k, ...](EXPR)");
      return buildPrimary(ctx->primary());  // the module is not used; building goes on to find other errors
    }
    auto* indexList = ctx->subscript(0)->exprList();
    if (!indexList) {
      error(map_.node(ctx->subscript(0)), "a reduction needs at least one index, as in sum[k](...)");
      return buildPrimary(ctx->primary());
    }
    std::vector<ast::Ident> indices;
    std::vector<ast::ExprPtr> bounds;
    rangedNames(indexList, "a reduction index must be a name, or a name and its bound, as in sum[k](...) or sum[k < 3](...)",
                indices, bounds);
    ast::Ident opName{op->getText(), map_.node(op)};
    ast::ExprPtr body = buildExpr(ctx->reductionBody);
    return std::make_unique<ast::Reduction>(map_.node(ctx), std::move(opName), std::move(indices), std::move(bounds),
                                            std::move(body));
  }

  ast::ExprPtr buildPrimary(EmmyParser::PrimaryContext* ctx) {
    SourceLoc loc = map_.node(ctx);
    if (auto* number = dynamic_cast<EmmyParser::NumberExprContext*>(ctx)) return buildNumber(number->number());
    if (auto* boolean = dynamic_cast<EmmyParser::BoolExprContext*>(ctx))
      return std::make_unique<ast::Bool>(loc, boolean->value->getType() == EmmyParser::TRUE);
    if (auto* call = dynamic_cast<EmmyParser::CallExprContext*>(ctx)) return buildCall(call);
    if (auto* name = dynamic_cast<EmmyParser::NameExprContext*>(ctx))
      return std::make_unique<ast::Name>(loc, name->getText());
    auto* paren = dynamic_cast<EmmyParser::ParenExprContext*>(ctx);
    EMMY_INTERNAL_ASSERT(paren != nullptr, "unknown primary expression");
    return buildExpr(paren->expr());
  }

  // `f(x)`, `nn.layernorm(x, w, b, eps=1e-5)`
  ast::ExprPtr buildCall(EmmyParser::CallExprContext* ctx) {
    Nesting nesting(*this, 1, ctx);
    std::optional<ast::Ident> module;
    if (ctx->module) module = ident(ctx->module);
    std::vector<ast::Argument> args;
    if (ctx->argumentList())
      for (auto* arg : ctx->argumentList()->argument()) args.push_back(buildArgument(arg));
    return std::make_unique<ast::Call>(map_.node(ctx), std::move(module), ident(ctx->callee), std::move(args));
  }

  ast::Argument buildArgument(EmmyParser::ArgumentContext* ctx) {
    ast::Argument arg;
    if (ctx->keyword) arg.keyword = ident(ctx->keyword);
    arg.value = ctx->expr() ? buildExpr(ctx->expr()) : buildList(ctx->list());
    return arg;
  }

  // `[1, 0]`, `[-1, D]`
  ast::ExprPtr buildList(EmmyParser::ListContext* ctx) {
    Nesting nesting(*this, 1, ctx);
    std::vector<ast::ExprPtr> elements;
    for (auto* element : ctx->expr()) elements.push_back(buildExpr(element));
    return std::make_unique<ast::List>(map_.node(ctx), std::move(elements));
  }

  ast::ExprPtr buildNumber(EmmyParser::NumberContext* ctx) {
    SourceLoc loc = map_.node(ctx);
    std::string text = ctx->getText();
    if (ctx->INT()) {
      int64_t value = integer(ctx->INT()->getSymbol()).value_or(0);
      return std::make_unique<ast::Number>(loc, text, true, value, static_cast<double>(value));
    }
    double value = std::numeric_limits<double>::infinity();
    if (ctx->FLOAT()) {
      auto [end, status] = std::from_chars(text.data(), text.data() + text.size(), value);
      EMMY_INTERNAL_ASSERT(end == text.data() + text.size(), "the lexer accepted float literal '{}'", text);
      if (status == std::errc::result_out_of_range) error(loc, "number '" + text + "' is out of the range of f64");
    }
    return std::make_unique<ast::Number>(loc, text, false, 0, value);
  }

  // ---- helpers ----

  // Left-associative binary operators: `a - b - c` is `(a - b) - c`.
  template <typename Operand, typename BuildOperand>
  ast::ExprPtr leftAssociative(antlr4::ParserRuleContext* ctx, const std::vector<Operand*>& operands,
                               const std::vector<Token*>& ops, BuildOperand buildOperand) {
    Nesting nesting(*this, ops.size(), ctx);
    ast::ExprPtr result = buildOperand(operands[0]);
    for (size_t i = 0; i < ops.size(); ++i) {
      ast::ExprPtr rhs = buildOperand(operands[i + 1]);
      SourceLoc loc = map_.range(operands[0]->getStart(), operands[i + 1]->getStop());
      result =
          std::make_unique<ast::Binary>(loc, binaryOp(ops[i]), map_.token(ops[i]), std::move(result), std::move(rhs));
    }
    return result;
  }

  // `- - x` and `not not x`: the innermost operator applies first.
  template <typename BuildOperand>
  ast::ExprPtr prefixed(ast::UnaryOp op, const std::vector<Token*>& ops, antlr4::ParserRuleContext* ctx,
                        BuildOperand buildOperand) {
    Nesting nesting(*this, ops.size(), ctx);
    ast::ExprPtr result = buildOperand();
    for (auto it = ops.rbegin(); it != ops.rend(); ++it)
      result = std::make_unique<ast::Unary>(map_.range(*it, ctx->getStop()), op, std::move(result));
    return result;
  }

  static ast::BinaryOp binaryOp(const Token* op) {
    switch (op->getType()) {
      case EmmyParser::OR: return ast::BinaryOp::Or;
      case EmmyParser::AND: return ast::BinaryOp::And;
      case EmmyParser::LT: return ast::BinaryOp::Lt;
      case EmmyParser::LE: return ast::BinaryOp::Le;
      case EmmyParser::GT: return ast::BinaryOp::Gt;
      case EmmyParser::GE: return ast::BinaryOp::Ge;
      case EmmyParser::EQ: return ast::BinaryOp::Eq;
      case EmmyParser::NE: return ast::BinaryOp::Ne;
      case EmmyParser::PLUS: return ast::BinaryOp::Add;
      case EmmyParser::MINUS: return ast::BinaryOp::Sub;
      case EmmyParser::STAR: return ast::BinaryOp::Mul;
      case EmmyParser::SLASH: return ast::BinaryOp::Div;
      case EmmyParser::PERCENT: return ast::BinaryOp::Mod;
      case EmmyParser::MATMUL: return ast::BinaryOp::MatMul;
    }
    EMMY_INTERNAL_ASSERT(false, "token '{}' is not a binary operator", op->getText());
  }

  // The value of an integer literal, or nullopt (reported) when it does not fit in int64.
  std::optional<int64_t> integer(const Token* token) {
    std::string text = token->getText();
    int64_t value = 0;
    auto [end, status] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (status == std::errc() && end == text.data() + text.size()) return value;
    error(map_.token(token), fmt::format("integer '{}' is too large (the largest is {})", text,
                                         std::numeric_limits<int64_t>::max()));
    return std::nullopt;
  }

  std::vector<ast::ExprPtr> buildExprs(EmmyParser::ExprListContext* ctx) {
    std::vector<ast::ExprPtr> result;
    for (auto* e : ctx->expr()) result.push_back(buildExpr(e));
    return result;
  }

  std::vector<ast::Ident> identList(EmmyParser::IdListContext* ctx) {
    std::vector<ast::Ident> result;
    for (auto* id : ctx->ID()) result.push_back(ident(id));
    return result;
  }

  ast::Ident ident(const Token* token) const { return {token->getText(), map_.token(token)}; }
  ast::Ident ident(antlr4::tree::TerminalNode* node) const { return ident(node->getSymbol()); }

  void error(const SourceLoc& loc, std::string message) {
    diagnostics_.error(loc, std::move(message));
    failed_ = true;
  }

  // Adds `levels` to the depth of the expression being built while it lives (an upper bound: a chain of
  // n operators is n levels deep at its first operand); past kMaxExpressionDepth, the definition is
  // abandoned before a tree that deep exists.
  class Nesting {
  public:
    Nesting(AstBuilder& builder, size_t levels, antlr4::ParserRuleContext* ctx)
        : depth_(builder.depth_), levels_(static_cast<int>(levels)) {
      depth_ += levels_;
      if (depth_ > kMaxExpressionDepth) {
        builder.error(builder.map_.node(ctx),
                      fmt::format("expression is nested too deeply (more than {} levels); split it into several "
                                  "statements",
                                  kMaxExpressionDepth));
        throw CompilationAborted{};
      }
    }
    ~Nesting() { depth_ -= levels_; }
    Nesting(const Nesting&) = delete;
    Nesting& operator=(const Nesting&) = delete;

  private:
    int& depth_;
    int levels_;
  };

  const SourceMap& map_;
  Diagnostics& diagnostics_;
  bool failed_ = false;
  int depth_ = 0;  // see Nesting
};

std::unique_ptr<ast::Module> parseText(std::shared_ptr<const SourceFile> source, Diagnostics& diagnostics) {
  SourceMap map(source);
  SyntaxErrors errors;
  antlr4::ANTLRInputStream input(std::string(map.lexedText()));
  grammar::EmmyLexer lexer(&input);
  lexer.removeErrorListeners();  // every character is some token; unexpected ones are reported below
  antlr4::CommonTokenStream tokens(&lexer);
  tokens.fill();
  reportUnexpectedCharacters(tokens.getTokens(), map, errors);
  if (!checkBrackets(tokens.getTokens(), map, errors)) {
    errors.reportTo(diagnostics);
    return nullptr;
  }

  EmmyParser parser(&tokens);
  parser.removeErrorListeners();
  ParserErrorListener listener(map, tokens, errors);
  parser.addErrorListener(&listener);
  parser.setErrorHandler(std::make_shared<SyntaxErrorStrategy>());
  EmmyParser::FileContext* tree = parser.file();
  if (!errors.empty()) {
    errors.reportTo(diagnostics);
    return nullptr;
  }

  return AstBuilder(map, diagnostics).module(tree);
}

}  // namespace

std::unique_ptr<ast::Module> parseModule(std::shared_ptr<const SourceFile> source, Diagnostics& diagnostics) {
  if (std::optional<size_t> bad = findInvalidUtf8(source->text())) {
    SourceLoc loc = SourceMap(source).bytes(*bad, *bad + 1);
    diagnostics.error(loc, fmt::format("this file is not valid UTF-8 (byte 0x{:02X})",
                                       static_cast<unsigned char>(source->text()[*bad])));
    return nullptr;
  }
  try {
    return parseText(source, diagnostics);
  } catch (const InternalError&) {
    throw;
  } catch (const std::exception& e) {
    // ANTLR's runtime should not throw on valid UTF-8, but whatever it throws is no reason to crash.
    diagnostics.error(SourceLoc{source, 1, 1, 1}, fmt::format("could not parse this file: {}", e.what()));
    return nullptr;
  }
}

}  // namespace emmy
