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
                      EventWriter on_event, TailWriter tail, std::atomic<int>* in_flight) {
  auto guard = std::make_shared<InFlightGuard>(in_flight);
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [session, on_event, tail, guard](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& s) { return s.empty() || sink.write(s.data(), s.size()); };
        auto alive = [&] { return sink.is_writable(); };
        while (!session->done()) {
          RequestOutput ev;
          if (!session->Next(&ev, alive)) return false;
          if (!write(on_event(ev))) {
            session->CancelAll();
            return false;
          }
        }
        if (!write(tail())) return false;
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
