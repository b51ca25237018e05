// JinjaTemplate: a tree-walking interpreter over the parsed template.
//
// Design notes:
// - Scopes follow jinja2's frames: each for-loop iteration, macro call, call block and `with`
//   gets a child scope; `if` does not. `set` writes to the innermost scope, so a `set` inside a
//   loop body is reset at the next iteration and never leaks out (use namespace() for that),
//   exactly as in jinja2.
// - Errors inside the engine are JinjaError exceptions; they never leave Render(), which turns
//   them into a Status with the line of the node being evaluated.
#include "jinja/jinja_template.h"

#include <unordered_map>
#include <unordered_set>

#include "jinja/jinja_builtins.h"
#include "jinja/jinja_parser.h"

namespace mimo::jinja {
namespace {

struct Scope {
  std::unordered_map<std::string, JinjaValue> vars;
  std::shared_ptr<Scope> parent;

  const JinjaValue* Lookup(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent.get()) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};
using ScopePtr = std::shared_ptr<Scope>;

ScopePtr ChildScope(const ScopePtr& parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

enum class Flow { kNormal, kBreak, kContinue };

// Every value bound to a name (set, for, with, macro arguments) passes here. One expression adds
// at most kMaxExprHeight levels to what it reads, so refusing to bind values deeper than
// kMaxValueDepth bounds how deep any value of a render can nest, and so how deep its destruction
// recurses; `{% set ns.x = [ns.x] %}` in a loop ends here rather than in a stack overflow.
void CheckBindable(const JinjaValue& v) {
  if (v.depth() > kMaxValueDepth) {
    throw JinjaError("value nested deeper than the limit of " + std::to_string(kMaxValueDepth) +
                     " levels");
  }
}

class Interpreter;

// A macro (or a call block's `caller`) bound to the scope it was defined in. The scope is held
// weakly: the scope owns the macro value, and a strong pointer back would be a leaking cycle.
class MacroFunction : public Callable {
 public:
  MacroFunction(std::shared_ptr<MacroDef> def, const ScopePtr& closure, Interpreter* interp)
      : def_(std::move(def)), closure_(closure), interp_(interp) {}
  JinjaValue Call(const CallArgs& args) override;
  std::string Name() const override { return def_->name; }

 private:
  std::shared_ptr<MacroDef> def_;
  std::weak_ptr<Scope> closure_;
  Interpreter* interp_;
};

class Interpreter {
 public:
  std::string Run(const TemplateAst& ast, const ScopePtr& root) {
    std::string out;
    Exec(ast.body, root, &out);
    return out;
  }
  int line() const { return line_; }

  // One level of Eval/ExecStmt recursion (or of macro calls, with `macro` set); throws past the
  // limits in jinja_template.h rather than overflowing the stack. A throw leaves the count
  // raised: a render ends at its first error.
  class DepthGuard {
   public:
    explicit DepthGuard(Interpreter* in, const std::string* macro = nullptr)
        : in_(in), macro_(macro) {
      if (macro_ && ++in_->macro_depth_ > kMaxMacroCallDepth) {
        throw JinjaError("macro '" + *macro_ + "' called recursively: macro calls nested deeper " +
                         "than the limit of " + std::to_string(kMaxMacroCallDepth));
      }
      if (!macro_ && ++in_->depth_ > kMaxRenderDepth) {
        throw JinjaError("template rendering nested deeper than the limit of " +
                         std::to_string(kMaxRenderDepth) + " levels");
      }
    }
    ~DepthGuard() { --(macro_ ? in_->macro_depth_ : in_->depth_); }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;

   private:
    Interpreter* in_;
    const std::string* macro_;
  };

  // Namespaces are the only mutable values, so every reference cycle (`{% set ns.self = ns %}`,
  // two namespaces holding each other) runs through one that was assigned to. Emptying those
  // when the render ends frees the cycles (nothing of a render outlives it but its text).
  ~Interpreter() {
    for (const JinjaValue& ns : assigned_namespaces_) ns.mutable_namespace().Clear();
  }

  Flow Exec(const Body& body, const ScopePtr& scope, std::string* out) {
    for (const auto& s : body) {
      Flow f = ExecStmt(*s, scope, out);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  JinjaValue Eval(const Expr& e, const ScopePtr& scope);

 private:
  Flow ExecStmt(const Stmt& s, const ScopePtr& scope, std::string* out);
  Flow ExecFor(const Stmt& s, const ScopePtr& scope, std::string* out);
  void Assign(const Target& t, const JinjaValue& v, const ScopePtr& scope);
  JinjaValue EvalCall(const Expr& e, const ScopePtr& scope, const JinjaValue* caller);
  CallArgs EvalArgs(const Expr& e, size_t first, const ScopePtr& scope);
  JinjaValue EvalCompare(const Expr& e, const ScopePtr& scope);

  int line_ = 0;
  int depth_ = 0;        // open Eval/ExecStmt levels
  int macro_depth_ = 0;  // open macro calls
  std::vector<JinjaValue> assigned_namespaces_;        // each once
  std::unordered_set<const ValueMap*> assigned_maps_;  // their maps
};

JinjaValue MacroFunction::Call(const CallArgs& args) {
  Interpreter::DepthGuard guard(interp_, &def_->name);
  ScopePtr closure = closure_.lock();
  if (!closure) throw JinjaError("macro '" + def_->name + "' called outside the scope it was defined in");
  for (const JinjaValue& v : args.positional) CheckBindable(v);
  for (const auto& kv : args.keyword) CheckBindable(kv.second);
  auto scope = ChildScope(closure);
  const auto& params = def_->params;
  if (args.positional.size() > params.size() && !def_->uses_varargs) {
    throw JinjaError("macro '" + def_->name + "' takes not more than " +
                     std::to_string(params.size()) + " argument(s)");
  }
  std::vector<bool> bound(params.size(), false);
  for (size_t i = 0; i < args.positional.size() && i < params.size(); ++i) {
    scope->vars[params[i]] = args.positional[i];
    bound[i] = true;
  }
  ValueList varargs;
  for (size_t i = params.size(); i < args.positional.size(); ++i) varargs.push_back(args.positional[i]);
  auto kwargs = std::make_shared<ValueMap>();
  bool caller_given = false;
  for (const auto& [k, v] : args.keyword) {
    bool matched = false;
    for (size_t i = 0; i < params.size(); ++i) {
      if (params[i] != k) continue;
      if (bound[i]) throw JinjaError("macro '" + def_->name + "' got multiple values for argument '" + k + "'");
      scope->vars[k] = v;
      bound[i] = true;
      matched = true;
    }
    if (matched) continue;
    if (k == "caller" && def_->uses_caller) {
      scope->vars["caller"] = v;
      caller_given = true;
    } else if (def_->uses_kwargs) {
      kwargs->Set(k, v);
    } else {
      throw JinjaError("macro '" + def_->name + "' takes no keyword argument '" + k + "'");
    }
  }
  // Defaults are evaluated at call time, in the macro's scope (they may use earlier params).
  size_t first_default = params.size() - def_->defaults.size();
  for (size_t i = 0; i < params.size(); ++i) {
    if (bound[i]) continue;
    scope->vars[params[i]] = i >= first_default
                                 ? interp_->Eval(*def_->defaults[i - first_default], scope)
                                 : JinjaValue::Undefined("parameter '" + params[i] + "' was not provided");
  }
  if (def_->uses_varargs) scope->vars["varargs"] = JinjaValue::List(std::move(varargs), true);
  if (def_->uses_kwargs) scope->vars["kwargs"] = JinjaValue::Map(kwargs);
  if (def_->uses_caller && !caller_given) scope->vars["caller"] = JinjaValue::Undefined("No caller defined");
  std::string out;
  interp_->Exec(def_->body, scope, &out);
  return JinjaValue::String(std::move(out));
}

Flow Interpreter::ExecStmt(const Stmt& s, const ScopePtr& scope, std::string* out) {
  DepthGuard guard(this);
  line_ = s.line;
  switch (s.kind) {
    case StmtKind::kData:
      *out += s.text;
      return Flow::kNormal;
    case StmtKind::kPrint:
      *out += Eval(*s.expr, scope).Str();
      return Flow::kNormal;
    case StmtKind::kIf:
      for (const auto& [cond, body] : s.branches) {
        if (Eval(*cond, scope).Truthy()) return Exec(body, scope, out);
      }
      return Exec(s.else_body, scope, out);
    case StmtKind::kFor:
      return ExecFor(s, scope, out);
    case StmtKind::kSet:
      Assign(s.target, Eval(*s.expr, scope), scope);
      return Flow::kNormal;
    case StmtKind::kSetBlock: {
      std::string captured;
      Exec(s.body, ChildScope(scope), &captured);
      JinjaValue v = JinjaValue::String(std::move(captured));
      if (s.filter) {
        line_ = s.filter->line;
        CallArgs args = EvalArgs(*s.filter, 1, scope);
        v = ApplyFilter(s.filter->name, v, args);
      }
      Assign(s.target, v, scope);
      return Flow::kNormal;
    }
    case StmtKind::kMacro:
      scope->vars[s.macro->name] =
          JinjaValue::Function(std::make_shared<MacroFunction>(s.macro, scope, this));
      return Flow::kNormal;
    case StmtKind::kCallBlock: {
      JinjaValue caller =
          JinjaValue::Function(std::make_shared<MacroFunction>(s.macro, scope, this));
      *out += EvalCall(*s.expr, scope, &caller).Str();
      return Flow::kNormal;
    }
    case StmtKind::kFilterBlock: {
      std::string captured;
      Exec(s.body, ChildScope(scope), &captured);
      CallArgs args = EvalArgs(*s.filter, 1, scope);
      *out += ApplyFilter(s.filter->name, JinjaValue::String(std::move(captured)), args).Str();
      return Flow::kNormal;
    }
    case StmtKind::kWith: {
      auto inner = ChildScope(scope);
      for (const auto& [target, expr] : s.with_vars) Assign(target, Eval(*expr, scope), inner);
      return Exec(s.body, inner, out);
    }
    case StmtKind::kBreak:
      return Flow::kBreak;
    case StmtKind::kContinue:
      return Flow::kContinue;
    default:
      throw JinjaError("internal error: unknown statement");
  }
}

void Interpreter::Assign(const Target& t, const JinjaValue& v, const ScopePtr& scope) {
  CheckBindable(v);
  if (!t.ns_attr.empty()) {
    const JinjaValue* ns = scope->Lookup(t.names[0]);
    if (!ns || !ns->is_namespace()) {
      throw JinjaError("cannot assign attribute on non-namespace object");
    }
    ns->mutable_namespace().Set(t.ns_attr, v);
    if (assigned_maps_.insert(&ns->mutable_namespace()).second) assigned_namespaces_.push_back(*ns);
    return;
  }
  if (!t.is_tuple) {
    scope->vars[t.names[0]] = v;
    return;
  }
  ValueList items = Iterate(v);
  if (items.size() != t.names.size()) {
    throw JinjaError(items.size() < t.names.size()
                         ? "not enough values to unpack (expected " + std::to_string(t.names.size()) +
                               ", got " + std::to_string(items.size()) + ")"
                         : "too many values to unpack (expected " + std::to_string(t.names.size()) + ")");
  }
  for (size_t i = 0; i < items.size(); ++i) scope->vars[t.names[i]] = items[i];
}

Flow Interpreter::ExecFor(const Stmt& s, const ScopePtr& scope, std::string* out) {
  ValueList items = Iterate(Eval(*s.expr, scope));
  if (s.cond) {
    ValueList kept;
    for (const auto& item : items) {
      auto tmp = ChildScope(scope);
      Assign(s.target, item, tmp);
      if (Eval(*s.cond, tmp).Truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    Exec(s.else_body, ChildScope(scope), out);
    return Flow::kNormal;
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    auto iter_scope = ChildScope(scope);
    Assign(s.target, items[i], iter_scope);
    auto loop = std::make_shared<ValueMap>();
    loop->Set("index", JinjaValue::Int(i + 1));
    loop->Set("index0", JinjaValue::Int(i));
    loop->Set("revindex", JinjaValue::Int(n - i));
    loop->Set("revindex0", JinjaValue::Int(n - i - 1));
    loop->Set("first", JinjaValue::Bool(i == 0));
    loop->Set("last", JinjaValue::Bool(i == n - 1));
    loop->Set("length", JinjaValue::Int(n));
    loop->Set("depth", JinjaValue::Int(1));
    loop->Set("depth0", JinjaValue::Int(0));
    if (i > 0) loop->Set("previtem", items[i - 1]);
    if (i + 1 < n) loop->Set("nextitem", items[i + 1]);
    loop->Set("cycle", MakeFunction("cycle", [i](const CallArgs& a) {
      if (a.positional.empty()) throw JinjaError("no items for cycling given");
      return a.positional[i % a.positional.size()];
    }));
    iter_scope->vars["loop"] = JinjaValue::Map(std::move(loop));
    Flow f = Exec(s.body, iter_scope, out);
    if (f == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

CallArgs Interpreter::EvalArgs(const Expr& e, size_t first, const ScopePtr& scope) {
  CallArgs args;
  for (size_t i = first; i < e.children.size(); ++i) args.positional.push_back(Eval(*e.children[i], scope));
  for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, Eval(*v, scope));
  return args;
}

JinjaValue Interpreter::EvalCall(const Expr& e, const ScopePtr& scope, const JinjaValue* caller) {
  const Expr& callee = *e.children[0];
  JinjaValue fn;
  if (callee.kind == ExprKind::kGetAttr) {
    JinjaValue obj = Eval(*callee.children[0], scope);
    CallArgs args = EvalArgs(e, 1, scope);
    line_ = e.line;
    JinjaValue result;
    if (!caller && CallMethod(obj, callee.name, args, &result)) return result;
    fn = GetAttr(obj, callee.name);
    if (!fn.is_callable()) {
      if (fn.is_undefined()) throw JinjaError(fn.str());
      throw JinjaError("'" + fn.TypeName().substr(0, fn.TypeName().find(' ')) + "' object is not callable");
    }
    if (caller) args.keyword.emplace_back("caller", *caller);
    return fn.callable().Call(args);
  }
  fn = Eval(callee, scope);
  CallArgs args = EvalArgs(e, 1, scope);
  line_ = e.line;
  if (caller) args.keyword.emplace_back("caller", *caller);
  if (fn.is_undefined()) throw JinjaError(fn.str());
  if (!fn.is_callable()) {
    throw JinjaError("'" + fn.TypeName().substr(0, fn.TypeName().find(' ')) + "' object is not callable");
  }
  return fn.callable().Call(args);
}

JinjaValue Interpreter::EvalCompare(const Expr& e, const ScopePtr& scope) {
  JinjaValue left = Eval(*e.children[0], scope);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    JinjaValue right = Eval(*e.children[i + 1], scope);
    const std::string& op = e.ops[i];
    bool r;
    if (op == "==") r = ValuesEqual(left, right);
    else if (op == "!=") r = !ValuesEqual(left, right);
    else if (op == "in") r = Contains(right, left);
    else if (op == "notin") r = !Contains(right, left);
    else {
      int c = CompareValues(left, right, op);
      r = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    }
    if (!r) return JinjaValue::Bool(false);
    left = std::move(right);
  }
  return JinjaValue::Bool(true);
}

JinjaValue Interpreter::Eval(const Expr& e, const ScopePtr& scope) {
  DepthGuard guard(this);
  line_ = e.line;
  switch (e.kind) {
    case ExprKind::kLiteral:
      return e.literal;
    case ExprKind::kName: {
      const JinjaValue* v = scope->Lookup(e.name);
      return v ? *v : JinjaValue::Undefined("'" + e.name + "' is undefined");
    }
    case ExprKind::kList:
    case ExprKind::kTuple: {
      ValueList items;
      for (const auto& c : e.children) items.push_back(Eval(*c, scope));
      return JinjaValue::List(std::move(items), e.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      auto m = std::make_shared<ValueMap>();
      for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
        JinjaValue k = Eval(*e.children[i], scope);
        if (!k.is_string()) throw JinjaError("only string keys are supported in dict literals");
        m->Set(k.str(), Eval(*e.children[i + 1], scope));
      }
      return JinjaValue::Map(std::move(m));
    }
    case ExprKind::kGetAttr: {
      JinjaValue obj = Eval(*e.children[0], scope);
      line_ = e.line;
      return GetAttr(obj, e.name);
    }
    case ExprKind::kGetItem: {
      JinjaValue obj = Eval(*e.children[0], scope);
      const Expr& idx = *e.children[1];
      if (idx.kind == ExprKind::kSlice) {
        JinjaValue part[3];
        for (int i = 0; i < 3; ++i) {
          part[i] = idx.children[i] ? Eval(*idx.children[i], scope) : JinjaValue::None();
        }
        line_ = e.line;
        return SliceValue(obj, part[0], part[1], part[2]);
      }
      JinjaValue key = Eval(idx, scope);
      line_ = e.line;
      return GetItem(obj, key);
    }
    case ExprKind::kSlice:
      throw JinjaError("slice outside of a subscript");
    case ExprKind::kCall:
      return EvalCall(e, scope, nullptr);
    case ExprKind::kFilter: {
      JinjaValue v = e.children[0] ? Eval(*e.children[0], scope) : JinjaValue::String("");
      CallArgs args = EvalArgs(e, 1, scope);
      line_ = e.line;
      return ApplyFilter(e.name, v, args);
    }
    case ExprKind::kTest: {
      JinjaValue v = Eval(*e.children[0], scope);
      CallArgs args = EvalArgs(e, 1, scope);
      line_ = e.line;
      return JinjaValue::Bool(ApplyTest(e.name, v, args));
    }
    case ExprKind::kNot:
      return JinjaValue::Bool(!Eval(*e.children[0], scope).Truthy());
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      JinjaValue v = Eval(*e.children[0], scope);
      if (v.is_undefined()) throw JinjaError(v.str());
      if (!v.is_number()) {
        throw JinjaError(std::string("bad operand type for unary ") +
                         (e.kind == ExprKind::kNeg ? "-" : "+") + ": '" +
                         v.TypeName().substr(0, v.TypeName().find(' ')) + "'");
      }
      if (e.kind == ExprKind::kPos) return v.is_bool() ? JinjaValue::Int(v.int_value()) : v;
      return v.is_float() ? JinjaValue::Float(-v.float_value()) : JinjaValue::Int(-v.int_value());
    }
    case ExprKind::kBinary: {
      JinjaValue a = Eval(*e.children[0], scope);
      JinjaValue b = Eval(*e.children[1], scope);
      line_ = e.line;
      return BinaryOp(e.name, a, b);
    }
    case ExprKind::kCompare:
      return EvalCompare(e, scope);
    case ExprKind::kAnd: {
      JinjaValue a = Eval(*e.children[0], scope);
      return a.Truthy() ? Eval(*e.children[1], scope) : a;
    }
    case ExprKind::kOr: {
      JinjaValue a = Eval(*e.children[0], scope);
      return a.Truthy() ? a : Eval(*e.children[1], scope);
    }
    case ExprKind::kConcat: {
      std::string s;
      for (const auto& c : e.children) s += Eval(*c, scope).Str();
      return JinjaValue::String(std::move(s));
    }
    case ExprKind::kCondExpr:
      if (Eval(*e.children[0], scope).Truthy()) return Eval(*e.children[1], scope);
      return e.children[2] ? Eval(*e.children[2], scope)
                           : JinjaValue::Undefined("the inline if-expression on line " +
                                                   std::to_string(e.line) +
                                                   " evaluated to false and no else section was defined.");
    default:
      throw JinjaError("internal error: unknown expression");
  }
}

// Unknown filters and tests are compile-time errors in jinja2; check them before rendering.
void ValidateExpr(const Expr* e) {
  if (!e) return;
  if (e->kind == ExprKind::kFilter && !HasFilter(e->name)) {
    throw JinjaError("No filter named '" + e->name + "'.", e->line);
  }
  if (e->kind == ExprKind::kTest && !HasTest(e->name)) {
    throw JinjaError("No test named '" + e->name + "'.", e->line);
  }
  for (const auto& c : e->children) ValidateExpr(c.get());
  for (const auto& kv : e->kwargs) ValidateExpr(kv.second.get());
}

void ValidateBody(const Body& body) {
  for (const auto& s : body) {
    ValidateExpr(s->expr.get());
    ValidateExpr(s->cond.get());
    ValidateExpr(s->filter.get());
    for (const auto& [c, b] : s->branches) {
      ValidateExpr(c.get());
      ValidateBody(b);
    }
    for (const auto& wv : s->with_vars) ValidateExpr(wv.second.get());
    ValidateBody(s->body);
    ValidateBody(s->else_body);
    if (s->macro) {
      for (const auto& d : s->macro->defaults) ValidateExpr(d.get());
      ValidateBody(s->macro->body);
    }
  }
}

}  // namespace

StatusOr<JinjaTemplate> JinjaTemplate::Parse(const std::string& source,
                                             const LexerOptions& options) {
  auto ast = ParseTemplate(source, options);
  if (!ast.ok()) return ast.status();
  try {
    ValidateBody(ast->body);
  } catch (const JinjaError& e) {
    return InvalidArgument("template syntax error at line %d: %s", e.line, e.what());
  }
  JinjaTemplate t;
  t.ast_ = std::make_shared<const TemplateAst>(std::move(ast).value());
  return t;
}

StatusOr<std::string> JinjaTemplate::Render(
    const std::vector<std::pair<std::string, JinjaValue>>& variables) const {
  auto globals = std::make_shared<Scope>();
  for (auto& [k, v] : BuiltinGlobals()) globals->vars[k] = std::move(v);
  for (const auto& [k, v] : variables) globals->vars[k] = v;
  // Template-level `set`s live in their own scope above the context, as in jinja2.
  auto root = ChildScope(globals);
  Interpreter interp;
  try {
    return interp.Run(*ast_, root);
  } catch (const JinjaError& e) {
    return InvalidArgument("template error at line %d: %s", e.line ? e.line : interp.line(),
                           e.what());
  }
}

}  // namespace mimo::jinja
