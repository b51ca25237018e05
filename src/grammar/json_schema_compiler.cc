// JSON Schema -> rules: dispatch on keywords, strings, enums and references. Objects and arrays
// are in json_schema_containers.cc; the oneOf disjointness proof in schema_overlap.cc.
#include "grammar/json_schema_compiler.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "core/check.h"
#include "grammar/number_range.h"
#include "grammar/regex_parser.h"
#include "grammar/schema_overlap.h"
#include "grammar/text_dfa.h"
#include "grammar/text_profile.h"

namespace mimo {
namespace {

constexpr int kMaxDepth = 200;
constexpr int32_t kMaxValueStates = 20000;
constexpr int32_t kMaxPatternStates = 100000;  // NFA states of one pattern before determinizing
constexpr int64_t kMaxPatternWork = int64_t{1} << 24;  // NFA states visited determinizing it

std::string Where(const std::string& path) {
  return path.empty() ? "at the schema root" : "at " + path;
}

// Keywords of JSON Schema this compiler does not implement: rejected, never ignored.
const std::set<std::string>& UnsupportedKeywords() {
  static const std::set<std::string> k = {
      "patternProperties", "propertyNames",   "dependentRequired", "dependentSchemas",
      "dependencies",      "if",              "then",              "else",
      "not",               "contains",        "minContains",       "maxContains",
      "multipleOf",        "minProperties",   "maxProperties",     "unevaluatedProperties",
      "unevaluatedItems",  "$dynamicRef",     "$recursiveRef",     "$dynamicAnchor",
      "$recursiveAnchor"};
  return k;
}

// Keywords that constrain a value (everything else is an annotation or unknown).
const std::set<std::string>& ConstraintKeywords() {
  static const std::set<std::string> k = {
      "type",      "enum",          "const",           "properties", "required",
      "additionalProperties",       "items",           "prefixItems", "additionalItems",
      "minItems",  "maxItems",      "uniqueItems",     "minLength",  "maxLength",
      "pattern",   "format",        "minimum",         "maximum",    "exclusiveMinimum",
      "exclusiveMaximum",           "anyOf",           "oneOf",      "allOf",
      "$ref"};
  return k;
}

bool HasOtherConstraints(const SchemaJson& s, std::initializer_list<const char*> allowed) {
  for (auto it = s.begin(); it != s.end(); ++it) {
    if (!ConstraintKeywords().count(it.key())) continue;
    bool ok = false;
    for (const char* a : allowed) ok = ok || it.key() == a;
    if (!ok) return true;
  }
  return false;
}

// Regular expressions for the supported "format" values; each only produces valid values.
const char* FormatPattern(const std::string& f) {
  static constexpr char kDate[] = "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])";
  static constexpr char kTime[] =
      "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
  static const std::string kDateTime = std::string(kDate) + "T" + kTime;
  static const std::string kDateA = std::string("^") + kDate + "$";
  static const std::string kTimeA = std::string("^") + kTime + "$";
  static const std::string kDateTimeA = "^" + kDateTime + "$";
  if (f == "date") return kDateA.c_str();
  if (f == "time") return kTimeA.c_str();
  if (f == "date-time") return kDateTimeA.c_str();
  if (f == "uuid")
    return "^[0-9a-f]{8}-[0-9a-f]{4}-[1-5][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$";
  if (f == "email")
    return "^[A-Za-z0-9_+-]+(\\.[A-Za-z0-9_+-]+)*@[A-Za-z0-9-]+(\\.[A-Za-z0-9-]+)*\\.[A-Za-z]{2,}$";
  if (f == "ipv4")
    return "^(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|"
           "[1-9]?[0-9])){3}$";
  return nullptr;
}

// Number of code points of valid UTF-8 (continuation bytes not counted).
int64_t CodepointCount(std::string_view s) {
  int64_t n = 0;
  for (char c : s) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
  return n;
}

bool Accepts(const Dfa& d, std::string_view s) {
  int32_t q = 0;
  for (char c : s) {
    q = d.Next(q, static_cast<uint8_t>(c));
    if (q < 0) return false;
  }
  return d.accepting(q);
}

StatusOr<int64_t> NonNegativeInt(const SchemaJson& s, const char* key, const std::string& path) {
  const SchemaJson& v = s[key];
  if (!v.is_number() || v.get<double>() < 0 || v.get<double>() != std::floor(v.get<double>()))
    return InvalidArgument("JSON schema: '%s' must be a non-negative integer (%s)", key,
                           Where(path).c_str());
  return static_cast<int64_t>(std::min(v.get<double>(), 1e15));
}

// The type of every keyword this compiler reads, checked before any is read (nlohmann's get<>
// throws on a wrong type): a schema from a request with "minLength": "a" is an InvalidArgument
// naming the keyword, never an exception.
Status KeywordTypes(const SchemaJson& s, const std::string& path) {
  auto bad = [&](const std::string& key, const char* want) {
    return InvalidArgument("JSON schema: '%s' must be %s (%s)", key.c_str(), want,
                           Where(path).c_str());
  };
  for (auto it = s.begin(); it != s.end(); ++it) {
    const std::string& k = it.key();
    const SchemaJson& v = it.value();
    if (k == "minLength" || k == "maxLength" || k == "minItems" || k == "maxItems" ||
        k == "minProperties" || k == "maxProperties" || k == "minContains" || k == "maxContains") {
      if (!v.is_number() || v.get<double>() < 0 || v.get<double>() != std::floor(v.get<double>()))
        return bad(k, "a non-negative integer");
    } else if (k == "minimum" || k == "maximum" || k == "multipleOf") {
      if (!v.is_number()) return bad(k, "a number");
    } else if (k == "exclusiveMinimum" || k == "exclusiveMaximum") {
      if (!v.is_number() && !v.is_boolean()) return bad(k, "a number (or, draft 4, a boolean)");
    } else if (k == "pattern" || k == "format" || k == "$ref") {
      if (!v.is_string()) return bad(k, "a string");
    } else if (k == "enum") {
      if (!v.is_array()) return bad(k, "an array");
    } else if (k == "required") {
      if (!v.is_array()) return bad(k, "an array of strings");
      for (const auto& e : v)
        if (!e.is_string()) return bad(k, "an array of strings");
    } else if (k == "type") {
      bool ok = v.is_string() || v.is_array();
      if (v.is_array())
        for (const auto& e : v) ok = ok && e.is_string();
      if (!ok) return bad(k, "a string or an array of strings");
    } else if (k == "properties" || k == "$defs" || k == "definitions" ||
               k == "patternProperties" || k == "dependentSchemas") {
      if (!v.is_object()) return bad(k, "an object");
    } else if (k == "prefixItems" || k == "anyOf" || k == "oneOf" || k == "allOf") {
      if (!v.is_array()) return bad(k, "an array of schemas");
    } else if (k == "items") {
      if (!v.is_object() && !v.is_boolean() && !v.is_array())
        return bad(k, "a schema (or, draft 4, an array of schemas)");
    } else if (k == "additionalProperties" || k == "additionalItems" || k == "not" ||
               k == "contains" || k == "propertyNames" || k == "if" || k == "then" || k == "else" ||
               k == "unevaluatedProperties" || k == "unevaluatedItems") {
      if (!v.is_object() && !v.is_boolean()) return bad(k, "a schema (an object or a boolean)");
    } else if (k == "uniqueItems") {
      if (!v.is_boolean()) return bad(k, "a boolean");
    }
  }
  return Status::Ok();
}

}  // namespace

Status JsonSchemaCompiler::CheckKeywordTypes(const SchemaJson& s, const std::string& path) {
  return KeywordTypes(s, path);
}

JsonSchemaCompiler::JsonSchemaCompiler(GrammarBuilder* builder,
                                       std::shared_ptr<const TokenVocabulary> vocab,
                                       const GrammarOptions& options, bool tool_safe)
    : b_(builder), vocab_(std::move(vocab)), options_(options), tool_safe_(tool_safe) {}

Nfa::Frag JsonSchemaCompiler::Gap() {
  switch (options_.whitespace) {
    case GrammarOptions::Whitespace::kNone:
      return nfa().Empty();
    case GrammarOptions::Whitespace::kOptionalSpace:
      return nfa().Opt(nfa().Literal(" "));
    case GrammarOptions::Whitespace::kAny: {
      const int32_t s = nfa().AddState();
      for (char c : std::string_view(" \t\n\r")) nfa().AddRange(s, c, c, s);
      return {s, s};
    }
  }
  return nfa().Empty();
}

std::string JsonSchemaCompiler::Quote(std::string_view s) const {
  std::string out = "\"";
  for (char ch : s) {
    const uint8_t c = static_cast<uint8_t>(ch);
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      default: break;
    }
    if (c < 0x20 || (tool_safe_ && (c == '&' || c == '<'))) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// Compact JSON of a value with our string spelling (so tool-safe escapes apply inside).
std::string JsonSchemaCompiler::Serialize(const SchemaJson& v) const {
  if (v.is_string()) return Quote(v.get<std::string>());
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + Serialize(v[i]);
    return out + "]";
  }
  if (v.is_object()) {
    std::string out = "{";
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      out += (first ? "" : ",") + Quote(it.key()) + ":" + Serialize(it.value());
      first = false;
    }
    return out + "}";
  }
  return v.dump();
}

