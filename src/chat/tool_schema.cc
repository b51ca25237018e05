// ToolSchema construction from the OpenAI `tools` field, and schema-driven value coercion.
#include "chat/tool_schema.h"

#include <charconv>
#include <cmath>
#include <cstring>

namespace mimo {
namespace {

using ojson = nlohmann::ordered_json;

// Types of one property schema: "type" (a name or a list of names), else the union of the
// "type"s in "anyOf"/"oneOf" branches (one level, which covers Optional[...] style schemas).
JsonTypeMask TypesOfProperty(const nlohmann::json& prop) {
  if (!prop.is_object()) return 0;
  JsonTypeMask mask = 0;
  auto add = [&mask](const nlohmann::json& t) {
    if (t.is_string()) {
      mask |= JsonTypeFromName(t.get<std::string>());
    } else if (t.is_array()) {
      for (const auto& e : t)
        if (e.is_string()) mask |= JsonTypeFromName(e.get<std::string>());
    }
  };
  if (auto it = prop.find("type"); it != prop.end()) {
    add(*it);
    return mask;
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    auto it = prop.find(key);
    if (it == prop.end() || !it->is_array()) continue;
    for (const auto& branch : *it)
      if (branch.is_object() && branch.contains("type")) add(branch["type"]);
  }
  return mask;
}

std::string_view TrimAscii(std::string_view s) {
  auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return s;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

// A JSON number, optionally with a leading '+': -?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)? relaxed to
// allow leading zeros ("007"), which models emit. No hex, inf or nan.
bool LooksLikeNumber(std::string_view s) {
  size_t i = 0, n = s.size();
  if (i < n && (s[i] == '+' || s[i] == '-')) ++i;
  size_t digits = 0;
  while (i < n && s[i] >= '0' && s[i] <= '9') ++i, ++digits;
  if (i < n && s[i] == '.') {
    ++i;
    size_t frac = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9') ++i, ++frac;
    if (frac == 0) return false;
    digits += frac;
  }
  if (digits == 0) return false;
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < n && (s[i] == '+' || s[i] == '-')) ++i;
    size_t exp = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9') ++i, ++exp;
    if (exp == 0) return false;
  }
  return i == n;
}

bool ParseDouble(std::string_view s, double* out) {
  if (!LooksLikeNumber(s)) return false;
  if (s.front() == '+') s.remove_prefix(1);
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size() && std::isfinite(*out);
}

bool ParseInteger(std::string_view s, int64_t* out) {
  if (!LooksLikeNumber(s)) return false;
  std::string_view digits = s;
  if (digits.front() == '+') digits.remove_prefix(1);
  auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), *out);
  if (ec == std::errc() && p == digits.data() + digits.size()) return true;
  // "5.0", "1e3": integral numbers are integers too.
  double d;
  if (!ParseDouble(s, &d) || d != std::floor(d) || std::fabs(d) >= 9.2e18) return false;
  *out = static_cast<int64_t>(d);
  return true;
}

std::string JsonStringLiteral(std::string_view s) {
  std::string out = "\"";
  AppendJsonEscaped(s, &out);
  out += '"';
  return out;
}

// One attempt at coercing `v` (already trimmed) to one of `types`; empty string when none fits.
std::string TryCoerce(std::string_view v, JsonTypeMask types) {
  if (v == "null" || v == "None") return "null";
  if (types & kJsonInteger) {
    int64_t i;
    if (ParseInteger(v, &i)) return std::to_string(i);
  }
  if (types & kJsonNumber) {
    double d;
    if (ParseDouble(v, &d)) {
      if (d == std::floor(d) && std::fabs(d) < 9007199254740992.0)
        return std::to_string(static_cast<int64_t>(d));
      return ojson(d).dump();
    }
  }
  if (types & kJsonBoolean) {
    if (EqualsIgnoreCase(v, "true")) return "true";
    if (EqualsIgnoreCase(v, "false")) return "false";
  }
  if (types & (kJsonObject | kJsonArray)) {
    ojson j = ojson::parse(v, nullptr, /*allow_exceptions=*/false);
    if ((j.is_object() && (types & kJsonObject)) || (j.is_array() && (types & kJsonArray)))
      return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
  }
  return "";
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xC0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xE0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Decodes the reference body between '&' and ';' (e.g. "amp", "#39", "#x27"); false if unknown.
bool DecodeReference(std::string_view body, std::string* out) {
  static const struct { const char* name; const char* text; } kNamed[] = {
      {"amp", "&"}, {"lt", "<"}, {"gt", ">"}, {"quot", "\""}, {"apos", "'"}, {"nbsp", "\xC2\xA0"}};
  for (const auto& e : kNamed) {
    if (body == e.name) {
      *out += e.text;
      return true;
    }
  }
  if (body.size() < 2 || body[0] != '#') return false;
  bool hex = body[1] == 'x' || body[1] == 'X';
  std::string_view digits = body.substr(hex ? 2 : 1);
  if (digits.empty() || digits.size() > 8) return false;
  uint32_t cp = 0;
  auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), cp, hex ? 16 : 10);
  if (ec != std::errc() || p != digits.data() + digits.size()) return false;
  if (cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
  AppendUtf8(cp, out);
  return true;
}

}  // namespace

