// See request_json.h.
#include "server/request_json.h"

#include <string>

#include "core/json_depth.h"

namespace mimo {

namespace {

// Generation fields every chat-shaped endpoint reads (ParseGenerationFields), with vLLM's
// sampling extensions.
constexpr std::string_view kSamplingFields[] = {
    "model", "stream", "stream_options", "temperature", "top_p", "top_k", "min_p", "seed", "n",
    "best_of", "stop", "stop_token_ids", "max_tokens", "max_completion_tokens", "min_tokens",
    "frequency_penalty", "presence_penalty", "repetition_penalty", "logit_bias", "logprobs",
    "top_logprobs", "ignore_eos", "skip_special_tokens", "include_stop_str_in_output",
    "spaces_between_special_tokens", "response_format", "user", "metadata", "store",
    "service_tier", "safety_identifier", "prompt_cache_key", "prompt_cache_retention",
    "priority", "request_id", "length_penalty", "use_beam_search", "prompt_logprobs",
    "truncate_prompt_tokens", "add_special_tokens", "guided_json", "guided_regex",
    "guided_choice", "guided_grammar", "guided_decoding_backend", "guided_whitespace_pattern",
    "structural_tag", "return_tokens_as_token_ids", "allowed_token_ids", "bad_words",
    "cache_salt", "logits_processors", "vllm_xargs", "kv_transfer_params"};
// OpenAI chat completions (and /tokenize with messages), with vLLM's chat extensions.
constexpr std::string_view kChatFields[] = {
    "messages", "tools", "tool_choice", "parallel_tool_calls", "functions", "function_call",
    "audio", "modalities", "prediction", "reasoning_effort", "verbosity", "web_search_options",
    "add_generation_prompt", "continue_final_message", "chat_template", "chat_template_kwargs",
    "documents", "mm_processor_kwargs", "echo", "thinking", "enable_thinking", "reasoning",
    "prompt", "return_token_strs"};
constexpr std::string_view kCompletionFields[] = {"prompt", "suffix", "echo"};
constexpr std::string_view kResponsesFields[] = {
    "input", "instructions", "previous_response_id", "conversation", "include", "reasoning",
    "text", "tools", "tool_choice", "parallel_tool_calls", "max_output_tokens", "max_tool_calls",
    "truncation", "background", "prompt", "chat_template_kwargs"};
constexpr std::string_view kMessagesFields[] = {
    "model", "messages", "system", "max_tokens", "stop_sequences", "stream", "temperature",
    "top_p", "top_k", "metadata", "thinking", "tools", "tool_choice", "output_config",
    "output_format", "context_management", "container", "mcp_servers", "service_tier",
    "inference_geo", "thread"};
constexpr std::string_view kDetokenizeFields[] = {"model", "tokens"};

template <size_t N>
bool In(const std::string_view (&list)[N], std::string_view name) {
  for (std::string_view f : list)
    if (f == name) return true;
  return false;
}

}  // namespace

bool IsKnownField(RequestKind kind, std::string_view name) {
  switch (kind) {
    case RequestKind::kAny:
      return true;
    case RequestKind::kChatCompletions:
      return In(kSamplingFields, name) || In(kChatFields, name);
    case RequestKind::kCompletions:
      return In(kSamplingFields, name) || In(kCompletionFields, name);
    case RequestKind::kResponses:
      return In(kSamplingFields, name) || In(kResponsesFields, name);
    case RequestKind::kMessages:
      return In(kMessagesFields, name);
    case RequestKind::kDetokenize:
      return In(kDetokenizeFields, name);
  }
  return true;
}

std::optional<ApiError> ParseRequestBody(std::string_view body, OJson* out, RequestKind kind) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    return BadRequest("the request body is empty: send a JSON object");
  }
  if (body.size() > kMaxRequestBodyBytes) {
    ApiError e = BadRequest("the request body is too large (more than " +
                            std::to_string(kMaxRequestBodyBytes >> 20) + " MiB)");
    e.status = 413;
    return e;
  }
  const JsonShape shape = MeasureJson(body, kMaxJsonDepth, kMaxJsonValues);
  if (shape.depth > kMaxJsonDepth) {
    return BadRequest("the request body is nested deeper than " + std::to_string(kMaxJsonDepth) +
                      " levels");
  }
  if (shape.values > kMaxJsonValues) {
    return BadRequest("the request body holds more than " + std::to_string(kMaxJsonValues) +
                      " JSON values");
  }
  // Fields of the document's top-level object the endpoint does not know: the key and its value
  // are dropped by the parser as it reads them (their nested values are never stored).
  const OJson::parser_callback_t skip_unknown = [kind](int depth, OJson::parse_event_t event,
                                                       OJson& parsed) {
    if (depth != 1 || event != OJson::parse_event_t::key || !parsed.is_string()) return true;
    return IsKnownField(kind, parsed.get_ref<const std::string&>());
  };
  *out = OJson::parse(body, kind == RequestKind::kAny ? nullptr : skip_unknown,
                      /*allow_exceptions=*/false);
  if (out->is_discarded()) return BadRequest("the request body is not valid JSON");
  if (!out->is_object()) return BadRequest("the request body must be a JSON object");
  return std::nullopt;
}