StatusOr<const SchemaJson*> JsonSchemaCompiler::Resolve(const std::string& ref,
                                                        const std::string& path) const {
  if (ref.empty() || ref[0] != '#' || doc_ == nullptr)
    return Unimplemented("JSON schema: '$ref' to '%s' is not supported; only '#...' references "
                         "within the schema are (%s)", ref.c_str(), Where(path).c_str());
  // JSON pointer with ~0 ~1 escapes and %XX URI escapes.
  std::string pointer;
  for (size_t i = 1; i < ref.size(); ++i) {
    if (ref[i] == '%' && i + 2 < ref.size() && std::isxdigit(static_cast<uint8_t>(ref[i + 1])) &&
        std::isxdigit(static_cast<uint8_t>(ref[i + 2]))) {
      pointer += static_cast<char>(std::strtol(ref.substr(i + 1, 2).c_str(), nullptr, 16));
      i += 2;
    } else {
      pointer += ref[i];
    }
  }
  const SchemaJson* cur = doc_;
  size_t pos = 0;
  if (!pointer.empty() && pointer[0] != '/')
    return Unimplemented("JSON schema: '$ref' to an anchor '%s' is not supported (%s)",
                         ref.c_str(), Where(path).c_str());
  while (pos < pointer.size()) {
    size_t next = pointer.find('/', pos + 1);
    std::string token = pointer.substr(pos + 1, next == std::string::npos ? std::string::npos
                                                                          : next - pos - 1);
    std::string unescaped;
    for (size_t i = 0; i < token.size(); ++i) {
      if (token[i] == '~' && i + 1 < token.size()) {
        unescaped += token[i + 1] == '1' ? '/' : '~';
        ++i;
      } else {
        unescaped += token[i];
      }
    }
    if (cur->is_object() && cur->contains(unescaped)) {
      cur = &(*cur)[unescaped];
    } else if (cur->is_array() && !unescaped.empty() && unescaped.size() <= 9 &&
               unescaped.find_first_not_of("0123456789") == std::string::npos &&
               std::strtoul(unescaped.c_str(), nullptr, 10) < cur->size()) {
      cur = &(*cur)[std::strtoul(unescaped.c_str(), nullptr, 10)];
    } else {
      return InvalidArgument("JSON schema: '$ref' '%s' does not resolve (%s)", ref.c_str(),
                             Where(path).c_str());
    }
    if (next == std::string::npos) break;
    pos = next;
  }
  return cur;
}

