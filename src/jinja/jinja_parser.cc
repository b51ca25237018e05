// Jinja parser: recursive descent mirroring jinja2/parser.py (same precedence: condexpr < or < and
// < not < compare < +,- < ~ < *,/,//,% < ** < unary < primary/postfix/filter/test).
#include "jinja/jinja_parser.h"

#include <algorithm>
#include <initializer_list>

namespace mimo::jinja {
namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  TemplateAst Parse() {
    TemplateAst ast;
    ast.body = Subparse({});
    if (Cur().type != TokenType::kEof) Fail("unexpected '" + Cur().value + "'");
    ast.referenced_names = std::move(names_);
    return ast;
  }

 private:
  const Token& Cur() const { return toks_[pos_]; }
  const Token& Look() const { return toks_[pos_ + 1 < toks_.size() ? pos_ + 1 : pos_]; }
  const Token& Next() {
    const Token& t = toks_[pos_];
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  [[noreturn]] void Fail(const std::string& msg) const { throw JinjaError(msg, Cur().line); }

  bool IsOp(const char* op) const {
    return Cur().type == TokenType::kOperator && Cur().value == op;
  }
  bool IsName(const char* name) const {
    return Cur().type == TokenType::kName && Cur().value == name;
  }
  bool SkipOp(const char* op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(const char* name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }
  static std::string Describe(const Token& t) {
    switch (t.type) {
      case TokenType::kEof: return "end of template";
      case TokenType::kBlockEnd: return "end of statement block";
      case TokenType::kVarEnd: return "end of print statement";
      case TokenType::kBlockBegin: return "begin of statement block";
      case TokenType::kVarBegin: return "begin of print statement";
      case TokenType::kData: return "template data";
      default: return t.value;
    }
  }
  void ExpectOp(const char* op) {
    if (!SkipOp(op)) Fail(std::string("expected '") + op + "', got '" + Describe(Cur()) + "'");
  }
  void ExpectName(const char* name) {
    if (!SkipName(name)) Fail(std::string("expected '") + name + "', got '" + Describe(Cur()) + "'");
  }
  std::string ExpectAnyName() {
    if (Cur().type != TokenType::kName) Fail("expected name, got '" + Describe(Cur()) + "'");
    return Next().value;
  }
  void ExpectType(TokenType t) {
    if (Cur().type != t) {
      Fail(std::string("expected ") +
           (t == TokenType::kBlockEnd ? "end of statement block" : "end of print statement") +
           ", got '" + Describe(Cur()) + "'");
    }
    Next();
  }

  ExprPtr Make(ExprKind k, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }

  // Every child goes through here, so a node's height is known when it is built and a tree
  // taller than kMaxExprHeight is refused before it exists (a loop such as `a + b + ...` grows it
  // without recursing here). `child` may be null (a slice's missing part, an `if` with no else).
  void Adopt(Expr* parent, ExprPtr child) {
    if (child) Raise(parent, child->height);
    parent->children.push_back(std::move(child));
  }
  void AdoptKeyword(Expr* parent, std::string key, ExprPtr value) {
    Raise(parent, value->height);
    parent->kwargs.emplace_back(std::move(key), std::move(value));
  }
  void Raise(Expr* parent, int child_height) {
    parent->height = std::max(parent->height, child_height + 1);
    if (parent->height > kMaxExprHeight) {
      Fail("expression nested deeper than " + std::to_string(kMaxExprHeight) + " levels");
    }
  }

  // One level of the parser's own recursion (a bracket, a unary operator, an `else` branch of an
  // inline if, a nested block): beyond kMaxSyntaxNesting it is a syntax error, not a stack
  // overflow.
  class NestingGuard {
   public:
    explicit NestingGuard(Parser* p) : p_(p) {
      if (++p_->nesting_ > kMaxSyntaxNesting) {
        p_->Fail("template nested deeper than " + std::to_string(kMaxSyntaxNesting) +
                 " levels (brackets, operators and blocks)");
      }
    }
    ~NestingGuard() { --p_->nesting_; }
    NestingGuard(const NestingGuard&) = delete;
    NestingGuard& operator=(const NestingGuard&) = delete;

   private:
    Parser* p_;
  };

  // ---- statements ------------------------------------------------------------------------

  Body Subparse(const std::vector<std::string>& end_tokens) {
    Body body;
    while (Cur().type != TokenType::kEof) {
      const Token& t = Cur();
      if (t.type == TokenType::kData) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kData;
        s->line = t.line;
        s->text = t.value;
        body.push_back(std::move(s));
        Next();
      } else if (t.type == TokenType::kVarBegin) {
        Next();
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kPrint;
        s->line = t.line;
        s->expr = ParseTuple(false, true, {}, false);
        ExpectType(TokenType::kVarEnd);
        body.push_back(std::move(s));
      } else if (t.type == TokenType::kBlockBegin) {
        Next();
        if (Cur().type == TokenType::kName) {
          for (const auto& e : end_tokens) {
            if (Cur().value == e) return body;
          }
        }
        body.push_back(ParseStatement());
        ExpectType(TokenType::kBlockEnd);
      } else {
        Fail("internal parser error: unexpected token");
      }
    }
    if (!end_tokens.empty()) {
      std::string want;
      for (const auto& e : end_tokens) want += (want.empty() ? "'" : " or '") + e + "'";
      Fail("unexpected end of template; looking for " + want + " (the innermost open block is '" +
           tag_stack_.back() + "')");
    }
    return body;
  }

  Body ParseStatements(const std::vector<std::string>& end_tokens, bool drop_needle) {
    SkipOp(":");
    ExpectType(TokenType::kBlockEnd);
    Body b = Subparse(end_tokens);
    if (drop_needle) Next();
    return b;
  }

  StmtPtr ParseStatement() {
    NestingGuard guard(this);
    if (Cur().type != TokenType::kName) Fail("tag name expected");
    std::string tag = Cur().value;
    tag_stack_.push_back(tag);
    StmtPtr s;
    if (tag == "if") s = ParseIf();
    else if (tag == "for") s = ParseFor();
    else if (tag == "set") s = ParseSet();
    else if (tag == "macro") s = ParseMacro();
    else if (tag == "call") s = ParseCallBlock();
    else if (tag == "filter") s = ParseFilterBlock();
    else if (tag == "with") s = ParseWith();
    else if (tag == "print") s = ParsePrint();
    else if (tag == "break" || tag == "continue") {
      s = std::make_unique<Stmt>();
      s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      s->line = Next().line;
    } else if (tag == "extends" || tag == "block" || tag == "include" || tag == "import" ||
               tag == "from" || tag == "autoescape" || tag == "do") {
      Fail("tag '" + tag + "' is not supported by this engine");
    } else {
      Fail("encountered unknown tag '" + tag + "'");
    }
    tag_stack_.pop_back();
    return s;
  }

  StmtPtr NewStmt(StmtKind k) {
    auto s = std::make_unique<Stmt>();
    s->kind = k;
    s->line = Next().line;  // consumes the tag name
    return s;
  }

  StmtPtr ParseIf() {
    auto s = NewStmt(StmtKind::kIf);
    while (true) {
      ExprPtr test = ParseTuple(false, false, {}, false);
      Body body = ParseStatements({"elif", "else", "endif"}, false);
      s->branches.emplace_back(std::move(test), std::move(body));
      std::string tok = Next().value;
      if (tok == "elif") continue;
      if (tok == "else") s->else_body = ParseStatements({"endif"}, true);
      break;
    }
    return s;
  }

  StmtPtr ParseFor() {
    auto s = NewStmt(StmtKind::kFor);
    s->target = ParseAssignTarget(false, {"in"});
    ExpectName("in");
    s->expr = ParseTuple(false, false, {"recursive"}, false);
    if (SkipName("if")) s->cond = ParseExpression(true);
    if (IsName("recursive")) Fail("recursive loops are not supported by this engine");
    s->body = ParseStatements({"endfor", "else"}, false);
    if (Next().value == "else") s->else_body = ParseStatements({"endfor"}, true);
    return s;
  }

  StmtPtr ParseSet() {
    auto s = NewStmt(StmtKind::kSet);
    s->target = ParseAssignTarget(true, {});
    if (SkipOp("=")) {
      s->expr = ParseTuple(false, true, {}, false);
      return s;
    }
    s->kind = StmtKind::kSetBlock;
    if (IsOp("|")) s->filter = ParseFilter(nullptr, false);
    s->body = ParseStatements({"endset"}, true);
    return s;
  }

  void ParseSignature(MacroDef* m) {
    ExpectOp("(");
    while (!IsOp(")")) {
      if (!m->params.empty()) ExpectOp(",");
      m->params.push_back(ExpectAnyName());
      if (SkipOp("=")) {
        m->defaults.push_back(ParseExpression(true));
      } else if (!m->defaults.empty()) {
        Fail("non-default argument follows default argument");
      }
    }
    ExpectOp(")");
  }

  StmtPtr ParseMacro() {
    auto s = NewStmt(StmtKind::kMacro);
    s->macro = std::make_shared<MacroDef>();
    s->macro->name = ExpectAnyName();
    ParseSignature(s->macro.get());
    macro_stack_.push_back(s->macro.get());
    s->macro->body = ParseStatements({"endmacro"}, true);
    macro_stack_.pop_back();
    return s;
  }

  StmtPtr ParseCallBlock() {
    auto s = NewStmt(StmtKind::kCallBlock);
    s->macro = std::make_shared<MacroDef>();
    s->macro->name = "caller";
    if (IsOp("(")) ParseSignature(s->macro.get());
    s->expr = ParseExpression(true);
    if (s->expr->kind != ExprKind::kCall) Fail("expected call");
    macro_stack_.push_back(s->macro.get());
    s->macro->body = ParseStatements({"endcall"}, true);
    macro_stack_.pop_back();
    return s;
  }

  StmtPtr ParseFilterBlock() {
    auto s = NewStmt(StmtKind::kFilterBlock);
    s->filter = ParseFilter(nullptr, true);
    s->body = ParseStatements({"endfilter"}, true);
    return s;
  }

  StmtPtr ParseWith() {
    auto s = NewStmt(StmtKind::kWith);
    while (Cur().type != TokenType::kBlockEnd) {
      if (!s->with_vars.empty()) ExpectOp(",");
      Target t = ParseAssignTarget(false, {});
      ExpectOp("=");
      s->with_vars.emplace_back(std::move(t), ParseExpression(true));
    }
    s->body = ParseStatements({"endwith"}, true);
    return s;
  }

  StmtPtr ParsePrint() {
    auto s = NewStmt(StmtKind::kPrint);
    auto tuple = Make(ExprKind::kConcat, s->line);
    while (Cur().type != TokenType::kBlockEnd) {
      if (!tuple->children.empty()) ExpectOp(",");
      Adopt(tuple.get(), ParseExpression(true));
    }
    s->expr = std::move(tuple);
    return s;
  }

  Target ParseAssignTarget(bool with_namespace, const std::vector<std::string>& extra_end) {
    Target t;
    if (with_namespace && Cur().type == TokenType::kName && Look().type == TokenType::kOperator &&
        Look().value == ".") {
      t.names.push_back(Next().value);
      Next();
      t.ns_attr = ExpectAnyName();
      return t;
    }
    while (true) {
      if (!t.names.empty()) {
        if (!SkipOp(",")) break;
        t.is_tuple = true;
        if (IsTupleEnd(extra_end) || IsOp("=")) break;
      }
      if (Cur().type != TokenType::kName) Fail("can't assign to '" + Describe(Cur()) + "'");
      const std::string& n = Cur().value;
      if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" ||
          n == "None") {
        Fail("can't assign to const");
      }
      t.names.push_back(Next().value);
      if (IsOp(",")) t.is_tuple = true;
    }
    return t;
  }

