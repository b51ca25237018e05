// Jinja lexer. Mirrors jinja2/lexer.py: the root rule finds the next tag, applies `-`/lstrip to the
// text before it; block/variable/comment ends apply `-`, `+` and trim_blocks to the text after.
#include "jinja/jinja_lexer.h"

#include <cctype>
#include <cstdlib>

#include "jinja/jinja_value.h"

namespace mimo::jinja {
namespace {

// Decodes the code point at s[i] (UTF-8) and its byte length.
char32_t CodePointAt(const std::string& s, size_t i, size_t* len) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (i + n > s.size()) n = 1;
  *len = n;
  std::u32string d = DecodeUtf8(s.substr(i, n));
  return d.empty() ? 0xFFFD : d[0];
}

// Python str.rstrip() (Unicode whitespace).
std::string PyRstrip(const std::string& s) {
  std::u32string u = DecodeUtf8(s);
  size_t end = u.size();
  while (end > 0 && IsPySpace(u[end - 1])) --end;
  return EncodeUtf8(u.substr(0, end));
}

bool AllPySpace(const std::string& s) {
  for (char32_t c : DecodeUtf8(s)) {
    if (!IsPySpace(c)) return false;
  }
  return true;
}

// Length of the run of Python whitespace starting at s[i].
size_t SpaceRun(const std::string& s, size_t i) {
  size_t start = i;
  while (i < s.size()) {
    size_t len;
    if (!IsPySpace(CodePointAt(s, i, &len))) break;
    i += len;
  }
  return i - start;
}

int HexVal(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python's "unicode-escape" decoding of a string literal body (unknown escapes stay verbatim).
bool UnescapeString(const std::string& body, std::string* out, std::string* error) {
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out->push_back(c);
      continue;
    }
    char e = body[++i];
    switch (e) {
      case '\n': break;  // line continuation
      case '\\': out->push_back('\\'); break;
      case '\'': out->push_back('\''); break;
      case '"': out->push_back('"'); break;
      case 'a': out->push_back('\a'); break;
      case 'b': out->push_back('\b'); break;
      case 'f': out->push_back('\f'); break;
      case 'n': out->push_back('\n'); break;
      case 'r': out->push_back('\r'); break;
      case 't': out->push_back('\t'); break;
      case 'v': out->push_back('\v'); break;
      case 'x': case 'u': case 'U': {
        size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        char32_t cp = 0;
        for (size_t k = 0; k < n; ++k) {
          int h = i + 1 + k < body.size() ? HexVal(body[i + 1 + k]) : -1;
          if (h < 0) {
            *error = std::string("truncated \\") + e + " escape";
            return false;
          }
          cp = cp * 16 + h;
        }
        if (cp > 0x10FFFF) {
          *error = "illegal Unicode character";
          return false;
        }
        AppendUtf8(cp, out);
        i += n;
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          char32_t cp = 0;
          size_t k = 0;
          while (k < 3 && i + k < body.size() && body[i + k] >= '0' && body[i + k] <= '7') {
            cp = cp * 8 + (body[i + k] - '0');
            ++k;
          }
          AppendUtf8(cp, out);
          i += k - 1;
        } else {
          out->push_back('\\');
          out->push_back(e);
        }
    }
  }
  return true;
}

class Lexer {
 public:
  Lexer(std::string source, const LexerOptions& opt) : src_(std::move(source)), opt_(opt) {}

  Status Run(std::vector<Token>* out);

 private:
  int LineAt(size_t pos) {
    while (line_pos_ < pos && line_pos_ < src_.size()) {
      if (src_[line_pos_] == '\n') ++line_;
      ++line_pos_;
    }
    return line_;
  }
  Status Fail(size_t pos, const std::string& msg) {
    return InvalidArgument("template syntax error at line %d: %s", LineAt(pos), msg.c_str());
  }
  void Emit(TokenType t, std::string v, size_t pos) {
    Token tok;
    tok.type = t;
    tok.value = std::move(v);
    tok.line = LineAt(pos);
    out_->push_back(std::move(tok));
  }
  // Consumes a tag end (`%}`, `#}` or `}}` given by `end`) at pos_, if present, applying `-`,
  // `+` and (when `trim`) trim_blocks. Returns false when no end is at pos_.
  bool MatchEnd(const std::string& end, bool trim);
  Status LexTag(bool block);
  Status LexComment();
  Status LexRaw();

  std::string src_;
  LexerOptions opt_;
  std::vector<Token>* out_ = nullptr;
  size_t pos_ = 0;
  bool line_starting_ = true;
  int line_ = 1;
  size_t line_pos_ = 0;
};