// Follows "$ref" chains (and single-schema allOf) to the schema that says something.
StatusOr<const SchemaJson*> JsonSchemaCompiler::Deref(const SchemaJson* s,
                                                      const std::string& path) const {
  for (int hops = 0; hops < 64; ++hops) {
    if (!s->is_object()) return s;
    if (s->contains("$ref") && (*s)["$ref"].is_string()) {
      auto r = Resolve((*s)["$ref"].get<std::string>(), path);
      if (!r.ok()) return r.status();
      s = *r;
      continue;
    }
    if (s->contains("allOf") && (*s)["allOf"].is_array() && (*s)["allOf"].size() == 1 &&
        !HasOtherConstraints(*s, {"allOf"})) {
      s = &(*s)["allOf"][0];
      continue;
    }
    return s;
  }
  return InvalidArgument("JSON schema: '$ref' chain too long or cyclic (%s)", Where(path).c_str());
}

StatusOr<Nfa::Frag> JsonSchemaCompiler::RefCall(const std::string& ref, const std::string& path) {
  auto it = ref_rules_.find(ref);
  if (it != ref_rules_.end()) return nfa().CallRule(it->second);
  auto target = Resolve(ref, path);
  if (!target.ok()) return target.status();
  const int32_t rule = b_->DeclareRule("ref " + ref);
  ref_rules_[ref] = rule;
  auto body = Value(**target, ref.substr(1));
  if (!body.ok()) return body.status();
  b_->DefineRule(rule, *body);
  return nfa().CallRule(rule);
}

