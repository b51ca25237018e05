// `mimo` tool-call rules; the parameter typing mirrors chat/tool_schema.cc (ToolSchema), which this
// layer may not include.
#include "grammar/tool_call_grammar.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "grammar/json_schema_compiler.h"

namespace mimo {
namespace {

constexpr std::string_view kParameterClose = "</parameter>";

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

// Which types the tool parser sees for a property (ToolSchema's TypesOfProperty): the "type"
// names (with the parser's aliases), else the "type"s of anyOf/oneOf branches one level down.
struct ParserTypes {
  bool any_known = false;  // some recognised type name
  bool string = false;     // one of them is a string type
};

void AddTypeName(std::string_view name, ParserTypes* t) {
  static constexpr std::string_view kString[] = {"string", "str", "text"};
  static constexpr std::string_view kOther[] = {"integer", "int",    "number", "float", "double",
                                                "boolean", "bool",   "object", "dict",  "array",
                                                "list",    "null"};
  for (auto s : kString)
    if (EqualsIgnoreCase(name, s)) t->any_known = t->string = true;
  for (auto s : kOther)
    if (EqualsIgnoreCase(name, s)) t->any_known = true;
}

ParserTypes TypesOfProperty(const SchemaJson& prop) {
  ParserTypes t;
  if (!prop.is_object()) return t;
  auto add = [&t](const SchemaJson& v) {
    if (v.is_string()) AddTypeName(v.get<std::string>(), &t);
    if (v.is_array())
      for (const auto& e : v)
        if (e.is_string()) AddTypeName(e.get<std::string>(), &t);
  };
  if (prop.contains("type")) {
    add(prop["type"]);
    return t;
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (!prop.contains(key) || !prop[key].is_array()) continue;
    for (const auto& branch : prop[key])
      if (branch.is_object() && branch.contains("type")) add(branch["type"]);
  }
  return t;
}

// A name the parser reads back unchanged: no '>' / '<' / newline, no surrounding whitespace.
bool UsableName(const std::string& s) {
  if (s.empty() || s.find_first_of("<>\n") != std::string::npos) return false;
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  return !space(s.front()) && !space(s.back());
}

struct Function {
  std::string name;
  const SchemaJson* parameters = nullptr;  // may be null
};

// <function=NAME>\n? (param)* </function>
StatusOr<Nfa::Frag> FunctionBody(const Function& f, JsonSchemaCompiler* json, Nfa* n) {
  std::vector<Nfa::Frag> parts = {n->Literal("<function=" + f.name + ">"),
                                  n->Opt(n->Literal("\n"))};
  const SchemaJson* params = f.parameters;
  if (params != nullptr) {
    // The tool parser reads parameter types from `parameters.properties` only.
    if (params->contains("$ref"))
      return Unimplemented("tools: function '%s': 'parameters' given by '$ref' is not supported "
                           "(the mimo tool parser reads 'parameters.properties' directly)",
                           f.name.c_str());
    for (const char* key : {"anyOf", "oneOf", "allOf", "not", "if", "patternProperties",
                            "dependentRequired", "minProperties", "maxProperties"}) {
      if (params->is_object() && params->contains(key))
        return Unimplemented("tools: function '%s': '%s' in 'parameters' is not supported",
                             f.name.c_str(), key);
    }
  }
  if (params != nullptr && params->is_object() && params->contains("properties")) {
    const SchemaJson& props = (*params)["properties"];
    if (!props.is_object())
      return InvalidArgument("tools: function '%s': 'parameters.properties' must be an object",
                             f.name.c_str());
    std::vector<std::string> required;
    if (params->contains("required") && (*params)["required"].is_array())
      for (const auto& r : (*params)["required"])
        if (r.is_string()) required.push_back(r.get<std::string>());
    for (const std::string& r : required) {
      if (!props.contains(r))
        return Unimplemented("tools: function '%s': required parameter '%s' is not declared in "
                             "'properties'", f.name.c_str(), r.c_str());
    }
    for (auto it = props.begin(); it != props.end(); ++it) {
      const std::string& key = it.key();
      if (!UsableName(key))
        return InvalidArgument("tools: function '%s': parameter name '%s' cannot be written in "
                               "the mimo tool-call format", f.name.c_str(), key.c_str());
      const std::string path = "/" + f.name + "/" + key;
      const ParserTypes types = TypesOfProperty(it.value());
      StatusOr<Nfa::Frag> value = Status::Ok();
      if (!types.any_known || types.string) {
        value = json->RawString(it.value(), path, kParameterClose);
        if (!value.ok())
          return Status(value.status().code(),
                        "tools: function '" + f.name + "' parameter '" + key +
                            "': the mimo format passes it as a string, but: " +
                            value.status().message());
      } else {
        auto v = json->Value(it.value(), path);
        if (!v.ok())
          return Status(v.status().code(), "tools: function '" + f.name + "' parameter '" + key +
                                               "': " + v.status().message());
        value = n->Seq(*v, n->Literal(std::string(kParameterClose)));
      }
      Nfa::Frag param =
          n->Seq({n->Literal("<parameter=" + key + ">"), *value, n->Opt(n->Literal("\n"))});
      const bool is_required =
          std::find(required.begin(), required.end(), key) != required.end();
      parts.push_back(is_required ? param : n->Opt(param));
    }
  }
  parts.push_back(n->Literal("</function>"));
  return n->Seq(parts);
}

}  // namespace

StatusOr<int32_t> ToolCallGrammar::Compile(std::string_view tools_json,
                                           const std::string& only_function, bool parallel,
                                           std::shared_ptr<const TokenVocabulary> vocab,
                                           const GrammarOptions& options, GrammarBuilder* b) {
  // The compilers resolve "$ref" in these documents only while Compile runs.
  auto tools = std::make_shared<SchemaJson>(SchemaJson::parse(tools_json, nullptr, false));
  if (tools->is_discarded()) return InvalidArgument("tools: not valid JSON");
  if (!tools->is_array() || tools->empty())
    return InvalidArgument("tools: expected a non-empty JSON array of tools");
  std::vector<Function> functions;
  for (size_t i = 0; i < tools->size(); ++i) {
    const SchemaJson& tool = (*tools)[i];
    if (!tool.is_object()) return InvalidArgument("tools[%zu]: expected an object", i);
    const SchemaJson* fn = &tool;
    if (tool.contains("function")) {
      if (!tool["function"].is_object())
        return InvalidArgument("tools[%zu].function: expected an object", i);
      fn = &tool["function"];
    }
    if (!fn->contains("name") || !(*fn)["name"].is_string())
      return InvalidArgument("tools[%zu]: missing function name", i);
    Function f;
    f.name = (*fn)["name"].get<std::string>();
    if (!UsableName(f.name))
      return InvalidArgument("tools[%zu]: function name '%s' cannot be written in the mimo "
                             "tool-call format", i, f.name.c_str());
    if (fn->contains("parameters") && !(*fn)["parameters"].is_null()) {
      if (!(*fn)["parameters"].is_object())
        return InvalidArgument("tools[%zu].parameters: expected a JSON-schema object", i);
      f.parameters = &(*fn)["parameters"];
    }
    if (only_function.empty() || f.name == only_function) functions.push_back(f);
  }
  if (functions.empty())
    return InvalidArgument("tool_choice: function '%s' is not among the tools",
                           only_function.c_str());
  Nfa& n = b->nfa();
  std::vector<Nfa::Frag> bodies;
  std::vector<std::unique_ptr<JsonSchemaCompiler>> compilers;
  for (const Function& f : functions) {
    compilers.push_back(std::make_unique<JsonSchemaCompiler>(b, vocab, options, /*tool_safe=*/true));
    compilers.back()->SetDocument(f.parameters);
    auto body = FunctionBody(f, compilers.back().get(), &n);
    if (!body.ok()) return body.status();
    bodies.push_back(*body);
  }
  const int32_t block = b->DeclareRule("tool call");
  b->DefineRule(block, n.Seq({n.Literal("<tool_call>"), n.Opt(n.Literal("\n")), n.Alt(bodies),
                              n.Opt(n.Literal("\n")), n.Literal("</tool_call>")}));
  const int32_t root = b->DeclareRule("tool calls");
  Nfa::Frag one = n.CallRule(block);
  if (parallel) {
    // Blocks follow each other directly, as the chat template writes them (text between them
    // would be content to the parser).
    one = n.Seq(one, n.Star(n.CallRule(block)));
  }
  b->DefineRule(root, one);
  return root;
}

}  // namespace mimo
