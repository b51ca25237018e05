// Jinja operators, attribute/item access, Python str/dict methods and the template globals.
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "jinja/jinja_builtins.h"

namespace mimo::jinja {
namespace {

class NativeFunction : public Callable {
 public:
  NativeFunction(std::string name, std::function<JinjaValue(const CallArgs&)> fn)
      : name_(std::move(name)), fn_(std::move(fn)) {}
  JinjaValue Call(const CallArgs& args) override { return fn_(args); }
  std::string Name() const override { return name_; }

 private:
  std::string name_;
  std::function<JinjaValue(const CallArgs&)> fn_;
};

std::string PyType(const JinjaValue& v) {
  if (v.is_none()) return "NoneType";
  std::string n = v.TypeName();
  return n.substr(0, n.find(' '));
}

[[noreturn]] void ThrowUndefined(const JinjaValue& v) { throw JinjaError(v.str()); }

// Python int: bool counts as int.
bool IsIntLike(const JinjaValue& v) { return v.is_int() || v.is_bool(); }

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t FloorMod(int64_t a, int64_t b) {
  int64_t m = a % b;
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

// Resolves a Python slice against a sequence of length n into the selected indices.
std::vector<int64_t> SliceIndices(int64_t n, const JinjaValue& start, const JinjaValue& stop,
                                  const JinjaValue& step) {
  auto as_int = [](const JinjaValue& v) -> int64_t {
    if (!IsIntLike(v)) {
      throw JinjaError("slice indices must be integers or None or have an __index__ method");
    }
    return v.int_value();
  };
  int64_t st = (step.is_none() || step.is_undefined()) ? 1 : as_int(step);
  if (st == 0) throw JinjaError("slice step cannot be zero");
  int64_t lo, hi;
  if (st > 0) {
    lo = (start.is_none() || start.is_undefined()) ? 0 : as_int(start);
    hi = (stop.is_none() || stop.is_undefined()) ? n : as_int(stop);
    if (lo < 0) lo = std::max<int64_t>(lo + n, 0);
    if (lo > n) lo = n;
    if (hi < 0) hi = std::max<int64_t>(hi + n, 0);
    if (hi > n) hi = n;
  } else {
    lo = (start.is_none() || start.is_undefined()) ? n - 1 : as_int(start);
    hi = (stop.is_none() || stop.is_undefined()) ? -1 : as_int(stop);
    if (lo < 0) lo = std::max<int64_t>(lo + n, -1);
    if (lo >= n) lo = n - 1;
    if (!(stop.is_none() || stop.is_undefined())) {
      if (hi < 0) hi = std::max<int64_t>(hi + n, -1);
      if (hi >= n) hi = n - 1;
    }
  }
  std::vector<int64_t> idx;
  for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) idx.push_back(i);
  return idx;
}

const JinjaValue& Arg(const CallArgs& a, size_t i, const char* name, const JinjaValue& def) {
  if (i < a.positional.size()) return a.positional[i];
  if (const JinjaValue* v = a.Keyword(name)) return *v;
  return def;
}

std::string StrArg(const CallArgs& a, size_t i, const char* name, const char* method) {
  static const JinjaValue kNone = JinjaValue::None();
  const JinjaValue& v = Arg(a, i, name, kNone);
  if (!v.is_string()) {
    throw JinjaError(std::string(method) + "() argument must be str, not " + PyType(v));
  }
  return v.str();
}

bool StartsOrEnds(const std::string& s, const JinjaValue& affix, bool start, const char* method) {
  auto test = [&](const std::string& a) {
    if (a.size() > s.size()) return false;
    return start ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (affix.is_string()) return test(affix.str());
  if (affix.is_tuple()) {
    for (const auto& x : affix.list()) {
      if (!x.is_string()) throw JinjaError("tuple for " + std::string(method) + " must only contain str");
      if (test(x.str())) return true;
    }
    return false;
  }
  throw JinjaError(std::string(method) + " first arg must be str or a tuple of str, not " +
                   PyType(affix));
}

bool StringMethod(const std::string& s, const std::string& name, const CallArgs& a,
                  JinjaValue* out) {
  static const JinjaValue kNone = JinjaValue::None();
  static const JinjaValue kMinus1 = JinjaValue::Int(-1);
  if (name == "startswith" || name == "endswith") {
    *out = JinjaValue::Bool(StartsOrEnds(s, Arg(a, 0, "prefix", kNone), name == "startswith",
                                         name.c_str()));
  } else if (name == "strip" || name == "lstrip" || name == "rstrip") {
    *out = JinjaValue::String(
        PyStrip(s, Arg(a, 0, "chars", kNone), name != "rstrip", name != "lstrip"));
  } else if (name == "split") {
    *out = JinjaValue::List(PySplit(s, Arg(a, 0, "sep", kNone), Arg(a, 1, "maxsplit", kMinus1).int_value()));
  } else if (name == "upper") {
    *out = JinjaValue::String(AsciiUpper(s));
  } else if (name == "lower") {
    *out = JinjaValue::String(AsciiLower(s));
  } else if (name == "replace") {
    *out = JinjaValue::String(PyReplace(s, StrArg(a, 0, "old", "replace"),
                                        StrArg(a, 1, "new", "replace"),
                                        Arg(a, 2, "count", kMinus1).int_value()));
  } else if (name == "find" || name == "rfind" || name == "index" || name == "rindex" ||
             name == "count") {
    std::string sub = StrArg(a, 0, "sub", name.c_str());
    if (name == "count") {
      int64_t c = 0;
      if (sub.empty()) {
        c = Utf8Length(s) + 1;
      } else {
        for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++c;
      }
      *out = JinjaValue::Int(c);
      return true;
    }
    size_t p = (name[0] == 'r') ? s.rfind(sub) : s.find(sub);
    if (p == std::string::npos && (name == "index" || name == "rindex")) {
      throw JinjaError("substring not found");
    }
    *out = JinjaValue::Int(p == std::string::npos ? -1 : Utf8Length(s.substr(0, p)));
  } else if (name == "join") {
    std::string r;
    ValueList items = Iterate(Arg(a, 0, "iterable", kNone));
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        throw JinjaError("sequence item " + std::to_string(i) + ": expected str instance, " +
                         PyType(items[i]) + " found");
      }
      if (i) r += s;
      r += items[i].str();
    }
    *out = JinjaValue::String(std::move(r));
  } else if (name == "title" || name == "capitalize") {
    std::string r = s;
    bool prev_cased = false;
    for (size_t i = 0; i < r.size(); ++i) {
      char c = r[i];
      bool alpha = std::isalpha(static_cast<unsigned char>(c));
      if (name == "title") {
        r[i] = alpha ? (prev_cased ? std::tolower(c) : std::toupper(c)) : c;
        prev_cased = alpha;
      } else {
        r[i] = i == 0 ? std::toupper(c) : std::tolower(c);
      }
    }
    *out = JinjaValue::String(std::move(r));
  } else if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" ||
             name == "islower" || name == "isupper") {
    bool ok = !s.empty(), any_cased = false;
    for (char32_t c : DecodeUtf8(s)) {
      bool ascii = c < 0x80;
      if (name == "isdigit") ok = ok && ascii && std::isdigit(static_cast<int>(c));
      if (name == "isalpha") ok = ok && (!ascii || std::isalpha(static_cast<int>(c)));
      if (name == "isalnum") ok = ok && (!ascii || std::isalnum(static_cast<int>(c)));
      if (name == "isspace") ok = ok && IsPySpace(c);
      if (name == "islower" && ascii && std::isupper(static_cast<int>(c))) ok = false;
      if (name == "isupper" && ascii && std::islower(static_cast<int>(c))) ok = false;
      if (ascii && std::isalpha(static_cast<int>(c))) any_cased = true;
    }
    if (name == "islower" || name == "isupper") ok = ok && any_cased;
    *out = JinjaValue::Bool(ok);
  } else if (name == "splitlines") {
    ValueList lines;
    std::string cur;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\n' || s[i] == '\r') {
        lines.push_back(JinjaValue::String(cur));
        cur.clear();
        if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      } else {
        cur.push_back(s[i]);
      }
    }
    if (!cur.empty()) lines.push_back(JinjaValue::String(cur));
    *out = JinjaValue::List(std::move(lines));
  } else {
    return false;
  }
  return true;
}

}  // namespace