StatusOr<Nfa::Frag> JsonSchemaCompiler::Value(const SchemaJson& s, const std::string& path) {
  if (CompileBudget* b = b_->budget(); b != nullptr) MIMO_RETURN_IF_ERROR(b->Check());
  if (nfa().full() && b_->budget() != nullptr) return b_->budget()->ChargeNfaStates(nfa().wanted());
  if (s.is_boolean()) {
    if (s.get<bool>()) return nfa().CallRule(AnyValueRule());
    return InvalidArgument("JSON schema: the schema 'false' (%s) can never be satisfied",
                           Where(path).c_str());
  }
  if (!s.is_object())
    return InvalidArgument("JSON schema: expected a schema object (%s)", Where(path).c_str());
  if (depth_ > kMaxDepth)
    return InvalidArgument("JSON schema: nested too deeply (%s)", Where(path).c_str());
  struct DepthGuard {
    int* d;
    ~DepthGuard() { --*d; }
  } guard{&++depth_};
  MIMO_RETURN_IF_ERROR(KeywordTypes(s, path));
  for (auto it = s.begin(); it != s.end(); ++it) {
    if (UnsupportedKeywords().count(it.key()))
      return Unimplemented("JSON schema: '%s' is not supported (%s)", it.key().c_str(),
                           Where(path).c_str());
  }
  if (s.contains("$ref")) {
    if (!s["$ref"].is_string())
      return InvalidArgument("JSON schema: '$ref' must be a string (%s)", Where(path).c_str());
    if (HasOtherConstraints(s, {"$ref"}))
      return Unimplemented("JSON schema: '$ref' with sibling keywords is not supported (%s)",
                           Where(path).c_str());
    return RefCall(s["$ref"].get<std::string>(), path);
  }
  if (s.contains("allOf")) {
    const SchemaJson& all = s["allOf"];
    if (!all.is_array() || all.size() != 1 || HasOtherConstraints(s, {"allOf"}))
      return Unimplemented("JSON schema: 'allOf' is only supported with a single schema and no "
                           "sibling keywords (%s)", Where(path).c_str());
    return Value(all[0], path + "/allOf/0");
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (!s.contains(key)) continue;
    const SchemaJson& branches = s[key];
    if (!branches.is_array() || branches.empty())
      return InvalidArgument("JSON schema: '%s' must be a non-empty array (%s)", key,
                             Where(path).c_str());
    if (HasOtherConstraints(s, {key}))
      return Unimplemented("JSON schema: '%s' with sibling keywords is not supported (%s)", key,
                           Where(path).c_str());
    // The disjointness proof reads the branches' keywords before Value does.
    for (size_t i = 0; i < branches.size(); ++i) {
      if (branches[i].is_object())
        MIMO_RETURN_IF_ERROR(KeywordTypes(branches[i], path + "/" + key + "/" + std::to_string(i)));
    }
    if (std::string_view(key) == "oneOf") MIMO_RETURN_IF_ERROR(CheckOneOf(branches, path));
    std::vector<Nfa::Frag> alts;
    for (size_t i = 0; i < branches.size(); ++i) {
      auto f = Value(branches[i], path + "/" + key + "/" + std::to_string(i));
      if (!f.ok()) {
        // A branch that can never be satisfied is just not an alternative.
        if (f.status().code() == StatusCode::kInvalidArgument && branches.size() > 1 &&
            f.status().message().find("never be satisfied") != std::string::npos)
          continue;
        return f.status();
      }
      alts.push_back(*f);
    }
    if (alts.empty())
      return InvalidArgument("JSON schema: no branch of '%s' can be satisfied (%s)", key,
                             Where(path).c_str());
    return nfa().Alt(alts);
  }
  if (s.contains("const")) {
    SchemaJson values = SchemaJson::array({s["const"]});
    if (s.contains("enum")) {
      bool found = false;
      for (const auto& v : s["enum"]) found = found || v == s["const"];
      if (!found) values = SchemaJson::array();
    }
    return Enum(s, values, path);
  }
  if (s.contains("enum")) {
    if (!s["enum"].is_array())
      return InvalidArgument("JSON schema: 'enum' must be an array (%s)", Where(path).c_str());
    return Enum(s, s["enum"], path);
  }
  std::vector<std::string> types;
  if (s.contains("type")) {
    const SchemaJson& t = s["type"];
    if (t.is_string()) {
      types.push_back(t.get<std::string>());
    } else if (t.is_array()) {
      for (const auto& e : t) {
        if (!e.is_string())
          return InvalidArgument("JSON schema: 'type' entries must be strings (%s)",
                                 Where(path).c_str());
        types.push_back(e.get<std::string>());
      }
    } else {
      return InvalidArgument("JSON schema: 'type' must be a string or an array (%s)",
                             Where(path).c_str());
    }
  } else {
    // Inferred from the keywords present; none: any value.
    auto has = [&](std::initializer_list<const char*> keys) {
      for (const char* k : keys)
        if (s.contains(k)) return true;
      return false;
    };
    if (has({"properties", "required", "additionalProperties"})) types.push_back("object");
    if (has({"items", "prefixItems", "minItems", "maxItems", "additionalItems"}))
      types.push_back("array");
    if (has({"pattern", "minLength", "maxLength", "format"})) types.push_back("string");
    if (has({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}))
      types.push_back("number");
    if (types.empty()) return nfa().CallRule(AnyValueRule());
  }
  if (types.empty())
    return InvalidArgument("JSON schema: 'type' is an empty list (%s)", Where(path).c_str());
  // "integer" inside "number" adds nothing.
  const bool has_number = std::count(types.begin(), types.end(), "number") > 0;
  std::vector<Nfa::Frag> alts;
  std::set<std::string> seen;
  for (const std::string& t : types) {
    if (!seen.insert(t).second || (t == "integer" && has_number)) continue;
    auto f = OfType(t, s, path);
    if (!f.ok()) return f.status();
    alts.push_back(*f);
  }
  return alts.size() == 1 ? alts[0] : nfa().Alt(alts);
}

