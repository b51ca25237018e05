// KV memory planning from the per-layer geometry.
#include "kv/kv_memory_plan.h"

#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>

#include "attention/registry.h"

namespace mimo {

int64_t PhysicalMemoryBytes() {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? int64_t{pages} * page : 0;
}

int64_t PhysicalMemoryAndSwapBytes() {
  struct sysinfo si;
  if (sysinfo(&si) != 0) return PhysicalMemoryBytes();
  return static_cast<int64_t>(si.totalram + si.totalswap) * si.mem_unit;
}

StatusOr<KvMemoryPlan> PlanKvMemory(const ModelConfig& config, const KvMemoryPlanOptions& o) {
  if (o.block_size <= 0 || o.block_size > 4096) {
    return InvalidArgument("KV block size %d out of range [1, 4096]", o.block_size);
  }
  if (o.kv_dtype != DType::kF32 && o.kv_dtype != DType::kBF16 && o.kv_dtype != DType::kF8E4M3) {
    return InvalidArgument("KV cache dtype must be f32, bf16 or fp8");
  }
  if (o.max_sequences <= 0) return InvalidArgument("max sequences %d", o.max_sequences);
  if (o.max_chunk_tokens <= 0) return InvalidArgument("max chunk tokens %d", o.max_chunk_tokens);
  if (config.layers.empty()) return InvalidArgument("model config has no layers");
  KvMemoryPlan p;
  p.block_size = o.block_size;
  p.kv_dtype = o.kv_dtype;
  p.max_chunk_tokens = o.max_chunk_tokens;
  p.max_sequences = o.max_sequences;
  p.max_context = o.max_context;
  const int64_t es = static_cast<int64_t>(DTypeSize(o.kv_dtype));
  int mtp_window = 0;
  for (const LayerConfig& l : config.layers) {
    const int64_t per_token = int64_t{l.num_key_value_heads} * (l.head_dim + l.v_head_dim) * es;
    if (l.mtp) {
      if (l.sliding_window <= 0) return InvalidArgument("MTP layer without a sliding window");
      ++p.num_mtp_layers;
      p.mtp_bytes_per_token += per_token;
      mtp_window = std::max(mtp_window, l.sliding_window);
    } else if (l.attention == AttentionKind::kSlidingWindow) {
      if (l.sliding_window <= 0) return InvalidArgument("sliding-window layer with window 0");
      ++p.num_swa_layers;
      p.swa_bytes_per_token += per_token;
      p.sliding_window = std::max(p.sliding_window, l.sliding_window);
    } else {
      ++p.num_full_layers;
      p.full_bytes_per_token += per_token;
    }
  }
  p.full_bytes_per_block = p.full_bytes_per_token * o.block_size;
  p.swa_bytes_per_block = p.swa_bytes_per_token * o.block_size;
  // Windows and chunks are below 2^31 each, their sum is not: blocks are counted in 64 bits.
  auto window_blocks = [&](int window, int chunk) {
    return (int64_t{window} - 1 + chunk + o.block_size - 1) / o.block_size + 1;
  };
  if (p.num_swa_layers > 0) {
    const int64_t blocks = window_blocks(p.sliding_window, o.max_chunk_tokens);
    if (blocks > INT32_MAX) {
      return InvalidArgument("sliding window %d + chunk %d tokens: too many KV blocks per sequence",
                             p.sliding_window, o.max_chunk_tokens);
    }
    p.swa_blocks_per_sequence = static_cast<int>(blocks);
  }
  p.swa_bytes_per_sequence = p.swa_blocks_per_sequence * p.swa_bytes_per_block;
  const int64_t ctx_blocks = (o.max_context + o.block_size - 1) / o.block_size;
  p.full_bytes_per_sequence = ctx_blocks * p.full_bytes_per_block;
  p.unbounded_swa_bytes_per_sequence = ctx_blocks * p.swa_bytes_per_block;

  p.num_swa_blocks =
      p.num_swa_layers > 0 ? int64_t{o.max_sequences} * p.swa_blocks_per_sequence + 1 : 0;
  if (p.num_mtp_layers > 0) {
    p.mtp_bytes_per_block = p.mtp_bytes_per_token * o.block_size;
    const int chunk = o.mtp_chunk_tokens > 0 ? o.mtp_chunk_tokens : o.max_chunk_tokens;
    const int64_t blocks = window_blocks(mtp_window, chunk);
    if (blocks > INT32_MAX) {
      return InvalidArgument("MTP sliding window %d + chunk %d tokens: too many KV blocks per "
                             "sequence", mtp_window, chunk);
    }
    p.mtp_blocks_per_sequence = static_cast<int>(blocks);
    p.num_mtp_blocks =
        o.mtp_sequences_per_sequence > 0
            ? int64_t{o.max_sequences} * o.mtp_sequences_per_sequence * p.mtp_blocks_per_sequence + 1
            : std::max<int64_t>(p.num_swa_blocks, int64_t{o.max_sequences} * p.mtp_blocks_per_sequence + 1);
  }
  // The fixed pools: sliding-window and MTP layers, bounded by their windows.
  const int64_t swa_total =
      p.num_swa_blocks * p.swa_bytes_per_block + p.num_mtp_blocks * p.mtp_bytes_per_block;
  if (o.budget_bytes <= 0) {
    p.num_full_blocks = p.num_full_layers > 0 ? int64_t{o.max_sequences} * ctx_blocks + 1 : 0;
  } else {
    const int64_t rest = o.budget_bytes - swa_total;
    if (p.num_full_layers > 0) {
      p.num_full_blocks = rest > 0 ? rest / p.full_bytes_per_block : 0;
      if (p.num_full_blocks < 2) {
        return ResourceExhausted(
            "KV cache budget %lld bytes too small: sliding-window layers need %lld bytes for %d "
            "sequences and full layers %lld bytes per %d-token block",
            static_cast<long long>(o.budget_bytes), static_cast<long long>(swa_total),
            o.max_sequences, static_cast<long long>(p.full_bytes_per_block), o.block_size);
      }
    } else if (rest < 0) {
      return ResourceExhausted("KV cache budget %lld bytes below the %lld bytes %d sequences need",
                               static_cast<long long>(o.budget_bytes),
                               static_cast<long long>(swa_total), o.max_sequences);
    } else if (p.num_swa_layers > 0) {
      p.num_swa_blocks += rest / p.swa_bytes_per_block;  // spare room keeps more prefix blocks
    }
  }
  if (o.num_full_blocks_override > 0 && p.num_full_layers > 0) {
    p.num_full_blocks = o.num_full_blocks_override + 1;  // + the null block
  }
  p.num_full_blocks = std::min<int64_t>(p.num_full_blocks, (int64_t{1} << 31) - 1);
  p.num_swa_blocks = std::min<int64_t>(p.num_swa_blocks, (int64_t{1} << 31) - 1);
  p.total_bytes = p.num_full_blocks * p.full_bytes_per_block +
                  p.num_swa_blocks * p.swa_bytes_per_block +
                  p.num_mtp_blocks * p.mtp_bytes_per_block;
  p.budget_bytes = o.budget_bytes > 0 ? o.budget_bytes : p.total_bytes;
  p.tokens_that_fit = p.num_full_layers > 0 ? (p.num_full_blocks - 1) * o.block_size : 0;
  return p;
}

std::string FormatKvMemoryPlan(const KvMemoryPlan& p) {
  auto mib = [](int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
  std::string s;
  s += StrFormat("KV cache: %s, block size %d, %d full + %d sliding-window layers (window %d)\n",
                 KvDTypeName(p.kv_dtype), p.block_size, p.num_full_layers, p.num_swa_layers,
                 p.sliding_window);
  s += StrFormat("  full layers: %lld bytes/token (%.2f MiB per sequence at %lld tokens)\n",
                 static_cast<long long>(p.full_bytes_per_token), mib(p.full_bytes_per_sequence),
                 static_cast<long long>(p.max_context));
  s += StrFormat(
      "  sliding-window layers: %.2f MiB per sequence, fixed (%d blocks = window %d + chunk %d), "
      "vs %.2f MiB if sized to the context\n",
      mib(p.swa_bytes_per_sequence), p.swa_blocks_per_sequence, p.sliding_window,
      p.max_chunk_tokens, mib(p.unbounded_swa_bytes_per_sequence));
  s += StrFormat(
      "  budget %.2f MiB for %d sequences: %lld full blocks, %lld SWA blocks, "
      "%lld tokens fit\n",
      mib(p.budget_bytes), p.max_sequences, static_cast<long long>(p.num_full_blocks),
      static_cast<long long>(p.num_swa_blocks), static_cast<long long>(p.tokens_that_fit));
  return s;
}

}  // namespace mimo
