// `mimo bench eval`: accuracy of a model behind any OpenAI-compatible server (ours, vLLM, SGLang,
// llama-server) on a question/answer dataset, the check a user runs after changing a setting
// (KV dtype, MXFP4 experts, MTP or DFlash, TP ranks): gsm8k's own JSONL ({"question", "answer"
// ending in "#### N"}) or lines with "prompt" / "messages" and "answer". Optional few-shot prefix
// (the dataset's first K items), concurrency, answer extraction (gsm8k's "#### N", the last
// number, exact match, a regex, a JSON field); prints accuracy with its 95% Wilson interval,
// invalid answers, output tokens/s, and writes every item as JSONL. --compare-base-url runs the
// same items on a second server (or the same one with other settings) and reports the paired
// difference with its 95% interval and McNemar's exact test.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
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

struct EvalItem {
  std::string question;  // gsm8k "question" or "prompt" (shown in the per-item output)
  Json messages;         // chat: the request's messages (before the few-shot prefix); or null
  std::string answer;    // the reference as the dataset writes it (gsm8k: with its reasoning)
  std::string expected;  // the reference answer compared with
};

struct EvalOptions {
  double temperature = 0.0;
  int max_tokens = 256;
  std::string extract = "gsm8k";  // gsm8k | last-number | exact | regex:RE | json:FIELD
  std::optional<std::regex> re;
};

struct ItemResult {
  bool ok = false;  // the request succeeded
  std::string error, response, extracted;
  bool valid = false, correct = false;
  int completion_tokens = 0;
};

std::string Trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

// The last number in text ("1,234.5" -> "1234.5"; a sentence's final period is not a decimal
// point), or nothing.
std::optional<std::string> LastNumber(const std::string& text) {
  static const std::regex num(R"(-?\d[\d,]*(\.\d+)?)");
  std::optional<std::string> last;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), num); it != std::sregex_iterator();
       ++it) {
    std::string s = it->str();
    s.erase(std::remove(s.begin(), s.end(), ','), s.end());
    last = s;
  }
  return last;
}

// gsm8k writes the final answer after "####".
std::optional<std::string> AfterHashes(const std::string& text) {
  const size_t p = text.rfind("####");
  if (p == std::string::npos) return std::nullopt;
  return LastNumber(text.substr(p + 4)).value_or(Trim(text.substr(p + 4)));
}

std::optional<std::string> Extract(const std::string& text, const EvalOptions& o) {
  if (o.extract == "gsm8k") {
    if (auto a = AfterHashes(text)) return a;
    return LastNumber(text);
  }
  if (o.extract == "last-number") return LastNumber(text);
  if (o.extract == "exact") return Trim(text);
  if (o.re) {
    std::optional<std::string> last;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), *o.re);
         it != std::sregex_iterator(); ++it) {
      last = it->size() > 1 ? (*it)[1].str() : it->str();
    }
    if (last) return Trim(*last);
    return std::nullopt;
  }
  // json:FIELD: the text (or its first {...}) as a JSON object.
  const std::string field = o.extract.substr(5);
  Json j = Json::parse(text, nullptr, false);
  if (!j.is_object()) {
    const size_t a = text.find('{'), b = text.rfind('}');
    if (a != std::string::npos && b != std::string::npos && b > a) {
      j = Json::parse(text.substr(a, b - a + 1), nullptr, false);
    }
  }
  if (!j.is_object() || !j.contains(field)) return std::nullopt;
  return j[field].is_string() ? j[field].get<std::string>() : j[field].dump();
}

// Numbers compare as numbers ("36", "36.0", "+36"), anything else as trimmed text.
bool SameAnswer(const std::string& got, const std::string& want) {
  auto number = [](const std::string& s, double* v) {
    const std::string t = Trim(s);
    if (t.empty()) return false;
    char* end = nullptr;
    *v = std::strtod(t.c_str(), &end);
    return end == t.c_str() + t.size() && std::isfinite(*v);
  };
  double a, b;
  if (number(got, &a) && number(want, &b))
    return std::fabs(a - b) <= 1e-9 * std::max(1.0, std::fabs(b));
  return Trim(got) == Trim(want);
}

