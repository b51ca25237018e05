// An error answer of the HTTP API: status, OpenAI error type, message naming the field, param.
// Rendered as the OpenAI error object on /v1/* and as the Anthropic one on /v1/messages.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace mimo {

using OJson = nlohmann::ordered_json;

struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";  // OpenAI: invalid_request_error, not_found_error...
  std::string message;
  std::string param;  // the offending field, when there is one
  // OpenAI's machine-readable code (model_not_found, context_length_exceeded, invalid_api_key,
  // ...); empty: one derived from the status (CodeOrDefault).
  std::string code;
  // Not an error: the request needs a grammar compiled first, which the request workers leave
  // to the slow pool (HttpResponse::rerun_slow); ApiServer::SendError passes it on.
  bool rerun_slow = false;
  // Seconds a client should wait before retrying (the Retry-After header of a 429 or 503);
  // 0: the HTTP layer's default (HttpOptions::retry_after_s).
  int retry_after_s = 0;

  std::string CodeOrDefault() const;

  // {"error": {"message", "type", "param", "code"}} (OpenAI; code always a string).
  nlohmann::ordered_json OpenAiJson() const;
  // {"type": "error", "error": {"type", "message"}} (Anthropic).
  nlohmann::ordered_json AnthropicJson() const;
};

ApiError BadRequest(std::string message, std::string param = "");
ApiError NotFound(std::string message);
ApiError ServiceUnavailable(std::string message);
// Engine Submit errors: InvalidArgument -> 400, ResourceExhausted -> 429 (Retry-After 1: a
// full queue moves within a second), else 500. The engine's
// messages start with the field they are about ("max_tokens 300 plus ...", "stop: ..."), which
// becomes `param`; a prompt error names `prompt_param` ("messages" for chat, "prompt").
ApiError FromStatus(const Status& s, const std::string& prompt_param = "");

}  // namespace mimo
