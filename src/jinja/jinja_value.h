// JinjaValue: the dynamic value of the Jinja engine, with Python semantics for printing (str/repr),
// truthiness, equality, ordering and JSON (json.dumps) so rendered text matches Python's jinja2.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace mimo::jinja {

// Raised inside the engine for template errors; never crosses the public API (JinjaTemplate turns
// it into a Status). line == 0 means "not known yet": the interpreter fills in the current line.
class JinjaError : public std::runtime_error {
 public:
  explicit JinjaError(const std::string& msg, int line = 0) : std::runtime_error(msg), line(line) {}
  int line;
};

class JinjaValue;
using ValueList = std::vector<JinjaValue>;

// How deeply values may nest (lists, dicts, namespaces inside one another). A request's JSON is
// at most 128 levels deep, so this only stops values a template builds without end
// (`{% set ns.x = [ns.x] %}` in a loop) or a namespace that holds itself: printing, comparing,
// dumping or destroying them would otherwise recurse until the stack overflows. The interpreter
// refuses to bind a deeper value; printing, comparing and tojson refuse to walk deeper.
inline constexpr int kMaxValueDepth = 512;

// Insertion-ordered map with string keys (Python dicts keep insertion order).
class ValueMap {
 public:
  const JinjaValue* Find(const std::string& key) const;
  void Set(const std::string& key, JinjaValue value);
  size_t size() const;  // defined below JinjaValue: clang needs the complete pair type here
  const std::vector<std::pair<std::string, JinjaValue>>& items() const { return items_; }
  // Drops every entry (ends a render: a namespace may hold itself, a cycle of shared_ptrs).
  void Clear();

 private:
  std::vector<std::pair<std::string, JinjaValue>> items_;
  std::unordered_map<std::string, size_t> index_;
};

struct CallArgs {
  std::vector<JinjaValue> positional;
  std::vector<std::pair<std::string, JinjaValue>> keyword;
  const JinjaValue* Keyword(const std::string& name) const;
};

// Something callable from a template (a macro, a global function such as namespace()).
class Callable {
 public:
  virtual ~Callable() = default;
  virtual JinjaValue Call(const CallArgs& args) = 0;  // throws JinjaError
  virtual std::string Name() const = 0;
};

enum class ValueKind {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,  // also tuples (tuple() flag): they differ only in repr and equality
  kMap,
  kNamespace,  // jinja2's namespace(): a mutable attribute bag shared by reference
  kCallable,
  kCount
};

// Cheap to copy: aggregates are shared and immutable once built (the sandbox forbids mutation),
// except namespaces which are mutated in place through `set ns.x = ...`.
class JinjaValue {
 public:
  JinjaValue() : str_(DefaultHint()) {}  // Undefined
  // `hint` is the message raised when the value is used ("'foo' is undefined").
  static JinjaValue Undefined(std::string hint) {
    JinjaValue v;
    v.str_ = std::make_shared<const std::string>(std::move(hint));
    return v;
  }
  static JinjaValue None() { return Make(ValueKind::kNone); }
  static JinjaValue Bool(bool b) {
    JinjaValue v = Make(ValueKind::kBool);
    v.i_ = b ? 1 : 0;
    return v;
  }
  static JinjaValue Int(int64_t i) {
    JinjaValue v = Make(ValueKind::kInt);
    v.i_ = i;
    return v;
  }
  static JinjaValue Float(double f) {
    JinjaValue v = Make(ValueKind::kFloat);
    v.f_ = f;
    return v;
  }
  static JinjaValue String(std::string s, bool safe = false) {
    JinjaValue v = Make(ValueKind::kString);
    v.str_ = std::make_shared<const std::string>(std::move(s));
    v.safe_ = safe;
    return v;
  }
  static JinjaValue List(ValueList items, bool tuple = false) {
    JinjaValue v = Make(ValueKind::kList);
    v.depth_ = 1 + MaxDepth(items);
    v.list_ = std::make_shared<const ValueList>(std::move(items));
    v.tuple_ = tuple;
    return v;
  }
  static JinjaValue Map(std::shared_ptr<ValueMap> m) {
    JinjaValue v = Make(ValueKind::kMap);
    v.depth_ = 1 + MaxDepth(*m);
    v.map_ = std::move(m);
    return v;
  }
  static JinjaValue Namespace(std::shared_ptr<ValueMap> m) {
    JinjaValue v = Make(ValueKind::kNamespace);
    v.depth_ = 1 + MaxDepth(*m);
    v.map_ = std::move(m);
    return v;
  }
  static JinjaValue Function(std::shared_ptr<Callable> fn) {
    JinjaValue v = Make(ValueKind::kCallable);
    v.fn_ = std::move(fn);
    return v;
  }

