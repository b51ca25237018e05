// JinjaValue semantics: Python's str/repr/==/</len/json.dumps for the engine's dynamic values.
#include "jinja/jinja_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/json_escape.h"

namespace mimo::jinja {

const JinjaValue* ValueMap::Find(const std::string& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

void ValueMap::Clear() {
  // Moved out first: destroying a value may end the last reference to this map.
  std::vector<std::pair<std::string, JinjaValue>> items = std::move(items_);
  items_.clear();
  index_.clear();
}

void ValueMap::Set(const std::string& key, JinjaValue value) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    items_[it->second].second = std::move(value);
    return;
  }
  index_.emplace(key, items_.size());
  items_.emplace_back(key, std::move(value));
}

int JinjaValue::MaxDepth(const ValueList& items) {
  int d = 0;
  for (const JinjaValue& x : items) d = std::max(d, x.depth_);
  return d;
}

int JinjaValue::MaxDepth(const ValueMap& m) {
  int d = 0;
  for (const auto& kv : m.items()) d = std::max(d, kv.second.depth_);
  return d;
}

namespace {

// One level of a recursive walk over a value (str/repr, ==, <, json.dumps). Past kMaxValueDepth
// it throws instead of recursing on: a namespace may hold itself, and a value may have grown
// deeper than its recorded depth() through a namespace assigned after it was built.
class WalkDepthGuard {
 public:
  WalkDepthGuard() {
    if (++depth_ > kMaxValueDepth) {
      --depth_;  // no destructor runs for a guard whose constructor throws
      throw JinjaError("value nested deeper than the limit of " + std::to_string(kMaxValueDepth) +
                       " levels (a namespace that holds itself?)");
    }
  }
  ~WalkDepthGuard() { --depth_; }
  WalkDepthGuard(const WalkDepthGuard&) = delete;
  WalkDepthGuard& operator=(const WalkDepthGuard&) = delete;

 private:
  static thread_local int depth_;
};
thread_local int WalkDepthGuard::depth_ = 0;

}  // namespace

const JinjaValue* CallArgs::Keyword(const std::string& name) const {
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// UTF-8 helpers

std::u32string DecodeUtf8(const std::string& s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int extra = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
    if (extra < 0 || i + extra >= s.size() + (extra == 0 ? 1 : 0)) {
      out.push_back(0xFFFD);  // invalid byte: replacement char (inputs are valid in practice)
      ++i;
      continue;
    }
    char32_t cp = extra == 0 ? c : (c & (0x3F >> extra));
    bool ok = true;
    for (int k = 1; k <= extra; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) {
        ok = false;
        break;
      }
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += extra + 1;
  }
  return out;
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string EncodeUtf8(const std::u32string& s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) AppendUtf8(c, &out);
  return out;
}

int64_t Utf8Length(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool IsPySpace(char32_t c) {
  switch (c) {
    case ' ': case '\t': case '\n': case '\v': case '\f': case '\r':
    case 0x1C: case 0x1D: case 0x1E: case 0x1F: case 0x85: case 0xA0: case 0x1680:
    case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

// Approximates CPython's str.isprintable for code points >= 0x80 (categories C*, Z* except
// space are not printable).
static bool IsPyPrintable(char32_t c) {
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  if (c <= 0xA0 || c == 0xAD) return false;
  if (IsPySpace(c) || c == 0x180E || c == 0x061C || c == 0xFEFF) return false;
  if ((c >= 0x200B && c <= 0x200F) || (c >= 0x202A && c <= 0x202E)) return false;
  if ((c >= 0x2060 && c <= 0x206F) || (c >= 0xFFF9 && c <= 0xFFFB)) return false;
  if ((c >= 0xD800 && c <= 0xF8FF) || c >= 0xF0000) return false;  // surrogates, private use
  return true;
}

// ---------------------------------------------------------------------------------------------
// Python formatting

std::string PyFloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  // Shortest precision that round-trips, as CPython's repr does.
  int prec = 1;
  for (; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof(buf), "%.*e", prec - 1, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string s = buf;
  bool neg = s[0] == '-';
  if (neg) s = s.substr(1);
  size_t epos = s.find('e');
  std::string mant = s.substr(0, epos);
  int exp10 = std::atoi(s.c_str() + epos + 1);
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits.push_back(c);
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  int decpt = exp10 + 1;
  std::string out = neg ? "-" : "";
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(-decpt, '0') + digits;
    } else if (decpt >= static_cast<int>(digits.size())) {
      out += digits + std::string(decpt - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    int e = decpt - 1;
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    out += eb;
  }
  return out;
}

std::string PyStrRepr(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : DecodeUtf8(s)) {
    char buf[16];
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (IsPyPrintable(c)) {
      AppendUtf8(c, &out);
    } else {
      if (c < 0x100) {
        std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
      } else if (c < 0x10000) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      } else {
        std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(c));
      }
      out += buf;
    }
  }
  out.push_back(quote);
  return out;
}

