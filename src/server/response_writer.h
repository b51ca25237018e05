// Responses driven by a GenerationSession, as body sources the connection pulls from
// (server/http.h): a streamed one (SSE events as they come, keep-alives while nothing does) and a
// whole one (the JSON written when the request is done). The connection watches the client: when
// it goes away the source is cancelled, and with it the session's requests, so their KV blocks are
// freed at once.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "server/api_error.h"
#include "server/generation_session.h"
#include "server/http.h"

namespace mimo {

// Text to write for one event (may be empty).
using EventWriter = std::function<std::string(const RequestOutput&)>;
// Text to write at the end.
using TailWriter = std::function<std::string()>;

struct StreamWriters {
  // Written as soon as the response starts, before the prompt is processed (Anthropic's
  // message_start, the Responses API's response.created), so a client sees the request admitted.
  std::string head;
  EventWriter on_event;
  TailWriter tail;
  // Written whenever nothing else was for `keepalive_seconds` (Anthropic's ping event, an SSE
  // comment), so clients and proxies with idle timeouts wait through a long prompt.
  std::string keepalive = ": keepalive\n\n";
  // Called before each keep-alive when set (Anthropic: a message_start that waited for the
  // engine's admission event is written then if it has not come yet).
  std::function<std::string()> before_keepalive;
  double keepalive_seconds = 5;
  // When a sample ends with FinishReason::kError (an engine step failed, or the server stopped
  // the engine at the end of its drain): what is written instead of `tail` - for a stream the
  // protocol's error event and its terminator, for a whole response the error body (whose status
  // is then the error's: 503 at shutdown, else 500). Null: `tail` as usual.
  std::function<std::string(const ApiError&)> error_tail;
};

// Messages of the errors an engine stop at shutdown ends requests with start with this (the
// answer is then a 503 the client may retry elsewhere).
inline constexpr std::string_view kShutdownError = "the server is shutting down";

void RespondStreaming(HttpResponse& res, std::shared_ptr<GenerationSession> session,
                      StreamWriters writers, std::atomic<int>* in_flight);

void RespondWhenDone(HttpResponse& res, std::shared_ptr<GenerationSession> session,
                     EventWriter on_event, TailWriter body,
                     std::function<std::string(const ApiError&)> error_body,
                     std::atomic<int>* in_flight);

// "data: <json>\n\n"
std::string SseData(const std::string& json);
// "event: <name>\ndata: <json>\n\n"
std::string SseEvent(const std::string& name, const std::string& json);

}  // namespace mimo
