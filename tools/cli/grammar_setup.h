// Shared by the CLI subcommands that build a structured-output Grammar (grammar-walk, bench
// grammar): which grammar the flags ask for, and the EOS ids a walk ends with.
#pragma once

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "grammar/grammar.h"
#include "tokenizer/bpe.h"

namespace mimo::cli {

// --json-schema FILE | --json-object | --tools FILE [--function NAME] [--parallel];
// --whitespace none|space|any; --max-string-length N (GrammarOptions).
inline std::vector<std::string> GrammarKeys() {
  return {"json-schema", "tools", "function", "whitespace", "max-string-length"};
}
inline std::vector<std::string> GrammarFlags() { return {"json-object", "parallel"}; }

inline StatusOr<GrammarOptions> GrammarOptionsFromArgs(const Args& a) {
  GrammarOptions o;
  const std::string ws = a.Get("whitespace", "space");
  if (ws == "none") {
    o.whitespace = GrammarOptions::Whitespace::kNone;
  } else if (ws == "space") {
    o.whitespace = GrammarOptions::Whitespace::kOptionalSpace;
  } else if (ws == "any") {
    o.whitespace = GrammarOptions::Whitespace::kAny;
  } else {
    return InvalidArgument("--whitespace must be none, space or any");
  }
  o.max_string_length = static_cast<int32_t>(a.GetInt("max-string-length", -1));
  return o;
}

// One grammar the flags ask for: `name` is the schema/tools file or "json_object".
struct GrammarRequest {
  enum class Kind { kJsonSchema, kJsonObject, kTools } kind;
  std::string name;
};

// --json-schema takes a comma-separated list of files (several grammars in one run).
inline StatusOr<std::vector<GrammarRequest>> GrammarRequestsFromArgs(const Args& a) {
  const int kinds = a.Has("json-schema") + a.Has("json-object") + a.Has("tools");
  if (kinds != 1) return InvalidArgument("give exactly one of --json-schema, --json-object, --tools");
  std::vector<GrammarRequest> out;
  if (a.Has("json-object")) out.push_back({GrammarRequest::Kind::kJsonObject, "json_object"});
  if (a.Has("tools")) out.push_back({GrammarRequest::Kind::kTools, a.Get("tools")});
  if (a.Has("json-schema")) {
    const std::string list = a.Get("json-schema");
    size_t pos = 0;
    while (pos <= list.size()) {
      const size_t comma = std::min(list.find(',', pos), list.size());
      if (comma > pos) out.push_back({GrammarRequest::Kind::kJsonSchema, list.substr(pos, comma - pos)});
      pos = comma + 1;
    }
  }
  return out;
}

// Compiles one requested grammar; a schema or tools file is read from disk.
inline StatusOr<std::shared_ptr<const Grammar>> CompileGrammar(
    const GrammarRequest& r, const Args& a, std::shared_ptr<const TokenVocabulary> vocab) {
  auto o = GrammarOptionsFromArgs(a);
  if (!o.ok()) return o.status();
  if (r.kind == GrammarRequest::Kind::kJsonObject) return Grammar::JsonObject(vocab, *o);
  std::string text;
  if (!ReadFileToString(r.name, &text)) return NotFound("cannot read '%s'", r.name.c_str());
  if (r.kind == GrammarRequest::Kind::kJsonSchema) return Grammar::FromJsonSchema(text, vocab, *o);
  return Grammar::ToolCalls(text, a.Get("function"), a.Has("parallel"), vocab, *o);
}

// <|im_end|> and <|endoftext|> when the tokenizer has them.
inline std::vector<int32_t> WalkEosIds(const Tokenizer& tok) {
  std::vector<int32_t> ids;
  for (const char* name : {"<|im_end|>", "<|endoftext|>"}) {
    const int32_t id = tok.TokenToId(name);
    if (id >= 0) ids.push_back(id);
  }
  return ids;
}

}  // namespace mimo::cli