bool LoadItems(const std::string& path, bool chat, std::vector<EvalItem>* out, std::string* err) {
  std::ifstream in(path);
  if (!in) {
    *err = "cannot read " + path;
    return false;
  }
  std::string line;
  for (int ln = 1; std::getline(in, line); ++ln) {
    if (Trim(line).empty()) continue;
    const std::string where = path + ":" + std::to_string(ln) + ": ";
    const Json j = Json::parse(line, nullptr, false);
    if (!j.is_object()) {
      *err = where + "not a JSON object";
      return false;
    }
    EvalItem it;
    if (j.contains("question") && j["question"].is_string()) {
      it.question = j["question"].get<std::string>();
    } else if (j.contains("prompt") && j["prompt"].is_string()) {
      it.question = j["prompt"].get<std::string>();
    } else if (j.contains("messages") && j["messages"].is_array() && chat) {
      it.messages = j["messages"];
      const Json& last = it.messages.back();
      it.question =
          last.value("content", Json("")).is_string() ? last["content"].get<std::string>() : "";
    } else {
      *err = where + "needs \"question\" or \"prompt\" (a string)" +
             (chat ? std::string(" or \"messages\"")
                   : std::string(" (messages need --endpoint chat)"));
      return false;
    }
    if (!j.contains("answer") || !(j["answer"].is_string() || j["answer"].is_number())) {
      *err = where + "needs \"answer\" (a string or a number)";
      return false;
    }
    it.answer = j["answer"].is_string() ? j["answer"].get<std::string>() : j["answer"].dump();
    it.expected = AfterHashes(it.answer).value_or(Trim(it.answer));
    out->push_back(std::move(it));
  }
  if (out->empty()) {
    *err = path + " holds no items";
    return false;
  }
  return true;
}

// The request body of item `it` after the few-shot examples `shots` (chat: user/assistant turns;
// completions: "Question: ...\nAnswer: ...\n\n" blocks, then the question).
Json Body(const OpenAiServer& s, const EvalOptions& o, const std::vector<EvalItem>& shots,
          const EvalItem& it) {
  Json body = {{"model", s.model}, {"temperature", o.temperature}, {"max_tokens", o.max_tokens}};
  if (s.chat) {
    Json msgs = Json::array();
    for (const EvalItem& e : shots) {
      msgs.push_back({{"role", "user"}, {"content", e.question}});
      msgs.push_back({{"role", "assistant"}, {"content", e.answer}});
    }
    if (it.messages.is_array()) {
      for (const Json& m : it.messages) msgs.push_back(m);
    } else {
      msgs.push_back({{"role", "user"}, {"content", it.question}});
    }
    body["messages"] = msgs;
  } else {
    std::string prompt;
    for (const EvalItem& e : shots)
      prompt += "Question: " + e.question + "\nAnswer: " + e.answer + "\n\n";
    body["prompt"] =
        shots.empty() ? it.question : prompt + "Question: " + it.question + "\nAnswer:";
  }
  return body;
}

ItemResult Ask(const OpenAiServer& s, const EvalOptions& o, const std::vector<EvalItem>& shots,
               const EvalItem& it) {
  ItemResult r;
  const Completion c = Complete(s, Body(s, o, shots, it));
  if (!c.ok) {
    r.error = c.error;
    return r;
  }
  r.ok = true;
  r.response = c.text;
  r.completion_tokens = c.completion_tokens;
  if (auto e = Extract(r.response, o)) {
    r.valid = true;
    r.extracted = *e;
    r.correct = SameAnswer(*e, it.expected);
  }
  return r;
}

struct RunResult {
  std::vector<ItemResult> items;
  double seconds = 0;
};

RunResult Run(const char* label, const OpenAiServer& s, const EvalOptions& o,
              const std::vector<EvalItem>& shots, const std::vector<EvalItem>& items, int conc) {
  RunResult rr;
  const int n = static_cast<int>(items.size());
  rr.items.resize(n);
  std::atomic<int> next{0}, finished{0}, correct{0};
  const auto start = Clock::now();
  std::vector<std::thread> workers;
  for (int w = 0; w < std::min(conc, n); ++w) {
    workers.emplace_back([&] {
      for (int i; (i = next.fetch_add(1)) < n;) {
        rr.items[i] = Ask(s, o, shots, items[i]);
        if (rr.items[i].correct) ++correct;
        ++finished;
      }
    });
  }
  ProgressLine progress(label, n);
  while (finished.load() < n) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    progress.Update(finished.load());
  }
  for (auto& t : workers) t.join();
  progress.Finish();
  rr.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return rr;
}

// Wilson score interval of k successes in n at 95%.
void Wilson(int k, int n, double* lo, double* hi) {
  const double z = 1.959963984540054, p = static_cast<double>(k) / n, z2n = z * z / n;
  const double mid = (p + z2n / 2) / (1 + z2n);
  const double half = z * std::sqrt(p * (1 - p) / n + z2n / (4.0 * n)) / (1 + z2n);
  *lo = std::max(0.0, mid - half);
  *hi = std::min(1.0, mid + half);
}

// Two-sided exact McNemar p-value: P(X <= min(b, c)) * 2 for X ~ Binomial(b + c, 1/2).
double McNemarP(int b, int c) {
  const int m = b + c, k = std::min(b, c);
  if (m == 0) return 1.0;
  double tail = 0;
  for (int i = 0; i <= k; ++i) {
    tail += std::exp(std::lgamma(m + 1.0) - std::lgamma(i + 1.0) - std::lgamma(m - i + 1.0) -
                     m * std::log(2.0));
  }
  return std::min(1.0, 2 * tail);
}

