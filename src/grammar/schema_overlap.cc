// Conservative disjointness of JSON schemas (see schema_overlap.h).
#include "grammar/schema_overlap.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <string>

#include "grammar/dfa.h"
#include "grammar/regex_parser.h"

namespace mimo {
namespace {

unsigned KindsOfTypeName(const std::string& t) {
  if (t == "null") return SchemaOverlap::kNull;
  if (t == "boolean") return SchemaOverlap::kBool;
  if (t == "integer") return SchemaOverlap::kInt;
  if (t == "number") return SchemaOverlap::kInt | SchemaOverlap::kFraction;
  if (t == "string") return SchemaOverlap::kString;
  if (t == "object") return SchemaOverlap::kObject;
  if (t == "array") return SchemaOverlap::kArray;
  return 0;
}

unsigned KindOfValue(const SchemaJson& v) {
  if (v.is_null()) return SchemaOverlap::kNull;
  if (v.is_boolean()) return SchemaOverlap::kBool;
  if (v.is_number()) {
    const double d = v.get<double>();
    return d == std::floor(d) ? SchemaOverlap::kInt : SchemaOverlap::kFraction;
  }
  if (v.is_string()) return SchemaOverlap::kString;
  if (v.is_object()) return SchemaOverlap::kObject;
  return SchemaOverlap::kArray;
}

unsigned TypeKeyword(const SchemaJson& s) {
  unsigned k = 0;
  const SchemaJson& t = s["type"];
  if (t.is_string()) k = KindsOfTypeName(t.get<std::string>());
  if (t.is_array())
    for (const auto& e : t)
      if (e.is_string()) k |= KindsOfTypeName(e.get<std::string>());
  return k;
}

// The enum/const values of s, or nullptr.
const SchemaJson* Values(const SchemaJson& s, SchemaJson* storage) {
  if (s.contains("const")) {
    *storage = SchemaJson::array({s["const"]});
    return storage;
  }
  if (s.contains("enum") && s["enum"].is_array()) return &s["enum"];
  return nullptr;
}

bool Closed(const SchemaJson& s) {
  return s.contains("additionalProperties") && s["additionalProperties"].is_boolean() &&
         !s["additionalProperties"].get<bool>();
}

std::set<std::string> Strings(const SchemaJson& s, const char* key) {
  std::set<std::string> out;
  if (!s.contains(key)) return out;
  const SchemaJson& v = s[key];
  if (v.is_array()) {
    for (const auto& e : v)
      if (e.is_string()) out.insert(e.get<std::string>());
  } else if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it) out.insert(it.key());
  }
  return out;
}

// The string keywords of a schema, compiled once to test many enum/const values: a value is
// rejected for certain when it is outside minLength/maxLength (in code points) or its pattern
// does not match. A pattern that does not compile here (or needs too many states to check)
// rejects nothing.
class StringKeywords {
 public:
  explicit StringKeywords(const SchemaJson& s) {
    auto bound = [&](const char* key, int64_t* out) {
      if (s.contains(key) && s[key].is_number_integer()) *out = s[key].get<int64_t>();
    };
    bound("minLength", &min_);
    bound("maxLength", &max_);
    if (!s.contains("pattern") || !s["pattern"].is_string()) return;
    Nfa nfa;
    nfa.set_max_states(1 << 14);
    auto frag = RegexParser::Compile(s["pattern"].get<std::string>(), &nfa);
    if (!frag.ok() || nfa.full()) return;
    auto dfa = Dfa::Determinize(nfa, *frag, 1 << 12, int64_t{1} << 22);
    if (dfa.ok()) pattern_ = std::move(dfa).value();
  }

  bool Rejects(const std::string& v) const {
    int64_t chars = 0;
    for (unsigned char c : v) chars += (c & 0xC0) != 0x80;
    if (chars < min_ || (max_ >= 0 && chars > max_)) return true;
    if (!pattern_) return false;
    int32_t q = 0;
    for (unsigned char c : v) {
      q = pattern_->Next(q, c);
      if (q < 0) return true;
    }
    return !pattern_->accepting(q);
  }

 private:
  int64_t min_ = 0, max_ = -1;
  std::optional<Dfa> pattern_;
};

// Whether every one of `values` fails s for certain: a kind s does not accept (`accepted`), a
// string that s's string keywords reject (compiled at the first string that needs them), or a
// value that is none of s's own values (`s_values`, when s has them).
bool AllFail(const SchemaJson& values, const SchemaJson& s, unsigned accepted,
             const SchemaJson* s_values) {
  std::optional<StringKeywords> keywords;
  for (const auto& v : values) {
    if ((KindOfValue(v) & accepted) == 0) continue;
    if (s_values != nullptr && std::find(s_values->begin(), s_values->end(), v) == s_values->end())
      continue;
    if (!v.is_string()) return false;
    if (!keywords) keywords.emplace(s);
    if (!keywords->Rejects(v.get<std::string>())) return false;
  }
  return true;
}

}  // namespace

const SchemaJson* SchemaOverlap::Resolved(const SchemaJson& s) const {
  auto r = deref_(&s);
  return r.ok() ? *r : nullptr;
}