JsonTypeMask JsonTypeFromName(std::string_view name) {
  static const struct { const char* name; JsonTypeMask bit; } kNames[] = {
      {"string", kJsonString},   {"str", kJsonString},      {"text", kJsonString},
      {"integer", kJsonInteger}, {"int", kJsonInteger},     {"number", kJsonNumber},
      {"float", kJsonNumber},    {"double", kJsonNumber},   {"boolean", kJsonBoolean},
      {"bool", kJsonBoolean},    {"object", kJsonObject},   {"dict", kJsonObject},
      {"array", kJsonArray},     {"list", kJsonArray},      {"null", kJsonNull}};
  for (const auto& e : kNames)
    if (EqualsIgnoreCase(name, e.name)) return e.bit;
  return 0;
}

StatusOr<ToolSchema> ToolSchema::FromJson(const nlohmann::json& tools) {
  ToolSchema schema;
  if (tools.is_null()) return schema;
  if (!tools.is_array()) return InvalidArgument("tools: expected a JSON array of tools");
  for (size_t i = 0; i < tools.size(); ++i) {
    const nlohmann::json& tool = tools[i];
    if (!tool.is_object()) return InvalidArgument("tools[%zu]: expected an object", i);
    const nlohmann::json* fn = &tool;
    if (auto it = tool.find("function"); it != tool.end()) {
      if (!it->is_object()) return InvalidArgument("tools[%zu].function: expected an object", i);
      fn = &*it;
    }
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string() || name->get<std::string>().empty())
      return InvalidArgument("tools[%zu]: missing function name", i);
    Params& params = schema.functions_[name->get<std::string>()];
    auto parameters = fn->find("parameters");
    if (parameters == fn->end() || parameters->is_null()) continue;
    if (!parameters->is_object())
      return InvalidArgument("tools[%zu].parameters: expected a JSON-schema object", i);
    auto props = parameters->find("properties");
    if (props == parameters->end() || props->is_null()) continue;
    if (!props->is_object())
      return InvalidArgument("tools[%zu].parameters.properties: expected an object", i);
    for (auto it = props->begin(); it != props->end(); ++it)
      params[it.key()] = TypesOfProperty(it.value());
  }
  return schema;
}

StatusOr<ToolSchema> ToolSchema::FromJsonText(std::string_view text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("tools: not valid JSON");
  return FromJson(j);
}

JsonTypeMask ToolSchema::ParamTypes(std::string_view fn, std::string_view param) const {
  auto f = functions_.find(fn);
  if (f == functions_.end()) return 0;
  auto p = f->second.find(param);
  return p == f->second.end() ? 0 : p->second;
}

std::string HtmlUnescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == '&') {
      size_t semi = s.find(';', i + 1);
      if (semi != std::string_view::npos && semi - i <= 10 &&
          DecodeReference(s.substr(i + 1, semi - i - 1), &out)) {
        i = semi + 1;
        continue;
      }
    }
    out += s[i++];
  }
  return out;
}

std::string CoerceParameterValue(std::string_view raw, JsonTypeMask types) {
  std::string_view trimmed = TrimAscii(raw);
  std::string unescaped = HtmlUnescape(trimmed);
  std::string json = TryCoerce(unescaped, types);
  if (json.empty() && unescaped != trimmed) json = TryCoerce(trimmed, types);
  return json.empty() ? JsonStringLiteral(raw) : json;
}

}  // namespace mimo