JinjaValue MakeFunction(std::string name, std::function<JinjaValue(const CallArgs&)> fn) {
  return JinjaValue::Function(std::make_shared<NativeFunction>(std::move(name), std::move(fn)));
}

std::string HtmlEscape(const std::string& s) {
  std::string r;
  for (char c : s) {
    switch (c) {
      case '&': r += "&amp;"; break;
      case '<': r += "&lt;"; break;
      case '>': r += "&gt;"; break;
      case '"': r += "&#34;"; break;
      case '\'': r += "&#39;"; break;
      default: r.push_back(c);
    }
  }
  return r;
}

std::string AsciiLower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string AsciiUpper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string PyStrip(const std::string& s, const JinjaValue& chars, bool left, bool right) {
  std::u32string u = DecodeUtf8(s);
  std::u32string set;
  bool ws = chars.is_none() || chars.is_undefined();
  if (!ws) {
    if (!chars.is_string()) throw JinjaError("strip arg must be None or str");
    set = DecodeUtf8(chars.str());
  }
  auto strip_it = [&](char32_t c) {
    return ws ? IsPySpace(c) : set.find(c) != std::u32string::npos;
  };
  size_t b = 0, e = u.size();
  if (left) {
    while (b < e && strip_it(u[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(u[e - 1])) --e;
  }
  return EncodeUtf8(u.substr(b, e - b));
}

ValueList PySplit(const std::string& s, const JinjaValue& sep, int64_t maxsplit) {
  ValueList out;
  if (sep.is_none() || sep.is_undefined()) {
    std::u32string u = DecodeUtf8(s);
    size_t i = 0;
    int64_t splits = 0;
    while (i < u.size()) {
      while (i < u.size() && IsPySpace(u[i])) ++i;
      if (i >= u.size()) break;
      if (maxsplit >= 0 && splits >= maxsplit) {
        size_t e = u.size();
        while (e > i && IsPySpace(u[e - 1])) --e;
        out.push_back(JinjaValue::String(EncodeUtf8(u.substr(i, e - i))));
        break;
      }
      size_t j = i;
      while (j < u.size() && !IsPySpace(u[j])) ++j;
      out.push_back(JinjaValue::String(EncodeUtf8(u.substr(i, j - i))));
      ++splits;
      i = j;
    }
    return out;
  }
  if (!sep.is_string()) throw JinjaError("must be str or None, not " + PyType(sep));
  const std::string& d = sep.str();
  if (d.empty()) throw JinjaError("empty separator");
  size_t start = 0;
  int64_t splits = 0;
  while (true) {
    size_t p = (maxsplit >= 0 && splits >= maxsplit) ? std::string::npos : s.find(d, start);
    if (p == std::string::npos) {
      out.push_back(JinjaValue::String(s.substr(start)));
      return out;
    }
    out.push_back(JinjaValue::String(s.substr(start, p - start)));
    start = p + d.size();
    ++splits;
  }
}

std::string PyReplace(const std::string& s, const std::string& old, const std::string& repl,
                      int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts repl between every character (and at both ends).
    std::u32string u = DecodeUtf8(s);
    int64_t n = 0;
    for (size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || n < count) {
        out += repl;
        ++n;
      }
      if (i < u.size()) AppendUtf8(u[i], &out);
    }
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t p = s.find(old, pos);
    if (p == std::string::npos) break;
    out.append(s, pos, p - pos);
    out += repl;
    pos = p + old.size();
    ++n;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

bool ParsePyInt(const std::string& text, int64_t* out) {
  std::string s = PyStrip(text, JinjaValue::None(), true, true);
  std::string clean;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() && std::isdigit((unsigned char)s[i - 1]) &&
        std::isdigit((unsigned char)s[i + 1])) {
      continue;
    }
    clean.push_back(s[i]);
  }
  if (clean.empty()) return false;
  size_t i = (clean[0] == '+' || clean[0] == '-') ? 1 : 0;
  if (i >= clean.size()) return false;
  for (size_t k = i; k < clean.size(); ++k) {
    if (!std::isdigit(static_cast<unsigned char>(clean[k]))) return false;
  }
  *out = std::strtoll(clean.c_str(), nullptr, 10);
  return true;
}

