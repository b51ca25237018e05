// Request bodies -> JSON, parsed once with limits, before any handler copies, dumps or walks the
// document (all of which recurse in nlohmann::json), and the limits on every count a request
// gives, checked before anything is sized from them. Each refusal is a 400 naming the field and
// the limit. docs/SECURITY.md lists these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "server/api_error.h"

namespace mimo {

// --- The body ---------------------------------------------------------------------------------
// Deepest '[' / '{' nesting of a request body, and of JSON text inside it that the server parses
// (tool-call arguments). 128 leaves room for any real schema or message while bounding the
// recursion of copies, dumps, the chat template and the schema compiler.
inline constexpr int kMaxJsonDepth = 128;
// Largest request body (the HTTP layer's payload limit should be the same).
inline constexpr size_t kMaxRequestBodyBytes = size_t{64} << 20;
// Most JSON values in one body (counted by the same scan as the depth, before anything is
// built): ~100 bytes each once parsed, so a body costs at most ~200 MB of documents however it
// is shaped (60 MiB of "{}," used to become 22M values: 1.45 GB and 10 s).
inline constexpr int64_t kMaxJsonValues = int64_t{1} << 21;

// --- Counts (each names its field in the 400) --------------------------------------------------
inline constexpr int kMaxN = 128;                    // n, best_of: samples per prompt
inline constexpr int kMaxCompletionPrompts = 1024;   // /v1/completions: prompts in one request
inline constexpr int kMaxCompletionChoices = 1024;   // /v1/completions: prompts x n
inline constexpr int kMaxStopStrings = 64;           // stop, stop_sequences: entries
inline constexpr size_t kMaxStopStringBytes = 4096;  // stop, stop_sequences: bytes of each
inline constexpr int kMaxStopTokenIds = 1024;        // stop_token_ids: entries
inline constexpr int kMaxLogitBias = 1024;           // logit_bias: entries
inline constexpr int kMaxLogprobs = 20;              // logprobs (completions), top_logprobs
inline constexpr int kMaxTools = 512;                // tools (functions, after flattening)
inline constexpr int kMaxMessages = 16384;           // messages; Responses API input items
inline constexpr size_t kMaxMetadataPairs = 16;        // metadata (stored with a response)
inline constexpr size_t kMaxMetadataKeyChars = 64;     // ... its keys
inline constexpr size_t kMaxMetadataValueChars = 512;  // ... its values (strings)
inline constexpr size_t kMaxUserChars = 256;           // user (stored with a response)

// Which endpoint a body is for: its top-level fields are those of its API as documented (read or
// refused by this server) and this server's extensions; any other top-level field is skipped
// while parsing, never built (kAny keeps every field).
enum class RequestKind {
  kAny,
  kChatCompletions,  // also /tokenize, which reads a chat request's fields
  kCompletions,
  kResponses,
  kMessages,  // and /v1/messages/count_tokens
  kDetokenize,
};
// Whether `kind` keeps the top-level field `name`.
bool IsKnownField(RequestKind kind, std::string_view name);

// Parses a request body: empty, too large, nested deeper than kMaxJsonDepth, holding more than
// kMaxJsonValues values, not JSON, or not an object -> a 400 (413 for the size) saying which.
// Depth and values are checked by a scan of the text (no recursion) before nlohmann builds
// anything, so the document that comes out is at most kMaxJsonDepth deep; the top-level fields
// `kind` does not know are skipped, not built.
std::optional<ApiError> ParseRequestBody(std::string_view body, OJson* out,
                                         RequestKind kind = RequestKind::kAny);

// JSON text that arrives inside a request (tool-call arguments as a string): the same depth
// limit; nested too deep or not JSON -> a discarded value (is_discarded()).
OJson ParseNestedJson(std::string_view text);

// `n` samples of each of `prompts` prompts within the limits above, or a 400 naming the field.
std::optional<ApiError> CheckChoiceCount(int64_t n, int64_t prompts);

// A whole (not streamed) answer is built in memory before it is sent: at most kMaxWholeTokens
// tokens in all its choices and kMaxWholeLogprobs log-probability entries (each token's own and
// its alternatives, ~350 bytes each as JSON). 1024 choices x 4096 tokens x 21 entries would have
// been ~54 GiB. A streamed answer is written as it comes and is not bounded here.
inline constexpr int64_t kMaxWholeTokens = int64_t{1} << 24;
inline constexpr int64_t kMaxWholeLogprobs = int64_t{1} << 19;
// `choices` x `max_tokens` (each choice's limit) within those, with `logprobs` alternatives per
// token (-1: no log-probabilities); else a 400 that says to stream it or ask for less.
std::optional<ApiError> CheckWholeAnswerSize(int64_t choices, int64_t max_tokens, int logprobs);

// --- Integers ---------------------------------------------------------------------------------
// Every integer a request gives is read through here, as a value in [lo, hi]. nlohmann keeps a
// JSON integer above INT64_MAX as unsigned, which get<int64_t>() wraps (2^64 - 1 became -1,
// "no top-k"), and a value past 2^31 read into an int wraps too: both are refused instead. Not an
// integer, or outside [lo, hi] -> a 400 naming `field` and the range.
std::optional<ApiError> IntegerInRange(const OJson& v, const std::string& field, int64_t lo,
                                       int64_t hi, int64_t* out);

}  // namespace mimo
