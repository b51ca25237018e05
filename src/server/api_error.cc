// ApiError rendering (see api_error.h).
#include "server/api_error.h"

#include <cstring>

namespace mimo {

nlohmann::ordered_json ApiError::OpenAiJson() const {
  nlohmann::ordered_json e = {{"message", message}, {"type", type}};
  e["param"] = param.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(param);
  e["code"] = CodeOrDefault();
  return {{"error", e}};
}

std::string ApiError::CodeOrDefault() const {
  if (!code.empty()) return code;
  switch (status) {
    case 400:
      return param.empty() ? "invalid_request" : "invalid_value";
    case 401:
      return "invalid_api_key";
    case 404:
      return "not_found";
    case 405:
      return "method_not_allowed";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_exceeded";
    case 503:
      return "service_unavailable";
    default:
      return status >= 500 ? "internal_error" : "invalid_request";
  }
}

nlohmann::ordered_json ApiError::AnthropicJson() const {
  std::string t = "invalid_request_error";
  if (status == 401) t = "authentication_error";
  if (status == 404) t = "not_found_error";
  if (status == 429) t = "rate_limit_error";
  if (status == 503) t = "overloaded_error";
  if (status >= 500 && status != 503) t = "api_error";
  return {{"type", "error"}, {"error", {{"type", t}, {"message", message}}}};
}

ApiError BadRequest(std::string message, std::string param) {
  ApiError e;
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

ApiError NotFound(std::string message) {
  return ApiError{404, "not_found_error", std::move(message), "", ""};
}

ApiError ServiceUnavailable(std::string message) {
  return ApiError{503, "service_unavailable", std::move(message), "", ""};
}

ApiError FromStatus(const Status& s, const std::string& prompt_param) {
  ApiError e;
  e.message = s.message();
  static const char* const kFields[] = {"max_tokens", "min_tokens", "stop_token_ids", "stop", "n",
                                        "logit_bias", "seed", "temperature", "top_p", "top_k",
                                        "min_p", "repetition_penalty", "presence_penalty",
                                        "frequency_penalty", "logprobs"};
  for (const char* f : kFields) {
    const size_t len = std::strlen(f);
    if (e.message.compare(0, len, f) == 0 && e.message.size() > len &&
        (e.message[len] == ' ' || e.message[len] == ':')) {
      e.param = f;
      break;
    }
  }
  if (e.param.empty() &&
      (e.message.rfind("the prompt", 0) == 0 || e.message.rfind("prompt ", 0) == 0)) {
    e.param = prompt_param;
  }
  // The prompt does not fit the context at all.
  if (e.message.find("the context length (max_model_len)") != std::string::npos) {
    e.code = "context_length_exceeded";
  }
  if (s.code() == StatusCode::kResourceExhausted) {
    e.status = 429;
    e.type = "rate_limit_error";
    e.retry_after_s = 1;
  } else if (s.code() != StatusCode::kInvalidArgument) {
    e.status = 500;
    e.type = "internal_server_error";
  }
  return e;
}

}  // namespace mimo
