// ToolCallGrammar: rules for the `mimo` tool-call format (see chat/tool_call_parser.h) over an
// OpenAI `tools` array:
//   <tool_call>\n<function=NAME>\n<parameter=KEY>VALUE</parameter>\n...</function>\n</tool_call>
// (each "\n" optional, which also covers the compact form; parallel blocks follow each other
// directly, as the chat template writes them). NAME is one of the tools; parameters
// come in schema order, required ones always, optional ones freely. VALUE follows the parser's
// typing: a parameter the parser keeps as a string (declared "string", a type list or anyOf
// holding "string", no or an unknown type) is raw text valid for the schema's string branches;
// any other is JSON for its schema, in the tool-safe spelling so that the parser's coercion
// (trim, HTML unescape, JSON parse) returns it unchanged.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"
#include "grammar/grammar_builder.h"
#include "grammar/grammar_options.h"
#include "grammar/token_vocabulary.h"

namespace mimo {

class ToolCallGrammar {
 public:
  // The root rule: one block, or (parallel) one or more. only_function: "" = any tool.
  static StatusOr<int32_t> Compile(std::string_view tools_json, const std::string& only_function,
                                   bool parallel, std::shared_ptr<const TokenVocabulary> vocab,
                                   const GrammarOptions& options, GrammarBuilder* builder);
};

}  // namespace mimo
