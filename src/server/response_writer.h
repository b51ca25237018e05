// Chunked HTTP responses driven by a GenerationSession: a streamed one (SSE events as they
// come) and a whole one (the JSON written when the request is done). Both notice a client that
// went away (a failed write; for whole responses a space written every 2 s while waiting, which
// is valid leading JSON whitespace) and cancel its requests, so their KV blocks are freed at once.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "server/generation_session.h"

namespace httplib {
struct Response;
}

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
  // comment), so clients and proxies with idle timeouts wait through a long prompt; also how a
  // client that went away is noticed while nothing is generated.
  std::string keepalive = ": keepalive\n\n";
  double keepalive_seconds = 5;
};

void RespondStreaming(httplib::Response& res, std::shared_ptr<GenerationSession> session,
                      StreamWriters writers, std::atomic<int>* in_flight);

void RespondWhenDone(httplib::Response& res, std::shared_ptr<GenerationSession> session,
                     EventWriter on_event, TailWriter body, std::atomic<int>* in_flight);

// "data: <json>\n\n"
std::string SseData(const std::string& json);
// "event: <name>\ndata: <json>\n\n"
std::string SseEvent(const std::string& name, const std::string& json);

}  // namespace mimo