bool ParsePyFloat(const std::string& text, double* out) {
  std::string s = AsciiLower(PyStrip(text, JinjaValue::None(), true, true));
  if (s.empty()) return false;
  std::string body = (s[0] == '+' || s[0] == '-') ? s.substr(1) : s;
  if (body == "inf" || body == "infinity" || body == "nan") {
    double v = body == "nan" ? NAN : INFINITY;
    *out = s[0] == '-' ? -v : v;
    return true;
  }
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return false;
  for (char c : body) {
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == '+' ||
          c == '-')) {
      return false;  // strtod accepts hex and more; Python float() does not
    }
  }
  return true;
}

std::string PyPercentFormat(const std::string& fmt, const JinjaValue& args) {
  ValueList list = args.is_tuple() ? args.list() : ValueList{args};
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    size_t j = i + 1;
    std::string spec = "%";
    while (j < fmt.size() && std::string("-+ 0#").find(fmt[j]) != std::string::npos) spec += fmt[j++];
    while (j < fmt.size() && (std::isdigit((unsigned char)fmt[j]) || fmt[j] == '.')) spec += fmt[j++];
    if (j >= fmt.size()) throw JinjaError("incomplete format");
    char conv = fmt[j];
    i = j;
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (next >= list.size()) throw JinjaError("not enough arguments for format string");
    const JinjaValue& v = list[next++];
    char buf[512];
    if (conv == 's' || conv == 'r' || conv == 'a') {
      std::string str = conv == 's' ? v.Str() : v.Repr();
      std::snprintf(buf, sizeof(buf), (spec + "s").c_str(), str.c_str());
      out += std::string(buf).size() < sizeof(buf) - 1 ? std::string(buf) : str;
    } else if (conv == 'd' || conv == 'i' || conv == 'x' || conv == 'X' || conv == 'o') {
      if (!v.is_number()) throw JinjaError("%" + std::string(1, conv) + " format: a real number is required, not " + PyType(v));
      long long n = v.is_float() ? static_cast<long long>(v.float_value()) : v.int_value();
      std::snprintf(buf, sizeof(buf), (spec + "ll" + (conv == 'i' ? 'd' : conv)).c_str(), n);
      out += buf;
    } else if (conv == 'f' || conv == 'F' || conv == 'e' || conv == 'E' || conv == 'g' ||
               conv == 'G') {
      if (!v.is_number()) throw JinjaError("must be real number, not " + PyType(v));
      std::snprintf(buf, sizeof(buf), (spec + conv).c_str(), v.AsDouble());
      out += buf;
    } else {
      throw JinjaError(std::string("unsupported format character '") + conv + "'");
    }
  }
  if (next < list.size()) throw JinjaError("not all arguments converted during string formatting");
  return out;
}