bool Lexer::MatchEnd(const std::string& end, bool trim) {
  size_t p = pos_;
  char sign = 0;
  if (p < src_.size() && (src_[p] == '-' || src_[p] == '+') &&
      src_.compare(p + 1, end.size(), end) == 0) {
    sign = src_[p];
    ++p;
  } else if (src_.compare(p, end.size(), end) != 0) {
    return false;
  }
  if (sign == '+' && end == "}}") return false;  // `+}}` is not an end marker in jinja2
  p += end.size();
  if (sign == '-') {
    p += SpaceRun(src_, p);
  } else if (sign == 0 && trim && opt_.trim_blocks && p < src_.size() && src_[p] == '\n') {
    ++p;
  }
  line_starting_ = p > 0 && src_[p - 1] == '\n';
  pos_ = p;
  return true;
}

Status Lexer::Run(std::vector<Token>* out) {
  out_ = out;
  // Newline normalisation and trailing-newline removal, as jinja2's tokeniter does.
  std::string norm;
  norm.reserve(src_.size());
  for (size_t i = 0; i < src_.size(); ++i) {
    if (src_[i] == '\r') {
      norm.push_back('\n');
      if (i + 1 < src_.size() && src_[i + 1] == '\n') ++i;
    } else {
      norm.push_back(src_[i]);
    }
  }
  if (!opt_.keep_trailing_newline && !norm.empty() && norm.back() == '\n') norm.pop_back();
  src_ = std::move(norm);

  while (pos_ < src_.size()) {
    size_t tag = pos_;
    for (; tag + 1 < src_.size(); ++tag) {
      if (src_[tag] == '{' && (src_[tag + 1] == '{' || src_[tag + 1] == '%' ||
                               src_[tag + 1] == '#')) {
        break;
      }
    }
    if (tag + 1 >= src_.size()) {  // no more tags: the rest is data
      Emit(TokenType::kData, src_.substr(pos_), pos_);
      pos_ = src_.size();
      break;
    }
    char kind = src_[tag + 1];
    char sign = 0;
    size_t after = tag + 2;
    if (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) {
      sign = src_[after];
      ++after;
    }
    std::string text = src_.substr(pos_, tag - pos_);
    if (sign == '-') {
      text = PyRstrip(text);
    } else if (sign != '+' && opt_.lstrip_blocks && kind != '{') {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && l_pos < text.size() && AllPySpace(text.substr(l_pos))) {
        text = text.substr(0, l_pos);
      }
    }
    if (!text.empty()) Emit(TokenType::kData, text, pos_);
    pos_ = after;
    line_starting_ = false;
    if (kind == '#') {
      MIMO_RETURN_IF_ERROR(LexComment());
    } else if (kind == '%') {
      // {% raw %} ... {% endraw %}
      size_t p = pos_ + SpaceRun(src_, pos_);
      if (src_.compare(p, 3, "raw") == 0) {
        size_t q = p + 3;
        q += SpaceRun(src_, q);
        size_t save = pos_;
        pos_ = q;
        if (src_.compare(q, 3, "-%}") == 0) {
          pos_ = q + 3;
          pos_ += SpaceRun(src_, pos_);
          MIMO_RETURN_IF_ERROR(LexRaw());
          continue;
        }
        if (src_.compare(q, 2, "%}") == 0) {
          pos_ = q + 2;
          MIMO_RETURN_IF_ERROR(LexRaw());
          continue;
        }
        pos_ = save;
      }
      Emit(TokenType::kBlockBegin, "", tag);
      MIMO_RETURN_IF_ERROR(LexTag(true));
    } else {
      Emit(TokenType::kVarBegin, "", tag);
      MIMO_RETURN_IF_ERROR(LexTag(false));
    }
  }
  Emit(TokenType::kEof, "", src_.size());
  return Status::Ok();
}

Status Lexer::LexComment() {
  size_t start = pos_;
  size_t end = src_.find("#}", start);
  if (end == std::string::npos) return Fail(start, "Missing end of comment tag");
  // The lazy match stops at the earliest of "-#}", "+#}", "#}".
  pos_ = (end > start && (src_[end - 1] == '-' || src_[end - 1] == '+')) ? end - 1 : end;
  if (!MatchEnd("#}", true)) return Fail(pos_, "Missing end of comment tag");
  return Status::Ok();
}

Status Lexer::LexRaw() {
  // Find "{%" [-+] ws "endraw" ws end.
  size_t search = pos_;
  while (true) {
    size_t b = src_.find("{%", search);
    if (b == std::string::npos) return Fail(pos_, "Missing end of raw directive");
    size_t p = b + 2;
    char sign = 0;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
    p += SpaceRun(src_, p);
    if (src_.compare(p, 6, "endraw") != 0) {
      search = b + 2;
      continue;
    }
    p += 6;
    p += SpaceRun(src_, p);
    std::string text = src_.substr(pos_, b - pos_);
    if (sign == '-') {
      text = PyRstrip(text);
    } else if (sign != '+' && opt_.lstrip_blocks) {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && l_pos < text.size() && AllPySpace(text.substr(l_pos))) {
        text = text.substr(0, l_pos);
      }
    }
    size_t save = pos_;
    pos_ = p;
    if (!MatchEnd("%}", true)) {
      pos_ = save;
      search = b + 2;
      continue;
    }
    if (!text.empty()) Emit(TokenType::kData, text, save);
    return Status::Ok();
  }
}

