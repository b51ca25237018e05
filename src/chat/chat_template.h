// ChatTemplate: renders a model's chat_template (tokenizer_config.json) the way Hugging Face
// transformers' apply_chat_template does, byte for byte.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "jinja/jinja_template.h"

namespace mimo {

// Immutable after construction; Render is const and thread-safe.
class ChatTemplate {
 public:
  // A bare template text (no special tokens known).
  static StatusOr<ChatTemplate> FromString(const std::string& text);
  // tokenizer_config.json content: "chat_template" is a string or a list of {name, template}
  // (the one named "default" is used); bos/eos/pad/unk/... tokens become template variables.
  static StatusOr<ChatTemplate> FromTokenizerConfig(const nlohmann::ordered_json& config);
  static StatusOr<ChatTemplate> FromTokenizerConfigFile(const std::string& path);
  // Reads DIR/tokenizer_config.json; falls back to DIR/chat_template.jinja for the template.
  static StatusOr<ChatTemplate> FromModelDir(const std::string& dir);

  // Like transformers: the template sees messages, tools (None when null), documents (None),
  // add_generation_prompt, the special tokens, then every key of extra_kwargs (for example
  // enable_thinking, keep_all_reasoning) as top-level variables.
  //
  // Thinking alias: requests use both `enable_thinking` and `thinking`. When extra_kwargs sets
  // exactly one of them and the template reads only the other, the other is set too.
  StatusOr<std::string> Render(const nlohmann::ordered_json& messages,
                               const nlohmann::ordered_json& tools, bool add_generation_prompt,
                               const nlohmann::ordered_json& extra_kwargs) const;

  // Continues the final message instead of opening a new turn (vLLM's and transformers'
  // `continue_final_message`, Anthropic's assistant prefill), so the model writes on from it. The
  // final message must be an assistant message.
  // - Plain text (no reasoning_content, no tool_calls): the rest of the conversation with its
  //   generation prompt, then the text - the prompt the model would have been answering had it
  //   written the text itself. Where a template opens an assistant turn differently in its
  //   generation prompt than in history (MiMo with thinking off puts the empty `<think></think>`
  //   in the generation prompt only), this differs from transformers, whose cut of the history
  //   rendering would drop the empty think block and put the model mid-answer in thinking mode.
  // - Otherwise, or where the generation prompt ends inside an open `<think>` (think-prefill
  //   templates, which would turn the text into reasoning): transformers' cut, found by rendering
  //   the history with a marker after the content (whatever the template does to the content,
  //   e.g. splitting off `<think>...</think>`, still happens); a template that does not render the
  //   content at the end of its turn is an error.
  StatusOr<std::string> RenderContinuing(const nlohmann::ordered_json& messages,
                                         const nlohmann::ordered_json& tools,
                                         const nlohmann::ordered_json& extra_kwargs) const;

  // Image, audio and video content parts ({"type": "image_url", ...}, "input_audio", "video",
  // ...; also a part holding such a key, as the MiMo-V2.5 template tests) are an error naming
  // messages[i].content[j]: the engine runs the language model alone, and a template would
  // otherwise render a placeholder the model cannot see through. Text parts pass. Render calls
  // it first unless media parts are allowed, so every caller that feeds a model (mimo chat, the
  // server) gets the same error.
  static Status CheckTextOnly(const nlohmann::ordered_json& messages);
  // Render media parts as the template does (`mimo render`, which reproduces a template byte for
  // byte, uses it; nothing that runs the model may).
  void set_allow_media_parts(bool allow) { allow_media_parts_ = allow; }

  // Replaces tool-call `function.arguments` given as JSON strings (the OpenAI wire form) by the
  // parsed JSON values, as vLLM does before rendering: templates iterate arguments as a mapping.
  // Arguments nested deeper than max_depth levels are refused before they are parsed.
  static Status ParseToolCallArguments(nlohmann::ordered_json* messages, int max_depth = 128);

  // Whether the template reasons when a request leaves enable_thinking / thinking unset (MiMo-V2.5
  // templates default to on, V2-Flash ones to off): a one-message probe rendered without the
  // kwarg is compared with the renderings for true and false. False when neither matches.
  bool ThinksByDefault() const;

  // Whether the template reads variable `name`.
  bool References(const std::string& name) const;
  // Overrides/adds special-token variables (bos_token, eos_token, ...).
  void SetSpecialToken(const std::string& name, nlohmann::ordered_json value);

 private:
  jinja::JinjaTemplate template_;
  std::vector<std::pair<std::string, nlohmann::ordered_json>> special_tokens_;
  bool allow_media_parts_ = false;
};

}  // namespace mimo
