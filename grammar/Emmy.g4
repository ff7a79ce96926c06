// The syntax of .emmy files (LANGUAGE.md sections 1, 2, 3 and 5). frontend/parser.cpp turns the parse
// tree into the AST of frontend/ast.h. Where a permissive rule gives a clearer message than a parse
// error (chained comparisons, subscripts on the left of '=', directive arities), the rule accepts more
// and the AST builder rejects it with a message of its own.
grammar Emmy;

@lexer::members {
  // A line break inside ( ) or [ ] continues the line, as in Python.
  int bracketDepth = 0;
  // The directive words are keywords only between the braces of a `schedule` block.
  bool scheduleHeaderSeen = false;
  bool inSchedule = false;
  // The type of the last token on the parser's channel: a line break right after `->` continues the line.
  size_t previousType = antlr4::Token::INVALID_TYPE;

  std::unique_ptr<antlr4::Token> nextToken() override {
    std::unique_ptr<antlr4::Token> token = antlr4::Lexer::nextToken();
    if (token->getChannel() == antlr4::Token::DEFAULT_CHANNEL) previousType = token->getType();
    return token;
  }

  // Whether the token being read starts a line of a block (a directive's first word).
  bool atDirectiveStart() const { return previousType == NEWLINE || previousType == LBRACE; }

  // Whether the next line, after its indentation, starts with `->`: a kernel header (or a directive)
  // broken before its arrow continues there. Only that line is looked at, so lexing stays linear.
  bool nextLineStartsWithArrow() {
    size_t k = 1;
    while (_input->LA(k) == ' ' || _input->LA(k) == '\t') ++k;
    return _input->LA(k) == '-' && _input->LA(k + 1) == '>';
  }
}

// ---------------------------------------------------------------------------------------------------
// A file: import lines, fn and kernel definitions and schedule blocks, one per line or block.
// Lines are written `line (NEWLINE line)*` rather than `(item? NEWLINE)* item?` so that every decision
// needs one token of lookahead: ANTLR then reports an error where it is, not at the start of the item.
// Each kind of line is a rule of its own, possibly empty, so that recovering from a bad line resumes at
// the next line of the same block.
file : topLevel (NEWLINE topLevel)* EOF ;

topLevel : (importDecl | fnDef | kernelDef | scheduleDef)? ;

importDecl : IMPORT module=ID ;

fnDef : FN name=ID LPAREN (params+=ID (COMMA params+=ID)* COMMA?)? RPAREN ASSIGN body=expr ;

kernelDef
  : KERNEL name=ID typeParams? LPAREN paramList? RPAREN ARROW outputs
    LBRACE statementLine (NEWLINE statementLine)* RBRACE
  ;

statementLine : statement? ;

// A long list may break its line after a comma (`<` is no bracket to the lexer, which cannot tell it from
// a comparison).
typeParams : LT typeParam (COMMA NEWLINE* typeParam)* GT ;

// `T: f16 | bf16 | f32`, or an integer parameter `STRIDE: i64 = 1` (or `= STRIDE`, an earlier one's value).
typeParam : name=ID COLON bound+=ID (PIPE bound+=ID)* (ASSIGN (negative=MINUS? defaultValue=INT | defaultName=ID))? ;

paramList : param (COMMA param)* COMMA? ;

outputs : param | LPAREN paramList RPAREN ;

param : name=ID COLON type (ASSIGN defaultValue=expr)? ;

// `f32[]` is a rank-0 tensor, `f32` a scalar parameter.
type : elementType=ID (LBRACK (dim (COMMA dim)*)? RBRACK)? ;

// A literal, a size name, or an expression of those and integer parameters (`(H + 2 * PAD - KH) / STRIDE + 1`);
// the builder checks that only + - * / and parentheses are used.
dim : additive ;

statement
  : target=ID LBRACK exprList? RBRACK ASSIGN value=expr  # indexStatement
  | target=ID ASSIGN value=expr                          # tensorStatement
  | LPAREN idList RPAREN ASSIGN value=expr               # multiStatement
  ;

idList : ID (COMMA ID)* ;

// ---------------------------------------------------------------------------------------------------
// Schedules: one directive per line. Lists are parsed whatever their length; the builder checks it.
scheduleDef : SCHEDULE kernel=ID (LT choices+=typeChoice (COMMA choices+=typeChoice)* GT)? LBRACE directiveLine (NEWLINE directiveLine)* RBRACE ;

