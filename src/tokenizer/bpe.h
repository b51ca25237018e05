// Tokenizer: byte-level BPE loaded from a Hugging Face tokenizer.json (the Qwen2/Qwen3 family
// that MiMo's vocabulary is based on). Encode = added tokens split out -> NFC -> regex pre-tokens
// -> BPE per pre-token (cached); Decode maps the GPT-2 byte<->unicode alphabet back to bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace mimo {

class RegexSplitter;

// One entry of tokenizer.json "added_tokens".
struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;  // skipped by Decode(skip_special=true)
  bool lstrip = false;   // absorbs whitespace before it
  bool rstrip = false;   // absorbs whitespace after it
};

// A byte range [begin, end) of a text.
struct TextRange {
  size_t begin = 0;
  size_t end = 0;
};

// Immutable after loading; Encode/Decode are thread-safe (the BPE cache is locked per shard).
class Tokenizer {
 public:
  static StatusOr<std::unique_ptr<Tokenizer>> FromFile(const std::string& path);
  static StatusOr<std::unique_ptr<Tokenizer>> FromJson(std::string_view json_text);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Token ids of `text`. Invalid UTF-8 is first repaired (each invalid subpart -> U+FFFD). With
  // parse_special=false, added tokens ("<|im_start|>", "<think>", ...) are NOT recognised and are
  // encoded as the plain text they spell (use it for untrusted content). Never adds BOS/EOS.
  std::vector<int32_t> Encode(std::string_view text, bool parse_special = true) const;
  // Encode(text, parse_special), except that no added token is recognised where its match would
  // overlap one of `literal` (byte ranges of `text`; any order, overlaps allowed), and whitespace
  // an lstrip/rstrip token absorbs stops at them. The bytes of a range are thus encoded as the
  // text they spell, together with the text around them: between two recognised added tokens the
  // ids are exactly Encode(that stretch, false); pre-tokenization and BPE never cut at a range's
  // edge. The server encodes a rendered chat prompt so, the request's text as `literal`
  // (chat/chat_prompt.h).
  // Invalid UTF-8 is repaired inside each stretch between range edges.
  std::vector<int32_t> Encode(std::string_view text, bool parse_special,
                              std::span<const TextRange> literal) const;

  // Text of `ids` (lossy: bytes that do not form valid UTF-8 become U+FFFD). Unknown ids are
  // skipped. skip_special drops added tokens marked "special" (<|im_end|>, not <think>).
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special = false) const;

  // Raw bytes of one token (byte-level decoded; may be a partial UTF-8 sequence). Empty for an
  // unknown id.
  std::string_view TokenBytes(int32_t id) const;
  bool IsSpecial(int32_t id) const;
  bool IsValidId(int32_t id) const { return id >= 0 && id < vocab_size() && known_[id]; }

  // The token as spelled in tokenizer.json (byte-level alphabet, e.g. "Ġhello"), or an added
  // token's content. -1 / "" when unknown.
  int32_t TokenToId(std::string_view token) const;
  std::string IdToToken(int32_t id) const;
  int32_t vocab_size() const { return static_cast<int32_t>(id_to_token_.size()); }
  const std::vector<AddedToken>& added_tokens() const { return added_; }
  bool normalizes_nfc() const { return nfc_; }
  bool regex_jit() const;

  // Merge table entry: the pair's priority and the id it merges into.
  struct Merge {
    int32_t rank;
    int32_t id;
  };

 private:
  Tokenizer();
  Status LoadModel(const void* json);  // nlohmann::json*, kept out of this header
  Status LoadPipeline(const void* json);
  Status LoadAddedTokens(const void* json);

  void EncodeText(std::string_view text, std::vector<int32_t>* out) const;
  void Bpe(std::string_view piece, std::vector<int32_t>* out) const;          // cached
  void BpeUncached(std::string_view piece, std::vector<int32_t>* out) const;  // appends
  void BpeLong(std::vector<int32_t>* sym) const;
  const Merge* FindMerge(int32_t a, int32_t b) const;
  // Leftmost-longest added token in text[from:] that overlaps none of `literal` (sorted,
  // disjoint; *next: the first range that may still matter, advanced as the scan goes), with
  // lstrip/rstrip applied up to the ranges' edges. False if none.
  bool FindAddedToken(std::string_view text, size_t from, std::span<const TextRange> literal,
                      size_t* next, size_t* start, size_t* end, int32_t* id) const;

  std::vector<std::string> id_to_token_;  // [vocab_size] spelling in tokenizer.json
  std::vector<std::string> id_to_bytes_;  // [vocab_size] decoded bytes
  std::vector<uint8_t> known_;            // [vocab_size] id present
  std::vector<uint8_t> special_;          // [vocab_size] added token with special=true
  std::unordered_map<std::string, int32_t> token_to_id_;
  int32_t byte_id_[256];  // id of each single byte's token (-1 if absent)
  // Merges in an open-addressing table keyed by (left id, right id).
  std::vector<uint64_t> merge_keys_;  // [capacity] (a << 32 | b) + 1, 0 = empty
  std::vector<Merge> merge_vals_;     // [capacity]
  uint64_t merge_mask_ = 0;
  bool ignore_merges_ = false;
  bool nfc_ = false;
  std::vector<std::unique_ptr<RegexSplitter>> splitters_;  // applied in order; none: one piece
  std::vector<AddedToken> added_;
  std::vector<std::vector<int32_t>>
      added_by_first_byte_;  // [256] indices into added_, longest first

  // Bounded BPE cache: direct-mapped by the pre-token's hash (a colliding entry is replaced),
  // so a look-up is one hash and one compare. Slots are guarded by striped mutexes.
  static constexpr size_t kCacheSlots = 1 << 16;
  static constexpr size_t kCacheLocks = 64;
  struct CacheSlot {
    std::string key;           // pre-token bytes; empty = unused
    std::vector<int32_t> ids;  // [n] its BPE ids
  };
  mutable std::unique_ptr<CacheSlot[]> cache_;      // [kCacheSlots]
  mutable std::unique_ptr<std::mutex[]> cache_mu_;  // [kCacheLocks]
};

}  // namespace mimo