OJson ParseNestedJson(std::string_view text) {
  if (JsonNestsDeeperThan(text, kMaxJsonDepth)) return OJson(OJson::value_t::discarded);
  return OJson::parse(text, nullptr, /*allow_exceptions=*/false);
}

std::optional<ApiError> CheckWholeAnswerSize(int64_t choices, int64_t max_tokens, int logprobs) {
  const int64_t tokens = choices * max_tokens;
  const int64_t entries = logprobs < 0 ? 0 : tokens * (1 + logprobs);
  if (tokens <= kMaxWholeTokens && entries <= kMaxWholeLogprobs) return std::nullopt;
  std::string what = std::to_string(choices) + " choices x " + std::to_string(max_tokens) + " tokens";
  if (logprobs >= 0) {
    what += " x " + std::to_string(1 + logprobs) + " log-probabilities is " +
            std::to_string(entries) + " entries, more than the " +
            std::to_string(kMaxWholeLogprobs);
  } else {
    what += " is " + std::to_string(tokens) + " tokens, more than the " +
            std::to_string(kMaxWholeTokens);
  }
  return BadRequest("a whole answer of " + what +
                        " this server builds in memory; stream it (\"stream\": true) or ask "
                        "for fewer choices, max_tokens or top_logprobs",
                    "stream");
}

std::optional<ApiError> CheckChoiceCount(int64_t n, int64_t prompts) {
  if (n < 1 || n > kMaxN) {
    return BadRequest("'n' must be in [1, " + std::to_string(kMaxN) + "], got " + std::to_string(n),
                      "n");
  }
  if (prompts > kMaxCompletionPrompts) {
    return BadRequest("'prompt' holds " + std::to_string(prompts) + " prompts; at most " +
                          std::to_string(kMaxCompletionPrompts) + " are allowed",
                      "prompt");
  }
  if (n * prompts > kMaxCompletionChoices) {
    return BadRequest("'n' " + std::to_string(n) + " times " + std::to_string(prompts) +
                          " prompts is " + std::to_string(n * prompts) + " choices; at most " +
                          std::to_string(kMaxCompletionChoices) + " are allowed",
                      "n");
  }
  return std::nullopt;
}

std::optional<ApiError> IntegerInRange(const OJson& v, const std::string& field, int64_t lo,
                                       int64_t hi, int64_t* out) {
  const auto range = [&] {
    return "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  };
  if (!v.is_number_integer()) {
    return BadRequest("'" + field + "' must be an integer in " + range(), field);
  }
  // Unsigned: only above INT64_MAX does it differ from its int64 reading, and then it is above
  // any hi an int64_t can state.
  const bool above_int64 =
      v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX);
  const int64_t x = above_int64 ? INT64_MAX : v.get<int64_t>();
  if (above_int64 || x < lo || x > hi) {
    std::string got = v.dump();
    if (got.size() > 32) got = got.substr(0, 32) + "...";
    return BadRequest("'" + field + "' must be an integer in " + range() + ", got " + got, field);
  }
  *out = x;
  return std::nullopt;
}

}  // namespace mimo