StatusOr<Nfa::Frag> JsonSchemaCompiler::OfType(const std::string& type, const SchemaJson& s,
                                               const std::string& path) {
  if (type == "null") return nfa().Literal("null");
  if (type == "boolean") return nfa().Alt({nfa().Literal("true"), nfa().Literal("false")});
  if (type == "integer" || type == "number") {
    NumericBounds nb;
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
      if (s.contains(k) && !s[k].is_number() && !s[k].is_boolean())
        return InvalidArgument("JSON schema: '%s' must be a number (%s)", k, Where(path).c_str());
    }
    if (s.contains("minimum")) nb.minimum = s["minimum"].get<double>();
    if (s.contains("maximum")) nb.maximum = s["maximum"].get<double>();
    // Draft 6+: exclusiveMinimum is a number; draft 4: a boolean modifying minimum.
    if (s.contains("exclusiveMinimum")) {
      if (s["exclusiveMinimum"].is_boolean()) {
        nb.exclusive_minimum = s["exclusiveMinimum"].get<bool>() && nb.minimum.has_value();
      } else {
        const double v = s["exclusiveMinimum"].get<double>();
        if (!nb.minimum || v >= *nb.minimum) {
          nb.minimum = v;
          nb.exclusive_minimum = true;
        }
      }
    }
    if (s.contains("exclusiveMaximum")) {
      if (s["exclusiveMaximum"].is_boolean()) {
        nb.exclusive_maximum = s["exclusiveMaximum"].get<bool>() && nb.maximum.has_value();
      } else {
        const double v = s["exclusiveMaximum"].get<double>();
        if (!nb.maximum || v <= *nb.maximum) {
          nb.maximum = v;
          nb.exclusive_maximum = true;
        }
      }
    }
    auto f = type == "integer" ? NumberRange::Integer(nb, &nfa()) : NumberRange::Number(nb, &nfa());
    if (!f.ok()) return Status(f.status().code(), f.status().message() + " (" + Where(path) + ")");
    return f;
  }
  if (type == "string") return String(s, path);
  if (type == "object") {
    auto r = ObjectRule(s, path);
    if (!r.ok()) return r.status();
    return nfa().CallRule(*r);
  }
  if (type == "array") {
    auto r = ArrayRule(s, path);
    if (!r.ok()) return r.status();
    return nfa().CallRule(*r);
  }
  return InvalidArgument("JSON schema: unknown type '%s' (%s)", type.c_str(), Where(path).c_str());
}

