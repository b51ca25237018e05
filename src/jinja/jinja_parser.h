// Jinja parser: tokens -> TemplateAst, following jinja2/parser.py's grammar and precedence.
#pragma once

#include <string>

#include "core/status.h"
#include "jinja/jinja_ast.h"
#include "jinja/jinja_lexer.h"

namespace mimo::jinja {

// Tokenizes and parses a template. Errors name the line ("line 7: expected 'endif' ...").
StatusOr<TemplateAst> ParseTemplate(const std::string& source, const LexerOptions& options = {});

}  // namespace mimo::jinja
