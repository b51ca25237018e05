// `mimo bench grammar` (also `mimo bench-grammar`): the cost of structured outputs against the
// model's decode time, measured in one run. Per grammar (each schema of --schemas, json_object,
// and the tools of --schemas/tools/tools.json): compile time, then random walks (GrammarWalker)
// replayed on a fresh matcher, timing FillNextTokenMask and AcceptToken for every token with the
// thread's CPU clock. Then the model's greedy decode time per token (prefill 16, decode N tokens
// of MimoV2Model::Forward over the paged KV cache, like `bench e2e`), and each grammar's mask
// time as a percentage of it. Last, requests that run into max_tokens (--budget-tokens): the
// server's constraint per token while it steers the output to close in time. Results are recorded
// in docs/PERFORMANCE.md.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli/command.h"
#include "cli/decode_session.h"
#include "cli/grammar_setup.h"
#include "cli/model_loading.h"
#include "engine/sampler.h"
#include "grammar/grammar_matcher.h"
#include "grammar/grammar_walker.h"
#include "server/structured_output.h"

namespace mimo::cli {
namespace {

double ThreadCpuUs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

double WallMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / v.size();
}

struct GrammarTiming {
  std::string name;
  double cold_ms = 0;      // compile with a fresh vocabulary: no cached string profiles
  double compile_ms = 0;   // compile again: the profiles cached, as in a running server
  double distance_ms = 0;  // of which token distances (TokenDistance)
  int states = 0;
  std::vector<double> mask_us, within_us, accept_us;
};

// Walks the grammar `walks` times and replays each walk on a fresh matcher under the clock.
GrammarTiming TimeGrammar(const std::string& name, std::shared_ptr<const Grammar> g, int walks,
                          const std::vector<int32_t>& eos) {
  GrammarTiming t;
  t.name = name;
  t.compile_ms = g->stats().compile_ms + g->stats().precompute_ms + g->stats().distance_ms;
  t.distance_ms = g->stats().distance_ms;
  t.states = g->stats().num_states;
  std::vector<uint32_t> mask(g->vocab().mask_words());
  for (int w = 0; w < walks; ++w) {
    WalkOptions o;
    o.seed = 1 + w;
    WalkResult r = GrammarWalker::Walk(g, o, eos);
    GrammarMatcher m(g);
    for (int32_t id : r.tokens) {
      const double t0 = ThreadCpuUs();
      m.FillNextTokenMask(mask.data(), eos);
      const double t1 = ThreadCpuUs();
      // As the server asks for it: only tokens after which the output still fits (here far
      // from max_tokens, so the same mask, by token-distance groups).
      m.FillMaskWithin(mask.data(), eos, 1 << 20);
      const double t2 = ThreadCpuUs();
      const bool ok = m.AcceptToken(id);
      const double t3 = ThreadCpuUs();
      if (!ok) std::fprintf(stderr, "bench grammar: %s: replay refused a token\n", name.c_str());
      t.mask_us.push_back(t1 - t0);
      t.within_us.push_back(t2 - t1);
      t.accept_us.push_back(t3 - t2);
    }
  }
  return t;
}

// Requests that run into max_tokens: `requests` outputs of at most `max_tokens` tokens through
// the server's constraint (FillMask with the tokens left, then Accept), each token drawn
// uniformly from the allowed ones (a random-weight model), so strings run to their bounds and
// the steering that closes the output in time does the work. Records the constraint's thread
// CPU time per request and per token, and whether each output ended by itself.
struct BudgetTiming {
  std::vector<double> request_ms, token_us;
  int ended = 0, requests = 0;
};

void TimeBudget(std::shared_ptr<const Grammar> g, int requests, int max_tokens,
                const std::vector<int32_t>& eos, BudgetTiming* t) {
  StructuredOutput so;
  so.grammar = g;
  ConstraintFactory make = MakeConstraintFactory(so);
  std::vector<uint32_t> mask(g->vocab().mask_words());
  std::vector<int32_t> allowed;
  for (int r = 0; r < requests; ++r) {
    std::mt19937_64 rng(77 + r);
    std::unique_ptr<TokenConstraint> c = make();
    double total = 0;
    bool ended = false;
    for (int i = 0; i < max_tokens && !ended; ++i) {
      const double t0 = ThreadCpuUs();
      c->FillMask(mask.data(), eos, max_tokens - i);
      const double t1 = ThreadCpuUs();
      allowed.clear();
      for (int32_t id = 0; id < g->vocab().size(); ++id)
        if ((mask[id >> 5] >> (id & 31)) & 1u) allowed.push_back(id);
      if (allowed.empty()) break;
      const int32_t id = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
      const double t2 = ThreadCpuUs();
      c->Accept(id);
      const double t3 = ThreadCpuUs();
      total += (t1 - t0) + (t3 - t2);
      t->token_us.push_back((t1 - t0) + (t3 - t2));
      ended = c->IsTerminated() || std::find(eos.begin(), eos.end(), id) != eos.end();
    }
    t->request_ms.push_back(total / 1e3);
    t->ended += ended;
    ++t->requests;
  }
}

// Greedy decode time per token of the model (ms), as in `bench e2e`.
bool DecodeMsPerToken(const Args& a, int threads, int tokens, double* wall_ms) {
  LoadedModel lm;
  if (!LoadModelOrReport("bench grammar", a.Get("model"), threads, &lm)) return false;
  if (!PrecisionFromArgs("bench grammar", a, &lm.ctx)) return false;
  const int prompt = 16;
  const ModelConfig& cfg = lm.model->config();
  const int warmup = 8;  // untimed decode tokens first: the page faults of the mmap'd experts
  auto kv = MakeKvCacheOrReport("bench grammar", a, *lm.model, 1, prompt + warmup + tokens, prompt);
  if (!kv) return false;
  std::vector<int32_t> ids(prompt);
  for (int i = 0; i < prompt; ++i) ids[i] = (1 + 7919 * i) % cfg.vocab_size;
  DecodeSession session(lm, *kv, 1);
  Status st = session.Prefill(ids, prompt);
  double t0 = WallMs();
  for (int i = 0; i < warmup + tokens && st.ok(); ++i) {
    if (i == warmup) t0 = WallMs();
    st = session.DecodeGreedy();
  }
  *wall_ms = (WallMs() - t0) / tokens;
  if (!st.ok()) std::fprintf(stderr, "mimo bench grammar: error: %s\n", st.message().c_str());
  return st.ok();
}

int Fail(const std::string& msg) {
  std::fprintf(stderr, "mimo bench grammar: error: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int RunBenchGrammar(int argc, char** argv) {
  Args a;
  std::string err;
  std::vector<std::string> keys = {
      "model",         "schemas",    "tokenizer",         "walks",           "threads",
      "decode-tokens", "whitespace", "max-string-length", "budget-requests", "budget-tokens",
      "tools"};
  for (auto& k : KvCacheKeys()) keys.push_back(k);
  if (!a.Parse(argc, argv, keys, KvCacheFlags(), &err)) return Fail(err);
  if (!a.Has("model")) return Fail("need --model DIR");
  const std::string dir = a.Get("model");
  const std::string schemas = a.Get("schemas", "tests/data/schemas");
  std::string tok_path = a.Get("tokenizer", dir + "/tokenizer.json");
  if (!a.Has("tokenizer") && !std::filesystem::exists(tok_path))
    tok_path = "third_party/qwen3/tokenizer.json";  // generated checkpoints have none
  const int walks = static_cast<int>(a.GetInt("walks", 10));
  const int threads = static_cast<int>(a.GetInt("threads", std::thread::hardware_concurrency()));
  const int decode_tokens = static_cast<int>(a.GetInt("decode-tokens", 32));
  const int budget_requests = static_cast<int>(a.GetInt("budget-requests", 2));
  const int budget_tokens = static_cast<int>(a.GetInt("budget-tokens", 64));

  auto tok = Tokenizer::FromFile(tok_path);
  if (!tok.ok()) return Fail(tok.status().message());
  double t0 = WallMs();
  auto vocab = TokenVocabulary::FromTokenizer(**tok);
  const double vocab_ms = WallMs() - t0;
  auto opts = GrammarOptionsFromArgs(a);
  if (!opts.ok()) return Fail(opts.status().message());
  // The built-in string profiles are computed once per vocabulary, at the first grammar.
  t0 = WallMs();
  if (!Grammar::FromJsonSchema(R"({"type": "string"})", vocab, *opts).ok()) return Fail("string");
  const double builtin_ms = WallMs() - t0;
  const std::vector<int32_t> eos = WalkEosIds(**tok);

  // The model first, while the machine's memory holds nothing else of ours.
  double decode_ms = 0;
  if (!DecodeMsPerToken(a, threads, decode_tokens, &decode_ms)) return 1;
  // Each grammar compiled twice: cold (a fresh vocabulary, so its string profiles are built,
  // including the built-in ones) and warm (again on that vocabulary: profiles cached).
  using Make = std::function<StatusOr<std::shared_ptr<const Grammar>>(
      std::shared_ptr<const TokenVocabulary>)>;
  std::vector<std::pair<std::string, Make>> grammars;
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(schemas))
    if (e.path().extension() == ".json") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  for (const std::string& f : files) {
    std::string text;
    if (!ReadFileToString(f, &text)) return Fail("cannot read " + f);
    grammars.emplace_back(std::filesystem::path(f).stem().string(), [text, &opts](auto v) {
      return Grammar::FromJsonSchema(text, v, *opts);
    });
  }
  grammars.emplace_back("json_object", [&opts](auto v) { return Grammar::JsonObject(v, *opts); });
  std::string tools;
  if (ReadFileToString(schemas + "/tools/tools.json", &tools)) {
    grammars.emplace_back("tool_calls", [tools, &opts](auto v) {
      return Grammar::ToolCalls(tools, "", /*parallel=*/true, v, *opts);
    });
  }
  // --tools F[,F2...]: more tool sets (OpenAI `tools` arrays; scripts/bench/agent_tools.py
  // writes the recorded agents'), each a row named after its file.
  for (const std::string& f : SplitList(a.Get("tools", ""))) {
    std::string text;
    if (!ReadFileToString(f, &text)) return Fail("cannot read --tools " + f);
    grammars.emplace_back("tools:" + std::filesystem::path(f).stem().string(),
                          [text, &opts](auto v) {
                            return Grammar::ToolCalls(text, "", /*parallel=*/true, v, *opts);
                          });
  }
  std::vector<GrammarTiming> timings;
  std::vector<BudgetTiming> budgets;
  for (const auto& [name, make] : grammars) {
    auto fresh = TokenVocabulary::FromTokenizer(**tok);
    const double c0 = WallMs();
    auto cold = make(fresh);
    const double cold_ms = WallMs() - c0;
    if (!cold.ok() && name.starts_with("tools:")) {  // a recorded tool set the server refuses too
      std::printf("%s: not compiled (%.1f ms): %s\n", name.c_str(), cold_ms,
                  cold.status().message().c_str());
      continue;
    }
    if (!cold.ok()) return Fail(name + ": " + cold.status().message());
    auto g = make(fresh);
    if (!g.ok()) return Fail(name + ": " + g.status().message());
    timings.push_back(TimeGrammar(name, *g, walks, eos));
    timings.back().cold_ms = cold_ms;
    budgets.emplace_back();
    TimeBudget(*g, budget_requests, budget_tokens, eos, &budgets.back());
  }

  std::printf(
      "vocabulary: %d tokens (%s); trie %d nodes; built in %.1f ms; built-in JSON string "
      "profile %.1f ms (once per vocabulary)\n",
      vocab->size(), tok_path.c_str(), vocab->trie().num_nodes(), vocab_ms, builtin_ms);
  std::printf(
      "mask and accept times: thread CPU time per token, replaying %d random walks per "
      "grammar; cold = compile on a fresh vocabulary (string profiles built), warm = "
      "compile again (profiles cached; a GrammarCache hit costs nothing)\n",
      walks);
  std::printf(
      "decode: %.2f ms/token (%s, %d threads, greedy, %d tokens after a 16-token prompt "
      "and 8 untimed ones)\n",
      decode_ms, dir.c_str(), threads, decode_tokens);
  std::printf("%-20s %8s %8s %8s %7s %7s %10s %9s %9s %9s %11s %9s %10s %8s %8s\n", "grammar",
              "cold ms", "warm ms", "dist ms", "states", "tokens", "mask mean", "p50", "p99", "max",
              "within mean", "p99", "accept", "mean %", "p99 %");
  std::vector<double> all_mask, all_within, all_accept;
  auto row = [&](const char* name, const std::string& cold, const std::string& warm,
                 const std::string& dist, const std::string& states, const std::vector<double>& m,
                 const std::vector<double>& w, const std::vector<double>& a) {
    std::printf(
        "%-20s %8s %8s %8s %7s %7zu %8.1fus %7.1fus %7.1fus %7.1fus %9.1fus %7.1fus %8.1fus "
        "%7.2f%% %7.2f%%\n",
        name, cold.c_str(), warm.c_str(), dist.c_str(), states.c_str(), m.size(), Mean(m),
        Percentile(m, 0.5), Percentile(m, 0.99), Percentile(m, 1.0), Mean(w), Percentile(w, 0.99),
        Mean(a), 100.0 * Mean(m) / (decode_ms * 1e3),
        100.0 * Percentile(m, 0.99) / (decode_ms * 1e3));
  };
  auto ms = [](double v) {
    char b[32];
    std::snprintf(b, sizeof(b), "%.1f", v);
    return std::string(b);
  };
  for (const GrammarTiming& t : timings) {
    all_mask.insert(all_mask.end(), t.mask_us.begin(), t.mask_us.end());
    all_within.insert(all_within.end(), t.within_us.begin(), t.within_us.end());
    all_accept.insert(all_accept.end(), t.accept_us.begin(), t.accept_us.end());
    row(t.name.c_str(), ms(t.cold_ms), ms(t.compile_ms), ms(t.distance_ms),
        std::to_string(t.states), t.mask_us, t.within_us, t.accept_us);
  }
  row("all", "", "", "", "", all_mask, all_within, all_accept);
  std::printf(
      "\nrequests into max_tokens %d (%d per grammar; each token drawn uniformly from the "
      "allowed ones): constraint CPU time (FillMask + Accept) per request and per token, "
      "and the outputs that ended by themselves (valid, before max_tokens)\n",
      budget_tokens, budget_requests);
  std::printf("%-20s %10s %10s %10s %10s %8s\n", "grammar", "req mean", "req max", "tok p50",
              "tok max", "ended");
  std::vector<double> all_req, all_tok;
  int all_ended = 0, all_requests = 0;
  for (size_t i = 0; i < timings.size(); ++i) {
    const BudgetTiming& b = budgets[i];
    all_req.insert(all_req.end(), b.request_ms.begin(), b.request_ms.end());
    all_tok.insert(all_tok.end(), b.token_us.begin(), b.token_us.end());
    all_ended += b.ended;
    all_requests += b.requests;
    std::printf("%-20s %8.1fms %8.1fms %8.1fus %8.1fus %4d/%-3d\n", timings[i].name.c_str(),
                Mean(b.request_ms), Percentile(b.request_ms, 1.0), Percentile(b.token_us, 0.5),
                Percentile(b.token_us, 1.0), b.ended, b.requests);
  }
  std::printf("%-20s %8.1fms %8.1fms %8.1fus %8.1fus %4d/%-3d\n", "all", Mean(all_req),
              Percentile(all_req, 1.0), Percentile(all_tok, 0.5), Percentile(all_tok, 1.0),
              all_ended, all_requests);
  return 0;
}

namespace {
int BenchGrammarCommand(int argc, char** argv) { return RunBenchGrammar(argc, argv); }
}  // namespace

MIMO_CLI_COMMAND("bench-grammar",
                 "--model DIR [--schemas DIR] [--walks 10] [--threads N] [--tokenizer FILE] "
                 "[--budget-requests 2] [--budget-tokens 64] [--tools F[,F2...]] "
                 "(structured-output compile and mask time vs decode time; also `mimo bench "
                 "grammar`)",
                 BenchGrammarCommand);

}  // namespace mimo::cli
