// ChatTemplate: tokenizer_config.json -> Jinja template + special tokens; Render mirrors
// transformers' render_jinja_template (variables: messages, tools, documents,
// add_generation_prompt, special tokens, then the caller's kwargs).
#include "chat/chat_template.h"

#include <fstream>
#include <sstream>

#include "core/json_depth.h"

namespace mimo {
namespace {

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound("cannot open '%s'", path.c_str());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// transformers' special-token attributes, in SPECIAL_TOKENS_ATTRIBUTES order.
const char* const kSpecialTokenKeys[] = {"bos_token",  "eos_token", "unk_token",
                                         "sep_token",  "pad_token", "cls_token",
                                         "mask_token", "additional_special_tokens"};

// A token is a string or an AddedToken dict {"content": ...}.
nlohmann::ordered_json TokenContent(const nlohmann::ordered_json& t) {
  if (t.is_object() && t.contains("content")) return t["content"];
  return t;
}

// Content-part types (and keys) that carry images, audio or video: OpenAI's and the MiMo-V2.5
// template's spellings.
bool IsMediaPart(const nlohmann::ordered_json& part, std::string* kind) {
  static const char* const kMedia[] = {"image", "image_url", "input_image", "audio",
                                       "audio_url", "input_audio", "video", "video_url"};
  if (!part.is_object()) return false;
  const auto type = part.find("type");
  for (const char* m : kMedia) {
    if ((type != part.end() && type->is_string() && *type == m) || part.contains(m)) {
      *kind = m;
      return true;
    }
  }
  return false;
}

}  // namespace

Status ChatTemplate::CheckTextOnly(const nlohmann::ordered_json& messages) {
  if (!messages.is_array()) return Status::Ok();
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if (!m.is_object() || !m.contains("content") || !m["content"].is_array()) continue;
    const auto& parts = m["content"];
    for (size_t j = 0; j < parts.size(); ++j) {
      std::string kind;
      if (IsMediaPart(parts[j], &kind)) {
        return InvalidArgument(
            "messages[%zu].content[%zu] is an '%s' part: only text can be run (the checkpoint's "
            "vision/audio towers are not loaded), so the request is refused rather than the "
            "part dropped",
            i, j, kind.c_str());
      }
    }
  }
  return Status::Ok();
}

StatusOr<ChatTemplate> ChatTemplate::FromString(const std::string& text) {
  auto t = jinja::JinjaTemplate::Parse(text);
  if (!t.ok()) return Status(t.status().code(), "chat template: " + t.status().message());
  ChatTemplate ct;
  ct.template_ = std::move(t).value();
  return ct;
}

StatusOr<ChatTemplate> ChatTemplate::FromTokenizerConfig(const nlohmann::ordered_json& config) {
  if (!config.is_object()) return InvalidArgument("tokenizer_config: expected a JSON object");
  if (!config.contains("chat_template")) {
    return NotFound("tokenizer_config has no \"chat_template\"");
  }
  const auto& ct = config["chat_template"];
  std::string text;
  if (ct.is_string()) {
    text = ct.get<std::string>();
  } else if (ct.is_array()) {
    bool found = false;
    for (const auto& entry : ct) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        text = entry["template"].get<std::string>();
        found = true;
      }
    }
    if (!found) {
      return InvalidArgument("tokenizer_config \"chat_template\" list has no template named \"default\"");
    }
  } else {
    return InvalidArgument("tokenizer_config \"chat_template\" must be a string or a list");
  }
  MIMO_ASSIGN_OR_RETURN(ChatTemplate result, FromString(text));
  for (const char* key : kSpecialTokenKeys) {
    if (!config.contains(key)) continue;
    const auto& v = config[key];
    if (v.is_array()) {
      nlohmann::ordered_json list = nlohmann::ordered_json::array();
      for (const auto& t : v) list.push_back(TokenContent(t));
      if (!list.empty()) result.special_tokens_.emplace_back(key, std::move(list));
    } else {
      nlohmann::ordered_json c = TokenContent(v);
      if (c.is_string() && !c.get<std::string>().empty()) result.special_tokens_.emplace_back(key, c);
    }
  }
  return result;
}

