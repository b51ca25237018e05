// The `mimo` tool-call parser state machine (see tool_call_parser.h for the format and decisions).
//
// One implementation serves both modes: Parse() feeds the whole text at once. Every transition
// is decided from a prefix of the buffered text alone, and waits (returns false) while the
// decision could still change with more text, which is what makes any chunking give the same
// bytes.
#include "chat/tool_call_parser.h"

#include "chat/tag_match.h"
#include "core/check.h"

namespace mimo {
namespace {

constexpr std::string_view kToolCallOpen = "<tool_call>";
constexpr std::string_view kToolCallClose = "</tool_call>";
constexpr std::string_view kFunctionOpen = "<function=";
constexpr std::string_view kFunctionClose = "</function>";
constexpr std::string_view kParameterOpen = "<parameter=";
constexpr std::string_view kParameterClose = "</parameter>";
// Longest function name / parameter key accepted inside `<function=...>` / `<parameter=...>`.
constexpr size_t kMaxNameLength = 512;

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

std::string_view Trim(std::string_view s) {
  size_t b = SkipSpaces(s);
  size_t e = s.size();
  while (e > b && IsAsciiSpace(s[e - 1])) --e;
  return s.substr(b, e - b);
}

enum class NameScan { kIncomplete, kInvalid, kComplete };

// Scans `<open>NAME>` at the start of `rest` (which starts with `open`). On kComplete, *name is
// the trimmed NAME and *end the offset just past '>'. A name never holds '<' or a newline.
NameScan ScanTagName(std::string_view rest, std::string_view open, std::string_view* name,
                     size_t* end) {
  for (size_t i = open.size(); i < rest.size(); ++i) {
    char c = rest[i];
    if (c == '>') {
      *name = Trim(rest.substr(open.size(), i - open.size()));
      *end = i + 1;
      return name->empty() ? NameScan::kInvalid : NameScan::kComplete;
    }
    if (c == '<' || c == '\n' || i - open.size() >= kMaxNameLength) return NameScan::kInvalid;
  }
  return NameScan::kIncomplete;
}

std::string Escaped(std::string_view s) {
  std::string out;
  AppendJsonEscaped(s, &out);
  return out;
}

}  // namespace

void AccumulateToolDelta(const ToolParseDelta& delta, ToolParseResult* result) {
  result->content += delta.content;
  for (const ToolCallDelta& d : delta.tool_calls) {
    if (!d.id.empty()) {
      result->tool_calls.push_back({d.index, d.id, d.name, d.arguments});
      continue;
    }
    for (auto it = result->tool_calls.rbegin(); it != result->tool_calls.rend(); ++it) {
      if (it->index == d.index) {
        it->arguments += d.arguments;
        break;
      }
    }
  }
}

MimoToolCallParser::MimoToolCallParser(ToolSchema schema, ToolCallParserOptions options)
    : schema_(std::move(schema)) {
  if (options.id_seed) {
    rng_.seed(*options.id_seed);
  } else {
    std::random_device rd;
    rng_.seed((static_cast<uint64_t>(rd()) << 32) ^ rd());
  }
}

std::string MimoToolCallParser::NewCallId() {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::uniform_int_distribution<int> pick(0, sizeof(kAlphabet) - 2);
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[pick(rng_)];
  return id;
}

ToolParseDelta MimoToolCallParser::Feed(std::string_view text) {
  MIMO_CHECK(!finished_, "MimoToolCallParser::Feed after Finish");
  buf_.append(text);
  ToolParseDelta out;
  while (Step(&out)) {
  }
  return out;
}

ToolParseDelta MimoToolCallParser::Finish() {
  MIMO_CHECK(!finished_, "MimoToolCallParser::Finish called twice");
  finished_ = true;
  ToolParseDelta out;
  Flush(&out);
  return out;
}

ToolParseDelta MimoToolCallParser::EndBlock() {
  MIMO_CHECK(!finished_, "MimoToolCallParser::EndBlock after Finish");
  ToolParseDelta out;
  Flush(&out);
  return out;
}

void MimoToolCallParser::Flush(ToolParseDelta* out) {
  switch (state_) {
    case State::kContent:
    case State::kUnknownBlock:
      out->content += buf_;
      break;
    case State::kBlockStart:  // the function name never completed: the block is text
      out->content += std::string(kToolCallOpen) + buf_;
      break;
    case State::kStringValue:  // a string value cut short keeps its text so far
      AppendArguments(Escaped(buf_) + "\"", out);
      EndCall(out);
      break;
    case State::kInCall:
    case State::kRawValue:  // a non-string value cut short is dropped
      EndCall(out);
      break;
    case State::kAfterFunction:
      break;
  }
  buf_.clear();
  raw_scanned_ = 0;
  state_ = State::kContent;
}

ToolParseResult MimoToolCallParser::Parse(const ToolSchema& schema, std::string_view text,
                                          ToolCallParserOptions options) {
  MimoToolCallParser parser(schema, options);
  ToolParseResult result;
  AccumulateToolDelta(parser.Feed(text), &result);
  AccumulateToolDelta(parser.Finish(), &result);
  return result;
}

void MimoToolCallParser::AppendArguments(std::string_view fragment, ToolParseDelta* out) {
  if (fragment.empty()) return;
  auto& calls = out->tool_calls;
  // Merge with the previous fragment of the same call; the header delta keeps arguments "".
  if (!calls.empty() && calls.back().index == call_index_ && calls.back().id.empty()) {
    calls.back().arguments.append(fragment);
  } else {
    calls.push_back({call_index_, "", "", std::string(fragment)});
  }
}

void MimoToolCallParser::BeginCall(std::string name, ToolParseDelta* out) {
  call_index_ = next_index_++;
  call_name_ = std::move(name);
  params_in_call_ = 0;
  out->tool_calls.push_back({call_index_, NewCallId(), call_name_, ""});
}

void MimoToolCallParser::EndCall(ToolParseDelta* out) {
  AppendArguments(params_in_call_ == 0 ? "{}" : "}", out);
}

bool MimoToolCallParser::Step(ToolParseDelta* out) {
  std::string_view buf = buf_;
  switch (state_) {
    case State::kContent: {
      size_t pos = buf.find(kToolCallOpen);
      if (pos != std::string_view::npos) {
        out->content.append(buf.substr(0, pos));
        buf_.erase(0, pos + kToolCallOpen.size());
        state_ = State::kBlockStart;
        return true;
      }
      size_t keep = buf.size() - PartialTagSuffix(buf, {kToolCallOpen});
      out->content.append(buf.substr(0, keep));
      buf_.erase(0, keep);
      return false;
    }
    case State::kBlockStart:
      return StepBlockStart(out);
    case State::kUnknownBlock: {
      size_t pos = buf.find(kToolCallClose);
      if (pos != std::string_view::npos) {
        out->content.append(buf.substr(0, pos + kToolCallClose.size()));
        buf_.erase(0, pos + kToolCallClose.size());
        state_ = State::kContent;
        return true;
      }
      size_t keep = buf.size() - PartialTagSuffix(buf, {kToolCallClose});
      out->content.append(buf.substr(0, keep));
      buf_.erase(0, keep);
      return false;
    }
    case State::kInCall:
      return StepInCall(out);
    case State::kStringValue: {
      size_t pos = buf.find(kParameterClose);
      if (pos != std::string_view::npos) {
        AppendArguments(Escaped(buf.substr(0, pos)) + "\"", out);
        buf_.erase(0, pos + kParameterClose.size());
        state_ = State::kInCall;
        return true;
      }
      size_t keep = buf.size() - PartialTagSuffix(buf, {kParameterClose});
      AppendArguments(Escaped(buf.substr(0, keep)), out);
      buf_.erase(0, keep);
      return false;
    }
    case State::kRawValue: {
      // Resume the search where the last one stopped, so a long value fed in small deltas is
      // scanned once (not once per delta).
      size_t from =
          raw_scanned_ >= kParameterClose.size() ? raw_scanned_ - kParameterClose.size() + 1 : 0;
      size_t pos = buf.find(kParameterClose, from);
      if (pos == std::string_view::npos) {
        raw_scanned_ = buf.size();
        return false;
      }
      raw_scanned_ = 0;
      std::string fragment = params_in_call_++ == 0 ? "{\"" : ", \"";
      AppendJsonEscaped(param_key_, &fragment);
      fragment += "\": ";
      fragment += CoerceParameterValue(buf.substr(0, pos), param_types_);
      AppendArguments(fragment, out);
      buf_.erase(0, pos + kParameterClose.size());
      state_ = State::kInCall;
      return true;
    }
    case State::kAfterFunction: {
      size_t p = SkipSpaces(buf);
      std::string_view rest = buf.substr(p);
      if (StartsWith(rest, kToolCallClose)) {
        buf_.erase(0, p + kToolCallClose.size());
        state_ = State::kContent;
        return true;
      }
      if (IsProperPrefixOf(rest, kToolCallClose)) return false;
      state_ = State::kContent;  // `</tool_call>` missing: the text after is content again
      return true;
    }
  }
  return false;
}

bool MimoToolCallParser::StepBlockStart(ToolParseDelta* out) {
  std::string_view buf = buf_;
  size_t p = SkipSpaces(buf);
  std::string_view rest = buf.substr(p);
  if (IsProperPrefixOf(rest, kFunctionOpen)) return false;
  std::string_view name;
  size_t end = 0;
  NameScan scan = StartsWith(rest, kFunctionOpen) ? ScanTagName(rest, kFunctionOpen, &name, &end)
                                                 : NameScan::kInvalid;
  if (scan == NameScan::kIncomplete) return false;
  if (scan == NameScan::kInvalid) {  // not a tool call after all: the tag is text
    out->content.append(kToolCallOpen);
    state_ = State::kContent;
    return true;
  }
  if (schema_.HasFunction(name)) {
    std::string fn(name);
    buf_.erase(0, p + end);
    BeginCall(std::move(fn), out);
    state_ = State::kInCall;
  } else {
    out->content.append(kToolCallOpen);
    out->content.append(buf.substr(0, p + end));
    buf_.erase(0, p + end);
    state_ = State::kUnknownBlock;
  }
  return true;
}

bool MimoToolCallParser::StepInCall(ToolParseDelta* out) {
  std::string_view buf = buf_;
  size_t p = SkipSpaces(buf);
  std::string_view rest = buf.substr(p);
  if (StartsWith(rest, kParameterOpen)) {
    std::string_view key;
    size_t end = 0;
    NameScan scan = ScanTagName(rest, kParameterOpen, &key, &end);
    if (scan == NameScan::kIncomplete) return false;
    if (scan == NameScan::kComplete) {
      param_key_ = std::string(key);
      param_types_ = schema_.ParamTypes(call_name_, param_key_);
      buf_.erase(0, p + end);
      if (IsStringParam(param_types_)) {
        std::string fragment = params_in_call_++ == 0 ? "{\"" : ", \"";
        AppendJsonEscaped(param_key_, &fragment);
        fragment += "\": \"";
        AppendArguments(fragment, out);
        state_ = State::kStringValue;
      } else {
        raw_scanned_ = 0;
        state_ = State::kRawValue;
      }
      return true;
    }
    // kInvalid: falls through to the stray-text rule below.
  } else if (StartsWith(rest, kFunctionClose)) {
    buf_.erase(0, p + kFunctionClose.size());
    EndCall(out);
    state_ = State::kAfterFunction;
    return true;
  } else if (StartsWith(rest, kToolCallClose)) {  // `</function>` missing
    buf_.erase(0, p + kToolCallClose.size());
    EndCall(out);
    state_ = State::kContent;
    return true;
  } else if (StartsWith(rest, kToolCallOpen)) {  // both closing tags missing: a new block
    buf_.erase(0, p);
    EndCall(out);
    state_ = State::kContent;
    return true;
  } else if (IsProperPrefixOf(rest, kParameterOpen) || IsProperPrefixOf(rest, kFunctionClose) ||
             IsProperPrefixOf(rest, kToolCallClose) || IsProperPrefixOf(rest, kToolCallOpen)) {
    buf_.erase(0, p);  // whitespace between tags is ignored
    return false;
  }
  // Stray text between parameters is ignored, up to the next '<'.
  size_t next = rest.find('<', 1);
  buf_.erase(0, next == std::string_view::npos ? buf.size() : p + next);
  return true;
}

}  // namespace mimo
