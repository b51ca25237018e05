// JsonSchemaCompiler: JSON Schema (the subset below) to grammar rules. Objects, arrays and $ref
// targets become rules (calls, so recursion works); strings become text rules; numbers, literals
// and enums are inlined into the calling rule.
//
// Supported: type (one or a list), enum, const, properties / required / additionalProperties
// (false, true or a schema; absent = no other properties are generated, which is valid, except
// for an object without properties, which is free-form), items,
// prefixItems (and draft-4 array "items" + additionalItems), minItems / maxItems, anyOf, oneOf
// (branches must be provably disjoint), allOf with one schema, $ref to "#..." JSON pointers
// ($defs, definitions, recursion), minLength / maxLength, pattern (see RegexParser), format
// (date, time, date-time, uuid, email, ipv4), minimum / maximum / exclusiveMinimum /
// exclusiveMaximum (see NumberRange), boolean schemas. Annotations (title, description, default,
// examples, ...) and keywords outside JSON Schema are ignored, as validators do. Every other
// keyword (patternProperties, propertyNames, if/then/else, not, multipleOf, uniqueItems,
// contains, min/maxProperties, dependent*, unevaluated*, ...) is rejected with Unimplemented
// naming it. Without "type", the type is inferred from the keywords present (properties ->
// object, items -> array, pattern -> string, minimum -> number), else any JSON value.
//
// Generated JSON is canonical where JSON allows a choice: properties in schema order, strings
// with one escape per character that needs one (plain strings allow every JSON escape),
// whitespace per GrammarOptions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "grammar/dfa.h"
#include "grammar/grammar_builder.h"
#include "grammar/grammar_options.h"
#include "grammar/token_vocabulary.h"

namespace mimo {

using SchemaJson = nlohmann::ordered_json;

// Single-use, not thread-safe; adds rules to one GrammarBuilder.
class JsonSchemaCompiler {
 public:
  // tool_safe: spell '&' and '<' inside JSON strings as \u0026 and \u003c, so that a JSON value
  // inside a `mimo` tool-call parameter never contains `</parameter>` and is not changed by the
  // parser's HTML unescaping.
  JsonSchemaCompiler(GrammarBuilder* builder, std::shared_ptr<const TokenVocabulary> vocab,
                     const GrammarOptions& options, bool tool_safe);

  // The document "#..." references resolve in; must outlive the compiler.
  void SetDocument(const SchemaJson* doc) { doc_ = doc; }
  // A fragment matching the JSON values valid for `schema`; path names it in errors.
  StatusOr<Nfa::Frag> Value(const SchemaJson& schema, const std::string& path);
  int32_t AnyValueRule();
  int32_t AnyObjectRule();
  // A raw (unescaped) string valid for `schema` followed by `terminator`, for `mimo` tool-call
  // parameters passed as strings. Fails when the schema accepts no string.
  StatusOr<Nfa::Frag> RawString(const SchemaJson& schema, const std::string& path,
                                std::string_view terminator);

 private:
  Nfa& nfa() { return b_->nfa(); }
  Nfa::Frag Gap();
  std::string Quote(std::string_view s) const;  // JSON string literal, canonical escapes
  std::string Serialize(const SchemaJson& v) const;

  StatusOr<const SchemaJson*> Resolve(const std::string& ref, const std::string& path) const;
  StatusOr<const SchemaJson*> Deref(const SchemaJson* s, const std::string& path) const;
  StatusOr<Nfa::Frag> RefCall(const std::string& ref, const std::string& path);
  StatusOr<Nfa::Frag> Enum(const SchemaJson& s, const SchemaJson& values, const std::string& path);
  StatusOr<Nfa::Frag> OfType(const std::string& type, const SchemaJson& s, const std::string& path);
  StatusOr<Nfa::Frag> String(const SchemaJson& s, const std::string& path);
  StatusOr<int32_t> ObjectRule(const SchemaJson& s, const std::string& path);
  StatusOr<int32_t> ArrayRule(const SchemaJson& s, const std::string& path);
  StatusOr<Nfa::Frag> ObjectBody(const SchemaJson& s, const std::string& path);
  StatusOr<Nfa::Frag> ArrayBody(const SchemaJson& s, const std::string& path);
  // The value language (UTF-8) of pattern / format constraints (lengths are counted by the text
  // rule); nullopt = none. Also validates minLength / maxLength.
  // With min_len/max_len given (the schema's bounds, in/out), a pattern's bounded repetition may
  // be moved into them (RegexParser::Compile); without, the automaton is exact.
  StatusOr<std::optional<Dfa>> StringValueDfa(const SchemaJson& s, const std::string& path,
                                              int32_t* min_len = nullptr,
                                              int32_t* max_len = nullptr);
  int32_t AnyStringRule(int32_t min_chars, int32_t max_chars);
  int32_t AnyRawRule(std::string_view terminator, int32_t min_chars, int32_t max_chars);
  StatusOr<int32_t> KeyExcludingRule(const std::vector<std::string>& names);
  // A text rule of [min_len, max_len] characters; with no maxLength (max_len < 0) the
  // max_string_length guard applies where the text can still be matched within it.
  StatusOr<int32_t> GuardedTextRule(const std::string& name, std::shared_ptr<const TextDfa> text,
                                    int32_t min_len, int32_t max_len);
  Status CheckOneOf(const SchemaJson& branches, const std::string& path) const;
  // The type of every keyword of one schema object that the compiler reads (a wrong one is an
  // InvalidArgument naming it, not an exception from the JSON library).
  static Status CheckKeywordTypes(const SchemaJson& s, const std::string& path);

  GrammarBuilder* b_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  GrammarOptions options_;
  bool tool_safe_;
  const SchemaJson* doc_ = nullptr;
  std::map<std::string, int32_t> ref_rules_;     // "$ref" -> rule
  std::map<std::string, int32_t> path_rules_;    // object/array rule by schema path
  std::map<std::pair<int32_t, int32_t>, int32_t> string_rules_;  // (min, max) -> text rule
  std::map<std::tuple<std::string, int32_t, int32_t>, int32_t> raw_rules_;
  int32_t any_value_ = -1, any_object_ = -1, any_array_ = -1;
  int depth_ = 0;  // nesting of Value / RawString calls ($ref cycles included)
};

}  // namespace mimo