// The types a typed schedule's instances take, one list per type parameter (`schedule matmul<f16 | bf16>`),
// then the values of integer parameters (`schedule conv2d<f16 | bf16, GROUPS = 1>`).
typeChoice : types+=ID (PIPE types+=ID)* | integer=ID ASSIGN values+=INT (PIPE values+=INT)* ;

directiveLine : directive? ;

directive
  : PARAM name=ID IN LBRACK factorList RBRACK ASSIGN paramDefault         # paramDirective
  | SPLIT axisRef BY factor ARROW LPAREN idList RPAREN                     # splitDirective
  | TILE stage=ID LPAREN axes=idList RPAREN BY LPAREN factorList RPAREN
    ARROW LPAREN results=idList RPAREN                                     # tileDirective
  | REORDER stage=ID LPAREN idList RPAREN                                  # reorderDirective
  | FUSE stage=ID LPAREN idList RPAREN ARROW result=ID                     # fuseDirective
  | BIND axisRef TO scope=ID DOT dimension=ID ATOMIC?                      # bindDirective
  | INLINE stage=ID                                                        # inlineDirective
  | COMPUTE stage=ID AT axisRef                                            # computeAtDirective
  | ROOT stage=ID                                                          # rootDirective
  | CACHE stage=ID IN memory=ID AT axisRef (ARROW result=ID)?              # cacheDirective
  | VECTORIZE axisRef (BY factor)?                                         # vectorizeDirective
  | UNROLL axisRef                                                         # unrollDirective
  | PAD stage=ID BY factor                                                 # padDirective
  | DOUBLE_BUFFER stage=ID                                                 # doubleBufferDirective
  | THREADS stage=ID factor                                                # threadsDirective
  | INDEX_BITS stage=ID factor                                             # indexBitsDirective
  | MMA stage=ID LPAREN axes=idList RPAREN BY LPAREN factorList RPAREN (word=ID stages=factor)? # mmaDirective
  | SCAN axisRef BY LPAREN factorList RPAREN                              # scanDirective
  ;

// A param's default: `V`, or `V if SIZE <= B else ...` (chosen at launch by a size) or `V if T == f16 else
// ...` (chosen per instance by a type). `if` and `else` are names everywhere else, so the builder checks
// these two words.
paramDefault
  : value=factor (ifWord=ID size=ID test=(LE | LT | GE | GT | EQ | NE) bound=factor elseWord=ID otherwise=paramDefault)?
  ;

axisRef : stage=ID DOT axis=ID ;

factorList : factor (COMMA factor)* ;

factor : INT | ID ;

// ---------------------------------------------------------------------------------------------------
// Expressions, loosest first. Comparisons are parsed as a chain so that the builder can say why a
// chained one is wrong.
expr : orExpr ;

orExpr : operands+=andExpr (ops+=OR operands+=andExpr)* ;

andExpr : operands+=notExpr (ops+=AND operands+=notExpr)* ;

// Prefix operators are loops, not recursion, so that a long run of them cannot exhaust the stack.
notExpr : ops+=NOT* comparison ;

comparison : operands+=additive (ops+=(LT | LE | GT | GE | EQ | NE) operands+=additive)* ;

additive : operands+=multiplicative (ops+=(PLUS | MINUS) operands+=multiplicative)* ;

multiplicative : operands+=unary (ops+=(STAR | SLASH | PERCENT | MATMUL) operands+=unary)* ;

unary : ops+=MINUS* postfix ;

// Subscripts, also of a call's result (`pad(x, 0)[i - 1]`), and reductions: `sum[k, l](EXPR)` is a
// subscripted name followed by its body. Written this way, a single token decides every branch (the
// builder checks that a body follows one subscript of a plain name).
postfix : primary (subscript+ (LPAREN reductionBody=expr RPAREN)?)? ;

// `s[]` reads a rank-0 tensor.
subscript : LBRACK exprList? RBRACK ;

primary
  : number                                                      # numberExpr
  | value=(TRUE | FALSE)                                        # boolExpr
  | (module=ID DOT)? callee=ID LPAREN argumentList? RPAREN      # callExpr
  | ID                                                          # nameExpr
  | LPAREN expr RPAREN                                          # parenExpr
  ;

