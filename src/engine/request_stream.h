// RequestStream: the events of one submission as a blocking queue, for a consumer thread (an
// HTTP handler, the CLI). Sink() is what Engine::Submit takes; it shares the queue, so events
// that arrive after the stream is gone (a disconnected client) are simply dropped.
// A consumer that does not wait (an HTTP connection) polls TryNext and sets a notify function,
// called on the engine thread after each event.
// Thread-safety: Sink() is called on the engine thread, Next()/TryNext() on one consumer thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

#include "engine/request.h"

namespace mimo {

class RequestStream {
 public:
  explicit RequestStream(int num_samples = 1) : state_(std::make_shared<State>()) {
    state_->open = num_samples;
  }

  OutputSink Sink() const {
    std::shared_ptr<State> s = state_;
    return [s](RequestOutput&& out) {
      {
        std::lock_guard<std::mutex> lk(s->mu);
        if (out.finished) --s->open;
        s->events.push_back(std::move(out));
        // Under the lock, so that once SetNotify(nullptr) returned it is never called again.
        if (s->notify) s->notify();
      }
      s->cv.notify_all();
    };
  }

  // The next event, waiting up to timeout_s seconds; false on timeout.
  bool Next(RequestOutput* out, double timeout_s) {
    std::unique_lock<std::mutex> lk(state_->mu);
    if (!state_->cv.wait_for(lk, std::chrono::duration<double>(timeout_s),
                             [&] { return !state_->events.empty(); })) {
      return false;
    }
    *out = std::move(state_->events.front());
    state_->events.pop_front();
    return true;
  }

  // The next event if one is queued; never waits.
  bool TryNext(RequestOutput* out) {
    std::lock_guard<std::mutex> lk(state_->mu);
    if (state_->events.empty()) return false;
    *out = std::move(state_->events.front());
    state_->events.pop_front();
    return true;
  }

  // Called (on the engine thread, with the queue's lock held: it must not block or call back
  // into the stream) after each event; nullptr stops the calls.
  void SetNotify(std::function<void()> notify) {
    std::lock_guard<std::mutex> lk(state_->mu);
    state_->notify = std::move(notify);
  }

  // Every sample finished and every event was taken.
  bool done() const {
    std::lock_guard<std::mutex> lk(state_->mu);
    return state_->open <= 0 && state_->events.empty();
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<RequestOutput> events;
    int open = 0;  // samples not finished yet
    std::function<void()> notify;
  };
  std::shared_ptr<State> state_;
};

}  // namespace mimo
