// OpenAI request bodies -> native types, with errors that name the offending field. Chat
// completions keep their messages and tools as JSON (the chat template consumes JSON); the rest
// becomes a GenerationRequest for the engine.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "io/generation_config.h"
#include "server/api_error.h"
#include "server/chat_turn.h"

namespace mimo {

// What request defaults and limits come from.
struct ServerDefaults {
  std::string served_model_name;
  int max_model_len = 0;
  int64_t vocab_size = 0;
  GenerationConfig gen;  // sampling defaults (vLLM --generation-config auto)
};

// The sampling a request that sets none of its fields gets: generation_config.json's (and
// --override-generation-config's) values where given, else OpenAI's (temperature 1, no top-p,
// top-k or min-p cut, no penalty).
SamplingParams DefaultSampling(const GenerationConfig& gen);

// Fields shared by chat and completions: sampling, stop rules, n. For chat, `logprobs` is a
// boolean with `top_logprobs`; for completions an integer (top-N).
std::optional<ApiError> ParseGenerationFields(const OJson& body, const ServerDefaults& d,
                                              bool chat, GenerationRequest* g);

// The `model` field: absent or the served name; anything else is a 404.
std::optional<ApiError> CheckModel(const OJson& body, const ServerDefaults& d);

// The messages are validated (text-only content parts; tool-call arguments parsed); the
// conversation may end in an assistant message to continue (`continue_final_message`, or
// `add_generation_prompt: false` with an assistant message last, as vLLM).
// Legacy `functions` / `function_call` (and `role: "function"` messages) are read as tools;
// `legacy_functions` then asks for the answer in that shape (message.function_call).
struct ChatRequest {
  ChatTurn turn;
  bool stream = false;
  bool include_usage = false;
  bool legacy_functions = false;
};
std::optional<ApiError> ParseChatRequest(const OJson& body, const ServerDefaults& d,
                                         ChatRequest* out);

// Tools in OpenAI's chat shape ([{"type": "function", "function": {"name", ...}}]) and
// tool_choice / parallel_tool_calls, checked into *turn (also used for converted Anthropic and
// Responses API tools).
std::optional<ApiError> CheckTools(const OJson& body, ChatTurn* turn);

struct CompletionRequest {
  // One entry per prompt: text, or token ids (then `text` is empty).
  struct Prompt {
    std::string text;
    std::vector<int32_t> ids;
    bool is_ids = false;
  };
  std::vector<Prompt> prompts;
  bool stream = false;
  bool include_usage = false;
  bool echo = false;
  OJson response_format = nullptr;
  GenerationRequest gen;
};
std::optional<ApiError> ParseCompletionRequest(const OJson& body, const ServerDefaults& d,
                                               CompletionRequest* out);

// /detokenize: {"tokens": [ids]}; every id an integer within the vocabulary (read as 64 bits)
// that `known` (when given: the tokenizer's) accepts.
std::optional<ApiError> ParseDetokenizeRequest(const OJson& body, const ServerDefaults& d,
                                               const std::function<bool(int32_t)>& known,
                                               std::vector<int32_t>* ids);

}  // namespace mimo