unsigned SchemaOverlap::Generated(const SchemaJson& s0, int depth) const {
  if (--budget_ < 0) return kAll;
  const SchemaJson* s = Resolved(s0);
  if (s == nullptr || depth > 16) return kAll;
  if (s->is_boolean()) return s->get<bool>() ? static_cast<unsigned>(kAll) : 0u;
  if (!s->is_object()) return kAll;
  SchemaJson storage;
  if (const SchemaJson* vals = Values(*s, &storage)) {
    unsigned k = 0;
    for (const auto& v : *vals) k |= KindOfValue(v);
    return k;
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (s->contains(key) && (*s)[key].is_array()) {
      unsigned k = 0;
      for (const auto& b : (*s)[key]) k |= Generated(b, depth + 1);
      return k;
    }
  }
  if (s->contains("type")) return TypeKeyword(*s);
  // Inference as in JsonSchemaCompiler::Value.
  unsigned k = 0;
  auto has = [&](std::initializer_list<const char*> keys) {
    for (const char* key : keys)
      if (s->contains(key)) return true;
    return false;
  };
  if (has({"properties", "required", "additionalProperties"})) k |= kObject;
  if (has({"items", "prefixItems", "minItems", "maxItems", "additionalItems"})) k |= kArray;
  if (has({"pattern", "minLength", "maxLength", "format"})) k |= kString;
  if (has({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) k |= kInt | kFraction;
  return k ? k : kAll;
}

unsigned SchemaOverlap::Accepted(const SchemaJson& s0, int depth) const {
  if (--budget_ < 0) return kAll;
  const SchemaJson* s = Resolved(s0);
  if (s == nullptr || depth > 16) return kAll;
  if (s->is_boolean()) return s->get<bool>() ? static_cast<unsigned>(kAll) : 0u;
  if (!s->is_object()) return kAll;
  unsigned k = s->contains("type") ? TypeKeyword(*s) : kAll;
  SchemaJson storage;
  if (const SchemaJson* vals = Values(*s, &storage)) {
    unsigned v = 0;
    for (const auto& e : *vals) v |= KindOfValue(e);
    k &= v;
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (s->contains(key) && (*s)[key].is_array()) {
      unsigned u = 0;
      for (const auto& b : (*s)[key]) u |= Accepted(b, depth + 1);
      k &= u;
    }
  }
  return k;
}

bool SchemaOverlap::OutputsFail(const SchemaJson& a0, const SchemaJson& b0, int depth) const {
  if (--budget_ < 0) return false;
  if (depth > 8) return false;
  const SchemaJson* a = Resolved(a0);
  const SchemaJson* b = Resolved(b0);
  if (a == nullptr || b == nullptr) return false;
  if ((Generated(*a) & Accepted(*b)) == 0) return true;
  if (!a->is_object() || !b->is_object()) return false;
  // a's outputs are enum values: each must fail b's enum, or b's type.
  SchemaJson sa, sb;
  const SchemaJson* va = Values(*a, &sa);
  const SchemaJson* vb = Values(*b, &sb);
  if (va != nullptr) {
    if (AllFail(*va, *b, Accepted(*b), vb)) return true;
  } else if (vb != nullptr) {
    // b accepts only its values: a's outputs fail b when a rejects each of them (our grammar
    // writes only values a validator accepts for a).
    if (AllFail(*vb, *a, Accepted(*a), nullptr)) return true;
  }
  // An alternation fails b when every branch does.
  for (const char* key : {"anyOf", "oneOf"}) {
    if (a->contains(key) && (*a)[key].is_array()) {
      for (const auto& branch : (*a)[key])
        if (!OutputsFail(branch, *b, depth + 1)) return false;
      return true;
    }
  }
  // Objects: told apart by their properties.
  if (Generated(*a) != kObject) return false;
  const std::set<std::string> a_req = Strings(*a, "required");
  const std::set<std::string> a_props = Strings(*a, "properties");
  const std::set<std::string> b_req = Strings(*b, "required");
  const std::set<std::string> b_props = Strings(*b, "properties");
  // Our objects never carry names outside properties/required unless extras are allowed.
  const bool a_closed = a->contains("additionalProperties")
                            ? (*a)["additionalProperties"].is_boolean() &&
                                  !(*a)["additionalProperties"].get<bool>()
                            : !a_props.empty();  // a bare object is free-form
  if (a_closed) {
    for (const std::string& k : b_req)
      if (!a_props.count(k) && !a_req.count(k)) return true;  // b needs a name a never writes
  }
  if (Closed(*b)) {
    for (const std::string& k : a_req)
      if (!b_props.count(k)) return true;  // a always writes a name b forbids
  }
  for (const std::string& k : a_req) {
    if (!b_props.count(k) || !a->contains("properties") || !(*a)["properties"].is_object() ||
        !(*a)["properties"].contains(k) || !(*b)["properties"].is_object())
      continue;
    if (OutputsFail((*a)["properties"][k], (*b)["properties"][k], depth + 1)) return true;
  }
  return false;
}

}  // namespace mimo
