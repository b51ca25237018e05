// `mimo bench serve`: a serving benchmark client for any OpenAI-compatible server (ours, vLLM,
// SGLang, llama-server). Sends --num-prompts streaming requests (completions or chat) with at most
// --max-concurrency in flight, arrivals at --request-rate (Poisson; inf: all at once), and reports
// what `vllm bench serve` / `sglang.bench_serving` report: completed and failed requests, request
// and token throughput, TTFT / TPOT / ITL / E2E latency (mean, median, p90, p99), and the
// speculative-decoding acceptance length when the server's /metrics exposes the counters
// (mimo:spec_decode_* or vllm:spec_decode_*), read before and after the run.
// Definitions (as vLLM's): TTFT = first streamed text; ITL = gaps between later text chunks;
// TPOT = (E2E - TTFT) / (output tokens - 1), output tokens from the usage chunk
// (stream_options.include_usage) or, when the server sends none, the count of text chunks.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/command.h"
#include "cli/http_client.h"
#include "core/progress.h"

namespace mimo::cli {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct BenchPrompt {
  Json prompt;         // completions: string or token-id array; chat: null
  Json messages;       // chat: the messages array; completions: null
  int input_len = 0;   // what the dataset asked for (0: unknown until usage arrives)
  int output_len = 0;  // max_tokens
  Json extra;          // chat: request fields the dataset line carries (tools, ...), or null
};

struct RequestResult {
  bool ok = false;
  std::string error;
  double ttft = 0, e2e = 0;  // seconds
  std::vector<double> itl;   // seconds between text chunks after the first
  int prompt_tokens = 0, output_tokens = 0;
};

struct BenchConfig {
  std::string base_url, path, model, api_key;
  bool chat = false, ignore_eos = false;
  double temperature = 0.0;
};

// Text carried by one streamed chunk (completions: choices[0].text; chat: delta content or
// reasoning_content). Empty for role-only, tool-call-less or usage-only chunks.
std::string ChunkText(const Json& j) {
  if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return "";
  const Json& c = j["choices"][0];
  std::string out;
  if (c.contains("text") && c["text"].is_string()) out += c["text"].get<std::string>();
  if (c.contains("delta") && c["delta"].is_object()) {
    for (const char* k : {"content", "reasoning_content", "reasoning"}) {
      if (c["delta"].contains(k) && c["delta"][k].is_string())
        out += c["delta"][k].get<std::string>();
    }
    if (c["delta"].contains("tool_calls")) out += "<tool>";
  }
  return out;
}

// One streaming request; parses the SSE events as they arrive and times the text chunks.
RequestResult SendOne(const BenchConfig& cfg, const BenchPrompt& p) {
  RequestResult r;
  Json body = {{"model", cfg.model},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}},
               {"temperature", cfg.temperature}};
  if (cfg.chat) {
    body["messages"] = p.messages;
    body["max_completion_tokens"] = p.output_len;
    if (p.extra.is_object()) body.update(p.extra);
  } else {
    body["prompt"] = p.prompt;
    body["max_tokens"] = p.output_len;
  }
  if (cfg.ignore_eos) body["ignore_eos"] = true;

  httplib::Client cli(cfg.base_url);
  cli.set_read_timeout(600, 0);
  cli.set_connection_timeout(30, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = cfg.path;
  req.headers = AuthHeaders(cfg.api_key);
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  std::string buf, error_body;
  int chunks = 0;
  bool done = false;
  const auto t0 = Clock::now();
  auto last = t0;
  int status = 0;
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status != 200) {
      error_body.append(data, n);
      return true;
    }
    buf.append(data, n);
    size_t end;
    while ((end = buf.find("\n\n")) != std::string::npos) {
      const std::string event = buf.substr(0, end);
      buf.erase(0, end + 2);
      std::istringstream lines(event);
      std::string line;
      while (std::getline(lines, line)) {
        if (line.rfind("data:", 0) != 0) continue;
        std::string payload = line.substr(5);
        if (!payload.empty() && payload[0] == ' ') payload.erase(0, 1);
        if (payload == "[DONE]") {
          done = true;
          continue;
        }
        const Json j = Json::parse(payload, nullptr, false);
        if (j.is_discarded()) {
          r.error = "unparsable SSE data: " + payload.substr(0, 200);
          continue;
        }
        if (j.contains("error")) r.error = j["error"].dump();
        if (j.contains("usage") && j["usage"].is_object()) {
          r.prompt_tokens = j["usage"].value("prompt_tokens", 0);
          r.output_tokens = j["usage"].value("completion_tokens", 0);
        }
        if (ChunkText(j).empty()) continue;
        const auto now = Clock::now();
        if (chunks == 0) {
          r.ttft = std::chrono::duration<double>(now - t0).count();
        } else {
          r.itl.push_back(std::chrono::duration<double>(now - last).count());
        }
        last = now;
        ++chunks;
      }
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent = cli.send(req, res, err);
  r.e2e = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!sent) {
    r.error = "transport error: " + httplib::to_string(err);
  } else if (status != 200) {
    r.error = "HTTP " + std::to_string(status) + ": " + error_body.substr(0, 300);
  } else if (!done && r.error.empty()) {
    r.error = "stream ended without data: [DONE]";
  } else if (chunks == 0 && r.error.empty()) {
    r.error = "no text was streamed";
  }
  if (r.output_tokens == 0) r.output_tokens = chunks;
  if (r.prompt_tokens == 0) r.prompt_tokens = p.input_len;
  r.ok = r.error.empty();
  return r;
}

