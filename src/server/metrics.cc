// ServerMetrics (see metrics.h).
#include "server/metrics.h"

#include <cmath>

#include "core/status.h"
#include "grammar/grammar_cache.h"

namespace mimo {
namespace {

// vLLM's buckets (seconds).
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                          0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                          20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kItlBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                         0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kLatencyBuckets = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                             5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                             60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

Histogram MakeHistogram(const std::vector<double>& bounds) {
  Histogram h;
  h.bounds = bounds;
  h.counts.assign(bounds.size() + 1, 0);
  return h;
}

std::string Num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return StrFormat("%.17g", v);
}

}  // namespace

void Histogram::Observe(double v) {
  size_t i = 0;
  while (i < bounds.size() && v > bounds[i]) ++i;
  ++counts[i];
  sum += v;
  ++count;
}

ServerMetrics::ServerMetrics(std::string model_name)
    : model_name_(std::move(model_name)),
      ttft_(MakeHistogram(kTtftBuckets)),
      itl_(MakeHistogram(kItlBuckets)),
      e2e_(MakeHistogram(kLatencyBuckets)),
      queue_(MakeHistogram(kLatencyBuckets)) {}

void ServerMetrics::ObserveFirstToken(double s) {
  std::lock_guard<std::mutex> lk(mu_);
  ttft_.Observe(s);
}
void ServerMetrics::ObserveInterToken(double s) {
  std::lock_guard<std::mutex> lk(mu_);
  itl_.Observe(s);
}
void ServerMetrics::ObserveQueueTime(double s) {
  std::lock_guard<std::mutex> lk(mu_);
  queue_.Observe(s);
}

void ServerMetrics::ObserveFinished(const RequestOutput& last) {
  std::lock_guard<std::mutex> lk(mu_);
  if (last.arrival_time > 0 && last.time >= last.arrival_time) {
    e2e_.Observe(last.time - last.arrival_time);
  }
}

namespace {

// The Prometheus text format, every sample labelled with the model's name.
class PromText {
 public:
  explicit PromText(const std::string& model_name) : label_("model_name=\"" + model_name + "\"") {}

