// The `mimo` tool-call parser: finds <tool_call> blocks in the content stream and turns them into
// OpenAI tool calls, one-shot or streamed delta by delta.
//
// Format (the MiMo-V2.5 chat template renders history exactly so; V2.6 emits the compact form):
//   <tool_call>\n<function=NAME>\n<parameter=KEY>VALUE</parameter>\n...</function>\n</tool_call>
//   <tool_call><function=NAME><parameter=KEY>VALUE</parameter></function></tool_call>
// Whitespace is allowed (and ignored) between the tags; NAME and KEY are whitespace-trimmed.
//
// Values (decisions):
// - VALUE is every byte between `<parameter=KEY>` and the first following `</parameter>`. The
//   template writes `<parameter=K>` + value + `</parameter>` with no framing newline, and its
//   instructions say the value "is preserved exactly as-is, including newlines and spaces", so
//   nothing is stripped from a string value: a leading/trailing newline is part of it.
// - String parameters (declared "string", a type list containing "string", no/unknown type, or
//   not declared in the schema) are kept verbatim: no HTML unescape, no "null" -> null. They are
//   streamed incrementally.
// - Other declared types are coerced when `</parameter>` arrives (CoerceParameterValue in
//   tool_schema.h: surrounding whitespace trimmed, HTML unescaped, "null" -> null, ...); a value
//   that does not fit is kept as the raw string.
// - `arguments` is a JSON object text in emitted key order, formatted like Python's json.dumps
//   (`{"k": v, "k2": v2}`), non-ASCII kept as UTF-8.
//
// Blocks (decisions):
// - Text before, between and after blocks is content, verbatim.
// - NAME not among the request's tools (or no tools): the whole block up to and including its
//   `</tool_call>` (or the end of output) is content. A `<tool_call>` not followed by
//   `<function=NAME>` (after optional whitespace) is content as well.
// - A call is committed once `<function=NAME>` is complete with a known NAME: it gets the next
//   index and an id, and its header is streamed at once. From then on it is never retracted:
//   - output that ends inside the call (max_tokens) keeps the call with the parameters that
//     completed, plus a string parameter cut short (its text so far); a non-string value cut
//     short is dropped; the arguments object is closed. A block that ends before the function
//     name is complete is content.
//   - stray text between parameters is ignored; a missing `</function>` or `</tool_call>` is
//     tolerated (the call ends at `</tool_call>`, a new `<tool_call>`, or other text after
//     `</function>`).
// - Streaming emits the same bytes for any chunking: a held-back suffix that may become a tag is
//   decided by the next delta, so no partial tag reaches content or an argument fragment, and an
//   argument fragment is always whole JSON escapes.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "chat/tool_schema.h"

namespace mimo {

// A complete call in OpenAI shape: {id, type: "function", function: {name, arguments}}.
struct ToolCall {
  int index = 0;
  std::string id;         // "call_" + 24 alphanumerics
  std::string name;
  std::string arguments;  // JSON object text
};

// One OpenAI streaming tool-call delta. The first delta of a call carries id and name (and
// arguments ""); later ones carry only an arguments fragment to append.
struct ToolCallDelta {
  int index = 0;
  std::string id;         // non-empty only in a call's first delta
  std::string name;       // non-empty only in a call's first delta
  std::string arguments;  // fragment
};

struct ToolParseDelta {
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return content.empty() && tool_calls.empty(); }
};

struct ToolParseResult {
  std::string content;
  std::vector<ToolCall> tool_calls;
};

// Appends a delta to an accumulated result (how a client assembles a stream).
void AccumulateToolDelta(const ToolParseDelta& delta, ToolParseResult* result);

struct ToolCallParserOptions {
  // Seed for call ids; unset = std::random_device. Tests set it for deterministic ids.
  std::optional<uint64_t> id_seed;
};

// One parser per generated sequence; not thread-safe.
class MimoToolCallParser {
 public:
  explicit MimoToolCallParser(ToolSchema schema, ToolCallParserOptions options = {});

  ToolParseDelta Feed(std::string_view text);
  ToolParseDelta Finish();  // end of output; Feed must not follow
  // The block being parsed ends here although the output goes on (the reasoning block closed
  // around a call written inside it): what is open is ended as Finish would end it, and parsing
  // goes on outside any block.
  ToolParseDelta EndBlock();

  // One-shot: a fresh parser fed `text` in one piece, then finished.
  static ToolParseResult Parse(const ToolSchema& schema, std::string_view text,
                               ToolCallParserOptions options = {});

 private:
  enum class State {
    kContent,        // outside any block
    kBlockStart,     // after <tool_call>, expecting <function=NAME>
    kUnknownBlock,   // block of an unknown function: content until </tool_call>
    kInCall,         // committed call, between parameters
    kStringValue,    // inside a string parameter value (streamed)
    kRawValue,       // inside a non-string parameter value (buffered until </parameter>)
    kAfterFunction,  // after </function>, expecting </tool_call>
  };
  bool Step(ToolParseDelta* out);  // one transition; false when more text is needed
  void Flush(ToolParseDelta* out);  // ends what is open as if the output ended here
  bool StepBlockStart(ToolParseDelta* out);
  bool StepInCall(ToolParseDelta* out);
  void BeginCall(std::string name, ToolParseDelta* out);
  void EndCall(ToolParseDelta* out);  // closes the arguments object
  void AppendArguments(std::string_view fragment, ToolParseDelta* out);
  std::string NewCallId();

  ToolSchema schema_;
  std::mt19937_64 rng_;
  State state_ = State::kContent;
  std::string buf_;             // text not yet consumed
  int next_index_ = 0;
  int call_index_ = -1;         // index of the open call
  std::string call_name_;
  int params_in_call_ = 0;      // parameters written into the open call's arguments
  std::string param_key_;       // the open parameter
  JsonTypeMask param_types_ = 0;
  size_t raw_scanned_ = 0;      // kRawValue: bytes of buf_ already searched for </parameter>
  bool finished_ = false;
};

}  // namespace mimo
