// GenerationSession (see generation_session.h).
#include "server/generation_session.h"

namespace mimo {

GenerationSession::GenerationSession(Engine& engine, ServerMetrics& metrics, int total_samples)
    : engine_(engine),
      metrics_(metrics),
      stream_(total_samples),
      last_token_time_(total_samples, 0.0),
      open_(total_samples) {}

GenerationSession::~GenerationSession() {
  stream_.SetNotify(nullptr);
  if (open_ > 0) CancelAll();
}

void GenerationSession::CancelAll() {
  for (uint64_t id : ids_) engine_.Cancel(id);
}

Status GenerationSession::Submit(GenerationRequest g, int base_index) {
  OutputSink inner = stream_.Sink();
  auto id = engine_.Submit(std::move(g), [inner, base_index](RequestOutput&& o) {
    o.index += base_index;
    inner(std::move(o));
  });
  if (!id.ok()) return id.status();
  ids_.push_back(*id);
  return Status::Ok();
}

bool GenerationSession::TryNext(RequestOutput* ev) {
  if (!stream_.TryNext(ev)) return false;
  Observe(*ev);
  return true;
}

void GenerationSession::Observe(const RequestOutput& e) {
  const RequestOutput* ev = &e;
  const int i = ev->index;
  if (!ev->token_ids.empty() && i >= 0 && i < static_cast<int>(last_token_time_.size())) {
    if (last_token_time_[i] == 0) {
      metrics_.ObserveFirstToken(ev->first_token_time - ev->arrival_time);
      metrics_.ObserveQueueTime(ev->first_scheduled_time - ev->arrival_time);
    } else {
      metrics_.ObserveInterToken(ev->time - last_token_time_[i]);
    }
    last_token_time_[i] = ev->time;
  }
  if (ev->finished) {
    --open_;
    metrics_.ObserveFinished(*ev);
  }
}

}  // namespace mimo