JinjaValue GetAttr(const JinjaValue& obj, const std::string& name) {
  if (obj.is_undefined()) ThrowUndefined(obj);
  if (obj.is_map() || obj.is_namespace()) {
    const JinjaValue* v = obj.is_map() ? obj.map().Find(name) : obj.mutable_namespace().Find(name);
    if (v) return *v;
  }
  return JinjaValue::Undefined("'" + obj.TypeName() + "' has no attribute '" + name + "'");
}

JinjaValue GetItem(const JinjaValue& obj, const JinjaValue& key) {
  if (obj.is_undefined()) ThrowUndefined(obj);
  if (obj.is_map() && key.is_string()) {
    if (const JinjaValue* v = obj.map().Find(key.str())) return *v;
  } else if ((obj.is_list() || obj.is_string()) && IsIntLike(key)) {
    int64_t n = obj.Length();
    int64_t i = key.int_value();
    if (i < 0) i += n;
    if (i >= 0 && i < n) {
      if (obj.is_list()) return obj.list()[i];
      std::u32string u = DecodeUtf8(obj.str());
      std::string r;
      AppendUtf8(u[i], &r);
      return JinjaValue::String(std::move(r));
    }
  } else if (obj.is_namespace() && key.is_string()) {
    if (const JinjaValue* v = obj.mutable_namespace().Find(key.str())) return *v;
  }
  if (key.is_string()) {
    return JinjaValue::Undefined("'" + obj.TypeName() + "' has no attribute '" + key.str() + "'");
  }
  return JinjaValue::Undefined(obj.TypeName() + " has no element " + key.Repr());
}

