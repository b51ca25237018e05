// An error answer of the HTTP API: status, OpenAI error type, message naming the field, param.
// Rendered as the OpenAI error object on /v1/* and as the Anthropic one on /v1/messages.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace mimo {

struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";  // OpenAI: invalid_request_error, not_found_error...
  std::string message;
  std::string param;  // the offending field, when there is one
  std::string code;

  // {"error": {"message", "type", "param", "code"}} (OpenAI).
  nlohmann::ordered_json OpenAiJson() const;
  // {"type": "error", "error": {"type", "message"}} (Anthropic).
  nlohmann::ordered_json AnthropicJson() const;
};

ApiError BadRequest(std::string message, std::string param = "");
// Engine Submit errors: InvalidArgument -> 400, ResourceExhausted -> 429, else 500. The engine's
// messages start with the field they are about ("max_tokens 300 plus ...", "stop: ..."), which
// becomes `param`; a prompt error names `prompt_param` ("messages" for chat, "prompt").
ApiError FromStatus(const Status& s, const std::string& prompt_param = "");

}  // namespace mimo
