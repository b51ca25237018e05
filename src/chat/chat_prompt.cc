// ContentEscaper and RenderChatPrompt (see chat_prompt.h).
#include "chat/chat_prompt.h"

#include <algorithm>

#include "core/utf8.h"

namespace mimo {
namespace {

using OJson = nlohmann::ordered_json;

// Sentinels are code points of the supplementary private-use planes: U+F0000 escapes the code
// point after it, U+F0001 + i stands for fragment i.
constexpr char32_t kEscape = 0xF0000;
constexpr char32_t kFirstSentinel = 0xF0001;
constexpr char32_t kLastSentinel = 0x10FFFF;

// The code point at s[i] if it is in the sentinel planes (4 bytes, lead F3 B0.. or F4), else 0.
char32_t PlaneCodePoint(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b != 0xF3 && b != 0xF4) return 0;
  char32_t cp = 0;
  return utf8::DecodeOne(s, i, &cp) == 4 && cp >= kEscape ? cp : 0;
}

// Length of the code point starting at s[i] (1 for an invalid byte).
size_t CodePointLength(std::string_view s, size_t i) {
  char32_t cp;
  const size_t n = utf8::DecodeOne(s, i, &cp);
  return n == 0 ? 1 : n;
}

// Start of the code point that ends with byte s[j - 1].
size_t CodePointStart(std::string_view s, size_t j) {
  size_t i = j - 1;
  while (i > 0 && j - i < 4 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return CodePointLength(s, i) == j - i ? i : j - 1;
}

}  // namespace

ContentEscaper::ContentEscaper(const Tokenizer& tok) : by_first_(256), by_last_(256) {
  for (const AddedToken& t : tok.added_tokens()) tokens_.push_back(t.content);
  // Longest first, so that a scan finds the leftmost-longest match as the tokenizer does.
  std::vector<int> order(tokens_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return tokens_[a].size() > tokens_[b].size(); });
  for (int i : order) {
    const std::string_view t = tokens_[i];
    by_first_[static_cast<uint8_t>(t.front())].push_back(i);
    by_last_[static_cast<uint8_t>(t.back())].push_back(i);
    max_len_ = std::max(max_len_, t.size());
  }
  for (std::string_view t : tokens_) reasoning_tag_.push_back(t == "<think>" || t == "</think>");
}

int ContentEscaper::FragmentIndex(std::string_view text) {
  auto it = index_.find(std::string(text));
  if (it != index_.end()) return it->second;
  if (fragments_.size() > kLastSentinel - kFirstSentinel) return -1;
  const int i = static_cast<int>(fragments_.size());
  fragments_.emplace_back(text);
  index_.emplace(fragments_.back(), i);
  return i;
}

Status ContentEscaper::EscapeString(std::string* str, bool keep_reasoning_tags) {
  const std::string_view s = *str;
  const size_t n = s.size();
  struct Mark {
    size_t begin, end;
    bool fragment;  // replaced by a sentinel; else a plane code point escaped as it is
  };
  std::vector<Mark> marks;
  // Added-token text, leftmost-longest; kept reasoning tags are left in place.
  size_t first = n, last_end = 0;  // where the first match starts, the last ends
  for (size_t i = 0; i < n; ++i) {
    if (PlaneCodePoint(s, i) != 0) {
      marks.push_back({i, i + 4, false});
      i += 3;
      continue;
    }
    for (int c : by_first_[static_cast<uint8_t>(s[i])]) {
      const std::string_view t = tokens_[c];
      if (s.compare(i, t.size(), t) != 0) continue;
      if (!(keep_reasoning_tags && reasoning_tag_[c])) marks.push_back({i, i + t.size(), true});
      first = std::min(first, i);
      last_end = i + t.size();
      i += t.size() - 1;
      break;
    }
  }
  // The string's edges: a start that ends a token begun before it, an end that begins one.
  const size_t edge = max_len_ > 0 ? max_len_ - 1 : 0;  // longest proper prefix or suffix
  for (size_t j = 1; j <= std::min(first, edge); ++j) {
    for (int c : by_last_[static_cast<uint8_t>(s[j - 1])]) {
      const std::string_view t = tokens_[c];
      if (t.size() > j && t.compare(t.size() - j, j, s.substr(0, j)) == 0) {
        marks.push_back({CodePointStart(s, j), j, true});
        break;
      }
    }
  }
  for (size_t i = std::max(last_end, n - std::min(n, edge)); i < n; ++i) {
    for (int c : by_first_[static_cast<uint8_t>(s[i])]) {
      const std::string_view t = tokens_[c];
      if (t.size() > n - i && t.compare(0, n - i, s.substr(i)) == 0) {
        marks.push_back({i, i + CodePointLength(s, i), true});
        break;
      }
    }
  }
  if (marks.empty()) return Status::Ok();
  std::sort(marks.begin(), marks.end(),
            [](const Mark& a, const Mark& b) { return a.begin < b.begin; });
  std::string out;
  out.reserve(n + 4 * marks.size());
  size_t pos = 0;
  for (const Mark& m : marks) {
    if (m.begin < pos) continue;  // the same code point marked twice
    out.append(s.substr(pos, m.begin - pos));
    if (m.fragment) {
      const int k = FragmentIndex(s.substr(m.begin, m.end - m.begin));
      if (k < 0) return InvalidArgument("the request holds too many distinct special-token texts");
      utf8::Append(kFirstSentinel + static_cast<char32_t>(k), &out);
    } else {
      utf8::Append(kEscape, &out);
      out.append(s.substr(m.begin, m.end - m.begin));
    }
    pos = m.end;
  }
  out.append(s.substr(pos));
  *str = std::move(out);
  return Status::Ok();
}