JinjaValue SliceValue(const JinjaValue& obj, const JinjaValue& start, const JinjaValue& stop,
                      const JinjaValue& step) {
  if (obj.is_undefined()) ThrowUndefined(obj);
  if (obj.is_list()) {
    ValueList out;
    for (int64_t i : SliceIndices(obj.Length(), start, stop, step)) out.push_back(obj.list()[i]);
    return JinjaValue::List(std::move(out), obj.is_tuple());
  }
  if (obj.is_string()) {
    std::u32string u = DecodeUtf8(obj.str());
    std::string out;
    for (int64_t i : SliceIndices(static_cast<int64_t>(u.size()), start, stop, step)) {
      AppendUtf8(u[i], &out);
    }
    return JinjaValue::String(std::move(out), obj.safe());
  }
  return JinjaValue::Undefined(obj.TypeName() + " has no element slice");
}

JinjaValue BinaryOp(const std::string& op, const JinjaValue& a, const JinjaValue& b) {
  if (a.is_undefined()) ThrowUndefined(a);
  if (b.is_undefined()) ThrowUndefined(b);
  auto unsupported = [&]() -> JinjaError {
    return JinjaError("unsupported operand type(s) for " + op + ": '" + PyType(a) + "' and '" +
                      PyType(b) + "'");
  };
  if (a.is_number() && b.is_number()) {
    bool ints = IsIntLike(a) && IsIntLike(b);
    double x = a.AsDouble(), y = b.AsDouble();
    if (op == "+") return ints ? JinjaValue::Int(a.int_value() + b.int_value()) : JinjaValue::Float(x + y);
    if (op == "-") return ints ? JinjaValue::Int(a.int_value() - b.int_value()) : JinjaValue::Float(x - y);
    if (op == "*") return ints ? JinjaValue::Int(a.int_value() * b.int_value()) : JinjaValue::Float(x * y);
    if (op == "/") {
      if (y == 0) throw JinjaError("division by zero");
      return JinjaValue::Float(x / y);
    }
    if (op == "//" || op == "%") {
      if (y == 0) throw JinjaError(ints ? "integer division or modulo by zero" : "float modulo");
      if (ints) {
        return op == "//" ? JinjaValue::Int(FloorDiv(a.int_value(), b.int_value()))
                          : JinjaValue::Int(FloorMod(a.int_value(), b.int_value()));
      }
      if (op == "//") return JinjaValue::Float(std::floor(x / y));
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return JinjaValue::Float(m);
    }
    if (op == "**") {
      if (ints && b.int_value() >= 0) {
        int64_t r = 1;
        for (int64_t i = 0; i < b.int_value(); ++i) r *= a.int_value();
        return JinjaValue::Int(r);
      }
      return JinjaValue::Float(std::pow(x, y));
    }
  }
  if (op == "+" && a.is_string() && b.is_string()) {
    if (a.safe() || b.safe()) {  // markupsafe.Markup escapes the other operand
      std::string l = a.safe() ? a.str() : HtmlEscape(a.str());
      std::string r = b.safe() ? b.str() : HtmlEscape(b.str());
      return JinjaValue::String(l + r, true);
    }
    return JinjaValue::String(a.str() + b.str());
  }
  if (op == "+" && (a.is_string() || a.is_list()) && PyType(a) != PyType(b)) {
    // Python: str + int, list + tuple, ... (its message names the left operand's type first).
    throw JinjaError("can only concatenate " + PyType(a) + " (not \"" + PyType(b) + "\") to " +
                     PyType(a));
  }
  if (op == "+" && a.is_list() && b.is_list()) {
    if (a.is_tuple() != b.is_tuple()) throw unsupported();
    ValueList out = a.list();
    out.insert(out.end(), b.list().begin(), b.list().end());
    return JinjaValue::List(std::move(out), a.is_tuple());
  }
  if (op == "*" && ((IsIntLike(a) && (b.is_string() || b.is_list())) ||
                    (IsIntLike(b) && (a.is_string() || a.is_list())))) {
    const JinjaValue& seq = IsIntLike(a) ? b : a;
    int64_t n = IsIntLike(a) ? a.int_value() : b.int_value();
    if (seq.is_string()) {
      std::string out;
      for (int64_t i = 0; i < n; ++i) out += seq.str();
      return JinjaValue::String(std::move(out));
    }
    ValueList out;
    for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.list().begin(), seq.list().end());
    return JinjaValue::List(std::move(out), seq.is_tuple());
  }
  if (op == "%" && a.is_string()) return JinjaValue::String(PyPercentFormat(a.str(), b));
  throw unsupported();
}

