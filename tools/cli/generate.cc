// `mimo generate`: requests through the serving engine (src/engine), never a decode loop of its
// own. Single form: one prompt (--ids or --prompt), greedy or sampled; prints the output (ids, or
// text with --prompt) and tok/s, or one JSON object with --json. Batch form: --requests IN.jsonl
// --out OUT.jsonl runs every request of the file concurrently (continuous batching) and writes
// one line per request (per sample when n > 1), in input order; a summary goes to stderr.
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/engine_setup.h"
#include "cli/weights_memory.h"
#include "engine/request_stream.h"
#include "grammar/grammar_cache.h"
#include "server/structured_output.h"

namespace mimo::cli {
namespace {

using Json = nlohmann::ordered_json;

// All events of one sample, gathered.
struct SampleResult {
  std::vector<int32_t> ids;
  std::vector<SampledToken> logprobs;
  std::string text;
  RequestOutput last;  // the final event (counts, timings, reason)
};

// Collects the events of every submission (engine thread) for reading after RunUntilIdle.
class Collector {
 public:
  OutputSink Sink() {
    return [this](RequestOutput&& o) {
      SampleResult& r = results_[{o.request_id, o.index}];
      r.ids.insert(r.ids.end(), o.token_ids.begin(), o.token_ids.end());
      for (auto& lp : o.logprobs) r.logprobs.push_back(std::move(lp));
      r.text += o.text;
      r.last = std::move(o);
    };
  }
  const SampleResult* Get(uint64_t id, int index) const {
    auto it = results_.find({id, index});
    return it == results_.end() ? nullptr : &it->second;
  }

 private:
  std::map<std::pair<uint64_t, int>, SampleResult> results_;
};

// {"num_drafts", "num_draft_tokens", "num_accepted_tokens", "mean_accept_length",
//  "acceptance_per_position"}: mean accept length counts the bonus token (tokens per verify step).
Json SpecJson(const EngineStats& s) {
  Json per = Json::array();
  for (int64_t a : s.spec_accepted_per_pos) {
    per.push_back(s.spec_num_drafts > 0 ? static_cast<double>(a) / s.spec_num_drafts : 0.0);
  }
  return {{"num_drafts", s.spec_num_drafts},
          {"num_draft_tokens", s.spec_num_draft_tokens},
          {"num_accepted_tokens", s.spec_num_accepted_tokens},
          {"mean_accept_length",
           s.spec_num_drafts > 0 ? 1.0 + static_cast<double>(s.spec_num_accepted_tokens) / s.spec_num_drafts
                                 : 0.0},
          {"acceptance_per_position", per}};
}

double Ms(double a, double b) { return b > a && a > 0 ? (b - a) * 1e3 : 0.0; }

// Structured outputs for the CLI (--json-schema FILE, or a line's "json_schema"): one grammar
// cache over the model's vocabulary, made on first use.
class SchemaConstraints {
 public:
  SchemaConstraints(const Tokenizer* tok, int vocab, int max_string_length)
      : tok_(tok), vocab_(vocab) {
    opts_.max_string_length = max_string_length;
  }
  bool Make(const std::string& schema, ConstraintFactory* out, std::string* err) {
    if (!tok_) {
      *err = "a JSON schema needs the model's tokenizer.json";
      return false;
    }
    if (!cache_) cache_ = std::make_unique<GrammarCache>(TokenVocabulary::FromTokenizer(*tok_, vocab_));
    auto g = cache_->JsonSchema(schema, opts_);
    if (!g.ok()) {
      *err = g.status().message();
      return false;
    }
    StructuredOutput so;
    so.grammar = std::move(g).value();
    *out = MakeConstraintFactory(std::move(so));
    return true;
  }

