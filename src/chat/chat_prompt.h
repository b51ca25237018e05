// ChatPrompt: a chat template rendered for the model, with the byte ranges that came from the
// request and must reach the model as text, so that a message saying "<|im_end|>" cannot forge a
// turn: the template's own <|im_start|> stay special tokens, the same spelling in content does not.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "chat/chat_template.h"
#include "core/status.h"
#include "tokenizer/bpe.h"

namespace mimo {

struct ChatPrompt {
  std::string text;                // the rendered template
  std::vector<TextRange> literal;  // [n] sorted, disjoint: request text spelling added tokens
};

// Token ids of a rendered prompt: added tokens recognised except inside prompt.literal.
inline std::vector<int32_t> EncodeChatPrompt(const Tokenizer& tok, const ChatPrompt& prompt) {
  return tok.Encode(prompt.text, /*parse_special=*/true, prompt.literal);
}

// What to render (ChatTemplate::Render, or RenderContinuing when continue_final_message).
struct ChatRenderRequest {
  const nlohmann::ordered_json* messages = nullptr;  // required
  const nlohmann::ordered_json* tools = nullptr;     // null: no tools
  const nlohmann::ordered_json* kwargs = nullptr;    // null: none
  bool add_generation_prompt = true;
  bool continue_final_message = false;
};

// Renders `r` with every request string escaped (ContentEscaper below) and restored afterwards.
// `tok` null renders the request as it is (no literal ranges: every added-token spelling in
// content becomes that token, `mimo serve --parse-special-in-content`).
StatusOr<ChatPrompt> RenderChatPrompt(const ChatTemplate& tmpl, const ChatRenderRequest& r,
                                      const Tokenizer* tok);

// Hides added-token text from a chat template and finds it again in the rendering.
//
// Before rendering, every occurrence of an added token's text in a request string (object keys
// too) is replaced by one private-use code point (U+F0001 + index into a table of the texts),
// and so is a code point at a string's edge where a token could start in the string and end in
// the template's text after it ("...<" then "|im_end|>"), or the reverse; code points of that
// private-use range already in the request are escaped (U+F0000 before them). The template sees
// no tag it could match on, joins and moves the strings as usual, and after rendering each
// sentinel becomes its text again, its bytes recorded as a literal range.
//
// Exception: in an assistant message's content (a string or text parts) the reasoning tags
// <think> and </think> stay as they are, because the template looks for them there (it splits
// "<think>r</think>answer" into reasoning and answer) and because they are what the model
// itself wrote: reasoning passed back in content renders and encodes exactly as before.
// `reasoning_content` and everything else is escaped in full.
//
// Not covered: a token the template spells around a request string that holds none of its text
// (MiMo renders an extra JSON-schema key k as "<k>", so a tool parameter key "think" gives a
// real <think>); such strings are structural (keys, roles) and cannot be escaped without
// changing what the template does with them.
//
// One per rendering; not thread-safe.
class ContentEscaper {
 public:
  explicit ContentEscaper(const Tokenizer& tok);
  // A messages array: every string and key; in assistant content the reasoning tags stay.
  Status EscapeMessages(nlohmann::ordered_json* messages);
  // Any value (tools, template kwargs' values): every string and key.
  Status Escape(nlohmann::ordered_json* value);
  // The rendering with the escaped texts back in place, and their ranges.
  ChatPrompt Restore(std::string_view rendered) const;

  // Escapes one string (exposed for tests).
  Status EscapeString(std::string* s, bool keep_reasoning_tags);

 private:
  Status EscapeJson(nlohmann::ordered_json* j, bool keep_reasoning_tags);
  int FragmentIndex(std::string_view text);  // -1: the table is full

  std::vector<std::string_view> tokens_;              // added-token texts (the tokenizer's)
  std::vector<std::vector<int>> by_first_, by_last_;  // [256] indices into tokens_ by byte
  std::vector<uint8_t> reasoning_tag_;                // [tokens_.size()] <think> or </think>
  size_t max_len_ = 0;                                // longest token text
  std::vector<std::string> fragments_;                // [n] escaped texts, by sentinel index
  std::unordered_map<std::string, int> index_;        // fragment text -> index
};

}  // namespace mimo
