// Prometheus metrics of the server, named like vLLM's under a `mimo:` prefix (so existing
// dashboards map over), rendered in the Prometheus text exposition format (version 0.0.4).
// Thread-safety: every method may be called from any thread (one mutex).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace mimo {

class GrammarCache;  // grammar/grammar_cache.h

// Cumulative histogram with fixed bucket upper bounds (seconds).
struct Histogram {
  std::vector<double> bounds;    // ascending; +Inf implied
  std::vector<uint64_t> counts;  // [bounds.size() + 1] non-cumulative
  double sum = 0;
  uint64_t count = 0;
  void Observe(double v);
};

class ServerMetrics {
 public:
  explicit ServerMetrics(std::string model_name);

  // A finished sample (HTTP thread): its end-to-end latency. (Finish reasons are counted by the
  // engine, which also sees requests whose client went away.)
  void ObserveFinished(const RequestOutput& last);
  void ObserveFirstToken(double ttft_seconds);
  void ObserveInterToken(double seconds);
  void ObserveQueueTime(double seconds);
  // The text of GET /metrics; gauges and engine counters (tokens, finish reasons, prefix cache,
  // preemptions, speculative decoding) come from `engine`; the grammar cache's counters from
  // `grammars` (none when null).
  std::string Render(const EngineStats& engine, const GrammarCache* grammars = nullptr) const;

 private:
  std::string model_name_;
  mutable std::mutex mu_;
  Histogram ttft_, itl_, e2e_, queue_;
};

}  // namespace mimo