// Sums the speculative-decoding counters of a Prometheus text page: [drafts, accepted tokens,
// draft tokens]; all zero when the server has none.
std::vector<double> SpecCounters(const BenchConfig& cfg) {
  std::vector<double> out(3, 0.0);
  httplib::Client cli(cfg.base_url);
  cli.set_read_timeout(10, 0);
  auto res = cli.Get("/metrics", AuthHeaders(cfg.api_key));
  if (!res || res->status != 200) return out;
  std::istringstream in(res->body);
  std::string line;
  const char* names[3] = {"spec_decode_num_drafts", "spec_decode_num_accepted_tokens",
                          "spec_decode_num_draft_tokens"};
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    std::string name = line.substr(0, line.find_first_of("{ "));
    const size_t colon = name.find(':');
    if (colon != std::string::npos) name = name.substr(colon + 1);  // mimo: / vllm: / sglang:
    if (name.size() > 6 && name.compare(name.size() - 6, 6, "_total") == 0) {
      name.resize(name.size() - 6);
    }
    for (int i = 0; i < 3; ++i) {
      if (name == names[i]) out[i] += std::atof(line.c_str() + sp + 1);
    }
  }
  return out;
}

// numpy.percentile's default (linear interpolation between closest ranks).
double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double pos = q / 100.0 * (v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - lo);
}

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / v.size();
}

// Random token ids (completions: sent as ids, exact length), or those ids turned into text by
// the server's /detokenize for chat (vLLM and mimo both have it).
bool MakeRandomDataset(const BenchConfig& cfg, int n, int in_len, int out_len, int vocab,
                       uint32_t seed, std::vector<BenchPrompt>* out, std::string* err) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> tok(0, vocab - 1);
  httplib::Client cli(cfg.base_url);
  cli.set_read_timeout(60, 0);
  for (int i = 0; i < n; ++i) {
    std::vector<int> ids(in_len);
    for (int& t : ids) t = tok(rng);
    BenchPrompt p;
    p.input_len = in_len;
    p.output_len = out_len;
    if (!cfg.chat) {
      p.prompt = ids;
    } else {
      const Json body = {{"model", cfg.model}, {"tokens", ids}};
      auto res = cli.Post("/detokenize", AuthHeaders(cfg.api_key), body.dump(), "application/json");
      const Json j = res && res->status == 200 ? Json::parse(res->body, nullptr, false) : Json();
      if (!j.is_object() || !j.contains("prompt") || !j["prompt"].is_string()) {
        *err = "the chat endpoint needs text prompts and POST /detokenize failed (" +
               (res ? "HTTP " + std::to_string(res->status) : std::string("no answer")) + ")";
        return false;
      }
      p.messages = Json::array({{{"role", "user"}, {"content", j["prompt"]}}});
    }
    out->push_back(std::move(p));
  }
  return true;
}