Json Summary(const OpenAiServer& s, const RunResult& rr) {
  const int n = static_cast<int>(rr.items.size());
  int correct = 0, invalid = 0, failed = 0;
  long long tokens = 0;
  for (const ItemResult& r : rr.items) {
    correct += r.correct;
    failed += !r.ok;
    invalid += r.ok && !r.valid;
    tokens += r.completion_tokens;
  }
  double lo, hi;
  Wilson(correct, n, &lo, &hi);
  return {{"base_url", s.origin},
          {"model", s.model},
          {"items", n},
          {"correct", correct},
          {"accuracy", 1.0 * correct / n},
          {"ci95", {lo, hi}},
          {"invalid", invalid},
          {"failed", failed},
          {"output_tokens", tokens},
          {"seconds", rr.seconds},
          {"output_tokens_per_s", rr.seconds > 0 ? tokens / rr.seconds : 0.0}};
}

void PrintSummary(const char* title, const Json& j) {
  std::printf("%s\n", title);
  std::printf("  %-28s %s (%s)\n", "server:", j["base_url"].get<std::string>().c_str(),
              j["model"].get<std::string>().c_str());
  std::printf("  %-28s %d / %d = %.4f  [95%% CI %.4f, %.4f]\n",
              "accuracy:", j["correct"].get<int>(), j["items"].get<int>(),
              j["accuracy"].get<double>(), j["ci95"][0].get<double>(), j["ci95"][1].get<double>());
  std::printf("  %-28s %d\n", "invalid answers:", j["invalid"].get<int>());
  std::printf("  %-28s %d\n", "failed requests:", j["failed"].get<int>());
  std::printf("  %-28s %lld in %.2f s: %.1f tok/s\n",
              "output tokens:", j["output_tokens"].get<long long>(), j["seconds"].get<double>(),
              j["output_tokens_per_s"].get<double>());
}

}  // namespace

