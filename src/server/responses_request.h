// The OpenAI Responses API's request (POST /v1/responses) -> a ChatTurn, with errors that name the
// offending field, plus what the response repeats and stores. Pure: what it needs of the server
// comes in a ParseContext (the defaults, verify for encrypted reasoning, the response store for
// previous_response_id and item_reference).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>

#include "server/api_error.h"
#include "server/chat_turn.h"
#include "server/parse_context.h"

namespace mimo {

// Encrypted reasoning items: kEncryptedPrefix + base64 of the text + "." + its signature under
// kReasoningKind (ApiServer::Sign / ParseContext::verify).
inline constexpr char kReasoningKind[] = "responses-reasoning";
inline constexpr char kEncryptedPrefix[] = "mimo1.";

// How the model's calls come back: a function of a namespace carries the namespace; a custom
// (free-form) tool is a function of one string `input` to the model and a custom_tool_call to
// the client.
struct ResponsesTools {
  std::map<std::string, std::string> namespace_of;  // function name -> namespace
  std::set<std::string> custom;                     // custom tool names
};

struct ResponsesRequest {
  ChatTurn turn;
  bool stream = false;
  bool store = true;
  bool encrypted_reasoning = false;  // include: ["reasoning.encrypted_content"]
  bool output_logprobs = false;      // include: ["message.output_text.logprobs"]
  // reasoning.summary auto | concise | detailed: reasoning items also carry a summary (this
  // model has no summarizer: the summary is the reasoning text itself).
  bool reasoning_summary = false;
  OJson instructions = nullptr;
  OJson input_items = OJson::array();  // as given, with ids added (for input_items)
  OJson history = OJson::array();      // messages without instructions (stored for the next turn)
  std::string previous_response_id;
  OJson echo = OJson::object();  // request fields the Response object repeats
  ResponsesTools tools;
};

// The conversation is the previous response's messages (previous_response_id), the instructions
// first, then the input; a reasoning item whose encrypted_content ctx.verify does not accept is
// left out of the prompt.
std::optional<ApiError> ParseResponsesRequest(const ParseContext& ctx, const OJson& body,
                                              ResponsesRequest* r);

}  // namespace mimo
