// Stop rules and text release (see stop_checker.h).
#include "engine/stop_checker.h"

#include <algorithm>

namespace mimo {

StopChecker::StopChecker(const Tokenizer* tokenizer, const StopParams& params,
                         const std::vector<int32_t>& eos_ids)
    : params_(params), eos_ids_(params.ignore_eos ? std::vector<int32_t>{} : eos_ids) {
  if (tokenizer) detok_.emplace(*tokenizer, params.skip_special_tokens);
  for (const std::string& s : params.stop) max_stop_ = std::max(max_stop_, s.size());
}

std::vector<int32_t> StopChecker::MinTokensMask(const std::vector<int32_t>& eos_ids) const {
  std::vector<int32_t> ids = params_.stop_token_ids;
  if (!params_.ignore_eos) ids.insert(ids.end(), eos_ids.begin(), eos_ids.end());
  return ids;
}

// Text up to the end (all) or up to the last point no stop string can still start before,
// never splitting a UTF-8 character.
std::string StopChecker::Release(bool all) {
  size_t end = text_.size();
  if (!all && max_stop_ > 1) {
    end = end > max_stop_ - 1 ? end - (max_stop_ - 1) : 0;
    while (end > emitted_ && end < text_.size() &&
           (static_cast<unsigned char>(text_[end]) & 0xC0) == 0x80) {
      --end;
    }
  }
  if (end <= emitted_) return "";
  std::string out = text_.substr(emitted_, end - emitted_);
  emitted_ = end;
  return out;
}

std::string StopChecker::Finish() {
  if (detok_) text_ += detok_->Flush();
  return Release(true);
}

StopChecker::Step StopChecker::Append(int32_t id, int num_output, int max_tokens,
                                      bool context_full) {
  Step s;
  const bool stop_id = std::find(params_.stop_token_ids.begin(), params_.stop_token_ids.end(),
                                 id) != params_.stop_token_ids.end();
  const bool eos = std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end();
  if ((stop_id || eos) && num_output >= params_.min_tokens) {
    // The stop token's own text is not part of the output.
    if (detok_) text_ += detok_->Flush();
    s.finished = true;
    s.stop_reason = std::to_string(id);
    s.text = Release(true);
    return s;
  }
  if (detok_) {
    const size_t before = text_.size();
    text_ += detok_->Add(id);
    // A stop string can only end in the new text; it may start up to max_stop_ - 1 bytes before.
    size_t best = std::string::npos;
    const std::string* hit = nullptr;
    for (const std::string& stop : params_.stop) {
      if (stop.empty()) continue;
      const size_t from = before >= stop.size() - 1 ? before - (stop.size() - 1) : 0;
      const size_t p = text_.find(stop, from);
      if (p != std::string::npos && p < best) {
        best = p;
        hit = &stop;
      }
    }
    if (hit) {
      text_.resize(best);
      emitted_ = std::min(emitted_, text_.size());
      s.finished = true;
      s.stop_reason = *hit;
      s.text = Release(true);
      return s;
    }
  }
  if (num_output >= max_tokens || context_full) {
    if (detok_) text_ += detok_->Flush();
    s.finished = true;
    s.by_length = true;
    s.text = Release(true);
    return s;
  }
  s.text = Release(false);
  return s;
}

}  // namespace mimo
