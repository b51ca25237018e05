// Jinja lexer: template text -> tokens, with jinja2's whitespace rules (trim_blocks, lstrip_blocks,
// `-`/`+` markers, newline normalisation, trailing-newline removal) reproduced exactly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace mimo::jinja {

enum class TokenType {
  kData,        // literal template text (after whitespace control)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,      // value holds the unescaped string
  kInt,
  kFloat,
  kOperator,    // value holds the operator text ("+", "//", "==", "(", ...)
  kEof,
  kCount
};

struct Token {
  TokenType type = TokenType::kEof;
  std::string value;
  int line = 1;
  int64_t int_value = 0;
  double float_value = 0;
};

struct LexerOptions {
  bool trim_blocks = true;    // transformers' settings
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

// Errors carry the line ("line 12: unexpected char '$'").
StatusOr<std::vector<Token>> Tokenize(const std::string& source, const LexerOptions& options = {});

}  // namespace mimo::jinja
