// The request's tools, reduced to what the tool-call parser needs: which function names exist and
// the declared JSON-schema type(s) of each parameter; plus the value coercion that uses them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/json_escape.h"
#include "core/status.h"

namespace mimo {

// Bit set of JSON-schema types a parameter may take ("type": "integer" or ["integer", "null"]).
// 0 means "no usable type": the parameter is not declared, has no "type", or only unknown types.
using JsonTypeMask = uint32_t;
inline constexpr JsonTypeMask kJsonString = 1u << 0;
inline constexpr JsonTypeMask kJsonInteger = 1u << 1;
inline constexpr JsonTypeMask kJsonNumber = 1u << 2;
inline constexpr JsonTypeMask kJsonBoolean = 1u << 3;
inline constexpr JsonTypeMask kJsonObject = 1u << 4;
inline constexpr JsonTypeMask kJsonArray = 1u << 5;
inline constexpr JsonTypeMask kJsonNull = 1u << 6;

// A parameter is kept verbatim as a JSON string (and streamed incrementally) when it may be a
// string, or when its type is missing/unknown, or when it is not declared at all.
inline bool IsStringParam(JsonTypeMask types) { return types == 0 || (types & kJsonString); }

// Immutable after construction; safe to share between threads.
class ToolSchema {
 public:
  ToolSchema() = default;  // no tools: every <tool_call> is returned as content

  // `tools` is the OpenAI request field: [{"type": "function", "function": {"name": ...,
  // "parameters": {"type": "object", "properties": {...}}}}, ...]. A bare {"name", "parameters"}
  // element is accepted too. null means no tools.
  static StatusOr<ToolSchema> FromJson(const nlohmann::json& tools);
  static StatusOr<ToolSchema> FromJsonText(std::string_view text);

  bool HasFunction(std::string_view name) const { return functions_.count(name) > 0; }
  // Declared types of `param` of function `fn`; 0 when unknown (see JsonTypeMask).
  JsonTypeMask ParamTypes(std::string_view fn, std::string_view param) const;
  size_t size() const { return functions_.size(); }

 private:
  using Params = std::map<std::string, JsonTypeMask, std::less<>>;
  std::map<std::string, Params, std::less<>> functions_;
};

// Maps a JSON-schema type name to its bit; also the aliases models and peers use ("int",
// "float", "bool", "dict", "list", "str", "text"). Unknown names give 0.
JsonTypeMask JsonTypeFromName(std::string_view name);

// HTML character references -> text: &amp; &lt; &gt; &quot; &apos; &#39; &nbsp; and numeric
// &#NNN; / &#xHH;. Anything else (unknown names, a missing ';') is copied unchanged.
std::string HtmlUnescape(std::string_view s);

// Converts one complete raw parameter value of a non-string parameter (!IsStringParam(types))
// to JSON text. Rules, in order, on the value with surrounding ASCII whitespace trimmed and HTML
// references unescaped (the raw trimmed text is tried second):
//   "null" / "None"                        -> null (any non-string type)
//   integer:  [+-]digits, or an integral number like 5.0 / 1e3       -> integer
//   number:   a finite JSON-style number; integral values (|v| < 2^53) -> integer, else float
//   boolean:  true/false, case-insensitive (so Python's True/False)  -> bool
//   object/array: JSON text whose top level has a declared kind     -> that value (key order kept)
// When nothing applies, the untrimmed raw value is kept as a JSON string.
std::string CoerceParameterValue(std::string_view raw, JsonTypeMask types);

}  // namespace mimo
