// The Anthropic Messages API's request (POST /v1/messages, /v1/messages/count_tokens) -> a
// ChatTurn, with errors that name the offending field. Pure: what it needs of the server comes in
// a ParseContext (the defaults, and verify for thinking-block signatures).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/api_error.h"
#include "server/chat_turn.h"
#include "server/parse_context.h"

namespace mimo {

// The error code (error.details.error_code) of a `thread: {"type": "continue"}` request, which
// this server answers 404: it keeps no threads, and the SDK replays the conversation on it.
inline constexpr char kThreadNotFound[] = "thread_not_found";

// The kind thinking-block signatures are made under (ApiServer::Sign / ParseContext::verify).
inline constexpr char kThinkingSignatureKind[] = "anthropic-thinking";

struct AnthropicRequest {
  ChatTurn turn;
  bool stream = false;
  bool thinking = false;
  bool omit_thinking = false;  // thinking.display "omitted"
};

// The request as a ChatTurn; `for_count`: count_tokens (no max_tokens, no sampling). A thinking
// block sent back with a signature that ctx.verify does not accept is left out of the prompt.
// `interleaved_thinking`: the anthropic-beta header names interleaved-thinking-2025-05-14 (a
// thinking budget may then reach max_tokens and beyond).
std::optional<ApiError> ParseAnthropicRequest(const ParseContext& ctx, const OJson& body,
                                              bool for_count, AnthropicRequest* r,
                                              bool interleaved_thinking = false);

// Whether the request's anthropic-beta headers (comma-separated, possibly several fields) name
// interleaved thinking.
bool HasInterleavedThinkingBeta(const std::vector<std::pair<std::string, std::string>>& headers);

}  // namespace mimo