bool Contains(const JinjaValue& container, const JinjaValue& item) {
  if (container.is_string()) {
    if (!item.is_string()) {
      throw JinjaError("'in <string>' requires string as left operand, not " + PyType(item));
    }
    return container.str().find(item.str()) != std::string::npos;
  }
  if (container.is_list()) {
    for (const auto& x : container.list()) {
      if (ValuesEqual(x, item)) return true;
    }
    return false;
  }
  if (container.is_map()) return item.is_string() && container.map().Find(item.str()) != nullptr;
  if (container.is_undefined()) return false;
  throw JinjaError("argument of type '" + PyType(container) + "' is not iterable");
}

ValueList Iterate(const JinjaValue& v) {
  if (v.is_list()) return v.list();
  if (v.is_undefined()) return {};
  ValueList out;
  if (v.is_map()) {
    for (const auto& kv : v.map().items()) out.push_back(JinjaValue::String(kv.first));
    return out;
  }
  if (v.is_string()) {
    for (char32_t c : DecodeUtf8(v.str())) {
      std::string s;
      AppendUtf8(c, &s);
      out.push_back(JinjaValue::String(std::move(s)));
    }
    return out;
  }
  throw JinjaError("'" + PyType(v) + "' object is not iterable");
}

bool CallMethod(const JinjaValue& obj, const std::string& name, const CallArgs& args,
                JinjaValue* result) {
  if (obj.is_string()) return StringMethod(obj.str(), name, args, result);
  static const JinjaValue kNone = JinjaValue::None();
  if (obj.is_map()) {
    if (name == "get") {
      const JinjaValue& key = Arg(args, 0, "key", kNone);
      const JinjaValue* v = key.is_string() ? obj.map().Find(key.str()) : nullptr;
      *result = v ? *v : Arg(args, 1, "default", kNone);
      return true;
    }
    if (name == "items" || name == "keys" || name == "values") {
      ValueList out;
      for (const auto& [k, v] : obj.map().items()) {
        if (name == "items") {
          out.push_back(JinjaValue::List({JinjaValue::String(k), v}, true));
        } else {
          out.push_back(name == "keys" ? JinjaValue::String(k) : v);
        }
      }
      *result = JinjaValue::List(std::move(out));
      return true;
    }
    if (obj.map().Find(name)) return false;  // a key holding a callable
    if (name == "update" || name == "pop" || name == "popitem" || name == "setdefault" ||
        name == "clear") {
      throw JinjaError("access to attribute '" + name + "' of 'dict' object is unsafe.");
    }
  }
  if (obj.is_list()) {
    if (name == "index" || name == "count") {
      const JinjaValue& x = Arg(args, 0, "value", kNone);
      int64_t c = 0;
      for (size_t i = 0; i < obj.list().size(); ++i) {
        if (!ValuesEqual(obj.list()[i], x)) continue;
        if (name == "index") {
          *result = JinjaValue::Int(static_cast<int64_t>(i));
          return true;
        }
        ++c;
      }
      if (name == "index") throw JinjaError(x.Repr() + " is not in list");
      *result = JinjaValue::Int(c);
      return true;
    }
    if (name == "append" || name == "extend" || name == "insert" || name == "pop" ||
        name == "remove" || name == "reverse" || name == "sort" || name == "clear") {
      throw JinjaError("access to attribute '" + name + "' of '" + PyType(obj) +
                       "' object is unsafe.");
    }
  }
  return false;
}

