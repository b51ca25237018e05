// RespondStreaming / RespondWhenDone (see response_writer.h).
#include "server/response_writer.h"

#include <httplib.h>

#include <chrono>

namespace mimo {
namespace {

// Decrements the in-flight count when the response is over (the provider is destroyed).
struct InFlightGuard {
  std::atomic<int>* n;
  explicit InFlightGuard(std::atomic<int>* c) : n(c) {
    if (n) ++*n;
  }
  ~InFlightGuard() {
    if (n) --*n;
  }
};

}  // namespace

std::string SseData(const std::string& json) { return "data: " + json + "\n\n"; }
std::string SseEvent(const std::string& name, const std::string& json) {
  return "event: " + name + "\ndata: " + json + "\n\n";
}

void RespondStreaming(httplib::Response& res, std::shared_ptr<GenerationSession> session,
                      StreamWriters writers, std::atomic<int>* in_flight) {
  auto guard = std::make_shared<InFlightGuard>(in_flight);
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  auto w = std::make_shared<StreamWriters>(std::move(writers));
  res.set_chunked_content_provider(
      "text/event-stream", [session, w, guard](size_t, httplib::DataSink& sink) {
        using Clock = std::chrono::steady_clock;
        auto last = Clock::now();
        auto write = [&](const std::string& s) {
          if (s.empty()) return true;
          last = Clock::now();
          return sink.write(s.data(), s.size());
        };
        const auto keepalive = std::chrono::duration<double>(w->keepalive_seconds);
        auto alive = [&] {
          if (w->keepalive.empty() || Clock::now() - last < keepalive) return sink.is_writable();
          return write(w->keepalive);
        };
        if (!write(w->head)) {
          session->CancelAll();
          return false;
        }
        while (!session->done()) {
          RequestOutput ev;
          if (!session->Next(&ev, alive)) return false;
          if (!write(w->on_event(ev))) {
            session->CancelAll();
            return false;
          }
        }
        if (!write(w->tail())) return false;
        sink.done();
        return true;
      });
}

void RespondWhenDone(httplib::Response& res, std::shared_ptr<GenerationSession> session,
                     EventWriter on_event, TailWriter body, std::atomic<int>* in_flight) {
  auto guard = std::make_shared<InFlightGuard>(in_flight);
  res.set_chunked_content_provider(
      "application/json", [session, on_event, body, guard](size_t, httplib::DataSink& sink) {
        auto last = std::chrono::steady_clock::now();
        auto alive = [&] {
          const auto now = std::chrono::steady_clock::now();
          if (now - last < std::chrono::seconds(2)) return sink.is_writable();
          last = now;
          return sink.write(" ", 1);
        };
        while (!session->done()) {
          RequestOutput ev;
          if (!session->Next(&ev, alive)) return false;
          on_event(ev);
        }
        const std::string b = body();
        if (!sink.write(b.data(), b.size())) return false;
        sink.done();
        return true;
      });
}

}  // namespace mimo
