// FeatureSpeculator (see feature_speculator.h).
#include "speculative/feature_speculator.h"

#include "engine/scheduler.h"
#include "speculative/verify.h"

namespace mimo {

void PositionFeatures::Keep(int start_pos, int n, int lo, const float* rows, int64_t width) {
  for (int j = 0; j < n; ++j) {
    if (start_pos + j >= lo) Set(start_pos + j, rows + j * width, width);
  }
}

const std::vector<float>* PositionFeatures::Find(int pos) const {
  auto it = rows_.find(pos);
  return it == rows_.end() ? nullptr : &it->second;
}

int64_t PositionFeatures::bytes() const {
  int64_t bytes = 0;
  for (const auto& [pos, row] : rows_) bytes += static_cast<int64_t>(row.size() * sizeof(float));
  return bytes;
}

void FeatureSpeculator::ObserveStep(const SchedulePlan& plan, const float* features,
                                    std::span<Request* const> chunk_requests) {
  const int64_t width = feature_width();
  int64_t row = 0;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    ObserveChunk(plan.chunks[i], chunk_requests[i], features + row * width);
    row += plan.chunks[i].num_tokens;
  }
}

VerifyResult FeatureSpeculator::Verify(Request& r, const float* logits, int64_t vocab,
                                       const std::vector<int32_t>& eos_ids, Sampler& sampler) {
  return VerifyDrafts(r, logits, vocab, eos_ids, sampler);
}

}  // namespace mimo
