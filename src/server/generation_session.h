// GenerationSession: the engine submissions of one HTTP request (n samples of one or several
// prompts) seen from its consumer (a handler, then the connection that writes the response).
// Hands out events, cancels every submission when the client goes away (or the consumer leaves
// early), and feeds the latency metrics (TTFT, ITL, queue time, e2e, finish reasons). Not
// thread-safe: one consumer at a time.
#pragma once

#include <functional>
#include <vector>

#include "engine/engine.h"
#include "engine/request_stream.h"
#include "server/metrics.h"

namespace mimo {

class GenerationSession {
 public:
  GenerationSession(Engine& engine, ServerMetrics& metrics, int total_samples);
  ~GenerationSession();  // cancels whatever has not finished
  GenerationSession(const GenerationSession&) = delete;
  GenerationSession& operator=(const GenerationSession&) = delete;

  // Submits one prompt's request; its samples get choice indices base_index .. + n - 1.
  Status Submit(GenerationRequest g, int base_index);
  // The next event if one is ready (its index is the choice index); never waits.
  bool TryNext(RequestOutput* ev);
  // Called on the engine thread after each event (see RequestStream::SetNotify).
  void SetNotify(std::function<void()> notify) { stream_.SetNotify(std::move(notify)); }
  bool done() const { return stream_.done(); }
  void CancelAll();

 private:
  void Observe(const RequestOutput& ev);  // metrics and the count of open samples

  Engine& engine_;
  ServerMetrics& metrics_;
  RequestStream stream_;
  std::vector<uint64_t> ids_;
  std::vector<double> last_token_time_;  // [total_samples]
  int open_ = 0;                          // samples not finished
};

}  // namespace mimo
