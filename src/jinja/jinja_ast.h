// Jinja syntax tree: expressions and statements produced by jinja_parser, walked by the interpreter.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "jinja/jinja_value.h"

namespace mimo::jinja {

// Nesting limits, enforced by the parser so that every recursive walk over a parsed template
// (parsing itself, validation, rendering, destruction) has a bounded depth and a hostile or broken
// template is a syntax error rather than a stack overflow. jinja2 itself stops earlier (Python's
// recursion limit: about 90 nested brackets, 100 nested blocks, a 1000-term `a + b + ...`).
// Brackets, unary operators, `else`-chained inline ifs and nested statement blocks, each a level:
inline constexpr int kMaxSyntaxNesting = 256;
// Height of one expression's tree (left-associative chains such as `a ~ b ~ ...` or `x|f|g|...`
// deepen the tree without deepening the parser's own recursion).
inline constexpr int kMaxExprHeight = 1024;

enum class ExprKind {
  kLiteral,    // literal
  kName,       // name
  kList,       // children
  kTuple,      // children
  kDict,       // children: key0, value0, key1, value1, ...
  kGetAttr,    // children[0] . name
  kGetItem,    // children[0] [ children[1] ]
  kSlice,      // children: start, stop, step (each may be null)
  kCall,       // children[0](children[1..], kwargs)
  kFilter,     // children[0] | name(children[1..], kwargs); children[0] null in filter blocks
  kTest,       // children[0] is name(children[1..], kwargs)
  kNot,        // not children[0]
  kNeg,        // -children[0]
  kPos,        // +children[0]
  kBinary,     // children[0] op children[1]; op in {+,-,*,/,//,%,**}
  kCompare,    // children[0] ops[0] children[1] ops[1] ...; ops: ==,!=,<,<=,>,>=,in,notin
  kAnd,
  kOr,
  kConcat,     // children joined with ~
  kCondExpr,   // children[1] if children[0] else children[2] (children[2] may be null)
  kCount
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  int line = 0;
  int height = 1;  // of this subtree: 1 for a leaf; at most kMaxExprHeight
  JinjaValue literal;
  std::string name;  // variable / attribute / filter / test name, or binary operator
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare operators
};

enum class StmtKind {
  kData,         // text
  kPrint,        // {{ expr }}
  kIf,           // branches (+ else_body)
  kFor,          // target in expr [if cond] body [else else_body]
  kSet,          // target = expr
  kSetBlock,     // {% set target [| filter] %}body{% endset %}
  kMacro,        // macro definition
  kCallBlock,    // {% call [(params)] expr %}body{% endcall %}
  kFilterBlock,  // {% filter f %}body{% endfilter %}
  kWith,         // {% with a = x %}body{% endwith %}
  kBreak,
  kContinue,
  kCount
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// Assignment target: a name, a tuple of names, or a namespace attribute (ns.attr).
struct Target {
  std::vector<std::string> names;
  bool is_tuple = false;
  std::string ns_attr;  // non-empty: names[0].ns_attr
};

struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // aligned to the last params
  Body body;
  bool uses_caller = false;
  bool uses_varargs = false;
  bool uses_kwargs = false;
};

struct Stmt {
  StmtKind kind = StmtKind::kData;
  int line = 0;
  std::string text;
  ExprPtr expr;                                  // print / for iterable / set value / call
  ExprPtr cond;                                  // for: loop filter
  ExprPtr filter;                                // set block / filter block: kFilter, no operand
  std::vector<std::pair<ExprPtr, Body>> branches;  // if / elif
  Body body;
  Body else_body;
  Target target;
  std::vector<std::pair<Target, ExprPtr>> with_vars;
  std::shared_ptr<MacroDef> macro;  // kMacro, and kCallBlock's caller
};

struct TemplateAst {
  Body body;
  std::set<std::string> referenced_names;  // every variable name the template reads
};

}  // namespace mimo::jinja
