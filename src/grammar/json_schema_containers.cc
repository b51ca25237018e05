// JsonSchemaCompiler, continued: objects, arrays, free-form JSON and raw tool-call strings.
#include <algorithm>
#include <set>

#include "core/check.h"
#include "grammar/json_schema_compiler.h"
#include "grammar/number_range.h"
#include "grammar/text_dfa.h"
#include "grammar/text_profile.h"

namespace mimo {
namespace {

constexpr int kMaxRawDepth = 200;  // as json_schema_compiler.cc's kMaxDepth

constexpr int kMaxUnrolledItems = 1000;
constexpr int32_t kMaxKeyStates = 20000;

std::string Where(const std::string& path) {
  return path.empty() ? "at the schema root" : "at " + path;
}

}  // namespace

int32_t JsonSchemaCompiler::AnyValueRule() {
  if (any_value_ >= 0) return any_value_;
  any_value_ = b_->DeclareRule("any value");
  any_object_ = b_->DeclareRule("any object");
  any_array_ = b_->DeclareRule("any array");
  Nfa& n = nfa();
  auto number = NumberRange::Number({}, &n);
  b_->DefineRule(any_value_,
                 n.Alt({n.CallRule(any_object_), n.CallRule(any_array_),
                        n.CallRule(AnyStringRule(0, options_.max_string_length)), *number, n.Literal("true"),
                        n.Literal("false"), n.Literal("null")}));
  // { gap ( } | member (gap , gap member)* gap } )
  auto member = [&] {
    return n.Seq({n.CallRule(AnyStringRule(0, options_.max_string_length)), Gap(), n.Literal(":"),
                  Gap(), n.CallRule(any_value_)});
  };
  Nfa::Frag more = n.Star(n.Seq({Gap(), n.Literal(","), Gap(), member()}));
  b_->DefineRule(any_object_,
                 n.Seq({n.Literal("{"), Gap(),
                        n.Alt({n.Literal("}"), n.Seq({member(), more, Gap(), n.Literal("}")})})}));
  Nfa::Frag more_items = n.Star(n.Seq({Gap(), n.Literal(","), Gap(), n.CallRule(any_value_)}));
  b_->DefineRule(any_array_,
                 n.Seq({n.Literal("["), Gap(),
                        n.Alt({n.Literal("]"), n.Seq({n.CallRule(any_value_), more_items, Gap(),
                                                      n.Literal("]")})})}));
  return any_value_;
}

int32_t JsonSchemaCompiler::AnyObjectRule() {
  AnyValueRule();
  return any_object_;
}

StatusOr<int32_t> JsonSchemaCompiler::ObjectRule(const SchemaJson& s, const std::string& path) {
  auto it = path_rules_.find("object " + path);
  if (it != path_rules_.end()) return it->second;
  const int32_t rule = b_->DeclareRule("object " + path);
  path_rules_["object " + path] = rule;
  auto body = ObjectBody(s, path);
  if (!body.ok()) return body.status();
  b_->DefineRule(rule, *body);
  return rule;
}

StatusOr<int32_t> JsonSchemaCompiler::ArrayRule(const SchemaJson& s, const std::string& path) {
  auto it = path_rules_.find("array " + path);
  if (it != path_rules_.end()) return it->second;
  const int32_t rule = b_->DeclareRule("array " + path);
  path_rules_["array " + path] = rule;
  auto body = ArrayBody(s, path);
  if (!body.ok()) return body.status();
  b_->DefineRule(rule, *body);
  return rule;
}

StatusOr<int32_t> JsonSchemaCompiler::KeyExcludingRule(const std::vector<std::string>& names) {
  if (names.empty()) return AnyStringRule(0, options_.max_string_length);
  Nfa n;
  std::vector<Nfa::Frag> alts;
  for (const std::string& name : names) alts.push_back(n.Literal(name));
  auto listed = Dfa::Determinize(n, n.Alt(alts), kMaxKeyStates);
  if (!listed.ok()) return listed.status();
  auto others = Dfa::Intersect(TextDfa::AnyUtf8(), listed->Complement(), kMaxKeyStates);
  if (!others.ok()) return others.status();
  auto text = TextDfa::JsonString(*others, tool_safe_);
  if (!text.ok()) return text.status();
  return GuardedTextRule("other key", *text, 0, -1);
}

// Properties in schema order, each required one present, optional ones free; then (when
// additionalProperties allows) further members whose names differ from the declared ones.
StatusOr<Nfa::Frag> JsonSchemaCompiler::ObjectBody(const SchemaJson& s, const std::string& path) {
  Nfa& n = nfa();
  std::vector<std::pair<std::string, const SchemaJson*>> props;
  static const SchemaJson kTrue = true;
  if (s.contains("properties")) {
    if (!s["properties"].is_object())
      return InvalidArgument("JSON schema: 'properties' must be an object (%s)",
                             Where(path).c_str());
    for (auto it = s["properties"].begin(); it != s["properties"].end(); ++it)
      props.emplace_back(it.key(), &it.value());
  }
  std::set<std::string> required;
  if (s.contains("required")) {
    if (!s["required"].is_array())
      return InvalidArgument("JSON schema: 'required' must be an array (%s)", Where(path).c_str());
    for (const auto& r : s["required"]) {
      if (!r.is_string())
        return InvalidArgument("JSON schema: 'required' entries must be strings (%s)",
                               Where(path).c_str());
      required.insert(r.get<std::string>());
    }
  }
  for (const std::string& r : required) {
    const bool declared = std::any_of(props.begin(), props.end(),
                                      [&](const auto& p) { return p.first == r; });
    if (!declared) props.emplace_back(r, &kTrue);  // required but undeclared: any value
  }
  // Schema of additional members, or none. Absent: none when properties are declared (only
  // those are written, which is valid), any members for a bare {"type": "object"}.
  const SchemaJson* extra = nullptr;
  if (s.contains("additionalProperties")) {
    const SchemaJson& a = s["additionalProperties"];
    if (a.is_object() || (a.is_boolean() && a.get<bool>())) extra = &a;
  } else if (props.empty()) {
    extra = &kTrue;
  }
  // none: nothing written yet; some: at least one member written (next needs a comma).
  const int32_t start = n.AddState();
  Nfa::Frag open = n.Seq(n.Literal("{"), Gap());
  n.AddEpsilon(open.end, start);
  int32_t none = start, some = -1;
  auto comma = [&] { return n.Seq({Gap(), n.Literal(","), Gap()}); };
  std::vector<std::string> names;
  for (const auto& [name, schema] : props) {
    names.push_back(name);
    const std::string sub = path + "/properties/" + name;
    const bool is_required = required.count(name) > 0;
    if (schema->is_boolean() && !schema->get<bool>()) {
      if (is_required)
        return InvalidArgument("JSON schema: required property '%s' has the schema 'false' (%s)",
                               name.c_str(), Where(path).c_str());
      continue;
    }
    auto value = Value(*schema, sub);
    if (!value.ok()) {
      if (!is_required && value.status().message().find("never be satisfied") != std::string::npos)
        continue;  // an optional property that cannot be written is left out
      return value.status();
    }
    Nfa::Frag member = n.Seq({n.Literal(Quote(name)), Gap(), n.Literal(":"), Gap(), *value});
    const int32_t next_some = n.AddState();
    if (none >= 0) n.AddEpsilon(none, member.start);
    if (some >= 0) {
      Nfa::Frag c = comma();
      n.AddEpsilon(some, c.start);
      n.AddEpsilon(c.end, member.start);
    }
    n.AddEpsilon(member.end, next_some);
    if (is_required) {
      none = -1;
    } else if (some >= 0) {
      n.AddEpsilon(some, next_some);
    }
    some = next_some;
  }
  if (extra != nullptr) {
    auto key = KeyExcludingRule(names);
    if (!key.ok()) return key.status();
    auto value = Value(*extra, path + "/additionalProperties");
    if (!value.ok()) return value.status();
    Nfa::Frag member = n.Seq({n.CallRule(*key), Gap(), n.Literal(":"), Gap(), *value});
    const int32_t after = n.AddState();
    Nfa::Frag c = comma();
    if (none >= 0) n.AddEpsilon(none, member.start);
    if (some >= 0) n.AddEpsilon(some, c.start);
    n.AddEpsilon(after, c.start);
    n.AddEpsilon(c.end, member.start);
    n.AddEpsilon(member.end, after);
    if (some >= 0) {
      n.AddEpsilon(after, some);
    } else {
      some = after;
    }
  }
  const int32_t end = n.AddState();
  if (none >= 0) {
    Nfa::Frag close = n.Literal("}");
    n.AddEpsilon(none, close.start);
    n.AddEpsilon(close.end, end);
  }
  if (some >= 0) {
    Nfa::Frag close = n.Seq(Gap(), n.Literal("}"));
    n.AddEpsilon(some, close.start);
    n.AddEpsilon(close.end, end);
  }
  return Nfa::Frag{open.start, end};
}

StatusOr<Nfa::Frag> JsonSchemaCompiler::ArrayBody(const SchemaJson& s, const std::string& path) {
  Nfa& n = nfa();
  static const SchemaJson kTrue = true;
  std::vector<const SchemaJson*> prefix;
  const SchemaJson* rest = &kTrue;
  std::string rest_path = path + "/items";
  if (s.contains("prefixItems")) {
    if (!s["prefixItems"].is_array())
      return InvalidArgument("JSON schema: 'prefixItems' must be an array (%s)",
                             Where(path).c_str());
    for (const auto& p : s["prefixItems"]) prefix.push_back(&p);
    if (s.contains("items")) rest = &s["items"];
  } else if (s.contains("items") && s["items"].is_array()) {  // draft 4 tuple form
    for (const auto& p : s["items"]) prefix.push_back(&p);
    if (s.contains("additionalItems")) rest = &s["additionalItems"];
    rest_path = path + "/additionalItems";
  } else if (s.contains("items")) {
    rest = &s["items"];
  }
  if (s.contains("uniqueItems") && s["uniqueItems"].is_boolean() && s["uniqueItems"].get<bool>()) {
    const bool at_most_one = s.contains("maxItems") && s["maxItems"].is_number() &&
                             s["maxItems"].get<double>() <= 1;
    if (!at_most_one)
      return Unimplemented("JSON schema: 'uniqueItems' is not supported (%s)", Where(path).c_str());
  }
  int64_t min_items = 0, max_items = -1;
  for (const char* k : {"minItems", "maxItems"}) {
    if (!s.contains(k)) continue;
    const SchemaJson& v = s[k];
    if (!v.is_number() || v.get<double>() < 0)
      return InvalidArgument("JSON schema: '%s' must be a non-negative integer (%s)", k,
                             Where(path).c_str());
    (std::string_view(k) == "minItems" ? min_items : max_items) =
        static_cast<int64_t>(std::min(v.get<double>(), 1e9));
  }
  const bool rest_allowed = !(rest->is_boolean() && !rest->get<bool>());
  const int64_t np = static_cast<int64_t>(prefix.size());
  if (!rest_allowed) max_items = max_items < 0 ? np : std::min(max_items, np);
  if (max_items >= 0 && min_items > max_items)
    return InvalidArgument("JSON schema: minItems > maxItems (%s)", Where(path).c_str());
  // Positions 0..unrolled-1 are explicit; an unbounded tail loops on the last state.
  int64_t unrolled = max_items >= 0 ? max_items : std::max<int64_t>({min_items, np, 1});
  if (unrolled > kMaxUnrolledItems)
    return Unimplemented("JSON schema: minItems/maxItems above %d are not supported (%s)",
                         kMaxUnrolledItems, Where(path).c_str());
  auto item = [&](int64_t i) -> StatusOr<Nfa::Frag> {
    if (i < np) return Value(*prefix[i], path + "/prefixItems/" + std::to_string(i));
    return Value(*rest, rest_path);
  };
  const int32_t start = n.AddState();
  Nfa::Frag open = n.Seq(n.Literal("["), Gap());
  n.AddEpsilon(open.end, start);
  const int32_t end = n.AddState();
  int32_t cur = start;  // after i items
  for (int64_t i = 0; i <= unrolled; ++i) {
    if (i >= min_items) {
      Nfa::Frag close = i == 0 ? n.Literal("]") : n.Seq(Gap(), n.Literal("]"));
      n.AddEpsilon(cur, close.start);
      n.AddEpsilon(close.end, end);
    }
    if (i == unrolled) break;
    auto f = item(i);
    if (!f.ok()) return f.status();
    Nfa::Frag step = i == 0 ? *f : n.Seq({Gap(), n.Literal(","), Gap(), *f});
    n.AddEpsilon(cur, step.start);
    cur = n.AddState();
    n.AddEpsilon(step.end, cur);
  }
  if (max_items < 0 && rest_allowed) {
    auto f = item(unrolled);
    if (!f.ok()) return f.status();
    Nfa::Frag step = n.Seq({Gap(), n.Literal(","), Gap(), *f});
    n.AddEpsilon(cur, step.start);
    n.AddEpsilon(step.end, cur);
  }
  return Nfa::Frag{open.start, end};
}

int32_t JsonSchemaCompiler::AnyRawRule(std::string_view terminator, int32_t min_chars,
                                       int32_t max_chars) {
  auto key = std::make_tuple(std::string(terminator), min_chars, max_chars);
  auto it = raw_rules_.find(key);
  if (it != raw_rules_.end()) return it->second;
  const std::string term(terminator);
  auto dfa = TextDfa::AnyRawValue(term);
  auto r = b_->AddTextRule("raw string", dfa, vocab_->ProfileFor(*dfa, b_->budget()), min_chars, max_chars);
  MIMO_CHECK(r.ok(), "%s", r.status().message().c_str());  // counts freely: cannot fail
  raw_rules_[key] = *r;
  return *r;
}

// The string alternatives of a schema (its branches that accept strings), as raw text.
StatusOr<Nfa::Frag> JsonSchemaCompiler::RawString(const SchemaJson& s0, const std::string& path,
                                                  std::string_view terminator) {
  Nfa& n = nfa();
  if (CompileBudget* b = b_->budget(); b != nullptr) MIMO_RETURN_IF_ERROR(b->Check());
  if (n.full() && b_->budget() != nullptr) return b_->budget()->ChargeNfaStates(n.wanted());
  auto d = Deref(&s0, path);
  if (!d.ok()) return d.status();
  const SchemaJson& s = **d;
  if (s.is_boolean()) {
    if (s.get<bool>()) return n.CallRule(AnyRawRule(terminator, 0, options_.max_string_length));
    return InvalidArgument("JSON schema: the schema 'false' (%s) can never be satisfied",
                           Where(path).c_str());
  }
  if (!s.is_object())
    return InvalidArgument("JSON schema: expected a schema object (%s)", Where(path).c_str());
  // anyOf branches may $ref back to this schema: bounded like Value's nesting.
  if (depth_ > kMaxRawDepth)
    return InvalidArgument("JSON schema: nested too deeply (%s)", Where(path).c_str());
  struct DepthGuard {
    int* d;
    ~DepthGuard() { --*d; }
  } guard{&++depth_};
  MIMO_RETURN_IF_ERROR(CheckKeywordTypes(s, path));
  for (const char* key : {"anyOf", "oneOf"}) {
    if (!s.contains(key) || !s[key].is_array()) continue;
    for (size_t i = 0; i < s[key].size(); ++i) {
      if (s[key][i].is_object())
        MIMO_RETURN_IF_ERROR(
            CheckKeywordTypes(s[key][i], path + "/" + key + "/" + std::to_string(i)));
    }
    if (std::string_view(key) == "oneOf") MIMO_RETURN_IF_ERROR(CheckOneOf(s[key], path));
    std::vector<Nfa::Frag> alts;
    for (size_t i = 0; i < s[key].size(); ++i) {
      auto f = RawString(s[key][i], path + "/" + key + "/" + std::to_string(i), terminator);
      if (f.ok()) alts.push_back(*f);
    }
    if (alts.empty())
      return InvalidArgument("JSON schema: no branch of '%s' accepts a string (%s)", key,
                             Where(path).c_str());
    return n.Alt(alts);
  }
  if (s.contains("type")) {
    bool string_ok = false;
    const SchemaJson& t = s["type"];
    if (t.is_string()) string_ok = t.get<std::string>() == "string";
    if (t.is_array())
      for (const auto& e : t) string_ok = string_ok || (e.is_string() && e.get<std::string>() == "string");
    if (!string_ok)
      return InvalidArgument("JSON schema: the schema does not accept a string (%s)",
                             Where(path).c_str());
  }
  if (s.contains("enum") || s.contains("const")) {
    SchemaJson values = s.contains("const") ? SchemaJson::array({s["const"]}) : s["enum"];
    std::vector<Nfa::Frag> alts;
    for (const auto& v : values) {
      if (!v.is_string()) continue;
      const std::string str = v.get<std::string>();
      if (str.find(terminator) != std::string::npos) continue;
      SchemaJson only = s;
      only.erase("enum");
      only.erase("const");
      only.erase("type");
      auto value = StringValueDfa(only, path);
      if (!value.ok()) return value.status();
      if (value->has_value()) {
        int32_t q = 0;
        for (char c : str) {
          q = (*value)->Next(q, static_cast<uint8_t>(c));
          if (q < 0) break;
        }
        if (q < 0 || !(*value)->accepting(q)) continue;
      }
      int64_t len = 0;
      for (char c : str) len += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
      if (s.contains("minLength") && s["minLength"].is_number() && len < s["minLength"].get<double>())
        continue;
      if (s.contains("maxLength") && s["maxLength"].is_number() && len > s["maxLength"].get<double>())
        continue;
      alts.push_back(n.Literal(str + std::string(terminator)));
    }
    if (alts.empty())
      return InvalidArgument("JSON schema: no string 'enum'/'const' value satisfies the schema (%s)",
                             Where(path).c_str());
    return n.Alt(alts);
  }
  int32_t min_len = 0, max_len = -1;
  auto value = StringValueDfa(s, path, &min_len, &max_len);
  if (!value.ok()) return value.status();
  if (!value->has_value()) {
    if (max_len < 0 && options_.max_string_length >= 0)
      max_len = std::max(options_.max_string_length, min_len);
    return n.CallRule(AnyRawRule(terminator, min_len, max_len));
  }
  auto text = TextDfa::RawValue(**value, terminator);
  if (!text.ok()) return text.status();
  auto rule = GuardedTextRule("raw string " + path, *text, min_len, max_len);
  if (!rule.ok()) return rule.status();
  return n.CallRule(*rule);
}

}  // namespace mimo
