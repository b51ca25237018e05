// `mimo grammar-walk`: random walks through structured-output grammars (no model needed): each
// sample takes only tokens the grammar's mask allows, until the grammar ends. Prints one JSON line
// per sample, {"grammar", "seed", "text", "tokens", "terminated", "stuck"} (and with
// --parse-tool-calls the `mimo` tool parser's "content" and "tool_calls"), so that an independent
// validator can check every output (tests/python/test_grammar_walk.py).
// With --sample-model DIR the tokens are instead sampled from that model's logits under the mask
// (temperature --temperature, greedy at 0), each sample a fresh sequence after a 3-token prompt,
// until the grammar ends ("finish": "stop") or --max-tokens ("length"): how a model with
// arbitrary (e.g. random) weights behaves under the grammar, before the engine takes grammars.
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "chat/tool_call_parser.h"
#include "cli/command.h"
#include "cli/decode_session.h"
#include "cli/grammar_setup.h"
#include "cli/model_loading.h"
#include "core/check.h"
#include "grammar/grammar_matcher.h"
#include "grammar/grammar_walker.h"

namespace mimo::cli {
namespace {

int Fail(const std::string& msg) {
  std::fprintf(stderr, "mimo grammar-walk: error: %s\n", msg.c_str());
  return 1;
}

// One completion sampled from the model under the grammar's masks.
WalkResult SampleFromModel(LoadedModel& lm, KvCache& kv, std::shared_ptr<const Grammar> g,
                           uint64_t seed, int max_tokens, double temperature) {
  const int vocab = lm.model->config().vocab_size;
  std::vector<uint32_t> mask(g->vocab().mask_words());
  GrammarMatcher m(g);
  std::mt19937_64 rng(seed);
  WalkResult r;
  const std::vector<int32_t> prompt = {1 % vocab, 2 % vocab, 3 % vocab};
  DecodeSession session(lm, kv, 1);  // a fresh sequence per sample
  Status st = session.Prefill(prompt, static_cast<int>(prompt.size()));
  MIMO_CHECK(st.ok(), "%s", st.message().c_str());
  std::span<float> logits(session.logits(0), vocab);  // [vocab] of the last step
  for (int i = 0; i < max_tokens && !m.IsTerminated(); ++i) {
    m.FillNextTokenMask(mask.data(), {});
    MaskLogits(mask.data(), logits.data(), vocab);
    int32_t pick = -1;
    if (temperature <= 0) {
      pick = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    } else {
      const float top = *std::max_element(logits.begin(), logits.end());
      double total = 0;
      std::vector<double> p(vocab);
      for (int t = 0; t < vocab; ++t) total += p[t] = std::exp((logits[t] - top) / temperature);
      double u = std::uniform_real_distribution<double>(0, total)(rng);
      for (int t = 0; t < vocab && pick < 0; ++t)
        if ((u -= p[t]) <= 0 && p[t] > 0) pick = t;
      if (pick < 0) pick = static_cast<int32_t>(std::max_element(p.begin(), p.end()) - p.begin());
    }
    if (std::isinf(logits[pick]) || !m.AcceptToken(pick)) {
      r.stuck = true;
      break;
    }
    r.tokens.push_back(pick);
    r.text.append(g->vocab().bytes(pick));
    st = session.Decode(std::span<const int32_t>(&pick, 1));
    MIMO_CHECK(st.ok(), "%s", st.message().c_str());
  }
  r.terminated = m.IsTerminated();
  return r;
}

int GrammarWalk(int argc, char** argv) {
  Args a;
  std::string err;
  std::vector<std::string> keys = GrammarKeys();
  for (const char* k : {"model", "tokenizer", "samples", "seed", "max-tokens", "steer-after",
                        "sample-model", "temperature", "threads"})
    keys.push_back(k);
  for (auto& k : KvCacheKeys()) keys.push_back(k);
  std::vector<std::string> flags = GrammarFlags();
  flags.push_back("parse-tool-calls");
  if (!a.Parse(argc, argv, keys, flags, &err)) return Fail(err);
  if (a.Has("model") == a.Has("tokenizer")) return Fail("give --model DIR or --tokenizer FILE");
  const std::string tok_path =
      a.Has("model") ? a.Get("model") + "/tokenizer.json" : a.Get("tokenizer");
  auto tok = Tokenizer::FromFile(tok_path);
  if (!tok.ok()) return Fail(tok.status().message());
  LoadedModel lm;
  std::unique_ptr<KvCache> kv;
  int32_t mask_vocab = 0;
  const int max_tokens = static_cast<int>(a.GetInt("max-tokens", 4096));
  if (a.Has("sample-model")) {
    if (!LoadModelOrReport("grammar-walk", a.Get("sample-model"),
                           static_cast<int>(a.GetInt("threads", 1)), &lm) ||
        !PrecisionFromArgs("grammar-walk", a, &lm.ctx))
      return 1;
    kv = MakeKvCacheOrReport("grammar-walk", a, *lm.model, 1, max_tokens + 8, 8);
    if (!kv) return 1;
    mask_vocab = lm.model->config().vocab_size;  // masks cover exactly the model's rows
  }
  auto vocab = TokenVocabulary::FromTokenizer(**tok, mask_vocab);
  auto requests = GrammarRequestsFromArgs(a);
  if (!requests.ok()) return Fail(requests.status().message());
  ToolSchema tool_schema;
  if (a.Has("parse-tool-calls")) {
    std::string tools_text;
    if (!a.Has("tools") || !ReadFileToString(a.Get("tools"), &tools_text))
      return Fail("--parse-tool-calls needs a readable --tools file");
    auto s = ToolSchema::FromJsonText(tools_text);
    if (!s.ok()) return Fail(s.status().message());
    tool_schema = std::move(*s);
  }
  const std::vector<int32_t> eos = WalkEosIds(**tok);
  const int samples = static_cast<int>(a.GetInt("samples", 1));
  const uint64_t seed = static_cast<uint64_t>(a.GetInt("seed", 1));
  WalkOptions o;
  o.max_tokens = static_cast<int>(a.GetInt("max-tokens", o.max_tokens));
  o.steer_after = static_cast<int>(a.GetInt("steer-after", o.steer_after));
  for (const GrammarRequest& req : *requests) {
    auto grammar = CompileGrammar(req, a, vocab);
    if (!grammar.ok()) return Fail(req.name + ": " + grammar.status().message());
    for (int i = 0; i < samples; ++i) {
      o.seed = seed + i;
      WalkResult r = lm.model ? SampleFromModel(lm, *kv, *grammar, o.seed, max_tokens,
                                                a.GetDouble("temperature", 1.0))
                              : GrammarWalker::Walk(*grammar, o, eos);
      nlohmann::json line;
      line["grammar"] = req.name;
      line["seed"] = o.seed;
      try {
        (void)nlohmann::json(r.text).dump();  // throws on invalid UTF-8
        line["text"] = r.text;
      } catch (const nlohmann::json::exception&) {
        line["text"] = nullptr;
        line["invalid_utf8"] = true;
      }
      line["tokens"] = r.tokens.size();
      line["terminated"] = r.terminated;
      if (lm.model) line["finish"] = r.terminated ? "stop" : "length";
      line["stuck"] = r.stuck;
      if (a.Has("parse-tool-calls")) {
        ToolParseResult p = MimoToolCallParser::Parse(tool_schema, r.text, {.id_seed = o.seed});
        line["content"] = p.content;
        line["tool_calls"] = nlohmann::json::array();
        for (const ToolCall& c : p.tool_calls)
          line["tool_calls"].push_back({{"name", c.name}, {"arguments", c.arguments}});
      }
      std::printf("%s\n", line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    }
  }
  return 0;
}

}  // namespace

MIMO_CLI_COMMAND("grammar-walk",
                 "(--model DIR | --tokenizer FILE) (--json-schema F[,F2...] | --json-object | "
                 "--tools F [--function NAME] [--parallel] [--parse-tool-calls]) [--samples N] "
                 "[--seed S] [--whitespace none|space|any] [--sample-model DIR [--temperature T]] "
                 "(random walks, or model samples, under structured-output grammars, one JSON "
                 "line each)",
                 GrammarWalk);

}  // namespace mimo::cli