bool JinjaValue::Truthy() const {
  switch (kind_) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
      return false;
    case ValueKind::kBool:
    case ValueKind::kInt:
      return i_ != 0;
    case ValueKind::kFloat:
      return f_ != 0.0;
    case ValueKind::kString:
      return !str_->empty();
    case ValueKind::kList:
      return !list_->empty();
    case ValueKind::kMap:
      return map_->size() > 0;
    default:
      return true;
  }
}

static std::string MapRepr(const ValueMap& m) {
  WalkDepthGuard guard;
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : m.items()) {
    if (!first) out += ", ";
    first = false;
    out += PyStrRepr(k) + ": " + v.Repr();
  }
  return out + "}";
}

std::string JinjaValue::Str() const {
  switch (kind_) {
    case ValueKind::kUndefined:
      return "";
    case ValueKind::kNone:
      return "None";
    case ValueKind::kBool:
      return i_ ? "True" : "False";
    case ValueKind::kInt:
      return std::to_string(i_);
    case ValueKind::kFloat:
      return PyFloatRepr(f_);
    case ValueKind::kString:
      return *str_;
    case ValueKind::kList: {
      WalkDepthGuard guard;
      std::string out = tuple_ ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i) out += ", ";
        out += (*list_)[i].Repr();
      }
      if (tuple_ && list_->size() == 1) out += ",";
      return out + (tuple_ ? ")" : "]");
    }
    case ValueKind::kMap:
      return MapRepr(*map_);
    case ValueKind::kNamespace:
      return "<Namespace " + MapRepr(*map_) + ">";
    case ValueKind::kCallable:
      return "<function " + fn_->Name() + ">";
    default:
      return "";
  }
}

std::string JinjaValue::Repr() const {
  if (is_string()) return PyStrRepr(*str_);
  if (is_undefined()) return "Undefined";
  return Str();
}

std::string JinjaValue::TypeName() const {
  switch (kind_) {
    case ValueKind::kUndefined: return "Undefined";
    case ValueKind::kNone: return "None";
    case ValueKind::kBool: return "bool object";
    case ValueKind::kInt: return "int object";
    case ValueKind::kFloat: return "float object";
    case ValueKind::kString: return "str object";
    case ValueKind::kList: return tuple_ ? "tuple object" : "list object";
    case ValueKind::kMap: return "dict object";
    case ValueKind::kNamespace: return "Namespace object";
    case ValueKind::kCallable: return "function object";
    default: return "object";
  }
}

static std::string PyTypeName(const JinjaValue& v) {
  std::string n = v.TypeName();
  if (n == "None") return "NoneType";
  auto sp = n.find(' ');
  return sp == std::string::npos ? n : n.substr(0, sp);
}

int64_t JinjaValue::Length() const {
  switch (kind_) {
    case ValueKind::kUndefined: return 0;
    case ValueKind::kString: return Utf8Length(*str_);
    case ValueKind::kList: return static_cast<int64_t>(list_->size());
    case ValueKind::kMap: return static_cast<int64_t>(map_->size());
    default:
      throw JinjaError("object of type '" + PyTypeName(*this) + "' has no len()");
  }
}

bool ValuesEqual(const JinjaValue& a, const JinjaValue& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.AsDouble() == b.AsDouble();
    return a.int_value() == b.int_value();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
      return true;
    case ValueKind::kString:
      return a.str() == b.str();
    case ValueKind::kList: {
      if (a.is_tuple() != b.is_tuple() || a.list().size() != b.list().size()) return false;
      WalkDepthGuard guard;
      for (size_t i = 0; i < a.list().size(); ++i) {
        if (!ValuesEqual(a.list()[i], b.list()[i])) return false;
      }
      return true;
    }
    case ValueKind::kMap: {
      if (a.map().size() != b.map().size()) return false;
      WalkDepthGuard guard;
      for (const auto& [k, v] : a.map().items()) {
        const JinjaValue* o = b.map().Find(k);
        if (!o || !ValuesEqual(v, *o)) return false;
      }
      return true;
    }
    case ValueKind::kNamespace:
      return &a.mutable_namespace() == &b.mutable_namespace();
    case ValueKind::kCallable:
      return &a.callable() == &b.callable();
    default:
      return false;
  }
}

