// SchemaChecker: a small JSON Schema validator written for the tests, independent of the grammar
// engine (patterns go through std::wregex, not our regex automaton). Covers the keywords the
// grammar supports, with the validator semantics (additionalProperties absent = allowed, oneOf =
// exactly one, minLength in code points).
#pragma once

#include <cmath>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

namespace mimo::testing {

class SchemaChecker {
 public:
  using Json = nlohmann::ordered_json;
  explicit SchemaChecker(const Json& root) : root_(root) {}

  // Empty when valid, else where and why it is not.
  std::string Check(const Json& v) const { return Check(v, root_, "$"); }

 private:
  static std::u32string Utf32(const std::string& s) {
    std::u32string out;
    for (size_t i = 0; i < s.size();) {
      const unsigned char c = s[i];
      int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      uint32_t cp = n == 1 ? c : c & (0x7F >> n);
      for (int k = 1; k < n && i + k < s.size(); ++k) cp = (cp << 6) | (s[i + k] & 0x3F);
      out.push_back(cp);
      i += n;
    }
    return out;
  }
  static std::wstring Wide(const std::string& s) {
    std::wstring w;
    for (char32_t c : Utf32(s)) w.push_back(static_cast<wchar_t>(c));
    return w;
  }

  const Json& Deref(const Json& s) const {
    const Json* cur = &s;
    for (int i = 0; i < 32 && cur->is_object() && cur->contains("$ref"); ++i) {
      std::string ref = (*cur)["$ref"].get<std::string>();
      cur = &root_.at(Json::json_pointer(ref.substr(1)));
    }
    return *cur;
  }

  static bool IsType(const Json& v, const std::string& t) {
    if (t == "null") return v.is_null();
    if (t == "boolean") return v.is_boolean();
    if (t == "string") return v.is_string();
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    if (t == "number") return v.is_number();
    if (t == "integer")
      return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
    return false;
  }

  std::string Check(const Json& v, const Json& s0, const std::string& at) const {
    const Json& s = Deref(s0);
    if (s.is_boolean()) return s.get<bool>() ? "" : at + ": schema false";
    if (s.contains("type")) {
      bool ok = false;
      if (s["type"].is_string()) ok = IsType(v, s["type"].get<std::string>());
      for (const auto& t : s["type"].is_array() ? s["type"] : Json::array()) ok = ok || IsType(v, t.get<std::string>());
      if (!ok) return at + ": wrong type";
    }
    if (s.contains("const") && !(s["const"] == v)) return at + ": not the const";
    if (s.contains("enum")) {
      bool found = false;
      for (const auto& e : s["enum"]) found = found || e == v;
      if (!found) return at + ": not in enum";
    }
    if (s.contains("anyOf")) {
      bool any = false;
      for (const auto& b : s["anyOf"]) any = any || Check(v, b, at).empty();
      if (!any) return at + ": no anyOf branch matches";
    }
    if (s.contains("oneOf")) {
      int n = 0;
      for (const auto& b : s["oneOf"]) n += Check(v, b, at).empty();
      if (n != 1) return at + ": " + std::to_string(n) + " oneOf branches match";
    }
    if (s.contains("allOf")) {
      for (const auto& b : s["allOf"]) {
        std::string e = Check(v, b, at);
        if (!e.empty()) return e;
      }
    }
    if (v.is_string()) {
      const std::string str = v.get<std::string>();
      const double len = static_cast<double>(Utf32(str).size());
      if (s.contains("minLength") && len < s["minLength"].get<double>()) return at + ": too short";
      if (s.contains("maxLength") && len > s["maxLength"].get<double>()) return at + ": too long";
      if (s.contains("pattern")) {
        std::wregex re(Wide(s["pattern"].get<std::string>()), std::regex::ECMAScript);
        if (!std::regex_search(Wide(str), re)) return at + ": pattern mismatch";
      }
    }
    if (v.is_number()) {
      const double x = v.get<double>();
      if (s.contains("minimum") && s["minimum"].is_number() && x < s["minimum"].get<double>()) return at + ": below minimum";
      if (s.contains("maximum") && s["maximum"].is_number() && x > s["maximum"].get<double>()) return at + ": above maximum";
      if (s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_number() && x <= s["exclusiveMinimum"].get<double>())
        return at + ": not above exclusiveMinimum";
      if (s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_number() && x >= s["exclusiveMaximum"].get<double>())
        return at + ": not below exclusiveMaximum";
    }
    if (v.is_object()) {
      if (s.contains("required"))
        for (const auto& r : s["required"])
          if (!v.contains(r.get<std::string>())) return at + ": missing " + r.get<std::string>();
      for (auto it = v.begin(); it != v.end(); ++it) {
        const std::string sub = at + "." + it.key();
        if (s.contains("properties") && s["properties"].contains(it.key())) {
          std::string e = Check(it.value(), s["properties"][it.key()], sub);
          if (!e.empty()) return e;
        } else if (s.contains("additionalProperties")) {
          std::string e = Check(it.value(), s["additionalProperties"], sub);
          if (!e.empty()) return e;
        }
      }
    }
    if (v.is_array()) {
      const double n = static_cast<double>(v.size());
      if (s.contains("minItems") && n < s["minItems"].get<double>()) return at + ": too few items";
      if (s.contains("maxItems") && n > s["maxItems"].get<double>()) return at + ": too many items";
      size_t np = s.contains("prefixItems") ? s["prefixItems"].size() : 0;
      for (size_t i = 0; i < v.size(); ++i) {
        const std::string sub = at + "[" + std::to_string(i) + "]";
        std::string e;
        if (i < np) {
          e = Check(v[i], s["prefixItems"][i], sub);
        } else if (s.contains("items")) {
          e = Check(v[i], s["items"], sub);
        }
        if (!e.empty()) return e;
      }
    }
    return "";
  }

  const Json& root_;
};

}  // namespace mimo::testing
