// What the Anthropic Messages and Responses API request parsers (anthropic_request.h,
// responses_request.h) take instead of the ApiServer, so that they link without the engine (the
// fuzz harness tests/fuzz/request_parsers_fuzz.cc calls them so), and the helpers they share:
// leading system messages merged, and the random ids given to request items.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "server/api_error.h"
#include "server/openai_request.h"

namespace mimo {

class ResponseStore;

struct ParseContext {
  const ServerDefaults& defaults;
  // Whether `signature` is this server's signature of `text` under `kind` (ApiServer::Verify:
  // thinking blocks, encrypted reasoning items).
  std::function<bool(std::string_view kind, std::string_view text, std::string_view signature)>
      verify;
  // The stored responses (previous_response_id, item_reference); null: nothing is stored.
  const ResponseStore* store = nullptr;
};

// System messages at the start of a conversation merged into one (joined by a blank line): the
// chat template renders only the first message as the system prompt (the tools follow it), so
// instructions given in several leading messages (Anthropic's top-level system and system
// messages, the Responses API's instructions and developer messages) stay one prompt. Later
// system messages stay where they are, as system turns.
OJson MergeLeadingSystemMessages(OJson messages);

// Random ids: prefix + 24 alphanumerics (chatcmpl-, msg_, resp_, call_, ...).
std::string RandomId(const char* prefix);

}  // namespace mimo
