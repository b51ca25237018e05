// The `mimo` reasoning parser (see reasoning_parser.h for the behaviour it implements).
#include "chat/reasoning_parser.h"

#include "chat/tag_match.h"
#include "core/check.h"

namespace mimo {
namespace {
constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kToolCallOpen = "<tool_call>";
constexpr std::string_view kToolCallClose = "</tool_call>";

// Appends `text` to the open tool-call piece of `out` (or starts one).
void AppendToolCallText(std::string_view text, bool block_ends, ReasoningDelta* out) {
  if (text.empty() && !block_ends) return;
  auto& pieces = out->tool_calls;
  if (pieces.empty() || pieces.back().block_ends) pieces.emplace_back();
  pieces.back().text.append(text);
  pieces.back().block_ends = block_ends;
}
}  // namespace

std::string ReasoningDelta::ToolCallText() const {
  std::string text;
  for (const ReasoningToolCallText& t : tool_calls) text += t.text;
  return text;
}

MimoReasoningParser::MimoReasoningParser(ReasoningParserOptions options)
    : options_(options),
      state_(options.prompt_ends_in_think ? State::kReasoning : State::kStart) {}

ReasoningDelta MimoReasoningParser::Feed(std::string_view delta) {
  MIMO_CHECK(!finished_, "MimoReasoningParser::Feed after Finish");
  buf_.append(delta);
  ReasoningDelta out;
  Step(&out);
  return out;
}

// Moves as much of buf_ as can be decided into `out`; stops when the rest needs more text.
void MimoReasoningParser::Step(ReasoningDelta* out) {
  for (;;) {
    std::string_view buf = buf_;
    switch (state_) {
      case State::kStart: {
        size_t p = SkipSpaces(buf);
        std::string_view rest = buf.substr(p);
        if (rest.substr(0, kThinkOpen.size()) == kThinkOpen) {
          if (options_.enable_thinking) {
            buf_.erase(0, p + kThinkOpen.size());
            state_ = State::kReasoning;
          } else {
            held_ = buf_.substr(0, p + kThinkOpen.size());
            buf_.erase(0, p + kThinkOpen.size());
            state_ = State::kOffThinkOpen;
          }
          continue;
        }
        if (IsProperPrefixOf(rest, kThinkOpen)) return;  // may still become "<think>"
        state_ = State::kContent;
        continue;
      }
      case State::kOffThinkOpen: {
        size_t p = SkipSpaces(buf);
        std::string_view rest = buf.substr(p);
        if (rest.substr(0, kThinkClose.size()) == kThinkClose) {
          held_.clear();  // the empty "<think></think>" is dropped
          buf_.erase(0, p + kThinkClose.size());
          state_ = State::kContent;
          continue;
        }
        if (IsProperPrefixOf(rest, kThinkClose)) return;
        buf_ = held_ + buf_;  // a real think block with thinking off: plain content
        held_.clear();
        state_ = State::kContent;
        continue;
      }
      case State::kReasoning: {
        size_t close = buf.find(kThinkClose);
        size_t tool = buf.find(kToolCallOpen);
        if (close != std::string_view::npos && (tool == std::string_view::npos || close < tool)) {
          out->reasoning.append(buf.substr(0, close));
          buf_.erase(0, close + kThinkClose.size());
          state_ = State::kContent;
          continue;
        }
        if (tool != std::string_view::npos) {
          // A call inside reasoning: the block goes to the tool-call parser, not to reasoning.
          out->reasoning.append(buf.substr(0, tool));
          buf_.erase(0, tool);
          state_ = State::kToolCall;
          continue;
        }
        size_t hold = PartialTagSuffix(buf, {kThinkClose, kToolCallOpen});
        out->reasoning.append(buf.substr(0, buf.size() - hold));
        buf_.erase(0, buf.size() - hold);
        return;
      }
      case State::kToolCall: {
        // The call runs to its `</tool_call>`: a `</think>` before it is text of the call (a
        // parameter value may hold it: the output constraint allows it there, and the tool-call
        // parser reads values verbatim).
        size_t end = buf.find(kToolCallClose);
        if (end != std::string_view::npos) {
          AppendToolCallText(buf.substr(0, end + kToolCallClose.size()), true, out);
          buf_.erase(0, end + kToolCallClose.size());
          state_ = State::kReasoning;  // the think block goes on after the call
          continue;
        }
        size_t hold = PartialTagSuffix(buf, {kToolCallClose});
        AppendToolCallText(buf.substr(0, buf.size() - hold), false, out);
        buf_.erase(0, buf.size() - hold);
        return;
      }
      case State::kContent:
        out->content.append(buf_);
        buf_.clear();
        return;
    }
  }
}

ReasoningDelta MimoReasoningParser::Finish() {
  MIMO_CHECK(!finished_, "MimoReasoningParser::Finish called twice");
  finished_ = true;
  ReasoningDelta out;
  switch (state_) {
    case State::kStart:
    case State::kContent:
      out.content = std::move(buf_);
      break;
    case State::kOffThinkOpen:
      out.content = held_ + buf_;
      break;
    case State::kReasoning:
      out.reasoning = std::move(buf_);  // truncated reasoning (or a held partial tag) stays reasoning
      break;
    case State::kToolCall:  // a call cut short: the tool-call parser decides what it was
      AppendToolCallText(buf_, false, &out);
      break;
  }
  buf_.clear();
  held_.clear();
  return out;
}

ReasoningDelta MimoReasoningParser::Parse(std::string_view text, ReasoningParserOptions options) {
  MimoReasoningParser parser(options);
  ReasoningDelta out = parser.Feed(text);
  ReasoningDelta tail = parser.Finish();
  out.reasoning += tail.reasoning;
  out.content += tail.content;
  for (ReasoningToolCallText& t : tail.tool_calls) {
    AppendToolCallText(t.text, t.block_ends, &out);
  }
  return out;
}

}  // namespace mimo