StatusOr<std::optional<Dfa>> JsonSchemaCompiler::StringValueDfa(const SchemaJson& s,
                                                                 const std::string& path,
                                                                 int32_t* min_out,
                                                                 int32_t* max_out) {
  int64_t min_len = 0, max_len = -1;
  if (s.contains("minLength")) {
    auto v = NonNegativeInt(s, "minLength", path);
    if (!v.ok()) return v.status();
    min_len = *v;
  }
  if (s.contains("maxLength")) {
    auto v = NonNegativeInt(s, "maxLength", path);
    if (!v.ok()) return v.status();
    max_len = *v;
  }
  if (max_len >= 0 && min_len > max_len)
    return InvalidArgument("JSON schema: minLength > maxLength (%s)", Where(path).c_str());
  if (min_out != nullptr) {
    // A bound no output can reach is decided before anything is sized from it: a minLength
    // above options_.max_text_chars can never be met, a maxLength above it can never bind.
    // What is left fits an int32 counter (the tables it sizes are budgeted).
    const int64_t fit = options_.max_text_chars;
    if (fit >= 0 && min_len > fit)
      return InvalidArgument("JSON schema: minLength %lld can never be met: at most %lld "
                             "characters fit in an output of this server's context (%s)",
                             static_cast<long long>(min_len), static_cast<long long>(fit),
                             Where(path).c_str());
    if (fit >= 0 && max_len > fit) max_len = -1;
    constexpr int64_t kCounter = int64_t{1} << 30;
    *min_out = static_cast<int32_t>(std::min(min_len, kCounter));
    *max_out = max_len < 0 ? -1 : static_cast<int32_t>(std::min(max_len, kCounter));
  }
  std::vector<std::string> patterns;
  if (s.contains("pattern")) {
    if (!s["pattern"].is_string())
      return InvalidArgument("JSON schema: 'pattern' must be a string (%s)", Where(path).c_str());
    patterns.push_back(s["pattern"].get<std::string>());
  }
  if (s.contains("format")) {
    const std::string f = s["format"].is_string() ? s["format"].get<std::string>() : "";
    const char* p = FormatPattern(f);
    if (p == nullptr)
      return Unimplemented("JSON schema: 'format' '%s' is not supported (%s)", f.c_str(),
                           Where(path).c_str());
    patterns.push_back(p);
  }
  if (patterns.empty()) return std::optional<Dfa>();
  std::optional<Dfa> v;
  for (const std::string& p : patterns) {
    Nfa n;
    n.set_max_states(kMaxPatternStates);
    RegexParser::LengthBounds relaxed;
    auto frag = RegexParser::Compile(p, &n, min_out != nullptr ? &relaxed : nullptr);
    if (!frag.ok()) return Status(frag.status().code(),
                                  frag.status().message() + " (" + Where(path) + ")");
    if (n.full())
      return ResourceExhausted("JSON schema: 'pattern' expands to more than %d automaton states "
                               "(repetitions multiply: (x{100}){100} is 10000 copies of x); "
                               "simplify it (%s)",
                               kMaxPatternStates, Where(path).c_str());
    // The value automaton has about as many states as the string's text automaton, whose
    // profile the budget counts: bounded by the same number.
    const int32_t max_states = static_cast<int32_t>(
        std::min<int64_t>(kMaxValueStates, options_.limits.max_text_states));
    auto d = Dfa::Determinize(n, *frag, max_states, kMaxPatternWork);
    if (!d.ok())
      return ResourceExhausted("JSON schema: 'pattern' is too complex: its %s (%s)",
                               d.status().message().c_str(), Where(path).c_str());
    if (min_out != nullptr) {
      *min_out = std::max(*min_out, relaxed.min);
      if (relaxed.max >= 0) *max_out = *max_out < 0 ? relaxed.max : std::min(*max_out, relaxed.max);
      if (*max_out >= 0 && *min_out > *max_out)
        return InvalidArgument("JSON schema: no string meets both the pattern and the length "
                               "bounds; the schema can never be satisfied (%s)",
                               Where(path).c_str());
    }
    if (!v) {
      v = d->Trimmed().Minimized();
    } else {
      auto both = Dfa::Intersect(*v, *d, kMaxValueStates);
      if (!both.ok()) return both.status();
      v = both->Minimized();
    }
  }
  if (v->IsEmptyLanguage())
    return InvalidArgument("JSON schema: no string satisfies the string constraints; the schema "
                           "can never be satisfied (%s)", Where(path).c_str());
  return v;
}

