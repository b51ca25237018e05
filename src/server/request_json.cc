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