  // ---- expressions -----------------------------------------------------------------------

  bool IsTupleEnd(const std::vector<std::string>& extra_end) const {
    const Token& t = Cur();
    if (t.type == TokenType::kVarEnd || t.type == TokenType::kBlockEnd ||
        (t.type == TokenType::kOperator && t.value == ")")) {
      return true;
    }
    if (t.type == TokenType::kName) {
      for (const auto& e : extra_end) {
        if (t.value == e) return true;
      }
    }
    return false;
  }

  ExprPtr ParseTuple(bool simplified, bool with_condexpr, const std::vector<std::string>& extra_end,
                     bool explicit_parens) {
    int line = Cur().line;
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) ExpectOp(",");
      if (IsTupleEnd(extra_end)) break;
      args.push_back(simplified ? ParsePrimary() : ParseExpression(with_condexpr));
      if (IsOp(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parens) Fail("expected an expression, got '" + Describe(Cur()) + "'");
    }
    auto e = Make(ExprKind::kTuple, line);
    for (auto& a : args) Adopt(e.get(), std::move(a));
    return e;
  }

  ExprPtr ParseExpression(bool with_condexpr) {
    NestingGuard guard(this);
    return with_condexpr ? ParseCondExpr() : ParseOr();
  }

  ExprPtr ParseCondExpr() {
    int line = Cur().line;
    ExprPtr expr1 = ParseOr();
    while (SkipName("if")) {
      ExprPtr expr2 = ParseOr();
      ExprPtr expr3;
      if (SkipName("else")) {
        NestingGuard guard(this);
        expr3 = ParseCondExpr();
      }
      auto e = Make(ExprKind::kCondExpr, line);
      Adopt(e.get(), std::move(expr2));
      Adopt(e.get(), std::move(expr1));
      Adopt(e.get(), std::move(expr3));
      expr1 = std::move(e);
      line = Cur().line;
    }
    return expr1;
  }

  ExprPtr Binary(ExprKind k, ExprPtr a, ExprPtr b, int line, const std::string& op = "") {
    auto e = Make(k, line);
    e->name = op;
    Adopt(e.get(), std::move(a));
    Adopt(e.get(), std::move(b));
    return e;
  }

  ExprPtr ParseOr() {
    int line = Cur().line;
    ExprPtr left = ParseAnd();
    while (SkipName("or")) left = Binary(ExprKind::kOr, std::move(left), ParseAnd(), line);
    return left;
  }

  ExprPtr ParseAnd() {
    int line = Cur().line;
    ExprPtr left = ParseNot();
    while (SkipName("and")) left = Binary(ExprKind::kAnd, std::move(left), ParseNot(), line);
    return left;
  }

  ExprPtr ParseNot() {
    if (IsName("not")) {
      int line = Next().line;
      auto e = Make(ExprKind::kNot, line);
      NestingGuard guard(this);
      Adopt(e.get(), ParseNot());
      return e;
    }
    return ParseCompare();
  }

  ExprPtr ParseCompare() {
    int line = Cur().line;
    ExprPtr expr = ParseMath1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (Cur().type == TokenType::kOperator &&
          (Cur().value == "==" || Cur().value == "!=" || Cur().value == "<" ||
           Cur().value == "<=" || Cur().value == ">" || Cur().value == ">=")) {
        op = Next().value;
      } else if (SkipName("in")) {
        op = "in";
      } else if (IsName("not") && Look().type == TokenType::kName && Look().value == "in") {
        Next();
        Next();
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = Make(ExprKind::kCompare, line);
        Adopt(cmp.get(), std::move(expr));
      }
      cmp->ops.push_back(op);
      Adopt(cmp.get(), ParseMath1());
    }
    return cmp ? std::move(cmp) : std::move(expr);
  }

  ExprPtr ParseMath1() {
    int line = Cur().line;
    ExprPtr left = ParseConcat();
    while (IsOp("+") || IsOp("-")) {
      std::string op = Next().value;
      left = Binary(ExprKind::kBinary, std::move(left), ParseConcat(), line, op);
    }
    return left;
  }

  ExprPtr ParseConcat() {
    int line = Cur().line;
    ExprPtr first = ParseMath2();
    if (!IsOp("~")) return first;
    auto e = Make(ExprKind::kConcat, line);
    Adopt(e.get(), std::move(first));
    while (SkipOp("~")) Adopt(e.get(), ParseMath2());
    return e;
  }

  ExprPtr ParseMath2() {
    int line = Cur().line;
    ExprPtr left = ParsePow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      std::string op = Next().value;
      left = Binary(ExprKind::kBinary, std::move(left), ParsePow(), line, op);
    }
    return left;
  }

  ExprPtr ParsePow() {
    int line = Cur().line;
    ExprPtr left = ParseUnary(true);
    while (SkipOp("**")) left = Binary(ExprKind::kBinary, std::move(left), ParseUnary(true), line, "**");
    return left;
  }

  ExprPtr ParseUnary(bool with_filter) {
    int line = Cur().line;
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      bool neg = Next().value == "-";
      node = Make(neg ? ExprKind::kNeg : ExprKind::kPos, line);
      NestingGuard guard(this);
      Adopt(node.get(), ParseUnary(false));
    } else {
      node = ParsePrimary();
    }
    node = ParsePostfix(std::move(node));
    if (with_filter) node = ParseFilterExpr(std::move(node));
    return node;
  }

  ExprPtr ParsePrimary() {
    const Token& t = Cur();
    int line = t.line;
    if (t.type == TokenType::kName) {
      auto e = Make(ExprKind::kLiteral, line);
      if (t.value == "true" || t.value == "True") {
        e->literal = JinjaValue::Bool(true);
      } else if (t.value == "false" || t.value == "False") {
        e->literal = JinjaValue::Bool(false);
      } else if (t.value == "none" || t.value == "None") {
        e->literal = JinjaValue::None();
      } else {
        e->kind = ExprKind::kName;
        e->name = t.value;
        names_.insert(t.value);
        if (!macro_stack_.empty()) {
          MacroDef* m = macro_stack_.back();
          if (t.value == "caller") m->uses_caller = true;
          if (t.value == "varargs") m->uses_varargs = true;
          if (t.value == "kwargs") m->uses_kwargs = true;
        }
      }
      Next();
      return e;
    }
    if (t.type == TokenType::kString) {
      std::string s;
      while (Cur().type == TokenType::kString) s += Next().value;
      auto e = Make(ExprKind::kLiteral, line);
      e->literal = JinjaValue::String(std::move(s));
      return e;
    }
    if (t.type == TokenType::kInt || t.type == TokenType::kFloat) {
      auto e = Make(ExprKind::kLiteral, line);
      e->literal = t.type == TokenType::kInt ? JinjaValue::Int(t.int_value)
                                             : JinjaValue::Float(t.float_value);
      Next();
      return e;
    }
    if (SkipOp("(")) {
      ExprPtr e = ParseTuple(false, true, {}, true);
      ExpectOp(")");
      return e;
    }
    if (SkipOp("[")) {
      auto e = Make(ExprKind::kList, line);
      while (!IsOp("]")) {
        if (!e->children.empty()) ExpectOp(",");
        if (IsOp("]")) break;
        Adopt(e.get(), ParseExpression(true));
      }
      ExpectOp("]");
      return e;
    }
    if (SkipOp("{")) {
      auto e = Make(ExprKind::kDict, line);
      while (!IsOp("}")) {
        if (!e->children.empty()) ExpectOp(",");
        if (IsOp("}")) break;
        Adopt(e.get(), ParseExpression(true));
        ExpectOp(":");
        Adopt(e.get(), ParseExpression(true));
      }
      ExpectOp("}");
      return e;
    }
    Fail("unexpected '" + Describe(t) + "'");
  }

  ExprPtr ParsePostfix(ExprPtr node) {
    while (true) {
      if (IsOp(".") || IsOp("[")) {
        node = ParseSubscript(std::move(node));
      } else if (IsOp("(")) {
        node = ParseCall(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (IsOp("|")) {
        node = ParseFilter(std::move(node), false);
      } else if (IsName("is")) {
        node = ParseTest(std::move(node));
      } else if (IsOp("(")) {
        node = ParseCall(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr ParseSubscript(ExprPtr node) {
    const Token& t = Next();
    int line = t.line;
    if (t.value == ".") {
      const Token& a = Cur();
      if (a.type == TokenType::kName) {
        auto e = Make(ExprKind::kGetAttr, line);
        e->name = Next().value;
        Adopt(e.get(), std::move(node));
        return e;
      }
      if (a.type != TokenType::kInt) Fail("expected name or number");
      auto idx = Make(ExprKind::kLiteral, line);
      idx->literal = JinjaValue::Int(Next().int_value);
      auto e = Make(ExprKind::kGetItem, line);
      Adopt(e.get(), std::move(node));
      Adopt(e.get(), std::move(idx));
      return e;
    }
    std::vector<ExprPtr> args;
    while (!IsOp("]")) {
      if (!args.empty()) ExpectOp(",");
      args.push_back(ParseSubscribed());
    }
    ExpectOp("]");
    auto e = Make(ExprKind::kGetItem, line);
    Adopt(e.get(), std::move(node));
    if (args.size() == 1) {
      Adopt(e.get(), std::move(args[0]));
    } else {
      auto tup = Make(ExprKind::kTuple, line);
      for (auto& a : args) Adopt(tup.get(), std::move(a));
      Adopt(e.get(), std::move(tup));
    }
    return e;
  }

  ExprPtr ParseSubscribed() {
    int line = Cur().line;
    std::vector<ExprPtr> args;
    if (SkipOp(":")) {
      args.push_back(nullptr);
    } else {
      ExprPtr node = ParseExpression(true);
      if (!SkipOp(":")) return node;
      args.push_back(std::move(node));
    }
    if (IsOp(":") || IsOp("]") || IsOp(",")) {
      args.push_back(nullptr);
    } else {
      args.push_back(ParseExpression(true));
    }
    if (SkipOp(":")) {
      args.push_back((IsOp("]") || IsOp(",")) ? nullptr : ParseExpression(true));
    } else {
      args.push_back(nullptr);
    }
    auto e = Make(ExprKind::kSlice, line);
    for (auto& a : args) Adopt(e.get(), std::move(a));
    return e;
  }

  // Parses "(args, kw=val)" into e->children (appended) and e->kwargs.
  void ParseCallArgs(Expr* e) {
    ExpectOp("(");
    bool require_comma = false;
    while (!IsOp(")")) {
      if (require_comma) {
        ExpectOp(",");
        if (IsOp(")")) break;
      }
      if (IsOp("*") || IsOp("**")) Fail("*args / **kwargs in calls are not supported");
      if (Cur().type == TokenType::kName && Look().type == TokenType::kOperator &&
          Look().value == "=") {
        std::string key = Next().value;
        Next();
        AdoptKeyword(e, key, ParseExpression(true));
      } else {
        if (!e->kwargs.empty()) Fail("invalid syntax for function call expression");
        Adopt(e, ParseExpression(true));
      }
      require_comma = true;
    }
    ExpectOp(")");
  }

  ExprPtr ParseCall(ExprPtr node) {
    auto e = Make(ExprKind::kCall, Cur().line);
    Adopt(e.get(), std::move(node));
    ParseCallArgs(e.get());
    return e;
  }

  ExprPtr ParseFilter(ExprPtr node, bool start_inline) {
    while (IsOp("|") || start_inline) {
      if (!start_inline) Next();
      int line = Cur().line;
      std::string name = ExpectAnyName();
      while (SkipOp(".")) name += "." + ExpectAnyName();
      auto e = Make(ExprKind::kFilter, line);
      e->name = name;
      Adopt(e.get(), std::move(node));
      if (IsOp("(")) ParseCallArgs(e.get());
      node = std::move(e);
      start_inline = false;
    }
    return node;
  }

  ExprPtr ParseTest(ExprPtr node) {
    int line = Next().line;  // "is"
    bool negated = SkipName("not");
    std::string name = ExpectAnyName();
    while (SkipOp(".")) name += "." + ExpectAnyName();
    auto e = Make(ExprKind::kTest, line);
    e->name = name;
    Adopt(e.get(), std::move(node));
    const Token& c = Cur();
    if (IsOp("(")) {
      ParseCallArgs(e.get());
    } else if ((c.type == TokenType::kName || c.type == TokenType::kString ||
                c.type == TokenType::kInt || c.type == TokenType::kFloat || IsOp("[") ||
                IsOp("{")) &&
               !(IsName("else") || IsName("or") || IsName("and"))) {
      if (IsName("is")) Fail("You cannot chain multiple tests with is");
      Adopt(e.get(), ParsePostfix(ParsePrimary()));
    }
    if (!negated) return e;
    auto n = Make(ExprKind::kNot, line);
    Adopt(n.get(), std::move(e));
    return n;
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  std::set<std::string> names_;
  std::vector<std::string> tag_stack_;
  std::vector<MacroDef*> macro_stack_;
  int nesting_ = 0;  // NestingGuard levels open now
};

}  // namespace

StatusOr<TemplateAst> ParseTemplate(const std::string& source, const LexerOptions& options) {
  auto tokens = Tokenize(source, options);
  if (!tokens.ok()) return tokens.status();
  try {
    Parser parser(std::move(tokens).value());
    return parser.Parse();
  } catch (const JinjaError& e) {
    return InvalidArgument("template syntax error at line %d: %s", e.line, e.what());
  }
}

}  // namespace mimo::jinja