// JSONL: one object per line with "prompt" (string) or "messages" (array), and optionally
// "output_len" / "max_tokens", and (chat) the request fields "tools", "tool_choice",
// "chat_template_kwargs" and "response_format", sent as they are; lines are reused in order when
// there are fewer than n.
bool LoadJsonlDataset(const std::string& path, bool chat, int n, int out_len,
                      std::vector<BenchPrompt>* out, std::string* err) {
  std::ifstream in(path);
  if (!in) {
    *err = "cannot read " + path;
    return false;
  }
  std::vector<BenchPrompt> rows;
  std::string line;
  for (int ln = 1; std::getline(in, line); ++ln) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const Json j = Json::parse(line, nullptr, false);
    if (!j.is_object()) {
      *err = path + ":" + std::to_string(ln) + ": not a JSON object";
      return false;
    }
    BenchPrompt p;
    p.output_len = j.value("output_len", j.value("max_tokens", out_len));
    if (j.contains("messages") && j["messages"].is_array()) {
      p.messages = j["messages"];
    } else if (j.contains("prompt") && j["prompt"].is_string()) {
      p.prompt = j["prompt"];
      p.messages = Json::array({{{"role", "user"}, {"content", j["prompt"]}}});
    } else {
      *err = path + ":" + std::to_string(ln) + ": needs \"prompt\" (string) or \"messages\"";
      return false;
    }
    for (const char* k : {"tools", "tool_choice", "chat_template_kwargs", "response_format"}) {
      if (j.contains(k)) p.extra[k] = j[k];
    }
    if (!chat && p.prompt.is_null()) {
      *err = path + ":" + std::to_string(ln) + ": \"messages\" needs --endpoint chat";
      return false;
    }
    rows.push_back(std::move(p));
  }
  if (rows.empty()) {
    *err = path + " holds no prompts";
    return false;
  }
  for (int i = 0; i < n; ++i) out->push_back(rows[i % rows.size()]);
  return true;
}

void PrintStat(const char* unit_name, const std::vector<double>& s, Json* out,
               const std::string& key) {
  std::vector<double> ms;
  for (double x : s) ms.push_back(1e3 * x);
  const double mean = Mean(ms), med = Percentile(ms, 50), p90 = Percentile(ms, 90),
               p99 = Percentile(ms, 99);
  std::printf("%-40s %10.2f\n", (std::string("Mean ") + unit_name + " (ms):").c_str(), mean);
  std::printf("%-40s %10.2f\n", (std::string("Median ") + unit_name + " (ms):").c_str(), med);
  std::printf("%-40s %10.2f\n", (std::string("P90 ") + unit_name + " (ms):").c_str(), p90);
  std::printf("%-40s %10.2f\n", (std::string("P99 ") + unit_name + " (ms):").c_str(), p99);
  (*out)["mean_" + key + "_ms"] = mean;
  (*out)["median_" + key + "_ms"] = med;
  (*out)["p90_" + key + "_ms"] = p90;
  (*out)["p99_" + key + "_ms"] = p99;
  double var = 0;  // population standard deviation, as numpy.std (vLLM's std_*_ms)
  for (double x : ms) var += (x - mean) * (x - mean);
  (*out)["std_" + key + "_ms"] = ms.empty() ? 0.0 : std::sqrt(var / ms.size());
}

void Section(const char* title) {
  const int w = 51, n = static_cast<int>(std::strlen(title)) + 2;
  std::string s(std::max(0, (w - n) / 2), '-');
  const std::string tail(std::max(0, w - n - static_cast<int>(s.size())), '-');
  std::printf("%s %s %s\n", s.c_str(), title, tail.c_str());
}

}  // namespace

int RunBenchSessions(const Args& a);  // bench_sessions.cc

