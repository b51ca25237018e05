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
  // Speculative decoding (filled by the MTP issue): accepted tokens per draft position.
  void ObserveSpecDecode(int64_t drafts, int64_t draft_tokens, int64_t accepted,
                         const std::vector<int64_t>& accepted_per_pos);

  // The text of GET /metrics; gauges and engine counters come from `engine`.
  std::string Render(const EngineStats& engine) const;

 private:
  std::string model_name_;
  mutable std::mutex mu_;
  Histogram ttft_, itl_, e2e_, queue_;
  int64_t spec_drafts_ = 0, spec_draft_tokens_ = 0, spec_accepted_ = 0;
  std::vector<int64_t> spec_accepted_per_pos_;
};

}  // namespace mimo
