// See request_json.h.
#include "server/request_json.h"

#include <string>

#include "core/json_depth.h"

namespace mimo {

std::optional<ApiError> ParseRequestBody(std::string_view body, OJson* out) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    return BadRequest("the request body is empty: send a JSON object");
  }
  if (body.size() > kMaxRequestBodyBytes) {
    ApiError e = BadRequest("the request body is too large (more than " +
                            std::to_string(kMaxRequestBodyBytes >> 20) + " MiB)");
    e.status = 413;
    return e;
  }
  if (JsonNestsDeeperThan(body, kMaxJsonDepth)) {
    return BadRequest("the request body is nested deeper than " + std::to_string(kMaxJsonDepth) +
                      " levels");
  }
  *out = OJson::parse(body, nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded()) return BadRequest("the request body is not valid JSON");
  if (!out->is_object()) return BadRequest("the request body must be a JSON object");
  return std::nullopt;
}

OJson ParseNestedJson(std::string_view text) {
  if (JsonNestsDeeperThan(text, kMaxJsonDepth)) return OJson(OJson::value_t::discarded);
  return OJson::parse(text, nullptr, /*allow_exceptions=*/false);
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

}  // namespace mimo