  ValueKind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == ValueKind::kUndefined; }
  bool is_none() const { return kind_ == ValueKind::kNone; }
  bool is_bool() const { return kind_ == ValueKind::kBool; }
  bool is_int() const { return kind_ == ValueKind::kInt; }
  bool is_float() const { return kind_ == ValueKind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }  // bool is an int
  bool is_string() const { return kind_ == ValueKind::kString; }
  bool is_list() const { return kind_ == ValueKind::kList; }
  bool is_tuple() const { return is_list() && tuple_; }
  bool is_map() const { return kind_ == ValueKind::kMap; }
  bool is_namespace() const { return kind_ == ValueKind::kNamespace; }
  bool is_callable() const { return kind_ == ValueKind::kCallable; }

  bool bool_value() const { return i_ != 0; }
  int64_t int_value() const { return i_; }  // also for bool
  double float_value() const { return f_; }
  double AsDouble() const { return is_float() ? f_ : static_cast<double>(i_); }
  const std::string& str() const { return *str_; }  // string content / undefined hint
  bool safe() const { return safe_; }
  const ValueList& list() const { return *list_; }
  const ValueMap& map() const { return *map_; }
  ValueMap& mutable_namespace() const { return *map_; }
  Callable& callable() const { return *fn_; }
  // Nesting levels of a container as built (0 for scalars, 1 for a flat list or dict). A
  // namespace's is taken when it is created; `set ns.x = ...` later does not raise it.
  int depth() const { return depth_; }

  // Python bool(x).
  bool Truthy() const;
  // Python str(x) (what {{ x }} prints); Undefined prints as "".
  std::string Str() const;
  // Python repr(x) (used inside containers).
  std::string Repr() const;
  // Python len(x); throws for values without a length.
  int64_t Length() const;
  // jinja2's object_type_repr style name used in messages ("dict object", "str object").
  std::string TypeName() const;

 private:
  static const std::shared_ptr<const std::string>& DefaultHint() {
    static const auto* hint = new std::shared_ptr<const std::string>(
        std::make_shared<const std::string>("value is undefined"));
    return *hint;
  }
  static JinjaValue Make(ValueKind k) {
    JinjaValue v;
    v.kind_ = k;
    return v;
  }
  static int MaxDepth(const ValueList& items);
  static int MaxDepth(const ValueMap& m);
  ValueKind kind_ = ValueKind::kUndefined;
  int64_t i_ = 0;
  double f_ = 0;
  bool safe_ = false;
  bool tuple_ = false;
  int depth_ = 0;
  std::shared_ptr<const std::string> str_;
  std::shared_ptr<const ValueList> list_;
  std::shared_ptr<ValueMap> map_;
  std::shared_ptr<Callable> fn_;
};

inline size_t ValueMap::size() const { return items_.size(); }

// Python ==.
bool ValuesEqual(const JinjaValue& a, const JinjaValue& b);
// Python <, as -1/0/1; throws JinjaError when the types are not orderable.
// `op` ("<", ">", "<=", ">=") only names the operator in the error for incomparable types, as
// Python does ("'>' not supported between instances of 'int' and 'str'").
int CompareValues(const JinjaValue& a, const JinjaValue& b, const std::string& op = "<");

struct JsonDumpOptions {
  int indent = -1;                   // < 0: None (single line)
  std::string item_separator;        // empty: Python default for the indent mode
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool separators_set = false;       // true when item/key separators were given explicitly
};
// json.dumps(v, ensure_ascii=False, ...). Throws JinjaError for values JSON cannot hold.
std::string ToJson(const JinjaValue& v, const JsonDumpOptions& opt = {});

// Conversions from JSON documents (keys keep their order with ordered_json).
JinjaValue FromJson(const nlohmann::ordered_json& j);
JinjaValue FromJson(const nlohmann::json& j);

// Python float repr (shortest round-trip, "1.0", "1e-05", "1e+16", "inf", "nan").
std::string PyFloatRepr(double d);
// Python repr of a str (quotes chosen like CPython, non-printables escaped).
std::string PyStrRepr(const std::string& s);

// UTF-8 helpers: Python strings are code point sequences, our strings are UTF-8.
std::u32string DecodeUtf8(const std::string& s);
std::string EncodeUtf8(const std::u32string& s);
void AppendUtf8(char32_t c, std::string* out);
int64_t Utf8Length(const std::string& s);
// Python str.isspace() for one code point (also what re's \s matches).
bool IsPySpace(char32_t c);

}  // namespace mimo::jinja