StatusOr<ChatTemplate> ChatTemplate::FromTokenizerConfigFile(const std::string& path) {
  MIMO_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  nlohmann::ordered_json config = nlohmann::ordered_json::parse(text, nullptr, false);
  if (config.is_discarded()) return InvalidArgument("'%s' is not valid JSON", path.c_str());
  auto result = FromTokenizerConfig(config);
  if (!result.ok()) return Status(result.status().code(), path + ": " + result.status().message());
  return result;
}

StatusOr<ChatTemplate> ChatTemplate::FromModelDir(const std::string& dir) {
  const std::string config_path = dir + "/tokenizer_config.json";
  MIMO_ASSIGN_OR_RETURN(std::string text, ReadFile(config_path));
  nlohmann::ordered_json config = nlohmann::ordered_json::parse(text, nullptr, false);
  if (config.is_discarded()) return InvalidArgument("'%s' is not valid JSON", config_path.c_str());
  if (config.is_object() && !config.contains("chat_template")) {
    auto jinja_file = ReadFile(dir + "/chat_template.jinja");
    if (jinja_file.ok()) config["chat_template"] = *jinja_file;
  }
  auto result = FromTokenizerConfig(config);
  if (!result.ok()) {
    return Status(result.status().code(), config_path + ": " + result.status().message());
  }
  return result;
}

bool ChatTemplate::References(const std::string& name) const {
  return template_.referenced_names().count(name) > 0;
}

void ChatTemplate::SetSpecialToken(const std::string& name, nlohmann::ordered_json value) {
  for (auto& [k, v] : special_tokens_) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  special_tokens_.emplace_back(name, std::move(value));
}

Status ChatTemplate::ParseToolCallArguments(nlohmann::ordered_json* messages, int max_depth) {
  if (!messages->is_array()) return Status::Ok();
  for (size_t i = 0; i < messages->size(); ++i) {
    auto& m = (*messages)[i];
    if (!m.is_object() || !m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
    auto& calls = m["tool_calls"];
    for (size_t j = 0; j < calls.size(); ++j) {
      auto& call = calls[j];
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
      auto& fn = call["function"];
      if (!fn.contains("arguments") || !fn["arguments"].is_string()) continue;
      const std::string& text = fn["arguments"].get_ref<const std::string&>();
      if (JsonNestsDeeperThan(text, max_depth)) {
        return InvalidArgument(
            "messages[%zu].tool_calls[%zu].function.arguments is nested deeper than %d levels", i,
            j, max_depth);
      }
      auto parsed = nlohmann::ordered_json::parse(text, nullptr, false);
      if (parsed.is_discarded()) {
        return InvalidArgument("messages[%zu].tool_calls[%zu].function.arguments is not valid JSON",
                               i, j);
      }
      fn["arguments"] = std::move(parsed);
    }
  }
  return Status::Ok();
}

StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& messages,
                                           const nlohmann::ordered_json& tools,
                                           bool add_generation_prompt,
                                           const nlohmann::ordered_json& extra_kwargs) const {
  if (!messages.is_array()) return InvalidArgument("messages must be a JSON array");
  if (!tools.is_null() && !tools.is_array()) return InvalidArgument("tools must be a JSON array or null");
  if (!allow_media_parts_) MIMO_RETURN_IF_ERROR(CheckTextOnly(messages));
  if (!extra_kwargs.is_null() && !extra_kwargs.is_object()) {
    return InvalidArgument("chat template kwargs must be a JSON object");
  }
  using jinja::FromJson;
  using jinja::JinjaValue;
  std::vector<std::pair<std::string, JinjaValue>> vars;
  vars.emplace_back("messages", FromJson(messages));
  vars.emplace_back("tools", FromJson(tools));
  vars.emplace_back("documents", JinjaValue::None());
  vars.emplace_back("add_generation_prompt", JinjaValue::Bool(add_generation_prompt));
  for (const auto& [k, v] : special_tokens_) vars.emplace_back(k, FromJson(v));
  if (extra_kwargs.is_object()) {
    for (auto it = extra_kwargs.begin(); it != extra_kwargs.end(); ++it) {
      const std::string& k = it.key();
      if (k == "messages" || k == "tools" || k == "documents" || k == "add_generation_prompt") {
        return InvalidArgument("chat template kwarg '%s' is reserved", k.c_str());
      }
      vars.emplace_back(k, FromJson(it.value()));
    }
    // The thinking switch has two spellings; map the one given to the one the template reads.
    const bool has_enable = extra_kwargs.contains("enable_thinking");
    const bool has_thinking = extra_kwargs.contains("thinking");
    if (has_thinking && !has_enable && References("enable_thinking") && !References("thinking")) {
      vars.emplace_back("enable_thinking", FromJson(extra_kwargs["thinking"]));
    } else if (has_enable && !has_thinking && References("thinking") &&
               !References("enable_thinking")) {
      vars.emplace_back("thinking", FromJson(extra_kwargs["enable_thinking"]));
    }
  }
  return template_.Render(vars);
}