number : INT | FLOAT | INF ;

exprList : expr (COMMA expr)* ;

argumentList : argument (COMMA argument)* COMMA? ;

argument : (keyword=ID ASSIGN)? (expr | list) ;

list : LBRACK (expr (COMMA expr)* COMMA?)? RBRACK ;

// ---------------------------------------------------------------------------------------------------
// Tokens. Keywords everywhere:
IMPORT : 'import' ;
FN : 'fn' ;
KERNEL : 'kernel' ;
SCHEDULE : 'schedule' { scheduleHeaderSeen = true; } ;
AND : 'and' ;
OR : 'or' ;
NOT : 'not' ;
TRUE : 'true' ;
FALSE : 'false' ;
INF : 'inf' ;

// Keywords inside a schedule block only; elsewhere they are identifiers (`pad(x, 0)`, a tensor `tile`).
PARAM : 'param' { inSchedule }? ;
IN : 'in' { inSchedule }? ;
TO : 'to' { inSchedule }? ;
AT : 'at' { inSchedule }? ;
BY : 'by' { inSchedule }? ;
SPLIT : 'split' { inSchedule }? ;
TILE : 'tile' { inSchedule }? ;
REORDER : 'reorder' { inSchedule }? ;
FUSE : 'fuse' { inSchedule }? ;
BIND : 'bind' { inSchedule }? ;
INLINE : 'inline' { inSchedule }? ;
COMPUTE : 'compute' { inSchedule }? ;
ROOT : 'root' { inSchedule }? ;
CACHE : 'cache' { inSchedule }? ;
VECTORIZE : 'vectorize' { inSchedule }? ;
UNROLL : 'unroll' { inSchedule }? ;
PAD : 'pad' { inSchedule }? ;
DOUBLE_BUFFER : 'double_buffer' { inSchedule }? ;
// Directive words LANGUAGE.md does not reserve: keywords only where a directive starts, names elsewhere
// (a tensor `scan`, a loop `threads`).
THREADS : 'threads' { inSchedule && atDirectiveStart() }? ;
INDEX_BITS : 'index_bits' { inSchedule && atDirectiveStart() }? ;
MMA : 'mma' { inSchedule && atDirectiveStart() }? ;
SCAN : 'scan' { inSchedule && atDirectiveStart() }? ;
ATOMIC : 'atomic' { inSchedule }? ;

ID : [A-Za-z_] [A-Za-z0-9_]* ;

INT : DIGITS ;
FLOAT : DIGITS '.' DIGITS? EXPONENT? | '.' DIGITS EXPONENT? | DIGITS EXPONENT ;
fragment DIGITS : [0-9]+ ;
fragment EXPONENT : [eE] [+-]? DIGITS ;

LPAREN : '(' { ++bracketDepth; } ;
RPAREN : ')' { if (bracketDepth > 0) --bracketDepth; } ;
LBRACK : '[' { ++bracketDepth; } ;
RBRACK : ']' { if (bracketDepth > 0) --bracketDepth; } ;
LBRACE : '{' { inSchedule = scheduleHeaderSeen; scheduleHeaderSeen = false; } ;
RBRACE : '}' { inSchedule = false; } ;

ARROW : '->' ;
LE : '<=' ;
GE : '>=' ;
EQ : '==' ;
NE : '!=' ;
LT : '<' ;
GT : '>' ;
ASSIGN : '=' ;
PLUS : '+' ;
MINUS : '-' ;
STAR : '*' ;
SLASH : '/' ;
PERCENT : '%' ;
MATMUL : '@' ;
COMMA : ',' ;
COLON : ':' ;
DOT : '.' ;
PIPE : '|' ;

// `schedule NAME {` is one line, so a line break ends a header that never reached its '{'. A line break
// next to `->` continues the line: `kernel k(x: f32[N])` may put its `-> (y: f32[N]) {` on the next line.
NEWLINE
  : '\r'? '\n'
    { if (bracketDepth > 0 || previousType == ARROW || nextLineStartsWithArrow()) skip(); else scheduleHeaderSeen = false; }
  ;
COMMENT : '#' ~[\r\n]* -> skip ;
WHITESPACE : [ \t\r\f]+ -> skip ;
// Any other character: kept off the parser's channel and reported by parser.cpp before parsing.
UNEXPECTED_CHARACTER : . -> channel(HIDDEN) ;
