// `mimo bench quality --model A --reference B (--text FILE | --dataset FILE.jsonl)`: how far model
// A's next-token distributions are from B's, in the units of llama.cpp's `llama-perplexity
// --kl-divergence`, so the figures sit in one table with its quantizations.
//  --text: llama-perplexity's protocol. The text (B's tokenizer.json; special-token strings read
//    as plain text, as it does, unless --parse-special) is cut into chunks of --ctx tokens, each
//    chunk runs through both models as one prompt, and the second half of every chunk is scored.
//  --dataset: lines {"prompt": TEXT, "completion": TEXT} (special tokens parsed): each line runs
//    as one sequence and only the completion's tokens are scored: what a chat model was trained
//    to predict, where a model trained on answers only has meaningless distributions over the
//    prompt (scripts/nano/quality_text.py writes the default model's).
// Per scored position: KL(P_B || P_A) in nats, whether the argmaxes agree, and both models'
// negative log-likelihood of the next token. Prints the mean KLD with its standard error and 95%
// interval, its median / p99 / max, the top-1 agreement with a 95% interval, and both
// perplexities; --json writes them as one object.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/model_loading.h"
#include <nlohmann/json.hpp>
#include "tokenizer/bpe.h"

namespace mimo::cli {
namespace {

// Every row's logits of one sequence run as a single prompt: [ids.size(), vocab].
bool PrefillLogits(const Args& a, LoadedModel& lm, const std::vector<int32_t>& ids,
                   std::vector<float>* logits) {
  const int n = static_cast<int>(ids.size());
  auto kv = MakeKvCacheOrReport("bench quality", a, *lm.model, 1, n, n);
  if (!kv) return false;
  logits->assign(static_cast<size_t>(n) * lm.model->config().vocab_size, 0.0f);
  StepBatch b;
  b.chunks.push_back({0, 0, n, 0});
  b.num_tokens = n;
  ForwardOutputs out;
  out.logits = logits->data();
  Status st = kv->StartSequence(0);
  StatusOr<KvStepPlan> plan = st.ok() ? kv->PlanStep(b) : StatusOr<KvStepPlan>(st);
  if (!plan.ok()) {
    std::fprintf(stderr, "mimo bench quality: error: %s\n", plan.status().message().c_str());
    return false;
  }
  RunForward(*lm.model, lm.ctx, *kv, *plan, ids.data(), out);
  return true;
}

// log-softmax of one row, in double.
void LogSoftmax(const float* x, int64_t n, std::vector<double>* out) {
  out->resize(n);
  double mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, static_cast<double>(x[i]));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(x[i] - mx);
  const double lse = mx + std::log(sum);
  for (int64_t i = 0; i < n; ++i) (*out)[i] = x[i] - lse;
}

int64_t Argmax(const float* x, int64_t n) { return std::max_element(x, x + n) - x; }

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * (v.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - lo) * (v[hi] - v[lo]);
}

// One sequence run through both models, with the positions [from, to) scored (position i
// predicts ids[i + 1]).
struct Scored {
  std::vector<int32_t> ids;
  int from = 0, to = 0;
};

bool ReadDataset(const std::string& path, const Tokenizer& tok, std::vector<Scored>* out,
                 std::string* err) {
  std::ifstream in(path);
  if (!in) {
    *err = "cannot read --dataset '" + path + "'";
    return false;
  }
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("prompt") || !j["prompt"].is_string() ||
        !j.contains("completion") || !j["completion"].is_string()) {
      *err = path + " line " + std::to_string(number) +
             ": expected {\"prompt\": string, \"completion\": string}";
      return false;
    }
    Scored s;
    s.ids = tok.Encode(j["prompt"].get<std::string>(), /*parse_special=*/true);
    const std::vector<int32_t> c = tok.Encode(j["completion"].get<std::string>(), true);
    if (s.ids.empty() || c.empty()) continue;
    s.from = static_cast<int>(s.ids.size()) - 1;
    s.ids.insert(s.ids.end(), c.begin(), c.end());
    s.to = static_cast<int>(s.ids.size()) - 1;
    out->push_back(std::move(s));
  }
  return true;
}

}  // namespace

