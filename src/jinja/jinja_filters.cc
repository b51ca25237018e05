// Jinja filters and tests (jinja2/filters.py, jinja2/tests.py semantics; `tojson` as transformers
// overrides it: json.dumps(x, ensure_ascii=False, indent, separators, sort_keys)).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "jinja/jinja_builtins.h"

namespace mimo::jinja {
namespace {

const JinjaValue& NoneValue() {
  static const JinjaValue v = JinjaValue::None();
  return v;
}

// Positional-or-keyword argument lookup (positional index excludes the filtered value).
const JinjaValue& Arg(const CallArgs& a, size_t i, const char* name, const JinjaValue& def) {
  if (i < a.positional.size()) return a.positional[i];
  if (const JinjaValue* v = a.Keyword(name)) return *v;
  return def;
}

bool BoolArg(const CallArgs& a, size_t i, const char* name, bool def) {
  if (i < a.positional.size()) return a.positional[i].Truthy();
  if (const JinjaValue* v = a.Keyword(name)) return v->Truthy();
  return def;
}

std::string PyType(const JinjaValue& v) {
  if (v.is_none()) return "NoneType";
  std::string n = v.TypeName();
  return n.substr(0, n.find(' '));
}

JinjaValue ToStringValue(const JinjaValue& v) {
  if (v.is_string()) return v;
  return JinjaValue::String(v.Str());
}

// jinja2's make_attrgetter: "a.b" and integer parts.
JinjaValue GetAttrPath(const JinjaValue& v, const std::string& path) {
  JinjaValue cur = v;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    int64_t idx;
    if (!part.empty() && std::all_of(part.begin(), part.end(), ::isdigit) && ParsePyInt(part, &idx)) {
      cur = GetItem(cur, JinjaValue::Int(idx));
    } else {
      cur = GetItem(cur, JinjaValue::String(part));
    }
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

JinjaValue SortKey(const JinjaValue& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return JinjaValue::String(AsciiLower(v.str()));
  return v;
}

JinjaValue Tojson(const JinjaValue& v, const CallArgs& a) {
  JsonDumpOptions opt;
  if (BoolArg(a, 0, "ensure_ascii", false)) {
    throw JinjaError("tojson(ensure_ascii=True) is not supported by this engine");
  }
  const JinjaValue& indent = Arg(a, 1, "indent", NoneValue());
  if (indent.is_int()) {
    opt.indent = static_cast<int>(std::max<int64_t>(0, indent.int_value()));
  } else if (!indent.is_none()) {
    throw JinjaError("tojson indent must be an integer or None");
  }
  const JinjaValue& sep = Arg(a, 2, "separators", NoneValue());
  if (sep.is_list() && sep.list().size() == 2 && sep.list()[0].is_string() &&
      sep.list()[1].is_string()) {
    opt.item_separator = sep.list()[0].str();
    opt.key_separator = sep.list()[1].str();
    opt.separators_set = true;
  } else if (!sep.is_none()) {
    throw JinjaError("tojson separators must be a pair of strings");
  }
  opt.sort_keys = BoolArg(a, 3, "sort_keys", false);
  return JinjaValue::String(ToJson(v, opt));
}

ValueList SelectOrReject(const JinjaValue& v, const CallArgs& a, bool select, bool by_attr) {
  ValueList out;
  size_t first = by_attr ? 1 : 0;
  std::string attr = by_attr && !a.positional.empty() ? a.positional[0].Str() : "";
  std::string test = a.positional.size() > first ? a.positional[first].Str() : "";
  CallArgs test_args;
  for (size_t i = first + 1; i < a.positional.size(); ++i) test_args.positional.push_back(a.positional[i]);
  for (const auto& item : Iterate(v)) {
    JinjaValue x = by_attr ? GetAttrPath(item, attr) : item;
    bool ok = test.empty() ? x.Truthy() : ApplyTest(test, x, test_args);
    if (ok == select) out.push_back(item);
  }
  return out;
}

JinjaValue MinMax(const JinjaValue& v, const CallArgs& a, bool max) {
  ValueList items = Iterate(v);
  if (items.empty()) return JinjaValue::Undefined("No aggregated item, sequence was empty.");
  bool cs = BoolArg(a, 0, "case_sensitive", false);
  const JinjaValue& attr = Arg(a, 1, "attribute", NoneValue());
  auto key = [&](const JinjaValue& x) {
    return SortKey(attr.is_none() ? x : GetAttrPath(x, attr.Str()), cs);
  };
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    int c = CompareValues(key(items[i]), key(items[best]));
    if (max ? c > 0 : c < 0) best = i;
  }
  return items[best];
}

using FilterFn = JinjaValue (*)(const JinjaValue&, const CallArgs&);

JinjaValue FIndent(const JinjaValue& v, const CallArgs& a) {
  if (!v.is_string()) throw JinjaError("unsupported operand type(s) for +=: '" + PyType(v) + "' and 'str'");
  std::string s = v.str();
  static const JinjaValue kFour = JinjaValue::Int(4);
  const JinjaValue& w = Arg(a, 0, "width", kFour);
  std::string pad = w.is_string() ? w.str() : std::string(static_cast<size_t>(std::max<int64_t>(0, w.int_value())), ' ');
  bool first = BoolArg(a, 1, "first", false), blank = BoolArg(a, 2, "blank", false);
  s += "\n";
  std::string out;
  size_t start = 0;
  bool is_first = true;
  while (start < s.size()) {
    size_t nl = s.find('\n', start);
    std::string line = s.substr(start, nl - start);
    bool indent = is_first ? first : (blank || !PyStrip(line, NoneValue(), true, true).empty());
    if (!is_first) out += "\n";
    out += (indent ? pad : "") + line;
    is_first = false;
    start = nl + 1;
  }
  return JinjaValue::String(out);
}

const std::vector<std::pair<std::string, FilterFn>>& Filters() {
  static const std::vector<std::pair<std::string, FilterFn>> kFilters = {
      {"tojson", Tojson},
      {"safe", [](const JinjaValue& v, const CallArgs&) { return JinjaValue::String(v.Str(), true); }},
      {"string", [](const JinjaValue& v, const CallArgs&) { return ToStringValue(v); }},
      {"trim", [](const JinjaValue& v, const CallArgs& a) {
         return JinjaValue::String(PyStrip(v.Str(), Arg(a, 0, "chars", NoneValue()), true, true));
       }},
      {"items", [](const JinjaValue& v, const CallArgs&) {
         if (v.is_undefined()) return JinjaValue::List({});
         if (!v.is_map()) throw JinjaError("Can only get item pairs from a mapping.");
         ValueList out;
         for (const auto& [k, x] : v.map().items()) out.push_back(JinjaValue::List({JinjaValue::String(k), x}, true));
         return JinjaValue::List(std::move(out));
       }},
      {"length", [](const JinjaValue& v, const CallArgs&) { return JinjaValue::Int(v.Length()); }},
      {"count", [](const JinjaValue& v, const CallArgs&) { return JinjaValue::Int(v.Length()); }},
      {"upper", [](const JinjaValue& v, const CallArgs&) { return JinjaValue::String(AsciiUpper(v.Str())); }},
      {"lower", [](const JinjaValue& v, const CallArgs&) { return JinjaValue::String(AsciiLower(v.Str())); }},
      {"capitalize", [](const JinjaValue& v, const CallArgs&) {
         JinjaValue r;
         CallMethod(JinjaValue::String(v.Str()), "capitalize", {}, &r);
         return r;
       }},
      {"title", [](const JinjaValue& v, const CallArgs&) {
         JinjaValue r;
         CallMethod(JinjaValue::String(v.Str()), "title", {}, &r);
         return r;
       }},
      {"default", [](const JinjaValue& v, const CallArgs& a) {
         static const JinjaValue kEmpty = JinjaValue::String("");
         bool boolean = BoolArg(a, 1, "boolean", false);
         if (v.is_undefined() || (boolean && !v.Truthy())) return Arg(a, 0, "default_value", kEmpty);
         return v;
       }},
      {"join", [](const JinjaValue& v, const CallArgs& a) {
         static const JinjaValue kEmpty = JinjaValue::String("");
         std::string d = Arg(a, 0, "d", kEmpty).Str();
         const JinjaValue& attr = Arg(a, 1, "attribute", NoneValue());
         std::string out;
         bool first = true;
         for (const auto& x : Iterate(v)) {
           if (!first) out += d;
           first = false;
           out += (attr.is_none() ? x : GetAttrPath(x, attr.Str())).Str();
         }
         return JinjaValue::String(out);
       }},
      {"first", [](const JinjaValue& v, const CallArgs&) {
         ValueList items = Iterate(v);
         if (items.empty()) return JinjaValue::Undefined("No first item, sequence was empty.");
         return items.front();
       }},
      {"last", [](const JinjaValue& v, const CallArgs&) {
         if (!v.is_list() && !v.is_string() && !v.is_map()) {
           throw JinjaError("'" + PyType(v) + "' object is not reversible");
         }
         ValueList items = Iterate(v);
         if (items.empty()) return JinjaValue::Undefined("No last item, sequence was empty.");
         return items.back();
       }},
      {"replace", [](const JinjaValue& v, const CallArgs& a) {
         const JinjaValue& count = Arg(a, 2, "count", NoneValue());
         return JinjaValue::String(PyReplace(v.Str(), Arg(a, 0, "old", NoneValue()).Str(),
                                             Arg(a, 1, "new", NoneValue()).Str(),
                                             count.is_none() ? -1 : count.int_value()));
       }},
      {"list", [](const JinjaValue& v, const CallArgs&) { return JinjaValue::List(Iterate(v)); }},
      {"int", [](const JinjaValue& v, const CallArgs& a) {
         static const JinjaValue kZero = JinjaValue::Int(0);
         if (v.is_int() || v.is_bool()) return JinjaValue::Int(v.int_value());
         if (v.is_float()) return JinjaValue::Int(static_cast<int64_t>(v.float_value()));
         int64_t i;
         double d;
         if (v.is_string() && ParsePyInt(v.str(), &i)) return JinjaValue::Int(i);
         if (v.is_string() && ParsePyFloat(v.str(), &d) && std::isfinite(d)) {
           return JinjaValue::Int(static_cast<int64_t>(d));
         }
         return Arg(a, 0, "default", kZero);
       }},
      {"float", [](const JinjaValue& v, const CallArgs& a) {
         static const JinjaValue kZero = JinjaValue::Float(0.0);
         if (v.is_number()) return JinjaValue::Float(v.AsDouble());
         double d;
         if (v.is_string() && ParsePyFloat(v.str(), &d)) return JinjaValue::Float(d);
         return Arg(a, 0, "default", kZero);
       }},
      {"abs", [](const JinjaValue& v, const CallArgs&) {
         if (v.is_float()) return JinjaValue::Float(std::fabs(v.float_value()));
         if (v.is_int() || v.is_bool()) return JinjaValue::Int(std::llabs(v.int_value()));
         throw JinjaError("bad operand type for abs(): '" + PyType(v) + "'");
       }},
      {"round", [](const JinjaValue& v, const CallArgs& a) {
         if (!v.is_number()) throw JinjaError("round filter needs a number");
         int64_t prec = Arg(a, 0, "precision", JinjaValue::Int(0)).int_value();
         std::string method = Arg(a, 1, "method", JinjaValue::String("common")).Str();
         double m = std::pow(10.0, static_cast<double>(prec));
         double x = v.AsDouble() * m;
         // "common" is Python's round(): half to even.
         double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::nearbyint(x);
         return JinjaValue::Float(r / m);
       }},
      {"reverse", [](const JinjaValue& v, const CallArgs&) {
         if (v.is_string()) {
           std::u32string u = DecodeUtf8(v.str());
           std::reverse(u.begin(), u.end());
           return JinjaValue::String(EncodeUtf8(u));
         }
         ValueList items = Iterate(v);
         std::reverse(items.begin(), items.end());
         return JinjaValue::List(std::move(items));
       }},
      {"sort", [](const JinjaValue& v, const CallArgs& a) {
         ValueList items = Iterate(v);
         bool rev = BoolArg(a, 0, "reverse", false), cs = BoolArg(a, 1, "case_sensitive", false);
         const JinjaValue& attr = Arg(a, 2, "attribute", NoneValue());
         auto key = [&](const JinjaValue& x) {
           return SortKey(attr.is_none() ? x : GetAttrPath(x, attr.Str()), cs);
         };
         std::stable_sort(items.begin(), items.end(), [&](const JinjaValue& x, const JinjaValue& y) {
           return rev ? CompareValues(key(y), key(x)) < 0 : CompareValues(key(x), key(y)) < 0;
         });
         return JinjaValue::List(std::move(items));
       }},
      {"unique", [](const JinjaValue& v, const CallArgs& a) {
         bool cs = BoolArg(a, 0, "case_sensitive", false);
         const JinjaValue& attr = Arg(a, 1, "attribute", NoneValue());
         ValueList out, seen;
         for (const auto& x : Iterate(v)) {
           JinjaValue k = SortKey(attr.is_none() ? x : GetAttrPath(x, attr.Str()), cs);
           bool dup = false;
           for (const auto& s : seen) dup = dup || ValuesEqual(s, k);
           if (dup) continue;
           seen.push_back(k);
           out.push_back(x);
         }
         return JinjaValue::List(std::move(out));
       }},
      {"min", [](const JinjaValue& v, const CallArgs& a) { return MinMax(v, a, false); }},
      {"max", [](const JinjaValue& v, const CallArgs& a) { return MinMax(v, a, true); }},
      {"sum", [](const JinjaValue& v, const CallArgs& a) {
         const JinjaValue& attr = Arg(a, 0, "attribute", NoneValue());
         JinjaValue total = Arg(a, 1, "start", JinjaValue::Int(0));
         for (const auto& x : Iterate(v)) total = BinaryOp("+", total, attr.is_none() ? x : GetAttrPath(x, attr.Str()));
         return total;
       }},
      {"map", [](const JinjaValue& v, const CallArgs& a) {
         ValueList out;
         if (const JinjaValue* attr = a.Keyword("attribute")) {
           const JinjaValue* def = a.Keyword("default");
           for (const auto& x : Iterate(v)) {
             JinjaValue r = GetAttrPath(x, attr->Str());
             out.push_back(r.is_undefined() && def ? *def : r);
           }
           return JinjaValue::List(std::move(out));
         }
         if (a.positional.empty()) throw JinjaError("map requires a filter argument");
         CallArgs fargs;
         fargs.positional.assign(a.positional.begin() + 1, a.positional.end());
         fargs.keyword = a.keyword;
         for (const auto& x : Iterate(v)) out.push_back(ApplyFilter(a.positional[0].Str(), x, fargs));
         return JinjaValue::List(std::move(out));
       }},
      {"select", [](const JinjaValue& v, const CallArgs& a) { return JinjaValue::List(SelectOrReject(v, a, true, false)); }},
      {"reject", [](const JinjaValue& v, const CallArgs& a) { return JinjaValue::List(SelectOrReject(v, a, false, false)); }},
      {"selectattr", [](const JinjaValue& v, const CallArgs& a) { return JinjaValue::List(SelectOrReject(v, a, true, true)); }},
      {"rejectattr", [](const JinjaValue& v, const CallArgs& a) { return JinjaValue::List(SelectOrReject(v, a, false, true)); }},
      {"dictsort", [](const JinjaValue& v, const CallArgs& a) {
         if (!v.is_map()) throw JinjaError("You can only sort by either \"key\" or \"value\"");
         bool cs = BoolArg(a, 0, "case_sensitive", false), rev = BoolArg(a, 2, "reverse", false);
         bool by_value = Arg(a, 1, "by", JinjaValue::String("key")).Str() == "value";
         ValueList items;
         for (const auto& [k, x] : v.map().items()) items.push_back(JinjaValue::List({JinjaValue::String(k), x}, true));
         std::stable_sort(items.begin(), items.end(), [&](const JinjaValue& x, const JinjaValue& y) {
           int c = CompareValues(SortKey(x.list()[by_value], cs), SortKey(y.list()[by_value], cs));
           return rev ? c > 0 : c < 0;
         });
         return JinjaValue::List(std::move(items));
       }},
      {"indent", FIndent},
      {"escape", [](const JinjaValue& v, const CallArgs&) {
         return v.safe() ? v : JinjaValue::String(HtmlEscape(v.Str()), true);
       }},
      {"e", [](const JinjaValue& v, const CallArgs&) {
         return v.safe() ? v : JinjaValue::String(HtmlEscape(v.Str()), true);
       }},
      {"format", [](const JinjaValue& v, const CallArgs& a) {
         return JinjaValue::String(PyPercentFormat(v.Str(), JinjaValue::List(a.positional, true)));
       }},
      {"attr", [](const JinjaValue& v, const CallArgs& a) {
         return GetAttr(v, Arg(a, 0, "name", NoneValue()).Str());
       }},
      {"wordcount", [](const JinjaValue& v, const CallArgs&) {
         return JinjaValue::Int(static_cast<int64_t>(PySplit(v.Str(), NoneValue(), -1).size()));
       }},
  };
  return kFilters;
}

FilterFn FindFilter(const std::string& name) {
  const std::string n = name == "d" ? "default" : name;
  for (const auto& [k, f] : Filters()) {
    if (k == n) return f;
  }
  return nullptr;
}

bool IsSameAs(const JinjaValue& a, const JinjaValue& b) {
  if (a.kind() != b.kind()) return false;
  if (a.is_none() || a.is_undefined()) return true;
  if (a.is_bool()) return a.bool_value() == b.bool_value();
  // Small ints and interned strings are identical in CPython; other objects only by identity.
  if (a.is_int()) return a.int_value() == b.int_value() && a.int_value() >= -5 && a.int_value() <= 256;
  if (a.is_list()) return &a.list() == &b.list();
  if (a.is_map() || a.is_namespace()) return &a.mutable_namespace() == &b.mutable_namespace();
  return ValuesEqual(a, b) && a.is_string() && a.str().empty();
}

const std::set<std::string>& TestNames() {
  static const std::set<std::string> kNames = {
      "odd", "even", "divisibleby", "defined", "undefined", "filter", "test", "none", "boolean",
      "false", "true", "integer", "float", "lower", "upper", "string", "mapping", "number",
      "sequence", "iterable", "callable", "sameas", "escaped", "in", "==", "eq", "equalto", "!=",
      "ne", ">", "gt", "greaterthan", "ge", ">=", "<", "lt", "lessthan", "<=", "le"};
  return kNames;
}

}  // namespace

bool HasFilter(const std::string& name) { return FindFilter(name) != nullptr; }

bool HasTest(const std::string& name) { return TestNames().count(name) > 0; }

JinjaValue ApplyFilter(const std::string& name, const JinjaValue& value, const CallArgs& args) {
  FilterFn f = FindFilter(name);
  if (!f) throw JinjaError("No filter named '" + name + "'.");
  return f(value, args);
}

bool ApplyTest(const std::string& name, const JinjaValue& v, const CallArgs& a) {
  const JinjaValue& arg = Arg(a, 0, "value", NoneValue());
  auto need_int = [&](const JinjaValue& x) {
    if (!x.is_number()) throw JinjaError("unsupported operand type(s) for %: '" + PyType(x) + "' and 'int'");
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "false") return v.is_bool() && !v.bool_value();
  if (name == "true") return v.is_bool() && v.bool_value();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_map();
  // Python: has __len__ and __getitem__ (Undefined has both).
  if (name == "sequence") return v.is_string() || v.is_list() || v.is_map() || v.is_undefined();
  if (name == "iterable") return v.is_string() || v.is_list() || v.is_map() || v.is_undefined();
  if (name == "callable") return v.is_callable();
  if (name == "escaped") return v.is_string() && v.safe();
  if (name == "lower" || name == "upper") {
    JinjaValue r;
    CallMethod(JinjaValue::String(v.Str()), name == "lower" ? "islower" : "isupper", {}, &r);
    return r.bool_value();
  }
  if (name == "odd" || name == "even") {
    need_int(v);
    int64_t m = BinaryOp("%", v, JinjaValue::Int(2)).int_value();
    return name == "odd" ? m == 1 : m == 0;
  }
  if (name == "divisibleby") {
    need_int(v);
    JinjaValue m = BinaryOp("%", v, arg);
    return m.AsDouble() == 0;
  }
  if (name == "filter") return v.is_string() && HasFilter(v.str());
  if (name == "test") return v.is_string() && HasTest(v.str());
  if (name == "sameas") return IsSameAs(v, arg);
  if (name == "in") return Contains(arg, v);
  if (name == "==" || name == "eq" || name == "equalto") return ValuesEqual(v, arg);
  if (name == "!=" || name == "ne") return !ValuesEqual(v, arg);
  if (name == ">" || name == "gt" || name == "greaterthan") return CompareValues(v, arg) > 0;
  if (name == ">=" || name == "ge") return CompareValues(v, arg) >= 0;
  if (name == "<" || name == "lt" || name == "lessthan") return CompareValues(v, arg) < 0;
  if (name == "<=" || name == "le") return CompareValues(v, arg) <= 0;
  throw JinjaError("No test named '" + name + "'.");
}

}  // namespace mimo::jinja
