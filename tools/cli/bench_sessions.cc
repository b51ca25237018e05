// `mimo bench serve --sessions F1,F2,...`: replays multi-turn agent sessions (built by
// scripts/bench/agent_sessions.py from the recorded agents' requests) against any server that
// speaks the sessions' APIs (Anthropic Messages, OpenAI Responses, chat completions). Each turn
// is the previous request plus the assistant's tool call and its result, sent in order and
// non-streamed with a small output budget, so its latency is the time to the first token plus
// --output-len - 1 steps; the default budget of 1 makes it the TTFT. Per turn it reports the
// prompt tokens, the tokens the server says it reused (usage: cached_tokens,
// cache_read_input_tokens) and, when the server's /metrics has them, how many came from the RAM
// and disk tiers of the prefix cache (mimo:prefix_cache_tier_hits_total), read around each turn.
#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/http_client.h"

namespace mimo::cli {
namespace {

using Json = nlohmann::json;

struct Session {
  std::string name, path, key;
  Json headers, body;
  std::vector<int> turns;  // items of body[key] each turn sends
};

bool LoadSession(const std::string& file, Session* s, std::string* err) {
  std::ifstream f(file);
  if (!f) {
    *err = file + ": cannot open";
    return false;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  const Json j = Json::parse(ss.str(), nullptr, false);
  if (!j.is_object() || !j.contains("body") || !j["body"].is_object() || !j.contains("turns") ||
      !j["turns"].is_array() || !j.contains("key") || !j["key"].is_string() ||
      !j.contains("path") || !j["path"].is_string()) {
    *err = file + ": not a session file (need path, key, body, turns)";
    return false;
  }
  s->name = j.value("agent", file);
  s->path = j["path"].get<std::string>();
  s->key = j["key"].get<std::string>();
  s->headers = j.value("headers", Json::object());
  s->body = j["body"];
  if (!s->body.contains(s->key) || !s->body[s->key].is_array()) {
    *err = file + ": body has no array '" + s->key + "'";
    return false;
  }
  for (const Json& t : j["turns"]) {
    if (!t.is_number_integer() || t.get<int>() < 1 ||
        t.get<size_t>() > s->body[s->key].size()) {
      *err = file + ": a turn's item count is out of range";
      return false;
    }
    s->turns.push_back(t.get<int>());
  }
  return true;
}

// The tier counters of /metrics (ram, disk), -1 when the server exposes none.
std::pair<double, double> TierHits(httplib::Client& cli) {
  auto res = cli.Get("/metrics");
  if (!res || res->status != 200) return {-1, -1};
  double ram = -1, disk = -1;
  std::istringstream lines(res->body);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("mimo:prefix_cache_tier_hits_total{", 0) != 0) continue;
    const double v = std::atof(line.substr(line.rfind(' ') + 1).c_str());
    if (line.find("tier=\"ram\"") != std::string::npos) ram = v;
    if (line.find("tier=\"disk\"") != std::string::npos) disk = v;
  }
  return {ram, disk};
}

struct TurnResult {
  bool ok = false;
  std::string error;
  double seconds = 0;
  int prompt_tokens = 0, cached_tokens = 0;
  double ram_tokens = -1, disk_tokens = -1;
};

// Usage in the three APIs' shapes: prompt tokens (all of them) and the reused ones.
void ReadUsage(const Json& u, TurnResult* r) {
  if (!u.is_object()) return;
  if (u.contains("cache_read_input_tokens")) {  // Anthropic: input_tokens excludes the cached
    r->cached_tokens = u.value("cache_read_input_tokens", 0);
    r->prompt_tokens = u.value("input_tokens", 0) + r->cached_tokens +
                       u.value("cache_creation_input_tokens", 0);
    return;
  }
  r->prompt_tokens = u.contains("prompt_tokens") ? u.value("prompt_tokens", 0)
                                                 : u.value("input_tokens", 0);
  for (const char* k : {"prompt_tokens_details", "input_tokens_details"}) {
    if (u.contains(k) && u[k].is_object()) r->cached_tokens = u[k].value("cached_tokens", 0);
  }
}

TurnResult SendTurn(const std::string& origin, const std::string& api_key, const std::string& model,
                    const Session& s, int turn, int output_len) {
  TurnResult r;
  Json body = s.body;
  Json& items = body[s.key];
  items.erase(items.begin() + s.turns[turn], items.end());
  body["model"] = model;
  body["stream"] = false;
  body["temperature"] = 0;
  if (s.key == "input") {
    body["max_output_tokens"] = output_len;
  } else {
    body["max_tokens"] = output_len;
    body.erase("max_completion_tokens");
  }
  httplib::Client cli(origin);
  cli.set_read_timeout(3600, 0);
  cli.set_connection_timeout(30, 0);
  httplib::Headers headers = AuthHeaders(api_key);
  if (!api_key.empty()) headers.emplace("x-api-key", api_key);
  for (auto it = s.headers.begin(); it != s.headers.end(); ++it) {
    if (it.value().is_string()) headers.emplace(it.key(), it.value().get<std::string>());
  }
  const auto [ram0, disk0] = TierHits(cli);
  const auto t0 = std::chrono::steady_clock::now();
  auto res = cli.Post(s.path, headers, body.dump(), "application/json");
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!res) {
    r.error = "transport error: " + httplib::to_string(res.error());
    return r;
  }
  if (res->status != 200) {
    r.error = "HTTP " + std::to_string(res->status) + ": " + res->body.substr(0, 300);
    return r;
  }
  const Json j = Json::parse(res->body, nullptr, false);
  if (j.is_object() && j.contains("usage")) ReadUsage(j["usage"], &r);
  const auto [ram1, disk1] = TierHits(cli);
  if (ram0 >= 0 && ram1 >= 0) r.ram_tokens = ram1 - ram0;
  if (disk0 >= 0 && disk1 >= 0) r.disk_tokens = disk1 - disk0;
  r.ok = true;
  return r;
}

}  // namespace

