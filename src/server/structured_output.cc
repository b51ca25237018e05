// Request -> OutputFormat -> OutputPlan -> one TokenConstraint per sample (see
// structured_output.h).
#include "server/structured_output.h"

#include "server/api_server.h"
#include "server/grammar_records.h"
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

// The grammar of a request's answer: its tool calls (tool_choice required, a named function, or
// auto with a tool-call tag in the vocabulary), else its response_format's; Internal("no
// grammar") when it has none. *param names the field it comes from.
StatusOr<std::shared_ptr<const Grammar>> RequestGrammar(const ConstraintRequest& r,
                                                        const ServingModel& m,
                                                        const CompileControl& control,
                                                        const char** param) {
  const bool has_tools = r.tools.is_array() && !r.tools.empty();
  const bool forced = r.tool_choice == "required" || r.tool_choice == "function";
  const bool auto_calls = r.tool_choice == "auto" && has_tools && m.tool_call_id >= 0;
  if (forced || auto_calls) {
    *param = "tools";
    return m.grammars->ToolCalls(r.tools.dump(), forced ? r.tool_choice_function : "",
                                 r.parallel_tool_calls, m.grammar_options, control);
  }
  const auto& rf = r.response_format;
  *param = "response_format";
  if (!rf.is_object()) return Internal("no grammar");
  if (rf.contains("type") && rf["type"] == "json_object")
    return m.grammars->JsonObject(m.grammar_options, control);
  if (rf.contains("json_schema") && rf["json_schema"].is_object() &&
      rf["json_schema"].contains("schema") && rf["json_schema"]["schema"].is_object())
    return m.grammars->JsonSchema(rf["json_schema"]["schema"].dump(), m.grammar_options, control);
  return Internal("no grammar");
}

}  // namespace

ApiError RerunOnSlowPool() {
  ApiError e;
  e.rerun_slow = true;
  return e;
}

std::optional<ApiError> EnsureGrammar(const ConstraintRequest& r, const ServingModel& m) {
  const HttpServer::RequestRecord* rec = HttpServer::CurrentRecord();
  if (rec == nullptr || m.grammars == nullptr) return std::nullopt;
  const char* param = nullptr;
  const auto g = rec->on_slow_pool
                     ? RequestGrammar(r, m, ControlHere(), &param)  // compiled now, into the cache
                     : RequestGrammar(r, m, CompileControl{nullptr, /*cached_only=*/true}, &param);
  if (g.ok() && rec->on_slow_pool && m.grammar_records != nullptr) {
    m.grammar_records->Record(r);  // compiled now: a restarted server compiles it before it serves
  }
  if (g.ok() || g.status().code() == StatusCode::kInternal) return std::nullopt;  // none needed
  if (GrammarCache::IsMiss(g.status())) return RerunOnSlowPool();
  // A refusal: answered now, before the prompt is rendered, unless tool_choice auto may still
  // answer without the grammar (BuildConstraint decides that).
  if (r.tool_choice == "auto") return std::nullopt;
  return BadRequest(g.status().message(), param);
}

StatusOr<std::shared_ptr<const Grammar>> CompileRequestGrammar(const ConstraintRequest& r,
                                                               const ServingModel& m) {
  const char* param = nullptr;
  return RequestGrammar(r, m, CompileControl{}, &param);
}

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
  if (schema) {
    const auto& rf = r.response_format;
    const bool object = rf.is_object() && rf.contains("type") && rf["type"] == "json_object";
    const auto* js = rf.is_object() && rf.contains("json_schema") ? &rf["json_schema"] : nullptr;
    if (!object && (!js || !js->is_object() || !js->contains("schema") || !(*js)["schema"].is_object())) {
      return BadRequest("'response_format.json_schema.schema' (an object) is required",
                        "response_format");
    }
  }
  const char* param = "response_format";
  StatusOr<std::shared_ptr<const Grammar>> g = RequestGrammar(r, m, ControlHere(), &param);
  if (!g.ok() && GrammarCache::IsMiss(g.status())) return RerunOnSlowPool();
  if (forced || auto_calls) {
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
    f.answer = OutputFormat::Answer::kGrammar;
  }
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
