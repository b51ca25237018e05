// OpenAI request bodies -> native types, with errors that name the offending field. Chat
// completions keep their messages and tools as JSON (the chat template consumes JSON); the rest
// becomes a GenerationRequest for the engine.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "io/generation_config.h"
#include "server/api_error.h"

namespace mimo {

using OJson = nlohmann::ordered_json;

// What request defaults and limits come from.
struct ServerDefaults {
  std::string served_model_name;
  int max_model_len = 0;
  int64_t vocab_size = 0;
  GenerationConfig gen;  // sampling defaults (vLLM --generation-config auto)
};

// Fields shared by chat and completions: sampling, stop rules, n. For chat, `logprobs` is a
// boolean with `top_logprobs`; for completions an integer (top-N).
std::optional<ApiError> ParseGenerationFields(const OJson& body, const ServerDefaults& d,
                                              bool chat, GenerationRequest* g);

// The `model` field: absent or the served name; anything else is a 404.
std::optional<ApiError> CheckModel(const OJson& body, const ServerDefaults& d);

struct ChatRequest {
  OJson messages;        // validated; text-only content parts; tool-call arguments parsed
  OJson tools = nullptr;  // OpenAI tools array, or null
  OJson template_kwargs = OJson::object();
  std::string tool_choice = "auto";  // none | auto | required | function
  std::string tool_choice_function;  // the named function when tool_choice == "function"
  bool parallel_tool_calls = true;
  bool stream = false;
  bool include_usage = false;
  OJson response_format = nullptr;
  GenerationRequest gen;  // prompt ids filled after rendering
};
std::optional<ApiError> ParseChatRequest(const OJson& body, const ServerDefaults& d,
                                         ChatRequest* out);

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

}  // namespace mimo