int RunBenchServe(int argc, char** argv) {
  Args a;
  std::string err;
  if (!a.Parse(argc, argv,
               {"base-url", "model", "dataset", "input-len", "output-len", "num-prompts",
                "max-concurrency", "request-rate", "seed", "result-json", "endpoint", "api-key",
                "random-vocab-size", "temperature", "sessions", "label"},
               {"ignore-eos"}, &err) ||
      !a.Has("base-url") || !a.Has("model")) {
    std::fprintf(stderr,
                 "bench serve: %s\nusage: mimo bench serve --base-url URL --model NAME "
                 "[--dataset random|FILE.jsonl] [--input-len 128] [--output-len 128] "
                 "[--num-prompts 100] [--max-concurrency 1] [--request-rate inf] [--ignore-eos] "
                 "[--seed 0] [--result-json F] [--endpoint completions|chat] [--api-key K] "
                 "[--random-vocab-size 32000] [--temperature 0]\n"
                 "       mimo bench serve --base-url URL --model NAME --sessions F1,F2,... "
                 "[--output-len 1] [--label L] [--result-json F]  (multi-turn agent sessions, "
                 "scripts/bench/agent_sessions.py)\n",
                 err.empty() ? "need --base-url and --model" : err.c_str());
    return 2;
  }
  if (a.Has("sessions")) return RunBenchSessions(a);
  BenchConfig cfg;
  cfg.base_url = OriginOf(a.Get("base-url"));
  cfg.model = a.Get("model");
  cfg.api_key =
      a.Get("api-key", std::getenv("OPENAI_API_KEY") ? std::getenv("OPENAI_API_KEY") : "");
  const std::string endpoint = a.Get("endpoint", "completions");
  if (endpoint != "completions" && endpoint != "chat") {
    std::fprintf(stderr, "bench serve: --endpoint must be completions or chat\n");
    return 2;
  }
  cfg.chat = endpoint == "chat";
  cfg.path = cfg.chat ? "/v1/chat/completions" : "/v1/completions";
  cfg.ignore_eos = a.Has("ignore-eos");
  cfg.temperature = a.GetDouble("temperature", 0.0);
  const int n = static_cast<int>(a.GetInt("num-prompts", 100));
  const int conc = static_cast<int>(a.GetInt("max-concurrency", 1));
  const int in_len = static_cast<int>(a.GetInt("input-len", 128));
  const int out_len = static_cast<int>(a.GetInt("output-len", 128));
  const int vocab = static_cast<int>(a.GetInt("random-vocab-size", 32000));
  const std::string rate_s = a.Get("request-rate", "inf");
  const double rate = rate_s == "inf" ? INFINITY : std::atof(rate_s.c_str());
  const uint32_t seed = static_cast<uint32_t>(a.GetInt("seed", 0));
  if (n <= 0 || conc <= 0 || in_len <= 0 || out_len <= 0 || vocab <= 0 || !(rate > 0)) {
    std::fprintf(stderr,
                 "bench serve: --num-prompts, --max-concurrency, --input-len, --output-len, "
                 "--random-vocab-size and --request-rate must be positive\n");
    return 2;
  }

  std::vector<BenchPrompt> prompts;
  const std::string dataset = a.Get("dataset", "random");
  const bool ok = dataset == "random"
                      ? MakeRandomDataset(cfg, n, in_len, out_len, vocab, seed, &prompts, &err)
                      : LoadJsonlDataset(dataset, cfg.chat, n, out_len, &prompts, &err);
  if (!ok) {
    std::fprintf(stderr, "bench serve: %s\n", err.c_str());
    return 1;
  }

  // Arrival times: Poisson at --request-rate (exponential gaps), or all at t = 0.
  std::vector<double> arrival(n, 0.0);
  std::mt19937 arng(seed + 1);
  std::exponential_distribution<double> gap(std::isinf(rate) ? 1.0 : rate);
  for (int i = 1; i < n; ++i) arrival[i] = std::isinf(rate) ? 0.0 : arrival[i - 1] + gap(arng);

  const std::vector<double> spec0 = SpecCounters(cfg);
  std::vector<RequestResult> results(n);
  std::atomic<int> next{0}, finished{0};
  const auto start = Clock::now();
  std::vector<std::thread> workers;
  for (int w = 0; w < std::min(conc, n); ++w) {
    workers.emplace_back([&] {
      for (int i; (i = next.fetch_add(1)) < n;) {
        std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                                  std::chrono::duration<double>(arrival[i])));
        results[i] = SendOne(cfg, prompts[i]);
        ++finished;
      }
    });
  }
  ProgressLine progress("bench serve: requests", n);
  while (finished.load() < n) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    progress.Update(finished.load());
  }
  for (auto& t : workers) t.join();
  progress.Finish();
  const double duration = std::chrono::duration<double>(Clock::now() - start).count();
  const std::vector<double> spec1 = SpecCounters(cfg);

  int completed = 0;
  long long total_in = 0, total_out = 0;
  std::vector<double> ttft, tpot, itl, e2e;
  std::vector<std::string> errors;
  for (const RequestResult& r : results) {
    if (!r.ok) {
      errors.push_back(r.error);
      continue;
    }
    ++completed;
    total_in += r.prompt_tokens;
    total_out += r.output_tokens;
    ttft.push_back(r.ttft);
    e2e.push_back(r.e2e);
    if (r.output_tokens > 1) tpot.push_back((r.e2e - r.ttft) / (r.output_tokens - 1));
    itl.insert(itl.end(), r.itl.begin(), r.itl.end());
  }
  Json out = {{"base_url", cfg.base_url},
              {"endpoint", cfg.path},
              {"model", cfg.model},
              {"dataset", dataset},
              {"num_prompts", n},
              {"max_concurrency", conc},
              {"request_rate", std::isinf(rate) ? Json("inf") : Json(rate)},
              {"input_len", in_len},
              {"output_len", out_len},
              {"ignore_eos", cfg.ignore_eos},
              {"seed", seed},
              {"duration", duration},
              {"completed", completed},
              {"failed", n - completed},
              {"total_input_tokens", total_in},
              {"total_output_tokens", total_out},
              {"request_throughput", completed / duration},
              {"output_throughput", total_out / duration},
              {"total_token_throughput", (total_in + total_out) / duration}};

  std::printf("%s Serving Benchmark Result %s\n", std::string(13, '=').c_str(),
              std::string(13, '=').c_str());
  std::printf("%-40s %10d\n", "Successful requests:", completed);
  std::printf("%-40s %10d\n", "Failed requests:", n - completed);
  std::printf("%-40s %10d\n", "Maximum request concurrency:", conc);
  std::printf("%-40s %10s\n", "Request rate configured (RPS):", rate_s.c_str());
  std::printf("%-40s %10.2f\n", "Benchmark duration (s):", duration);
  std::printf("%-40s %10lld\n", "Total input tokens:", total_in);
  std::printf("%-40s %10lld\n", "Total generated tokens:", total_out);
  std::printf("%-40s %10.2f\n", "Request throughput (req/s):", completed / duration);
  std::printf("%-40s %10.2f\n", "Output token throughput (tok/s):", total_out / duration);
  std::printf("%-40s %10.2f\n",
              "Total token throughput (tok/s):", (total_in + total_out) / duration);
  Section("Time to First Token");
  PrintStat("TTFT", ttft, &out, "ttft");
  Section("Time per Output Token (excl. 1st token)");
  PrintStat("TPOT", tpot, &out, "tpot");
  Section("Inter-token Latency");
  PrintStat("ITL", itl, &out, "itl");
  Section("End-to-end Latency");
  PrintStat("E2EL", e2e, &out, "e2el");
  const double drafts = spec1[0] - spec0[0], accepted = spec1[1] - spec0[1],
               draft_tokens = spec1[2] - spec0[2];
  if (drafts > 0) {
    Section("Speculative Decoding");
    const double rate_pct = draft_tokens > 0 ? 100.0 * accepted / draft_tokens : 0.0;
    const double accept_len = 1.0 + accepted / drafts;
    std::printf("%-40s %10.2f\n", "Acceptance rate (%):", rate_pct);
    std::printf("%-40s %10.2f\n", "Acceptance length:", accept_len);
    std::printf("%-40s %10.0f\n", "Drafts:", drafts);
    std::printf("%-40s %10.0f\n", "Draft tokens:", draft_tokens);
    std::printf("%-40s %10.0f\n", "Accepted tokens:", accepted);
    out["spec_decode_acceptance_rate"] = rate_pct;
    out["spec_decode_acceptance_length"] = accept_len;
    out["spec_decode_num_drafts"] = drafts;
    out["spec_decode_draft_tokens"] = draft_tokens;
    out["spec_decode_accepted_tokens"] = accepted;
  }
  std::printf("%s\n", std::string(52, '=').c_str());
  for (size_t i = 0; i < errors.size() && i < 5; ++i) {
    std::fprintf(stderr, "bench serve: failed request: %s\n", errors[i].c_str());
  }
  if (a.Has("result-json")) {
    Json per = Json::array();
    for (const RequestResult& r : results) {
      per.push_back({{"ok", r.ok},
                     {"error", r.error},
                     {"ttft", r.ttft},
                     {"e2e", r.e2e},
                     {"prompt_tokens", r.prompt_tokens},
                     {"output_tokens", r.output_tokens}});
    }
    out["requests"] = per;
    std::ofstream f(a.Get("result-json"));
    f << out.dump(2) << "\n";
    if (!f) {
      std::fprintf(stderr, "bench serve: cannot write %s\n", a.Get("result-json").c_str());
      return 1;
    }
  }
  return completed == n ? 0 : 1;
}

}  // namespace mimo::cli
