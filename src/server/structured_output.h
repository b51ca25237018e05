// Structured outputs for the engine: what a request's output must look like (response_format,
// tool_choice, a reasoning block and its budget) becomes a grammar-layer OutputConstraint
// (grammar/output_constraint.h) behind the engine's TokenConstraint seam, one per sample.
// Compiled on the HTTP thread (GrammarCache), so a bad schema or an impossible max_tokens is a 400
// before the engine sees the request.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "engine/token_constraint.h"
#include "grammar/grammar.h"
#include "grammar/output_constraint.h"
#include "server/api_error.h"

namespace mimo {

struct ServingModel;  // server/api_server.h

struct ConstraintRequest {
  // null, {"type": "json_object"} or {"type": "json_schema", "json_schema": {"schema": {...}}}.
  nlohmann::ordered_json response_format = nullptr;
  nlohmann::ordered_json tools = nullptr;  // OpenAI tools array, or null
  std::string tool_choice = "none";        // none | auto | required | function
  std::string tool_choice_function;        // tool_choice "function": its name
  bool parallel_tool_calls = true;
  bool thinking = false;             // the model may reason first (thinking on, block not closed)
  bool prompt_in_reasoning = false;  // the prompt already opened <think> (think-prefill templates)
  int reasoning_budget = -1;         // max tokens inside the reasoning block; -1: none
  int max_tokens = 0;                // the request's output budget; <= 0: no up-front check
};

// The constraint of a request, in *out (a null factory and no error: nothing constrains it):
// - response_format json_object / json_schema: the answer is that grammar.
// - tool_choice "required" / a named function: the answer is tool calls (of those tools).
// - tool_choice "auto" with tools the grammar can express (or one marked strict): free text,
//   and a call the model opens is the grammar (if it still fits before max_tokens).
// - tool_choice "none" with tools: the answer may not open a tool call.
// - thinking / prompt_in_reasoning: an optional (or already open) reasoning block first, free
//   text that closes in time for the answer and within reasoning_budget tokens.
// Errors (400): structured outputs unavailable; a schema or tools the grammar cannot express,
// naming the keyword; max_tokens below the fewest tokens of any complete output (param
// "max_tokens"). The server passes its effective max_tokens (after any clamp to the context).
std::optional<ApiError> BuildConstraint(const ConstraintRequest& r, const ServingModel& m,
                                        ConstraintFactory* out);

// The request's grammar (tool calls or response_format) before anything else is done for it: on
// a request worker a grammar not compiled yet moves the request to the slow pool
// (RerunOnSlowPool); on the slow pool it is compiled into the cache then. Outside the HTTP server
// (the CLI, tests) nothing: BuildConstraint compiles in place.
std::optional<ApiError> EnsureGrammar(const ConstraintRequest& r, const ServingModel& m);

// The request's grammar (tool calls or response_format) compiled in place into m's cache, as a
// caller outside the HTTP server does (server start-up: GrammarRecords::CompileAll); Internal
// when the request has none.
StatusOr<std::shared_ptr<const Grammar>> CompileRequestGrammar(const ConstraintRequest& r,
                                                               const ServingModel& m);
// The answer that moves a request to the slow pool (ApiError::rerun_slow).
ApiError RerunOnSlowPool();

// One constraint per sample from a plan.
ConstraintFactory MakeConstraintFactory(std::shared_ptr<const OutputPlan> plan);

// For the CLI (`mimo generate --json-schema`): the answer is `grammar`, nothing else.
struct StructuredOutput {
  std::shared_ptr<const Grammar> grammar;
};
ConstraintFactory MakeConstraintFactory(StructuredOutput so);

}  // namespace mimo