// Called by RunBenchServe when --sessions is given.
int RunBenchSessions(const Args& a) {
  const std::string origin = OriginOf(a.Get("base-url"));
  const std::string model = a.Get("model");
  const char* env_key = std::getenv("OPENAI_API_KEY");
  const std::string api_key = a.Get("api-key", env_key ? env_key : "");
  const int output_len = static_cast<int>(a.GetInt("output-len", 1));
  const std::string label = a.Get("label", "");
  std::vector<Session> sessions;
  for (const std::string& file : SplitList(a.Get("sessions"))) {
    Session s;
    std::string err;
    if (!LoadSession(file, &s, &err)) {
      std::fprintf(stderr, "bench serve: --sessions: %s\n", err.c_str());
      return 2;
    }
    sessions.push_back(std::move(s));
  }
  if (sessions.empty() || output_len < 1) {
    std::fprintf(stderr, "bench serve: --sessions needs session files and --output-len >= 1\n");
    return 2;
  }
  Json out = Json::array();
  std::printf("%-12s %4s %8s %8s %8s %8s %9s\n", "session", "turn", "prompt", "reused", "ram",
              "disk", "ttft_s");
  int failed = 0;
  for (const Session& s : sessions) {
    double total = 0;
    int prompt = 0, reused = 0;
    for (size_t t = 0; t < s.turns.size(); ++t) {
      const TurnResult r = SendTurn(origin, api_key, model, s, static_cast<int>(t), output_len);
      if (!r.ok) {
        std::printf("%-12s %4zu failed: %s\n", s.name.c_str(), t + 1, r.error.c_str());
        ++failed;
        break;
      }
      auto tier = [](double v) { return v < 0 ? std::string("-") : std::to_string(int64_t(v)); };
      std::printf("%-12s %4zu %8d %8d %8s %8s %9.3f\n", s.name.c_str(), t + 1, r.prompt_tokens,
                  r.cached_tokens, tier(r.ram_tokens).c_str(), tier(r.disk_tokens).c_str(),
                  r.seconds);
      std::fflush(stdout);
      total += r.seconds;
      prompt += r.prompt_tokens;
      reused += r.cached_tokens;
      out.push_back({{"label", label},
                     {"session", s.name},
                     {"turn", t + 1},
                     {"prompt_tokens", r.prompt_tokens},
                     {"cached_tokens", r.cached_tokens},
                     {"ram_tokens", r.ram_tokens},
                     {"disk_tokens", r.disk_tokens},
                     {"ttft_s", r.seconds}});
    }
    std::printf("%-12s  all %8d %8d %8s %8s %9.3f\n", s.name.c_str(), prompt, reused, "", "",
                total);
  }
  if (a.Has("result-json")) {
    std::ofstream f(a.Get("result-json"));
    f << out.dump(1) << "\n";
    if (!f) {
      std::fprintf(stderr, "bench serve: cannot write %s\n", a.Get("result-json").c_str());
      return 1;
    }
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace mimo::cli
