// `mimo render`: prints the prompt a chat template produces for a conversation, byte for byte.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "chat/chat_template.h"
#include "cli/command.h"

namespace mimo::cli {
namespace {

bool ReadJsonFile(const std::string& path, nlohmann::ordered_json* out, std::string* error) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    *error = "cannot open '" + path + "'";
    return false;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  *out = nlohmann::ordered_json::parse(ss.str(), nullptr, false);
  if (out->is_discarded()) {
    *error = "'" + path + "' is not valid JSON";
    return false;
  }
  return true;
}

int Fail(const std::string& msg) {
  std::fprintf(stderr, "mimo render: %s\n", msg.c_str());
  return 1;
}

int RunRender(int argc, char** argv) {
  Args args;
  std::string error;
  if (!args.Parse(argc, argv, {"model", "messages", "tools", "kwargs", "chat-template"},
                  {"no-generation-prompt", "raw-tool-arguments", "continue-final-message"},
                  &error)) {
    return Fail(error);
  }
  if (!args.Has("messages")) return Fail("--messages FILE is required");
  if (!args.Has("model") && !args.Has("chat-template")) {
    return Fail("--model DIR or --chat-template FILE is required");
  }

  // Template: --chat-template FILE wins over the config's; special tokens come from --model DIR.
  StatusOr<ChatTemplate> tmpl = Status(StatusCode::kInternal, "unset");
  std::string template_text;
  if (args.Has("chat-template")) {
    std::ifstream f(args.Get("chat-template"), std::ios::binary);
    if (!f) return Fail("cannot open '" + args.Get("chat-template") + "'");
    std::stringstream ss;
    ss << f.rdbuf();
    template_text = ss.str();
  }
  if (args.Has("model")) {
    if (args.Has("chat-template")) {
      nlohmann::ordered_json config;
      if (!ReadJsonFile(args.Get("model") + "/tokenizer_config.json", &config, &error)) {
        return Fail(error);
      }
      if (!config.is_object()) return Fail("tokenizer_config.json must be a JSON object");
      config["chat_template"] = template_text;
      tmpl = ChatTemplate::FromTokenizerConfig(config);
    } else {
      tmpl = ChatTemplate::FromModelDir(args.Get("model"));
    }
  } else {
    tmpl = ChatTemplate::FromString(template_text);
  }
  if (!tmpl.ok()) return Fail(tmpl.status().message());
  // `mimo render` shows what the template itself produces, image and audio placeholders included;
  // `mimo chat` and the server refuse such parts (ChatTemplate::CheckTextOnly).
  tmpl->set_allow_media_parts(true);

  // --messages: a JSON array of messages, or an object {"messages": [...], "tools": [...]}.
  nlohmann::ordered_json messages, tools = nullptr, kwargs = nlohmann::ordered_json::object();
  if (!ReadJsonFile(args.Get("messages"), &messages, &error)) return Fail(error);
  if (messages.is_object()) {
    if (messages.contains("tools")) tools = messages["tools"];
    nlohmann::ordered_json m = messages.value("messages", nlohmann::ordered_json());
    messages = std::move(m);
  }
  if (args.Has("tools") && !ReadJsonFile(args.Get("tools"), &tools, &error)) return Fail(error);
  if (args.Has("kwargs")) {
    kwargs = nlohmann::ordered_json::parse(args.Get("kwargs"), nullptr, false);
    if (kwargs.is_discarded() || !kwargs.is_object()) return Fail("--kwargs must be a JSON object");
  }
  // Like a server (vLLM), turn OpenAI-style string arguments into JSON before rendering.
  if (!args.Has("raw-tool-arguments")) {
    Status st = ChatTemplate::ParseToolCallArguments(&messages);
    if (!st.ok()) return Fail(st.message());
  }
  // --continue-final-message: the final assistant message is left open (an assistant prefill).
  auto text = args.Has("continue-final-message")
                  ? tmpl->RenderContinuing(messages, tools, kwargs)
                  : tmpl->Render(messages, tools, !args.Has("no-generation-prompt"), kwargs);
  if (!text.ok()) return Fail(text.status().message());
  std::fwrite(text->data(), 1, text->size(), stdout);
  return 0;
}

}  // namespace

MIMO_CLI_COMMAND("render",
                 "--model DIR --messages M.json [--tools T.json] [--kwargs JSON] "
                 "[--no-generation-prompt | --continue-final-message] [--chat-template FILE] "
                 "[--raw-tool-arguments]",
                 RunRender);

}  // namespace mimo::cli
