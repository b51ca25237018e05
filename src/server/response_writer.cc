// RespondStreaming / RespondWhenDone (see response_writer.h).
#include "server/response_writer.h"

#include <chrono>
#include <optional>

namespace mimo {
namespace {

using Clock = std::chrono::steady_clock;

// The session's events turned into body text. Counts as in flight (for the drain) until the
// connection drops it.
// The answer to a sample the engine ended with an error.
ApiError ErrorOf(const RequestOutput& ev) {
  ApiError e;
  const bool shutdown = ev.error.rfind(kShutdownError, 0) == 0;
  e.status = shutdown ? 503 : 500;
  e.type = shutdown ? "service_unavailable" : "server_error";
  e.message = ev.error.empty() ? "the request failed in the engine" : ev.error;
  return e;
}

class SessionSource : public BodySource {
 public:
  SessionSource(std::shared_ptr<GenerationSession> session, StreamWriters w, bool stream,
                std::atomic<int>* in_flight)
      : session_(std::move(session)), w_(std::move(w)), stream_(stream), in_flight_(in_flight) {
    if (in_flight_) ++*in_flight_;
  }
  ~SessionSource() override {
    session_->SetNotify(nullptr);
    if (in_flight_) --*in_flight_;
  }

  State Pull(std::string* out) override {
    if (!started_) {
      started_ = true;
      *out += w_.head;
    }
    RequestOutput ev;
    while (session_->TryNext(&ev)) {
      *out += w_.on_event(ev);
      if (ev.finished && ev.finish_reason == FinishReason::kError && !error_) error_ = ErrorOf(ev);
    }
    if (session_->done()) {
      if (error_ && w_.error_tail) {
        *out += w_.error_tail(*error_);
        status_ = stream_ ? 0 : error_->status;
      } else {
        *out += w_.tail();
      }
      return State::kDone;
    }
    const auto now = Clock::now();
    if (!out->empty()) {
      last_ = now;
    } else if (stream_ && !w_.keepalive.empty() &&
               now - last_ >= std::chrono::duration<double>(w_.keepalive_seconds)) {
      if (w_.before_keepalive) *out += w_.before_keepalive();
      *out += w_.keepalive;
      last_ = now;
    }
    return State::kMore;
  }
  void SetNotify(std::function<void()> notify) override { session_->SetNotify(std::move(notify)); }
  void Cancel() override { session_->CancelAll(); }
  double poll_seconds() const override {
    return stream_ ? std::min(1.0, std::max(0.05, w_.keepalive_seconds)) : 1.0;
  }
  int final_status() const override { return status_; }

 private:
  std::shared_ptr<GenerationSession> session_;
  StreamWriters w_;
  bool stream_;
  std::atomic<int>* in_flight_;
  bool started_ = false;
  Clock::time_point last_ = Clock::now();
  std::optional<ApiError> error_;  // the first sample that ended with an engine error
  int status_ = 0;
};

}  // namespace

std::string SseData(const std::string& json) { return "data: " + json + "\n\n"; }
std::string SseEvent(const std::string& name, const std::string& json) {
  return "event: " + name + "\ndata: " + json + "\n\n";
}

void RespondStreaming(HttpResponse& res, std::shared_ptr<GenerationSession> session,
                      StreamWriters writers, std::atomic<int>* in_flight) {
  res.content_type = "text/event-stream";
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.stream = true;
  res.source =
      std::make_shared<SessionSource>(std::move(session), std::move(writers), true, in_flight);
}

void RespondWhenDone(HttpResponse& res, std::shared_ptr<GenerationSession> session,
                     EventWriter on_event, TailWriter body,
                     std::function<std::string(const ApiError&)> error_body,
                     std::atomic<int>* in_flight) {
  StreamWriters w;
  w.on_event = std::move(on_event);
  w.tail = std::move(body);
  w.error_tail = std::move(error_body);
  w.keepalive.clear();
  res.content_type = "application/json";
  res.stream = false;
  res.source = std::make_shared<SessionSource>(std::move(session), std::move(w), false, in_flight);
}

}  // namespace mimo