  void Head(const char* name, const char* type, const char* help) {
    out_ += StrFormat("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
  }
  void Sample(const char* name, double v, const std::string& extra = "") {
    out_ += StrFormat("%s{%s%s} %s\n", name, label_.c_str(), extra.c_str(), Num(v).c_str());
  }
  void Gauge(const char* name, const char* help, double v) {
    Head(name, "gauge", help);
    Sample(name, v);
  }
  void Counter(const char* name, const char* help, double v) {
    Head(name, "counter", help);
    Sample(name, v);
  }
  void Histo(const char* name, const char* help, const Histogram& h) {
    Head(name, "histogram", help);
    uint64_t cum = 0;
    const std::string bucket = std::string(name) + "_bucket";
    for (size_t i = 0; i <= h.bounds.size(); ++i) {
      cum += h.counts[i];
      const double le = i < h.bounds.size() ? h.bounds[i] : INFINITY;
      Sample(bucket.c_str(), static_cast<double>(cum), ",le=\"" + Num(le) + "\"");
    }
    Sample((std::string(name) + "_sum").c_str(), h.sum);
    Sample((std::string(name) + "_count").c_str(), static_cast<double>(h.count));
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string label_;
  std::string out_;
};

// The scheduler, the KV cache and the token counts.
void EngineMetrics(const EngineStats& e, PromText& p) {
  p.Gauge("mimo:num_requests_running", "Number of requests in model execution batches.",
          e.num_running);
  p.Gauge("mimo:num_requests_waiting", "Number of requests waiting to be processed.",
          e.num_waiting);
  p.Gauge("mimo:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
          e.kv_cache_usage);
  p.Gauge("mimo:kv_cache_free_blocks", "Free full-attention KV-cache blocks.",
          e.num_kv_free_blocks);
  p.Counter("mimo:prefix_cache_queries_total", "Prefix cache queries, in terms of prompt tokens.",
            static_cast<double>(e.prefix_cache_queries));
  p.Counter("mimo:prefix_cache_hits_total", "Prefix cache hits, in terms of prompt tokens.",
            static_cast<double>(e.prefix_cache_hits));
  p.Counter("mimo:num_preemptions_total", "Cumulative number of preemptions.",
            static_cast<double>(e.num_preemptions));
  p.Counter("mimo:prompt_tokens_total", "Number of prefill tokens processed.",
            static_cast<double>(e.prompt_tokens));
  p.Counter("mimo:generation_tokens_total", "Number of generation tokens processed.",
            static_cast<double>(e.generation_tokens));
  p.Head("mimo:request_success_total", "counter", "Count of finished requests by finish reason.");
  for (FinishReason r :
       {FinishReason::kStop, FinishReason::kLength, FinishReason::kAbort, FinishReason::kError}) {
    p.Sample("mimo:request_success_total", static_cast<double>(e.finished[static_cast<int>(r)]),
             std::string(",finished_reason=\"") + FinishReasonName(r) + "\"");
  }
}

// The prefix cache's tiers below the KV pool, labelled tier="ram" | "disk".
void PrefixTierMetrics(const EngineStats& e, PromText& p) {
  struct Row {
    const char* name;
    const char* type;
    const char* help;
    double BlockTierStats::*d;
    int64_t BlockTierStats::*i;
  };
  const Row rows[] = {
      {"mimo:prefix_cache_tier_hits_total", "counter",
       "Prompt tokens whose KV blocks were loaded back from the tier.", nullptr,
       &BlockTierStats::hit_tokens},
      {"mimo:prefix_cache_tier_loads_total", "counter",
       "KV blocks (every group) loaded back from the tier into the pool.", nullptr,
       &BlockTierStats::loads},
      {"mimo:prefix_cache_tier_load_seconds_total", "counter",
       "Time spent loading blocks back from the tier.", &BlockTierStats::load_seconds, nullptr},
      {"mimo:prefix_cache_tier_stores_total", "counter", "KV blocks written into the tier.",
       nullptr, &BlockTierStats::stores},
      {"mimo:prefix_cache_tier_evictions_total", "counter",
       "KV blocks evicted from the tier to stay within its bound.", nullptr,
       &BlockTierStats::evictions},
      {"mimo:prefix_cache_tier_bytes", "gauge", "Bytes the tier holds.", nullptr,
       &BlockTierStats::bytes},
      {"mimo:prefix_cache_tier_capacity_bytes", "gauge", "The tier's bound in bytes.", nullptr,
       &BlockTierStats::capacity_bytes},
      {"mimo:prefix_cache_tier_rejected_total", "counter",
       "Cache files skipped because they failed a check (corrupt, truncated, foreign).", nullptr,
       &BlockTierStats::rejected},
      {"mimo:prefix_cache_tier_dropped_total", "counter",
       "KV blocks not written because the disk writer fell behind.", nullptr,
       &BlockTierStats::dropped},
  };
  for (const Row& r : rows) {
    p.Head(r.name, r.type, r.help);
    for (const auto& [tier, st] : {std::pair<const char*, const BlockTierStats*>{
                                       "ram", &e.prefix_tiers.ram},
                                   {"disk", &e.prefix_tiers.disk}}) {
      const double v = r.d != nullptr ? st->*r.d : static_cast<double>(st->*r.i);
      p.Sample(r.name, v, std::string(",tier=\"") + tier + "\"");
    }
  }
}

// Speculative decoding: drafts, acceptance, and the drafter state the KV cache holds.
void SpecMetrics(const EngineStats& e, PromText& p) {
  p.Counter("mimo:spec_decode_num_drafts_total", "Number of spec decoding drafts.",
            static_cast<double>(e.spec_num_drafts));
  p.Counter("mimo:spec_decode_num_draft_tokens_total", "Number of draft tokens.",
            static_cast<double>(e.spec_num_draft_tokens));
  p.Counter("mimo:spec_decode_num_accepted_tokens_total", "Number of accepted tokens.",
            static_cast<double>(e.spec_num_accepted_tokens));
  p.Gauge("mimo:spec_decode_draft_state_bytes",
          "Bytes of drafter state (DFlash's draft context, MTP's hidden states) the KV cache "
          "holds for running requests.",
          static_cast<double>(e.spec_draft_state_bytes));
  p.Gauge("mimo:spec_decode_feature_cache_bytes",
          "Bytes of DFlash prompt-block features in the KV cache's feature cache.",
          static_cast<double>(e.spec_feature_cache_bytes));
  p.Gauge("mimo:spec_decode_feature_cache_capacity_bytes",
          "The feature cache's byte limit (0: no feature cache).",
          static_cast<double>(e.spec_feature_cache_capacity_bytes));
  p.Head("mimo:spec_decode_num_accepted_tokens_per_pos_total", "counter",
         "Accepted tokens per draft position.");
  for (size_t i = 0; i < e.spec_accepted_per_pos.size(); ++i) {
    p.Sample("mimo:spec_decode_num_accepted_tokens_per_pos_total",
             static_cast<double>(e.spec_accepted_per_pos[i]),
             ",position=\"" + std::to_string(i) + "\"");
  }
}

void GrammarMetrics(const GrammarCache& g, PromText& p) {
  p.Counter("mimo:grammar_compiles_total",
            "Structured-output grammars compiled (grammar cache misses, start-up ones included).",
            static_cast<double>(g.misses()));
  p.Counter("mimo:grammar_cache_hits_total",
            "Structured-output grammars (and remembered refusals) found compiled.",
            static_cast<double>(g.hits()));
  p.Gauge("mimo:grammar_cache_bytes", "Bytes of the compiled grammars kept.",
          static_cast<double>(g.bytes()));
}

}  // namespace

std::string ServerMetrics::Render(const EngineStats& e, const GrammarCache* grammars) const {
  std::lock_guard<std::mutex> lk(mu_);
  PromText p(model_name_);
  EngineMetrics(e, p);
  PrefixTierMetrics(e, p);
  p.Histo("mimo:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
          ttft_);
  p.Histo("mimo:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itl_);
  p.Histo("mimo:e2e_request_latency_seconds", "Histogram of end to end request latency.", e2e_);
  p.Histo("mimo:request_queue_time_seconds",
          "Histogram of time spent in the waiting queue in seconds.", queue_);
  SpecMetrics(e, p);
  if (grammars != nullptr) GrammarMetrics(*grammars, p);
  return p.Take();
}

}  // namespace mimo