int RunBenchQuality(int argc, char** argv) {
  Args a;
  std::string err;
  std::vector<std::string> keys = {"model",   "reference", "text", "dataset", "ctx",
                                   "chunks",  "threads",   "json"};
  for (auto& k : KvCacheKeys()) keys.push_back(k);
  std::vector<std::string> flags = KvCacheFlags();
  flags.push_back("parse-special");
  if (!a.Parse(argc, argv, keys, flags, &err) || !a.Has("model") || !a.Has("reference") ||
      a.Has("text") == a.Has("dataset")) {
    std::fprintf(stderr,
                 "mimo bench quality: %s\nusage: mimo bench quality --model A --reference B "
                 "(--text FILE [--ctx 512] [--chunks N] [--parse-special] | --dataset "
                 "FILE.jsonl) [--threads N] [--json OUT]\n",
                 err.empty() ? "--model, --reference and one of --text / --dataset are required"
                             : err.c_str());
    return 2;
  }
  auto tok = Tokenizer::FromFile(a.Get("reference") + "/tokenizer.json");
  if (!tok.ok()) {
    std::fprintf(stderr, "mimo bench quality: error: %s\n", tok.status().message().c_str());
    return 1;
  }
  std::vector<Scored> seqs;
  size_t text_tokens = 0;
  const int ctx = static_cast<int>(a.GetInt("ctx", 512));
  if (a.Has("text")) {
    if (ctx < 4) {
      std::fprintf(stderr, "mimo bench quality: --ctx must be >= 4, got %d\n", ctx);
      return 2;
    }
    std::string text;
    if (!ReadFileToString(a.Get("text"), &text)) {
      std::fprintf(stderr, "mimo bench quality: cannot read --text '%s'\n", a.Get("text").c_str());
      return 1;
    }
    const std::vector<int32_t> ids = (*tok)->Encode(text, a.Has("parse-special"));
    text_tokens = ids.size();
    int chunks = static_cast<int>(ids.size() / ctx);
    if (a.Has("chunks")) chunks = std::min<int>(chunks, static_cast<int>(a.GetInt("chunks", 0)));
    if (chunks < 1) {
      std::fprintf(stderr,
                   "mimo bench quality: the text has %zu tokens, fewer than one chunk of --ctx "
                   "%d\n",
                   ids.size(), ctx);
      return 2;
    }
    // llama-perplexity's split: positions ctx/2 .. ctx-2 predict tokens ctx/2+1 .. ctx-1.
    for (int c = 0; c < chunks; ++c) {
      Scored s;
      s.ids.assign(ids.begin() + static_cast<int64_t>(c) * ctx,
                   ids.begin() + static_cast<int64_t>(c + 1) * ctx);
      s.from = ctx / 2;
      s.to = ctx - 1;
      seqs.push_back(std::move(s));
    }
  } else if (!ReadDataset(a.Get("dataset"), **tok, &seqs, &err)) {
    std::fprintf(stderr, "mimo bench quality: %s\n", err.c_str());
    return 2;
  } else if (seqs.empty()) {
    std::fprintf(stderr, "mimo bench quality: --dataset '%s' has no items\n",
                 a.Get("dataset").c_str());
    return 2;
  }
  const int threads = static_cast<int>(a.GetInt("threads", 0));
  LoadedModel ma, mb;
  if (!LoadModelOrReport("bench quality", a.Get("model"), threads, &ma, &a)) return 1;
  // Load-time quantization and --precision apply to the model under test; the reference is exact.
  Args ref_args = a;
  ref_args.Erase("precision");
  ref_args.Erase("prefill-precision");
  ref_args.Erase("experts");
  ref_args.Erase("dense");
  ref_args.Erase("lm-head");
  if (!LoadModelOrReport("bench quality", a.Get("reference"), threads, &mb, &ref_args)) return 1;
  const int64_t V = ma.model->config().vocab_size;
  if (mb.model->config().vocab_size != V) {
    std::fprintf(stderr, "mimo bench quality: vocab_size differs: %lld vs %d\n",
                 static_cast<long long>(V), mb.model->config().vocab_size);
    return 2;
  }
  std::vector<double> kld;
  int64_t same_top1 = 0;
  double nll_a = 0, nll_b = 0;
  std::vector<float> la, lb;
  std::vector<double> pa, pb;
  for (size_t c = 0; c < seqs.size(); ++c) {
    const Scored& sq = seqs[c];
    if (!PrefillLogits(a, ma, sq.ids, &la) || !PrefillLogits(a, mb, sq.ids, &lb)) return 1;
    for (int i = sq.from; i < sq.to; ++i) {
      const float* ra = la.data() + static_cast<int64_t>(i) * V;
      const float* rb = lb.data() + static_cast<int64_t>(i) * V;
      LogSoftmax(ra, V, &pa);
      LogSoftmax(rb, V, &pb);
      double k = 0;
      for (int64_t j = 0; j < V; ++j) k += std::exp(pb[j]) * (pb[j] - pa[j]);
      kld.push_back(std::max(0.0, k));
      same_top1 += Argmax(ra, V) == Argmax(rb, V);
      nll_a -= pa[sq.ids[i + 1]];
      nll_b -= pb[sq.ids[i + 1]];
    }
    if (!kld.empty()) {
      double sum = 0;
      for (double v : kld) sum += v;
      std::fprintf(stderr, "\rmimo bench quality: %zu / %zu sequences, mean KLD so far %.6f", c + 1,
                   seqs.size(), sum / kld.size());
    }
  }
  std::fprintf(stderr, "\n");
  if (kld.empty()) {
    std::fprintf(stderr, "mimo bench quality: no position was scored\n");
    return 2;
  }
  const double n = static_cast<double>(kld.size());
  double mean = 0, var = 0;
  for (double v : kld) mean += v;
  mean /= n;
  for (double v : kld) var += (v - mean) * (v - mean);
  const double se = n > 1 ? std::sqrt(var / (n - 1) / n) : 0;
  const double agree = same_top1 / n;
  const double agree_se = std::sqrt(agree * (1 - agree) / n);
  const double ppl_a = std::exp(nll_a / n), ppl_b = std::exp(nll_b / n);
  std::printf("model      %s\nreference  %s\n", a.Get("model").c_str(), a.Get("reference").c_str());
  if (a.Has("text")) {
    std::printf("text       %s: %zu tokens, %zu chunks of %d, %lld scored positions\n",
                a.Get("text").c_str(), text_tokens, seqs.size(), ctx,
                static_cast<long long>(kld.size()));
  } else {
    std::printf("dataset    %s: %zu sequences, %lld scored completion positions\n",
                a.Get("dataset").c_str(), seqs.size(), static_cast<long long>(kld.size()));
  }
  std::printf("mean KLD   %.6f +- %.6f (standard error; 95%% interval %.6f .. %.6f)\n", mean, se,
              mean - 1.96 * se, mean + 1.96 * se);
  std::printf("KLD median %.6f, p99 %.6f, max %.6f\n", Quantile(kld, 0.5), Quantile(kld, 0.99),
              Quantile(kld, 1.0));
  std::printf("same top-1 %.3f%% +- %.3f%% (95%% interval)\n", 100 * agree, 196 * agree_se);
  std::printf("PPL        model %.6g, reference %.6g (ln ratio %.6f)\n", ppl_a, ppl_b,
              std::log(ppl_a / ppl_b));
  if (a.Has("json")) {
    FILE* f = std::fopen(a.Get("json").c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "mimo bench quality: cannot write '%s'\n", a.Get("json").c_str());
      return 1;
    }
    std::fprintf(f,
                 "{\"positions\": %lld, \"sequences\": %zu, \"mean_kld\": %.9g, "
                 "\"mean_kld_se\": %.9g, \"median_kld\": %.9g, \"p99_kld\": %.9g, "
                 "\"max_kld\": %.9g, \"same_top1\": %.9g, \"ppl_model\": %.9g, "
                 "\"ppl_reference\": %.9g}\n",
                 static_cast<long long>(kld.size()), seqs.size(), mean, se, Quantile(kld, 0.5),
                 Quantile(kld, 0.99), Quantile(kld, 1.0), agree, ppl_a, ppl_b);
    std::fclose(f);
  }
  return 0;
}

}  // namespace mimo::cli