StatusOr<std::string> ChatTemplate::RenderContinuing(
    const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
    const nlohmann::ordered_json& extra_kwargs) const {
  if (!messages.is_array() || messages.empty()) {
    return InvalidArgument("messages must be a non-empty JSON array");
  }
  const nlohmann::ordered_json& last = messages.back();
  if (!last.is_object() || !last.contains("role") || last["role"] != "assistant") {
    return InvalidArgument("only a final assistant message can be continued");
  }
  const bool plain =
      (!last.contains("reasoning_content") || last["reasoning_content"].is_null() ||
       last["reasoning_content"] == "") &&
      (!last.contains("tool_calls") || last["tool_calls"].is_null() || last["tool_calls"].empty());
  if (plain) {
    std::string text;
    if (last.contains("content") && last["content"].is_string()) {
      text = last["content"].get<std::string>();
    } else if (last.contains("content") && last["content"].is_array()) {
      for (const auto& part : last["content"]) {
        if (part.is_object() && part.contains("text") && part["text"].is_string()) {
          text += part["text"].get<std::string>();
        }
      }
    }
    nlohmann::ordered_json head = messages;
    head.erase(head.size() - 1);
    MIMO_ASSIGN_OR_RETURN(std::string prompt, Render(head, tools, true, extra_kwargs));
    static const std::string kThink = "<think>";
    const bool in_think = prompt.size() >= kThink.size() &&
                          prompt.compare(prompt.size() - kThink.size(), kThink.size(), kThink) == 0;
    if (!in_think) return prompt + text;
  }
  // A marker no tokenizer or template produces: control characters around a fixed word.
  static const std::string kMarker = "\x1e\x1fmimo-continue\x1f\x1e";
  nlohmann::ordered_json marked = messages;
  nlohmann::ordered_json& content = marked.back()["content"];
  if (content.is_array()) {
    if (!content.empty() && content.back().is_object() && content.back().contains("text") &&
        content.back()["text"].is_string()) {
      content.back()["text"] = content.back()["text"].get<std::string>() + kMarker;
    } else {
      content.push_back({{"type", "text"}, {"text", kMarker}});
    }
  } else if (content.is_string()) {
    content = content.get<std::string>() + kMarker;
  } else {
    content = kMarker;  // null or absent: an empty prefill
  }
  MIMO_ASSIGN_OR_RETURN(std::string text, Render(marked, tools, false, extra_kwargs));
  const size_t at = text.rfind(kMarker);
  if (at == std::string::npos) {
    return InvalidArgument(
        "the chat template does not render the final assistant message's content, so it cannot "
        "be continued");
  }
  text.resize(at);
  return text;
}

bool ChatTemplate::ThinksByDefault() const {
  const nlohmann::ordered_json probe =
      nlohmann::ordered_json::array({{{"role", "user"}, {"content", "probe"}}});
  auto render = [&](const nlohmann::ordered_json& kwargs) {
    auto r = Render(probe, nullptr, true, kwargs);
    return r.ok() ? *r : std::string("\x01error");
  };
  const std::string unset = render(nlohmann::ordered_json::object());
  const std::string on = render({{"enable_thinking", true}});
  const std::string off = render({{"enable_thinking", false}});
  return unset == on && unset != off;
}

}  // namespace mimo
