// Request -> OutputFormat -> OutputPlan -> one TokenConstraint per sample (see
// structured_output.h).
#include "server/structured_output.h"

#include "server/api_server.h"
#include "server/http_server.h"

namespace mimo {
namespace {

class OutputTokenConstraint final : public TokenConstraint {
 public:
  explicit OutputTokenConstraint(std::shared_ptr<const OutputPlan> plan) : c_(std::move(plan)) {}
  void FillMask(uint32_t* bitmask, std::span<const int32_t> eos_ids,
                int remaining_tokens) override {
    c_.FillMask(bitmask, eos_ids, remaining_tokens);
  }
  bool Accept(int32_t id) override { return c_.Accept(id); }
  bool IsTerminated() const override { return c_.IsTerminated(); }

 private:
  OutputConstraint c_;
};

// Whether the tools ask for strict arguments (OpenAI's function.strict); an error for a
// non-boolean.
std::optional<ApiError> AnyStrict(const nlohmann::ordered_json& tools, bool* strict) {
  *strict = false;
  for (size_t i = 0; i < tools.size(); ++i) {
    const auto& t = tools[i];
    if (!t.is_object() || !t.contains("function") || !t["function"].is_object()) continue;
    const auto& f = t["function"];
    if (!f.contains("strict") || f["strict"].is_null()) continue;
    if (!f["strict"].is_boolean()) {
      const std::string field = "tools[" + std::to_string(i) + "].function.strict";
      return BadRequest("'" + field + "' must be a boolean", field);
    }
    *strict |= f["strict"].get<bool>();
  }
  return std::nullopt;
}

// How this thread may compile: a request worker only looks grammars up (a miss moves the request
// to the slow pool), the slow pool compiles with the request's cancel flag, and a caller outside
// the HTTP server (the CLI, tests) compiles in place.
CompileControl ControlHere() {
  CompileControl c;
  if (const HttpServer::RequestRecord* r = HttpServer::CurrentRecord()) {
    c.cached_only = !r->on_slow_pool;
    c.cancel = r->cancel;
  }
  return c;
}

// A grammar not compiled yet, on a request worker: the request runs again on the slow pool,
// where it is compiled (and then found in the cache by the rest of the request).
ApiError RerunOnSlowPool() {
  ApiError e;
  e.rerun_slow = true;
  return e;
}

}  // namespace

ConstraintFactory MakeConstraintFactory(std::shared_ptr<const OutputPlan> plan) {
  return [plan] { return std::unique_ptr<TokenConstraint>(new OutputTokenConstraint(plan)); };
}

ConstraintFactory MakeConstraintFactory(StructuredOutput so) {
  OutputFormat f;
  f.answer = OutputFormat::Answer::kGrammar;
  f.grammar = std::move(so.grammar);
  auto plan = OutputPlan::Make(std::move(f));
  MIMO_CHECK(plan.ok(), "%s", plan.status().message().c_str());
  return MakeConstraintFactory(*plan);
}

std::optional<ApiError> BuildConstraint(const ConstraintRequest& r, const ServingModel& m,
                                        ConstraintFactory* out) {
  *out = nullptr;
  const bool has_tools = r.tools.is_array() && !r.tools.empty();
  const bool forced = r.tool_choice == "required" || r.tool_choice == "function";
  const bool auto_calls = r.tool_choice == "auto" && has_tools && m.tool_call_id >= 0;
  const bool no_calls = r.tool_choice == "none" && has_tools && m.tool_call_id >= 0;
  const bool reasons = (r.thinking || r.prompt_in_reasoning) && m.think_end_id >= 0 &&
                       (r.prompt_in_reasoning || m.think_start_id >= 0);
  const bool schema = !r.response_format.is_null();
  // A reasoning block matters only when something follows it or it has a budget.
  if (!forced && !schema && !auto_calls && !no_calls && !(reasons && r.reasoning_budget >= 0))
    return std::nullopt;
  if (!m.grammars) {
    return BadRequest("structured outputs are not available on this server", forced ? "tool_choice"
                                                                             : schema
                                                                                 ? "response_format"
                                                                                 : "tools");
  }
  OutputFormat f;
  f.vocab = m.grammars->vocab();
  if (m.tool_call_id >= 0) f.tool_call_tag = std::string(f.vocab->bytes(m.tool_call_id));
  StatusOr<std::shared_ptr<const Grammar>> g = Internal("no grammar");
  const char* param = "response_format";
  const CompileControl control = ControlHere();
  if (forced || auto_calls) {
    param = "tools";
    g = m.grammars->ToolCalls(r.tools.dump(), forced ? r.tool_choice_function : "",
                              r.parallel_tool_calls, m.grammar_options, control);
    if (!g.ok() && GrammarCache::IsMiss(g.status())) return RerunOnSlowPool();
    f.answer = forced ? OutputFormat::Answer::kGrammar : OutputFormat::Answer::kGrammarAfterTag;
    if (!forced && !g.ok()) {
      // Auto: tools whose schemas the grammar cannot express stay unconstrained, unless one of
      // them asks to be strict.
      bool strict = false;
      if (auto e = AnyStrict(r.tools, &strict)) return e;
      if (strict) return BadRequest(g.status().message(), param);
      f.answer = OutputFormat::Answer::kFree;
    }
  } else if (schema) {
    const auto& rf = r.response_format;
    if (rf.is_object() && rf.contains("type") && rf["type"] == "json_object") {
      g = m.grammars->JsonObject(m.grammar_options, control);
    } else {
      const auto* js = rf.is_object() && rf.contains("json_schema") ? &rf["json_schema"] : nullptr;
      if (!js || !js->is_object() || !js->contains("schema") || !(*js)["schema"].is_object()) {
        return BadRequest("'response_format.json_schema.schema' (an object) is required",
                          "response_format");
      }
      g = m.grammars->JsonSchema((*js)["schema"].dump(), m.grammar_options, control);
    }
    f.answer = OutputFormat::Answer::kGrammar;
  }
  if (!g.ok() && GrammarCache::IsMiss(g.status())) return RerunOnSlowPool();
  if (f.answer != OutputFormat::Answer::kFree) {
    if (!g.ok()) return BadRequest(g.status().message(), param);
    f.grammar = std::move(g).value();
  }
  f.forbid_tool_calls = no_calls;
  if (reasons) {
    f.reasoning =
        r.prompt_in_reasoning ? OutputFormat::Reasoning::kOpen : OutputFormat::Reasoning::kOptional;
    f.think_start_id = m.think_start_id;
    f.think_end_id = m.think_end_id;
    f.reasoning_budget = r.reasoning_budget;
  }
  if (f.answer == OutputFormat::Answer::kFree && !f.forbid_tool_calls &&
      !(reasons && r.reasoning_budget >= 0)) {
    return std::nullopt;  // auto with tools the grammar cannot express: nothing to constrain
  }
  auto plan = OutputPlan::Make(std::move(f));
  if (!plan.ok()) return BadRequest(plan.status().message(), param);
  const int32_t need = (*plan)->MinTokens();
  if (r.max_tokens > 0 && r.max_tokens < need) {
    return BadRequest("max_tokens is " + std::to_string(r.max_tokens) + ", but the shortest " +
                          std::string(forced ? "tool call" : "answer") +
                          " this request's format allows takes " + std::to_string(need) +
                          " tokens (the end included" +
                          (r.prompt_in_reasoning ? ", after closing the reasoning block" : "") +
                          "); raise max_tokens to at least " + std::to_string(need),
                      "max_tokens");
  }
  *out = MakeConstraintFactory(*plan);
  return std::nullopt;
}

}  // namespace mimo