int RunBenchEval(int argc, char** argv) {
  Args a;
  std::string err;
  if (!a.Parse(argc, argv,
               {"base-url", "model", "dataset", "endpoint", "api-key", "num-fewshot", "num-items",
                "concurrency", "extract", "temperature", "max-tokens", "output", "compare-base-url",
                "compare-model", "compare-api-key", "result-json"},
               {}, &err) ||
      !a.Has("base-url") || !a.Has("model") || !a.Has("dataset")) {
    std::fprintf(stderr,
                 "bench eval: %s\nusage: mimo bench eval --base-url URL --model NAME --dataset "
                 "FILE.jsonl [--endpoint chat|completions] [--num-fewshot 0] [--num-items all] "
                 "[--concurrency 4] [--extract gsm8k|last-number|exact|regex:RE|json:FIELD] "
                 "[--temperature 0] [--max-tokens 256] [--output ITEMS.jsonl] [--result-json F] "
                 "[--api-key K] [--compare-base-url URL2 [--compare-model NAME2] "
                 "[--compare-api-key K2]]\n",
                 err.empty() ? "need --base-url, --model and --dataset" : err.c_str());
    return 2;
  }
  OpenAiServer s;
  if (!ServerFromFlags("bench eval", a, &s)) return 2;
  const std::string endpoint = s.chat ? "chat" : "completions";
  EvalOptions o;
  o.temperature = a.GetDouble("temperature", 0.0);
  o.max_tokens = static_cast<int>(a.GetInt("max-tokens", 256));
  o.extract = a.Get("extract", "gsm8k");
  if (o.extract.rfind("regex:", 0) == 0) {
    try {
      o.re.emplace(o.extract.substr(6));
    } catch (const std::regex_error& e) {
      std::fprintf(stderr, "bench eval: --extract %s: %s\n", o.extract.c_str(), e.what());
      return 2;
    }
  } else if (!(o.extract == "gsm8k" || o.extract == "last-number" || o.extract == "exact" ||
               (o.extract.rfind("json:", 0) == 0 && o.extract.size() > 5))) {
    std::fprintf(stderr,
                 "bench eval: --extract must be gsm8k, last-number, exact, regex:RE or "
                 "json:FIELD, got '%s'\n",
                 o.extract.c_str());
    return 2;
  }
  const int shots_n = static_cast<int>(a.GetInt("num-fewshot", 0));
  const int conc = static_cast<int>(a.GetInt("concurrency", 4));
  if (shots_n < 0 || conc <= 0 || o.max_tokens <= 0 || !(o.temperature >= 0)) {
    std::fprintf(stderr,
                 "bench eval: --num-fewshot must be >= 0; --concurrency and --max-tokens > 0; "
                 "--temperature >= 0\n");
    return 2;
  }
  std::vector<EvalItem> all;
  if (!LoadItems(a.Get("dataset"), s.chat, &all, &err)) {
    std::fprintf(stderr, "bench eval: %s\n", err.c_str());
    return 1;
  }
  if (shots_n >= static_cast<int>(all.size())) {
    std::fprintf(stderr, "bench eval: --num-fewshot %d leaves none of the %zu items to ask\n",
                 shots_n, all.size());
    return 2;
  }
  // The first K items are the examples, the rest are asked.
  const std::vector<EvalItem> shots(all.begin(), all.begin() + shots_n);
  std::vector<EvalItem> items(all.begin() + shots_n, all.end());
  if (a.Has("num-items")) {
    const long long n = a.GetInt("num-items", 0);
    if (n <= 0) {
      std::fprintf(stderr, "bench eval: --num-items must be positive\n");
      return 2;
    }
    if (n < static_cast<long long>(items.size())) items.resize(static_cast<size_t>(n));
  }

  std::vector<std::pair<OpenAiServer, RunResult>> runs;
  runs.push_back({s, Run("bench eval: items", s, o, shots, items, conc)});
  if (a.Has("compare-base-url")) {
    OpenAiServer b = s;
    b.origin = OriginOf(a.Get("compare-base-url"));
    b.model = a.Get("compare-model", s.model);
    b.api_key = a.Get("compare-api-key", s.api_key);
    runs.push_back({b, Run("bench eval: items (compare)", b, o, shots, items, conc)});
  }

  if (a.Has("output")) {
    std::ofstream out(a.Get("output"));
    if (!out) {
      std::fprintf(stderr, "bench eval: cannot write %s\n", a.Get("output").c_str());
      return 1;
    }
    for (size_t r = 0; r < runs.size(); ++r) {
      for (size_t i = 0; i < items.size(); ++i) {
        const ItemResult& x = runs[r].second.items[i];
        Json line = {
            {"run", r == 0 ? "A" : "B"},     {"index", i + shots_n},
            {"question", items[i].question}, {"expected", items[i].expected},
            {"response", x.response},        {"extracted", x.valid ? Json(x.extracted) : Json()},
            {"correct", x.correct},          {"completion_tokens", x.completion_tokens}};
        if (!x.ok) line["error"] = x.error;
        out << line.dump() << "\n";
      }
    }
  }

  Json result = {{"dataset", a.Get("dataset")},  {"endpoint", endpoint},
                 {"num_fewshot", shots_n},       {"extract", o.extract},
                 {"temperature", o.temperature}, {"max_tokens", o.max_tokens}};
  result["A"] = Summary(runs[0].first, runs[0].second);
  PrintSummary("============ Accuracy (A) ============", result["A"]);
  if (runs.size() == 2) {
    result["B"] = Summary(runs[1].first, runs[1].second);
    PrintSummary("============ Accuracy (B) ============", result["B"]);
    // Paired: b = right in A only, c = right in B only; B - A = (c - b) / n.
    int both = 0, only_a = 0, only_b = 0, neither = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      const bool x = runs[0].second.items[i].correct, y = runs[1].second.items[i].correct;
      (x && y ? both : x ? only_a : y ? only_b : neither) += 1;
    }
    const double n = static_cast<double>(items.size());
    const double diff = (only_b - only_a) / n;
    const double se =
        std::sqrt(std::max(0.0, only_a + only_b - (only_b - only_a) * (only_b - only_a) / n)) / n;
    const double p = McNemarP(only_a, only_b);
    result["paired"] = {{"both", both},
                        {"only_a", only_a},
                        {"only_b", only_b},
                        {"neither", neither},
                        {"difference_b_minus_a", diff},
                        {"ci95", {diff - 1.959963984540054 * se, diff + 1.959963984540054 * se}},
                        {"mcnemar_p", p}};
    std::printf("============ Paired (B - A) ============\n");
    std::printf("  %-28s both %d, A only %d, B only %d, neither %d\n", "items:", both, only_a,
                only_b, neither);
    std::printf("  %-28s %+.4f  [95%% CI %+.4f, %+.4f]\n", "accuracy difference:", diff,
                result["paired"]["ci95"][0].get<double>(),
                result["paired"]["ci95"][1].get<double>());
    std::printf("  %-28s p = %.4g (exact, two-sided)\n", "McNemar:", p);
  }
  if (a.Has("result-json")) {
    std::ofstream f(a.Get("result-json"));
    if (!f) {
      std::fprintf(stderr, "bench eval: cannot write %s\n", a.Get("result-json").c_str());
      return 1;
    }
    f << result.dump(2) << "\n";
  }
  return 0;
}

}  // namespace mimo::cli
