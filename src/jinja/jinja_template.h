// JinjaTemplate: the public face of the Jinja-subset engine. Parse once, render many times; output
// matches Python jinja2 configured like Hugging Face transformers (trim_blocks, lstrip_blocks,
// loop controls, sandboxed, default Undefined).
#pragma once

#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "jinja/jinja_ast.h"
#include "jinja/jinja_lexer.h"
#include "jinja/jinja_value.h"

namespace mimo::jinja {

// Render-time recursion limits (the parser bounds one template's nesting; these bound what calls
// add on top of it). Macro calls nested deeper than kMaxMacroCallDepth (a macro calling itself,
// or two calling each other, without end) fail naming the macro; jinja2 manages about 250 before
// Python's recursion limit, so no template jinja2 renders is refused. kMaxRenderDepth bounds
// statements, expressions and calls together, each level about 1 KiB of stack in a release build
// (more under sanitizers), so a render stays well inside a thread's default 8 MiB stack.
inline constexpr int kMaxMacroCallDepth = 256;
inline constexpr int kMaxRenderDepth = 2048;

// Immutable after Parse; Render is const and safe to call from many threads at once.
class JinjaTemplate {
 public:
  // Syntax errors, unknown filters and unknown tests are reported here, with the line.
  static StatusOr<JinjaTemplate> Parse(const std::string& source, const LexerOptions& options = {});

  // Renders with `variables` as the template context (on top of the built-in globals range,
  // dict, namespace, raise_exception, strftime_now). Runtime errors (raise_exception, type
  // errors, undefined access) come back as InvalidArgument naming the line.
  StatusOr<std::string> Render(
      const std::vector<std::pair<std::string, JinjaValue>>& variables) const;

  // Every variable name the template reads (for example "enable_thinking").
  const std::set<std::string>& referenced_names() const { return ast_->referenced_names; }

 private:
  std::shared_ptr<const TemplateAst> ast_;
};

}  // namespace mimo::jinja