int32_t JsonSchemaCompiler::AnyStringRule(int32_t min_chars, int32_t max_chars) {
  auto it = string_rules_.find({min_chars, max_chars});
  if (it != string_rules_.end()) return it->second;
  auto dfa = TextDfa::AnyJsonString(tool_safe_);
  auto profile = vocab_->ProfileFor(*dfa, b_->budget());
  auto r = b_->AddTextRule("string", dfa, profile, min_chars, max_chars);
  MIMO_CHECK(r.ok(), "%s", r.status().message().c_str());  // counts freely: cannot fail
  string_rules_[{min_chars, max_chars}] = *r;
  return *r;
}

namespace {

}  // namespace


StatusOr<int32_t> JsonSchemaCompiler::GuardedTextRule(const std::string& name,
                                                      std::shared_ptr<const TextDfa> text,
                                                      int32_t min_len, int32_t max_len) {
  auto profile = vocab_->ProfileFor(*text, b_->budget());
  if (max_len < 0 && options_.max_string_length >= 0) {  // the guard, where it can be met
    auto rule = b_->AddTextRule(name, text, profile, min_len,
                                std::max(options_.max_string_length, min_len));
    if (rule.ok()) return rule;
  }
  return b_->AddTextRule(name, text, profile, min_len, max_len);
}

StatusOr<Nfa::Frag> JsonSchemaCompiler::String(const SchemaJson& s, const std::string& path) {
  int32_t min_len = 0, max_len = -1;
  auto value = StringValueDfa(s, path, &min_len, &max_len);
  if (!value.ok()) return value.status();
  if (!value->has_value()) {
    if (max_len < 0 && options_.max_string_length >= 0)
      max_len = std::max(options_.max_string_length, min_len);
    return nfa().CallRule(AnyStringRule(min_len, max_len));
  }
  auto text = TextDfa::JsonString(**value, tool_safe_);
  if (!text.ok()) return Status(text.status().code(),
                                text.status().message() + " (" + Where(path) + ")");
  auto rule = GuardedTextRule("string " + path, *text, min_len, max_len);
  if (!rule.ok()) return Status(rule.status().code(),
                                rule.status().message() + " (" + Where(path) + ")");
  return nfa().CallRule(*rule);
}