int CompareValues(const JinjaValue& a, const JinjaValue& b, const std::string& op) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.AsDouble(), y = b.AsDouble();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    return a.int_value() < b.int_value() ? -1 : a.int_value() > b.int_value() ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.str().compare(b.str());  // UTF-8 byte order == code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    WalkDepthGuard guard;
    size_t n = std::min(a.list().size(), b.list().size());
    for (size_t i = 0; i < n; ++i) {
      if (!ValuesEqual(a.list()[i], b.list()[i])) return CompareValues(a.list()[i], b.list()[i], op);
    }
    return a.list().size() < b.list().size() ? -1 : a.list().size() > b.list().size() ? 1 : 0;
  }
  if (a.is_undefined() || b.is_undefined()) {
    throw JinjaError(a.is_undefined() ? a.str() : b.str());
  }
  throw JinjaError("'" + op + "' not supported between instances of '" + PyTypeName(a) + "' and '" +
                   PyTypeName(b) + "'");
}

// ---------------------------------------------------------------------------------------------
// JSON

static void JsonString(const std::string& s, std::string* out) {
  out->push_back('"');
  AppendJsonEscaped(s, out);
  out->push_back('"');
}

static void JsonDump(const JinjaValue& v, const JsonDumpOptions& opt, int level,
                     std::string* out) {
  const std::string& item_sep =
      opt.separators_set ? opt.item_separator : (opt.indent >= 0 ? "," : ", ");
  auto newline = [&](int lvl) {
    if (opt.indent < 0) return;
    out->push_back('\n');
    out->append(static_cast<size_t>(opt.indent) * lvl, ' ');
  };
  switch (v.kind()) {
    case ValueKind::kNone: *out += "null"; return;
    case ValueKind::kBool: *out += v.bool_value() ? "true" : "false"; return;
    case ValueKind::kInt: *out += std::to_string(v.int_value()); return;
    case ValueKind::kFloat: {
      double d = v.float_value();
      if (std::isnan(d)) *out += "NaN";
      else if (std::isinf(d)) *out += d < 0 ? "-Infinity" : "Infinity";
      else *out += PyFloatRepr(d);
      return;
    }
    case ValueKind::kString: JsonString(v.str(), out); return;
    case ValueKind::kList: {
      if (v.list().empty()) {
        *out += "[]";
        return;
      }
      WalkDepthGuard guard;
      out->push_back('[');
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i) *out += item_sep;
        newline(level + 1);
        JsonDump(v.list()[i], opt, level + 1, out);
      }
      newline(level);
      out->push_back(']');
      return;
    }
    case ValueKind::kMap: {
      if (v.map().size() == 0) {
        *out += "{}";
        return;
      }
      WalkDepthGuard guard;
      std::vector<const std::pair<std::string, JinjaValue>*> items;
      for (const auto& kv : v.map().items()) items.push_back(&kv);
      if (opt.sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      }
      out->push_back('{');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) *out += item_sep;
        newline(level + 1);
        JsonString(items[i]->first, out);
        *out += opt.key_separator;
        JsonDump(items[i]->second, opt, level + 1, out);
      }
      newline(level);
      out->push_back('}');
      return;
    }
    case ValueKind::kUndefined:
      throw JinjaError("Object of type Undefined is not JSON serializable");
    default:
      throw JinjaError("Object of type " + PyTypeName(v) + " is not JSON serializable");
  }
}

std::string ToJson(const JinjaValue& v, const JsonDumpOptions& opt) {
  std::string out;
  JsonDump(v, opt, 0, &out);
  return out;
}

template <typename Json>
static JinjaValue FromJsonImpl(const Json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return JinjaValue::None();
    case nlohmann::json::value_t::boolean: return JinjaValue::Bool(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return JinjaValue::Int(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      uint64_t u = j.template get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return JinjaValue::Int(static_cast<int64_t>(u));
      return JinjaValue::Float(static_cast<double>(u));
    }
    case nlohmann::json::value_t::number_float: return JinjaValue::Float(j.template get<double>());
    case nlohmann::json::value_t::string:
      return JinjaValue::String(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(FromJsonImpl(e));
      return JinjaValue::List(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      auto m = std::make_shared<ValueMap>();
      for (auto it = j.begin(); it != j.end(); ++it) m->Set(it.key(), FromJsonImpl(it.value()));
      return JinjaValue::Map(std::move(m));
    }
    default:
      return JinjaValue::None();
  }
}

JinjaValue FromJson(const nlohmann::ordered_json& j) { return FromJsonImpl(j); }
JinjaValue FromJson(const nlohmann::json& j) { return FromJsonImpl(j); }

}  // namespace mimo::jinja