 private:
  const Tokenizer* tok_;
  int vocab_;
  GrammarOptions opts_;
  std::unique_ptr<GrammarCache> cache_;
};

// One request line -> GenerationRequest. Defaults follow the single form: greedy, 16 tokens.
bool ParseRequestLine(const Json& j, const Tokenizer* tok, SchemaConstraints* schemas,
                      GenerationRequest* g, std::string* err) {
  if (!j.is_object()) {
    *err = "not a JSON object";
    return false;
  }
  auto bad = [&](const char* field, const char* want) {
    *err = std::string("field '") + field + "' must be " + want;
    return false;
  };
  auto number = [&](const char* field, float* out) {
    if (!j.contains(field) || j[field].is_null()) return true;
    if (!j[field].is_number()) return bad(field, "a number");
    *out = j[field].get<float>();
    return true;
  };
  auto integer = [&](const char* field, int* out) {
    if (!j.contains(field) || j[field].is_null()) return true;
    if (!j[field].is_number_integer()) return bad(field, "an integer");
    *out = j[field].get<int>();
    return true;
  };
  if (j.contains("prompt_ids") == j.contains("prompt")) {
    *err = "exactly one of 'prompt_ids' or 'prompt' is needed";
    return false;
  }
  if (j.contains("prompt_ids")) {
    if (!j["prompt_ids"].is_array()) return bad("prompt_ids", "an array of token ids");
    for (const Json& x : j["prompt_ids"]) {
      if (!x.is_number_integer()) return bad("prompt_ids", "an array of token ids");
      g->prompt_ids.push_back(x.get<int32_t>());
    }
  } else {
    if (!j["prompt"].is_string()) return bad("prompt", "a string");
    if (!tok) {
      *err = "'prompt' needs the model's tokenizer.json";
      return false;
    }
    g->prompt_ids = tok->Encode(j["prompt"].get<std::string>());
  }
  SamplingParams& s = g->sampling;
  s.temperature = 0.0f;
  g->stop.max_tokens = 16;
  if (!number("temperature", &s.temperature) || !number("top_p", &s.top_p) ||
      !integer("top_k", &s.top_k) || !number("min_p", &s.min_p) ||
      !number("presence_penalty", &s.presence_penalty) ||
      !number("frequency_penalty", &s.frequency_penalty) ||
      !number("repetition_penalty", &s.repetition_penalty) ||
      !integer("max_tokens", &g->stop.max_tokens) ||
      !integer("min_tokens", &g->stop.min_tokens) || !integer("n", &g->n) ||
      !integer("logprobs", &s.logprobs)) {
    return false;
  }
  if (j.contains("seed") && !j["seed"].is_null()) {
    if (!j["seed"].is_number_integer()) return bad("seed", "an integer");
    s.seed = j["seed"].get<uint64_t>();
  }
  if (j.contains("logit_bias") && !j["logit_bias"].is_null()) {
    if (!j["logit_bias"].is_object()) return bad("logit_bias", "an object {token id: bias}");
    for (auto it = j["logit_bias"].begin(); it != j["logit_bias"].end(); ++it) {
      char* end = nullptr;
      const long id = std::strtol(it.key().c_str(), &end, 10);
      if (it.key().empty() || *end != '\0' || !it.value().is_number()) {
        return bad("logit_bias", "an object {token id: bias}");
      }
      s.logit_bias.push_back({static_cast<int32_t>(id), it.value().get<float>()});
    }
  }
  if (j.contains("stop") && !j["stop"].is_null()) {
    if (j["stop"].is_string()) {
      g->stop.stop.push_back(j["stop"].get<std::string>());
    } else if (j["stop"].is_array()) {
      for (const Json& x : j["stop"]) {
        if (!x.is_string()) return bad("stop", "a string or an array of strings");
        g->stop.stop.push_back(x.get<std::string>());
      }
    } else {
      return bad("stop", "a string or an array of strings");
    }
  }
  if (j.contains("stop_token_ids") && !j["stop_token_ids"].is_null()) {
    if (!j["stop_token_ids"].is_array()) return bad("stop_token_ids", "an array of token ids");
    for (const Json& x : j["stop_token_ids"]) {
      if (!x.is_number_integer()) return bad("stop_token_ids", "an array of token ids");
      g->stop.stop_token_ids.push_back(x.get<int32_t>());
    }
  }
  if (j.contains("ignore_eos") && !j["ignore_eos"].is_null()) {
    if (!j["ignore_eos"].is_boolean()) return bad("ignore_eos", "true or false");
    g->stop.ignore_eos = j["ignore_eos"].get<bool>();
  }
  if (j.contains("json_schema") && !j["json_schema"].is_null()) {
    if (!j["json_schema"].is_object()) return bad("json_schema", "a JSON schema object");
    if (!schemas->Make(j["json_schema"].dump(), &g->constraint, err)) {
      *err = "json_schema: " + *err;
      return false;
    }
  }
  return true;
}

Json LogprobsJson(const std::vector<SampledToken>& lps) {
  Json a = Json::array();
  for (const SampledToken& t : lps) {
    Json top = Json::array();
    for (const auto& [id, lp] : t.top) top.push_back({id, lp});
    a.push_back({{"id", t.id}, {"logprob", t.logprob}, {"top", top}});
  }
  return a;
}

int RunBatch(const Args& a) {
  if (!a.Has("out")) {
    std::fprintf(stderr, "mimo generate: --requests needs --out FILE\n");
    return 2;
  }
  std::string text;
  if (!ReadFileToString(a.Get("requests"), &text)) {
    std::fprintf(stderr, "mimo generate: cannot read '%s'\n", a.Get("requests").c_str());
    return 2;
  }
  EngineRuntime rt;
  if (!MakeEngineOrReport("generate", a, false, 16, &rt)) return 1;
  if (!PlaceWeightsOrReport("generate", a, rt, false)) return 1;
  struct Line {
    int number;
    Json id;
    std::string error;
    uint64_t request_id = 0;
    int n = 1;
    bool logprobs = false;
  };
  std::vector<Line> lines;
  Collector col;
  SchemaConstraints schemas(rt.tok.get(), rt.lm.model->config().vocab_size,
                            static_cast<int>(a.GetInt("grammar-max-string-length", -1)));
  std::istringstream in(text);
  std::string row;
  for (int number = 1; std::getline(in, row); ++number) {
    if (row.find_first_not_of(" \t\r") == std::string::npos) continue;
    Line l{number, number, "", 0, 1, false};
    Json j = Json::parse(row, nullptr, false);
    GenerationRequest g;
    std::string err;
    if (j.is_discarded()) {
      l.error = "not valid JSON";
    } else {
      if (j.is_object() && j.contains("id")) l.id = j["id"];
      if (!ParseRequestLine(j, rt.tok.get(), &schemas, &g, &err)) l.error = err;
    }
    if (l.error.empty()) {
      l.n = g.n;
      l.logprobs = g.sampling.logprobs >= 0;
      auto id = rt.engine->Submit(std::move(g), col.Sink());
      if (id.ok()) {
        l.request_id = *id;
      } else {
        l.error = id.status().message();
      }
    }
    if (!l.error.empty()) {
      std::fprintf(stderr, "mimo generate: %s line %d: %s\n", a.Get("requests").c_str(), number,
                   l.error.c_str());
    }
    lines.push_back(std::move(l));
  }
  const double t0 = NowSeconds();
  rt.engine->RunUntilIdle();
  const double secs = NowSeconds() - t0;
  std::ofstream out(a.Get("out"), std::ios::binary);
  if (!out) {
    std::fprintf(stderr, "mimo generate: cannot write '%s'\n", a.Get("out").c_str());
    return 1;
  }
  int64_t prompt_tokens = 0, gen_tokens = 0;
  int failed = 0;
  for (const Line& l : lines) {
    if (!l.error.empty()) {
      ++failed;
      out << Json{{"id", l.id}, {"line", l.number}, {"error", l.error}}.dump() << "\n";
      continue;
    }
    for (int i = 0; i < l.n; ++i) {
      const SampleResult* r = col.Get(l.request_id, i);
      MIMO_CHECK(r != nullptr && r->last.finished, "request on line %d did not finish", l.number);
      Json o = {{"id", l.id}};
      if (l.n > 1) o["index"] = i;
      o["output_ids"] = r->ids;
      if (rt.tok) o["text"] = r->text;
      o["finish_reason"] = FinishReasonName(r->last.finish_reason);
      if (!r->last.error.empty()) o["error"] = r->last.error;
      o["num_prompt_tokens"] = r->last.num_prompt_tokens;
      o["num_cached_tokens"] = r->last.num_cached_tokens;
      o["ttft_ms"] = Ms(r->last.arrival_time, r->last.first_token_time);
      o["latency_ms"] = Ms(r->last.arrival_time, r->last.time);
      if (l.logprobs) o["logprobs"] = LogprobsJson(r->logprobs);
      out << o.dump() << "\n";
      if (i == 0) prompt_tokens += r->last.num_prompt_tokens;
      gen_tokens += static_cast<int64_t>(r->ids.size());
    }
  }
  const EngineStats st = rt.engine->Stats();
  std::fprintf(stderr,
               "%zu requests (%d failed): %lld prompt + %lld generated tokens in %.2f s: %.1f "
               "generated tok/s, %.1f total tok/s; %lld steps, %lld preemptions, %lld of %lld "
               "prompt tokens from the prefix cache\n",
               lines.size(), failed, static_cast<long long>(prompt_tokens),
               static_cast<long long>(gen_tokens), secs, gen_tokens / std::max(secs, 1e-9),
               (prompt_tokens + gen_tokens) / std::max(secs, 1e-9),
               static_cast<long long>(st.num_steps), static_cast<long long>(st.num_preemptions),
               static_cast<long long>(st.prefix_cache_hits),
               static_cast<long long>(st.prefix_cache_queries));
  if (st.spec_num_drafts > 0) {
    std::fprintf(stderr,
                 "speculative: %lld verify steps with drafts, %lld of %lld draft tokens "
                 "accepted\n",
                 static_cast<long long>(st.spec_num_drafts),
                 static_cast<long long>(st.spec_num_accepted_tokens),
                 static_cast<long long>(st.spec_num_draft_tokens));
  }
  return failed ? 1 : 0;
}

int RunGenerate(int argc, char** argv) {
  Args a;
  std::string err;
  std::vector<std::string> keys = {"model",
                                   "ids",
                                   "prompt",
                                   "max-tokens",
                                   "temperature",
                                   "top-k",
                                   "top-p",
                                   "min-p",
                                   "seed",
                                   "requests",
                                   "out",
                                   "json-schema",
                                   "grammar-max-string-length",
                                   "weights-memory"};
  for (auto& k : EngineKeys()) keys.push_back(k);
  std::vector<std::string> flags = EngineFlags();
  flags.push_back("json");
  flags.push_back("ignore-eos");
  if (!a.Parse(argc, argv, keys, flags, &err) || !a.Has("model") ||
      (a.Has("requests") ? (a.Has("ids") || a.Has("prompt")) : (a.Has("ids") == a.Has("prompt")))) {
    std::fprintf(stderr, "mimo generate: %s\n",
                 err.empty() ? "need --model and one of --ids, --prompt or --requests" : err.c_str());
    return 2;
  }
  if (a.Has("requests")) return RunBatch(a);
  std::vector<int> ids;
  if (a.Has("ids") && !ParseIdList(a.Get("ids"), &ids, &err)) {
    std::fprintf(stderr, "mimo generate: %s\n", err.c_str());
    return 2;
  }
  EngineRuntime rt;
  if (!MakeEngineOrReport("generate", a, a.Has("prompt") || a.Has("json-schema"), 1, &rt)) return 1;
  if (!PlaceWeightsOrReport("generate", a, rt, false)) return 1;
  GenerationRequest g;
  if (a.Has("prompt")) {
    g.prompt_ids = rt.tok->Encode(a.Get("prompt"));
  } else {
    g.prompt_ids.assign(ids.begin(), ids.end());
  }
  g.sampling.temperature = static_cast<float>(a.GetDouble("temperature", 0.0));
  g.sampling.top_k = static_cast<int>(a.GetInt("top-k", 0));
  g.sampling.top_p = static_cast<float>(a.GetDouble("top-p", 1.0));
  g.sampling.min_p = static_cast<float>(a.GetDouble("min-p", 0.0));
  g.sampling.seed = static_cast<uint64_t>(a.GetInt("seed", 0));
  g.stop.max_tokens = static_cast<int>(a.GetInt("max-tokens", 16));
  g.stop.ignore_eos = a.Has("ignore-eos");
  if (a.Has("json-schema")) {
    std::string schema;
    if (!ReadFileToString(a.Get("json-schema"), &schema)) {
      std::fprintf(stderr, "mimo generate: cannot read '%s'\n", a.Get("json-schema").c_str());
      return 2;
    }
    SchemaConstraints sc(rt.tok.get(), rt.lm.model->config().vocab_size,
                         static_cast<int>(a.GetInt("grammar-max-string-length", -1)));
    if (!sc.Make(schema, &g.constraint, &err)) {
      std::fprintf(stderr, "mimo generate: error: --json-schema: %s\n", err.c_str());
      return 2;
    }
  }
  RequestStream stream;
  auto id = rt.engine->Submit(std::move(g), stream.Sink());
  if (!id.ok()) {
    std::fprintf(stderr, "mimo generate: error: %s\n", id.status().message().c_str());
    return 2;
  }
  rt.engine->RunUntilIdle();
  std::vector<int32_t> output;
  std::string text;
  RequestOutput ev, last;
  while (stream.Next(&ev, 0.0)) {
    output.insert(output.end(), ev.token_ids.begin(), ev.token_ids.end());
    text += ev.text;
    last = std::move(ev);
  }
  const int n_prompt = last.num_prompt_tokens;
  const double prefill_s = last.first_token_time - last.first_scheduled_time;
  const double decode_s = last.time - last.first_token_time;
  const double prefill_tps = n_prompt / std::max(prefill_s, 1e-9);
  const double decode_tps = output.size() > 1 ? (output.size() - 1) / std::max(decode_s, 1e-9) : 0.0;
  std::string list;
  for (size_t i = 0; i < output.size(); ++i) list += (i ? "," : "") + std::to_string(output[i]);
  if (a.Has("json")) {
    Json j = {{"output_ids", output},
              {"num_prompt_tokens", n_prompt},
              {"finish_reason", FinishReasonName(last.finish_reason)},
              {"prefill_tokens_per_s", prefill_tps},
              {"decode_tokens_per_s", decode_tps}};
    if (a.Has("speculative")) j["spec"] = SpecJson(rt.engine->Stats());
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("%s\n", a.Has("prompt") ? rt.tok->Decode(output).c_str() : list.c_str());
  const double bytes = rt.lm.model->ActiveWeightBytesPerToken();
  std::fprintf(stderr,
               "prompt %d tokens: %.1f tok/s prefill; %zu generated: %.1f tok/s decode "
               "(%.2f GB/s of active weights, %.1f MB/token)\n",
               n_prompt, prefill_tps, output.size(), decode_tps, decode_tps * bytes / 1e9,
               bytes / 1e6);
  return 0;
}

}  // namespace
MIMO_CLI_COMMAND("generate",
                 "--model DIR (--ids 1,2,3 | --prompt TEXT | --requests IN.jsonl --out OUT.jsonl) "
                 "[--max-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S] "
                 "[--json-schema FILE] [--max-num-seqs N] [--max-num-batched-tokens N] "
                 "[--weights-memory auto|copy|mmap] [--json]",
                 RunGenerate);
}  // namespace mimo::cli