Status ContentEscaper::EscapeJson(OJson* j, bool keep_reasoning_tags) {
  if (j->is_string()) return EscapeString(j->get_ptr<std::string*>(), keep_reasoning_tags);
  if (j->is_array()) {
    for (OJson& x : *j) MIMO_RETURN_IF_ERROR(EscapeJson(&x, keep_reasoning_tags));
    return Status::Ok();
  }
  if (!j->is_object()) return Status::Ok();
  std::vector<std::string> keys;  // escaped; the object is rebuilt only if one changed
  bool renamed = false;
  for (auto it = j->begin(); it != j->end(); ++it) {
    MIMO_RETURN_IF_ERROR(EscapeJson(&it.value(), keep_reasoning_tags));
    keys.push_back(it.key());
    MIMO_RETURN_IF_ERROR(EscapeString(&keys.back(), keep_reasoning_tags));
    renamed = renamed || keys.back() != it.key();
  }
  if (!renamed) return Status::Ok();
  OJson out = OJson::object();
  size_t k = 0;
  for (auto it = j->begin(); it != j->end(); ++it)
    out[std::move(keys[k++])] = std::move(it.value());
  *j = std::move(out);
  return Status::Ok();
}

Status ContentEscaper::Escape(OJson* value) { return EscapeJson(value, false); }

Status ContentEscaper::EscapeMessages(OJson* messages) {
  if (!messages->is_array()) return Escape(messages);
  for (OJson& m : *messages) {
    const bool assistant = m.is_object() && m.contains("role") && m["role"] == "assistant";
    if (!assistant) {
      MIMO_RETURN_IF_ERROR(Escape(&m));
      continue;
    }
    // The content's text with the reasoning tags left visible, the rest of the message in full.
    OJson content;
    const bool has_content = m.contains("content");
    if (has_content) {
      content = std::move(m["content"]);
      m.erase("content");
    }
    MIMO_RETURN_IF_ERROR(Escape(&m));
    if (!has_content) continue;
    if (content.is_string()) {
      MIMO_RETURN_IF_ERROR(EscapeJson(&content, true));
    } else if (content.is_array()) {
      for (OJson& part : content) {
        OJson text;
        const bool has_text = part.is_object() && part.contains("text");
        if (has_text) {
          text = std::move(part["text"]);
          part.erase("text");
        }
        MIMO_RETURN_IF_ERROR(Escape(&part));
        if (!has_text) continue;
        MIMO_RETURN_IF_ERROR(EscapeJson(&text, true));
        part["text"] = std::move(text);
      }
    } else {
      MIMO_RETURN_IF_ERROR(Escape(&content));
    }
    m["content"] = std::move(content);
  }
  return Status::Ok();
}

ChatPrompt ContentEscaper::Restore(std::string_view s) const {
  ChatPrompt p;
  p.text.reserve(s.size());
  size_t pos = 0;  // s[pos:i] not yet copied
  for (size_t i = 0; i < s.size();) {
    const char32_t cp = PlaneCodePoint(s, i);
    if (cp == 0) {
      ++i;
      continue;
    }
    p.text.append(s.substr(pos, i - pos));
    if (cp == kEscape && i + 4 < s.size() && PlaneCodePoint(s, i + 4) != 0) {
      p.text.append(s.substr(i + 4, 4));  // an escaped code point: itself, no range
      i += 8;
    } else if (cp >= kFirstSentinel && cp - kFirstSentinel < fragments_.size()) {
      const std::string& f = fragments_[cp - kFirstSentinel];
      if (!p.literal.empty() && p.literal.back().end == p.text.size()) {
        p.literal.back().end += f.size();
      } else {
        p.literal.push_back({p.text.size(), p.text.size() + f.size()});
      }
      p.text += f;
      i += 4;
    } else {
      p.text.append(s.substr(i, 4));  // not ours (the template's own text)
      i += 4;
    }
    pos = i;
  }
  p.text.append(s.substr(pos));
  return p;
}

StatusOr<ChatPrompt> RenderChatPrompt(const ChatTemplate& tmpl, const ChatRenderRequest& r,
                                      const Tokenizer* tok) {
  static const OJson kNull = nullptr;
  static const OJson kNoKwargs = OJson::object();
  const OJson& messages = *r.messages;
  const OJson& tools = r.tools ? *r.tools : kNull;
  const OJson& kwargs = r.kwargs ? *r.kwargs : kNoKwargs;
  auto render = [&](const OJson& m, const OJson& t, const OJson& k) {
    return r.continue_final_message ? tmpl.RenderContinuing(m, t, k)
                                    : tmpl.Render(m, t, r.add_generation_prompt, k);
  };
  if (tok == nullptr) {
    MIMO_ASSIGN_OR_RETURN(std::string text, render(messages, tools, kwargs));
    return ChatPrompt{std::move(text), {}};
  }
  ContentEscaper esc(*tok);
  OJson m = messages, t = tools, k = kwargs;
  MIMO_RETURN_IF_ERROR(esc.EscapeMessages(&m));
  MIMO_RETURN_IF_ERROR(esc.Escape(&t));
  if (k.is_object()) {  // the values only: the keys are the template's variable names
    for (auto it = k.begin(); it != k.end(); ++it) MIMO_RETURN_IF_ERROR(esc.Escape(&it.value()));
  }
  StatusOr<std::string> text = render(m, t, k);
  if (!text.ok()) {  // a template's error may quote request text: show it as it was sent
    return Status(text.status().code(), esc.Restore(text.status().message()).text);
  }
  return esc.Restore(*text);
}

}  // namespace mimo