std::vector<std::pair<std::string, JinjaValue>> BuiltinGlobals() {
  std::vector<std::pair<std::string, JinjaValue>> g;
  g.emplace_back("range", MakeFunction("range", [](const CallArgs& a) {
    if (a.positional.empty() || a.positional.size() > 3) {
      throw JinjaError("range expected 1 to 3 arguments");
    }
    for (const auto& v : a.positional) {
      if (!IsIntLike(v)) throw JinjaError("'" + PyType(v) + "' object cannot be interpreted as an integer");
    }
    int64_t start = 0, stop, step = 1;
    if (a.positional.size() == 1) {
      stop = a.positional[0].int_value();
    } else {
      start = a.positional[0].int_value();
      stop = a.positional[1].int_value();
      if (a.positional.size() == 3) step = a.positional[2].int_value();
    }
    if (step == 0) throw JinjaError("range() arg 3 must not be zero");
    ValueList out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (out.size() >= 100000) throw JinjaError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
      out.push_back(JinjaValue::Int(i));
    }
    return JinjaValue::List(std::move(out));
  }));
  g.emplace_back("dict", MakeFunction("dict", [](const CallArgs& a) {
    auto m = std::make_shared<ValueMap>();
    if (!a.positional.empty()) {
      if (!a.positional[0].is_map()) throw JinjaError("dict() positional argument must be a mapping");
      for (const auto& [k, v] : a.positional[0].map().items()) m->Set(k, v);
    }
    for (const auto& [k, v] : a.keyword) m->Set(k, v);
    return JinjaValue::Map(std::move(m));
  }));
  g.emplace_back("namespace", MakeFunction("namespace", [](const CallArgs& a) {
    auto m = std::make_shared<ValueMap>();
    for (const auto& p : a.positional) {
      if (!p.is_map()) throw JinjaError("namespace() positional argument must be a mapping");
      for (const auto& [k, v] : p.map().items()) m->Set(k, v);
    }
    for (const auto& [k, v] : a.keyword) m->Set(k, v);
    return JinjaValue::Namespace(std::move(m));
  }));
  g.emplace_back("raise_exception", MakeFunction("raise_exception", [](const CallArgs& a) -> JinjaValue {
    throw JinjaError(a.positional.empty() ? std::string("raise_exception called")
                                          : a.positional[0].Str());
  }));
  g.emplace_back("strftime_now", MakeFunction("strftime_now", [](const CallArgs& a) {
    if (a.positional.empty() || !a.positional[0].is_string()) {
      throw JinjaError("strftime_now() expects a format string");
    }
    std::time_t t = std::time(nullptr);
    std::tm tm_local;
    localtime_r(&t, &tm_local);
    char buf[256];
    size_t n = std::strftime(buf, sizeof(buf), a.positional[0].str().c_str(), &tm_local);
    return JinjaValue::String(std::string(buf, n));
  }));
  return g;
}

}  // namespace mimo::jinja
