// The bits the HTTP clients here share (bench serve, bench eval, bench niah): the server's origin
// from a base URL, the bearer header, and for the non-streaming ones the server flags and one
// chat/completions request with its text and usage.
#pragma once

#include <httplib.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/command.h"

namespace mimo::cli {

// The server's origin ("http://host:port") from a base URL; a trailing "/v1" (what every OpenAI
// client appends anyway) and trailing slashes are dropped.
inline std::string OriginOf(std::string url) {
  while (!url.empty() && url.back() == '/') url.pop_back();
  if (url.size() >= 3 && url.compare(url.size() - 3, 3, "/v1") == 0) url.resize(url.size() - 3);
  return url;
}

inline httplib::Headers AuthHeaders(const std::string& key) {
  httplib::Headers h;
  if (!key.empty()) h.emplace("Authorization", "Bearer " + key);
  return h;
}

// An OpenAI-compatible server and which endpoint the client speaks to.
struct OpenAiServer {
  std::string origin, model, api_key, path;
  bool chat = true;
};

// --base-url, --model, --api-key (else $OPENAI_API_KEY) and --endpoint chat|completions (default
// chat); false (after saying why, as `cmd`) on a bad endpoint.
inline bool ServerFromFlags(const char* cmd, const Args& a, OpenAiServer* s) {
  const char* env_key = std::getenv("OPENAI_API_KEY");
  s->origin = OriginOf(a.Get("base-url"));
  s->model = a.Get("model");
  s->api_key = a.Get("api-key", env_key ? env_key : "");
  const std::string endpoint = a.Get("endpoint", "chat");
  if (endpoint != "chat" && endpoint != "completions") {
    std::fprintf(stderr, "%s: --endpoint must be chat or completions\n", cmd);
    return false;
  }
  s->chat = endpoint == "chat";
  s->path = s->chat ? "/v1/chat/completions" : "/v1/completions";
  return true;
}

struct Completion {
  bool ok = false;
  std::string text, error;  // chat: the message content (not reasoning); completions: the text
  int prompt_tokens = 0, completion_tokens = 0;
};

// One non-streaming request (body: everything but what the endpoint implies).
inline Completion Complete(const OpenAiServer& s, const nlohmann::json& body) {
  using Json = nlohmann::json;
  Completion r;
  httplib::Client cli(s.origin);
  cli.set_read_timeout(1800, 0);
  cli.set_connection_timeout(30, 0);
  auto res = cli.Post(s.path, AuthHeaders(s.api_key), body.dump(), "application/json");
  if (!res) {
    r.error = "transport error: " + httplib::to_string(res.error());
    return r;
  }
  const Json j = Json::parse(res->body, nullptr, false);
  if (res->status != 200 || !j.is_object() || !j.contains("choices") || !j["choices"].is_array() ||
      j["choices"].empty()) {
    r.error = "HTTP " + std::to_string(res->status) + ": " + res->body.substr(0, 300);
    return r;
  }
  const Json& c = j["choices"][0];
  const Json text =
      s.chat ? (c.contains("message") ? c["message"].value("content", Json("")) : Json(""))
             : c.value("text", Json(""));
  r.text = text.is_string() ? text.get<std::string>() : "";
  if (j.contains("usage") && j["usage"].is_object()) {
    r.prompt_tokens = j["usage"].value("prompt_tokens", 0);
    r.completion_tokens = j["usage"].value("completion_tokens", 0);
  }
  r.ok = true;
  return r;
}

}  // namespace mimo::cli