Status Lexer::LexTag(bool block) {
  const std::string end = block ? "%}" : "}}";
  std::vector<char> balance;
  static const char* kOps2[] = {"**", "//", "==", "!=", ">=", "<="};
  static const std::string kOps1 = "+-/*%~[](){}><=.:|,;";
  while (true) {
    if (pos_ >= src_.size()) {
      return Fail(pos_, block ? "unexpected end of template, expected '%}'"
                              : "unexpected end of template, expected '}}'");
    }
    if (balance.empty()) {
      size_t before = pos_;
      if (MatchEnd(end, block)) {
        Emit(block ? TokenType::kBlockEnd : TokenType::kVarEnd, "", before);
        return Status::Ok();
      }
    }
    char c = src_[pos_];
    size_t start = pos_;
    size_t ws = SpaceRun(src_, pos_);
    if (ws > 0) {
      pos_ += ws;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      // Float: digits ( (.digits)? e[+-]digits | .digits ); else integer.
      auto digits = [&](size_t p) {
        size_t q = p;
        while (q < src_.size() &&
               (std::isdigit(static_cast<unsigned char>(src_[q])) ||
                (src_[q] == '_' && q > p && q + 1 < src_.size() &&
                 std::isdigit(static_cast<unsigned char>(src_[q + 1]))))) {
          ++q;
        }
        return q;
      };
      size_t p = digits(pos_);
      size_t q = p;
      bool is_float = false;
      bool prev_dot = start > 0 && src_[start - 1] == '.';
      if (!prev_dot) {
        if (q < src_.size() && src_[q] == '.' && q + 1 < src_.size() &&
            std::isdigit(static_cast<unsigned char>(src_[q + 1]))) {
          q = digits(q + 1);
          is_float = true;
        }
        if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
          size_t r = q + 1;
          if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
          if (r < src_.size() && std::isdigit(static_cast<unsigned char>(src_[r]))) {
            q = digits(r);
            is_float = true;
          }
        }
      }
      std::string text;
      size_t stop = is_float ? q : p;
      for (size_t i = start; i < stop; ++i) {
        if (src_[i] != '_') text.push_back(src_[i]);
      }
      Token tok;
      tok.line = LineAt(start);
      if (is_float) {
        tok.type = TokenType::kFloat;
        tok.float_value = std::strtod(text.c_str(), nullptr);
      } else {
        tok.type = TokenType::kInt;
        tok.int_value = std::strtoll(text.c_str(), nullptr, 10);
      }
      tok.value = text;
      out_->push_back(tok);
      pos_ = stop;
      continue;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_' ||
        static_cast<unsigned char>(c) >= 0x80) {
      size_t p = pos_;
      while (p < src_.size()) {
        unsigned char d = static_cast<unsigned char>(src_[p]);
        if (std::isalnum(d) || d == '_') {
          ++p;
        } else if (d >= 0x80) {
          size_t len;
          if (IsPySpace(CodePointAt(src_, p, &len))) break;
          p += len;
        } else {
          break;
        }
      }
      Emit(TokenType::kName, src_.substr(pos_, p - pos_), start);
      pos_ = p;
      continue;
    }
    if (c == '\'' || c == '"') {
      size_t p = pos_ + 1;
      while (p < src_.size() && src_[p] != c) p += src_[p] == '\\' ? 2 : 1;
      if (p >= src_.size()) return Fail(start, "unterminated string literal");
      std::string value, error;
      if (!UnescapeString(src_.substr(pos_ + 1, p - pos_ - 1), &value, &error)) {
        return Fail(start, error);
      }
      Emit(TokenType::kString, value, start);
      pos_ = p + 1;
      continue;
    }
    std::string op;
    for (const char* o : kOps2) {
      if (src_.compare(pos_, 2, o) == 0) op = o;
    }
    if (op.empty() && kOps1.find(c) != std::string::npos) op = std::string(1, c);
    if (op.empty()) {
      return Fail(start, std::string("unexpected char '") + c + "'");
    }
    if (op == "(" || op == "[" || op == "{") {
      balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
    } else if (op == ")" || op == "]" || op == "}") {
      if (balance.empty()) return Fail(start, "unexpected '" + op + "'");
      if (balance.back() != op[0]) {
        return Fail(start, "unexpected '" + op + "', expected '" + balance.back() + "'");
      }
      balance.pop_back();
    }
    Emit(TokenType::kOperator, op, start);
    pos_ += op.size();
  }
}

}  // namespace

StatusOr<std::vector<Token>> Tokenize(const std::string& source, const LexerOptions& options) {
  std::vector<Token> tokens;
  Lexer lexer(source, options);
  Status st = lexer.Run(&tokens);
  if (!st.ok()) return st;
  return tokens;
}

}  // namespace mimo::jinja