StatusOr<Nfa::Frag> JsonSchemaCompiler::Enum(const SchemaJson& s, const SchemaJson& values,
                                             const std::string& path) {
  // Values must satisfy the sibling keywords too: filter by type, string and number bounds.
  if (HasOtherConstraints(s, {"enum", "const", "type", "minLength", "maxLength", "pattern",
                              "format", "minimum", "maximum", "exclusiveMinimum",
                              "exclusiveMaximum"}))
    return Unimplemented("JSON schema: 'enum'/'const' together with object or array keywords is "
                         "not supported (%s)", Where(path).c_str());
  std::set<std::string> types;
  if (s.contains("type")) {
    if (s["type"].is_string()) types.insert(s["type"].get<std::string>());
    if (s["type"].is_array())
      for (const auto& t : s["type"])
        if (t.is_string()) types.insert(t.get<std::string>());
  }
  std::optional<Dfa> string_dfa;
  bool string_checked = false;
  std::vector<Nfa::Frag> alts;
  std::set<std::string> emitted;
  for (const auto& v : values) {
    if (!types.empty()) {
      const bool is_int = v.is_number_integer() ||
                          (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()));
      bool ok = (v.is_null() && types.count("null")) || (v.is_boolean() && types.count("boolean")) ||
                (v.is_string() && types.count("string")) ||
                (v.is_number() && types.count("number")) || (is_int && types.count("integer")) ||
                (v.is_object() && types.count("object")) || (v.is_array() && types.count("array"));
      if (!ok) continue;
    }
    if (v.is_string()) {
      const std::string str = v.get<std::string>();
      const int64_t len = CodepointCount(str);
      if (s.contains("minLength") && s["minLength"].is_number() && len < s["minLength"].get<double>())
        continue;
      if (s.contains("maxLength") && s["maxLength"].is_number() && len > s["maxLength"].get<double>())
        continue;
      if (s.contains("pattern") || s.contains("format")) {
        if (!string_checked) {
          SchemaJson only;
          for (const char* k : {"pattern", "format"})
            if (s.contains(k)) only[k] = s[k];
          auto d = StringValueDfa(only, path);
          if (!d.ok()) return d.status();
          string_dfa = std::move(d).value();
          string_checked = true;
        }
        if (string_dfa && !Accepts(*string_dfa, str)) continue;
      }
    }
    if (v.is_number()) {
      const double x = v.get<double>();
      auto num = [&](const char* k, double* out) {
        if (!s.contains(k) || !s[k].is_number()) return false;
        *out = s[k].get<double>();
        return true;
      };
      double b;
      if (num("minimum", &b) && x < b) continue;
      if (num("maximum", &b) && x > b) continue;
      if (num("exclusiveMinimum", &b) && x <= b) continue;
      if (num("exclusiveMaximum", &b) && x >= b) continue;
    }
    const std::string text = Serialize(v);
    if (emitted.insert(text).second) alts.push_back(nfa().Literal(text));
  }
  if (alts.empty())
    return InvalidArgument("JSON schema: no 'enum'/'const' value satisfies the schema; the schema "
                           "can never be satisfied (%s)", Where(path).c_str());
  return nfa().Alt(alts);
}

Status JsonSchemaCompiler::CheckOneOf(const SchemaJson& branches, const std::string& path) const {
  SchemaOverlap overlap([this, &path](const SchemaJson* s) { return Deref(s, path); });
  for (size_t i = 0; i < branches.size(); ++i) {
    for (size_t j = 0; j < branches.size(); ++j) {
      if (i == j) continue;
      if (!overlap.OutputsFail(branches[i], branches[j]))
        return Unimplemented(
            "JSON schema: 'oneOf' whose branches %zu and %zu may both match a value is not "
            "supported; use 'anyOf' or make the branches disjoint (%s)", i, j, Where(path).c_str());
    }
  }
  return Status::Ok();
}

}  // namespace mimo
