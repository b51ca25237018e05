// Recursive-descent parser to a small AST, then Thompson construction (repetitions rebuild their
// operand, so each copy has its own states).
#include "grammar/regex_parser.h"

#include <algorithm>
#include <memory>
#include <vector>

namespace mimo {
namespace {

using CpRanges = std::vector<std::pair<uint32_t, uint32_t>>;  // sorted, disjoint

struct Node {
  enum class Kind { kSet, kSeq, kAlt, kRepeat, kStart, kEnd };
  Kind kind = Kind::kSeq;
  CpRanges set;
  std::vector<std::unique_ptr<Node>> kids;
  int min = 0, max = 0;  // kRepeat; max < 0 unbounded
};

CpRanges Normalize(CpRanges r) {
  std::sort(r.begin(), r.end());
  CpRanges out;
  for (auto [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

CpRanges Complement(const CpRanges& r, uint32_t limit) {
  CpRanges out;
  uint32_t next = 0;
  for (auto [lo, hi] : r) {
    if (lo > limit) break;
    if (lo > next) out.emplace_back(next, lo - 1);
    next = std::max(next, hi + 1);
  }
  if (next <= limit) out.emplace_back(next, limit);
  return out;
}

const CpRanges kDigit = {{'0', '9'}};
const CpRanges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const CpRanges kSpace = {{'\t', '\r'}, {' ', ' '}};  // \t \n \v \f \r and space
const CpRanges kDot = {{0, '\n' - 1}, {'\n' + 1, '\r' - 1}, {'\r' + 1, 0x2027}, {0x202A, 0x10FFFF}};

class Parser {
 public:
  explicit Parser(std::string_view pattern) : src_(pattern) {}

  StatusOr<std::unique_ptr<Node>> Parse() {
    if (!Decode()) return InvalidArgument("JSON schema: 'pattern' is not valid UTF-8");
    auto n = ParseAlt(0);
    if (!n.ok()) return n.status();
    if (pos_ != cps_.size()) return Error("unbalanced ')'");
    return n;
  }

 private:
  bool Decode() {
    size_t i = 0;
    while (i < src_.size()) {
      const uint8_t c = src_[i];
      int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
      if (n == 0 || i + n > src_.size()) return false;
      uint32_t cp = n == 1 ? c : c & (0x7F >> n);
      for (int k = 1; k < n; ++k) {
        const uint8_t d = src_[i + k];
        if ((d & 0xC0) != 0x80) return false;
        cp = (cp << 6) | (d & 0x3F);
      }
      cps_.push_back(cp);
      i += n;
    }
    return true;
  }

  Status Error(const char* what) const {
    return InvalidArgument("JSON schema: 'pattern' %s at offset %zu", what, pos_);
  }
  Status Unsupported(const char* what) const {
    return Unimplemented("JSON schema: 'pattern' uses %s, which is not supported", what);
  }
  bool AtEnd() const { return pos_ >= cps_.size(); }
  uint32_t Peek() const { return cps_[pos_]; }

  StatusOr<std::unique_ptr<Node>> ParseAlt(int depth) {
    if (depth > 100) return Error("nests too deeply");
    auto alt = std::make_unique<Node>();
    alt->kind = Node::Kind::kAlt;
    while (true) {
      auto seq = ParseSeq(depth);
      if (!seq.ok()) return seq.status();
      alt->kids.push_back(std::move(seq).value());
      if (!AtEnd() && Peek() == '|') {
        ++pos_;
        continue;
      }
      break;
    }
    return alt;
  }

  StatusOr<std::unique_ptr<Node>> ParseSeq(int depth) {
    auto seq = std::make_unique<Node>();
    seq->kind = Node::Kind::kSeq;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      auto atom = ParseAtom(depth);
      if (!atom.ok()) return atom.status();
      std::unique_ptr<Node> a = std::move(atom).value();
      auto q = ParseQuantifier(&a);
      if (!q.ok()) return q;
      seq->kids.push_back(std::move(a));
    }
    return seq;
  }

  Status ParseQuantifier(std::unique_ptr<Node>* atom) {
    while (!AtEnd()) {
      int min = -1, max = -1;
      const uint32_t c = Peek();
      if (c == '*') {
        min = 0;
        ++pos_;
      } else if (c == '+') {
        min = 1;
        ++pos_;
      } else if (c == '?') {
        min = 0;
        max = 1;
        ++pos_;
      } else if (c == '{') {
        if (pos_ + 1 < cps_.size() && cps_[pos_ + 1] == ',')
          return Unsupported("'{,n}' (a quantifier in Python's re, literal text in ECMA-262)");
        size_t save = pos_;
        if (!ParseBraces(&min, &max)) {
          pos_ = save;  // not a quantifier: a literal '{' (ECMA-262 Annex B, and Python)
          return Status::Ok();
        }
      } else {
        return Status::Ok();
      }
      if ((*atom)->kind == Node::Kind::kStart || (*atom)->kind == Node::Kind::kEnd)
        return Error("has a quantifier after an anchor");
      if (min > RegexParser::kMaxRepeat || max > RegexParser::kMaxRepeat)
        return Unimplemented("JSON schema: 'pattern' repeats more than %d times",
                             RegexParser::kMaxRepeat);
      if (max >= 0 && max < min) return Error("has a quantifier {n,m} with m < n");
      if (!AtEnd() && Peek() == '?') ++pos_;  // lazy: the same language
      auto rep = std::make_unique<Node>();
      rep->kind = Node::Kind::kRepeat;
      rep->min = min;
      rep->max = max;
      rep->kids.push_back(std::move(*atom));
      *atom = std::move(rep);
    }
    return Status::Ok();
  }

  // {n}, {n,}, {n,m}; false (nothing consumed by the caller) if not of that form.
  bool ParseBraces(int* min, int* max) {
    ++pos_;
    auto number = [&](int* out) {
      size_t start = pos_;
      long v = 0;
      while (!AtEnd() && Peek() >= '0' && Peek() <= '9') {
        v = std::min<long>(v * 10 + (Peek() - '0'), 1000000);
        ++pos_;
      }
      *out = static_cast<int>(v);
      return pos_ > start;
    };
    if (!number(min)) return false;
    if (!AtEnd() && Peek() == '}') {
      ++pos_;
      *max = *min;
      return true;
    }
    if (AtEnd() || Peek() != ',') return false;
    ++pos_;
    if (!AtEnd() && Peek() == '}') {
      ++pos_;
      *max = -1;
      return true;
    }
    if (!number(max) || AtEnd() || Peek() != '}') return false;
    ++pos_;
    return true;
  }

  static std::unique_ptr<Node> SetNode(CpRanges r) {
    auto n = std::make_unique<Node>();
    n->kind = Node::Kind::kSet;
    n->set = Normalize(std::move(r));
    return n;
  }

  StatusOr<std::unique_ptr<Node>> ParseAtom(int depth) {
    const uint32_t c = Peek();
    ++pos_;
    switch (c) {
      case '(': {
        if (!AtEnd() && Peek() == '?') {
          ++pos_;
          if (AtEnd()) return Error("ends inside a group");
          const uint32_t k = Peek();
          if (k == ':') {
            ++pos_;
          } else if (k == '<' && pos_ + 1 < cps_.size() && cps_[pos_ + 1] != '=' &&
                     cps_[pos_ + 1] != '!') {
            while (!AtEnd() && Peek() != '>') ++pos_;  // named group
            if (AtEnd()) return Error("ends inside a group name");
            ++pos_;
          } else if (k == '=' || k == '!' || k == '<') {
            return Unsupported("lookaround");
          } else {
            return Unsupported("a group modifier '(?'");
          }
        }
        auto inner = ParseAlt(depth + 1);
        if (!inner.ok()) return inner.status();
        if (AtEnd() || Peek() != ')') return Error("has an unclosed '('");
        ++pos_;
        return inner;
      }
      case ')':
        return Error("has an unbalanced ')'");
      case '[':
        return ParseClass();
      case '.':
        return SetNode(kDot);
      case '^': {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kStart;
        return n;
      }
      case '$': {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kEnd;
        return n;
      }
      case '\\': {
        CpRanges set;
        auto st = ParseEscape(/*in_class=*/false, &set, nullptr);
        if (!st.ok()) return st;
        return SetNode(std::move(set));
      }
      case '*':
      case '+':
      case '?':
        return Error("has a quantifier with nothing to repeat");
      default:
        return SetNode({{c, c}});
    }
  }

  // After a backslash. *shorthand is set when the escape was \d \w \s \D \W \S.
  Status ParseEscape(bool in_class, CpRanges* out, bool* shorthand) {
    if (AtEnd()) return Error("ends with a lone backslash");
    const uint32_t c = Peek();
    ++pos_;
    auto single = [&](uint32_t cp) {
      out->emplace_back(cp, cp);
      return Status::Ok();
    };
    auto mark = [&]() {
      if (shorthand) *shorthand = true;
    };
    auto hex = [&](int digits, uint32_t* v) {
      *v = 0;
      for (int i = 0; i < digits; ++i) {
        if (AtEnd()) return false;
        const uint32_t h = Peek();
        int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        if (d < 0) return false;
        *v = *v * 16 + d;
        ++pos_;
      }
      return true;
    };
    switch (c) {
      case 'd': mark(); out->insert(out->end(), kDigit.begin(), kDigit.end()); return Status::Ok();
      case 'w': mark(); out->insert(out->end(), kWord.begin(), kWord.end()); return Status::Ok();
      case 's': mark(); out->insert(out->end(), kSpace.begin(), kSpace.end()); return Status::Ok();
      case 'D': mark(); for (auto r : Complement(kDigit, 0x7F)) out->push_back(r); return Status::Ok();
      case 'W': mark(); for (auto r : Complement(kWord, 0x7F)) out->push_back(r); return Status::Ok();
      case 'S': mark(); for (auto r : Complement(kSpace, 0x7F)) out->push_back(r); return Status::Ok();
      case 't': return single('\t');
      case 'n': return single('\n');
      case 'r': return single('\r');
      case 'f': return single('\f');
      case 'v': return single('\v');
      case '0':
        if (!AtEnd() && Peek() >= '0' && Peek() <= '9') return Unsupported("an octal escape");
        return single(0);
      case 'x': {
        uint32_t v;
        if (!hex(2, &v)) return Error("has a malformed \\x escape");
        return single(v);
      }
      case 'u': {
        uint32_t v;
        if (!hex(4, &v)) return Error("has a malformed \\u escape");
        if (v >= 0xD800 && v <= 0xDFFF) return Unsupported("a surrogate \\u escape");
        return single(v);
      }
      case 'b':
        if (in_class) return single('\b');
        return Unsupported("a word boundary \\b");
      case 'B':
        return Unsupported("a word boundary \\B");
      case 'p':
      case 'P':
        return Unsupported("a Unicode property escape \\p");
      case 'c':
        return Unsupported("a control escape \\c");
      case 'k':
        return Unsupported("a named backreference \\k");
      default:
        if (c >= '1' && c <= '9') return Unsupported("a backreference");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
          return Unsupported("an unknown escape");
        return single(c);  // escaped punctuation
    }
  }

  StatusOr<std::unique_ptr<Node>> ParseClass() {
    bool negated = false;
    if (!AtEnd() && Peek() == '^') {
      negated = true;
      ++pos_;
    }
    if (!AtEnd() && Peek() == ']') return Unsupported("an empty class '[]' or '[^]'");
    CpRanges set;
    bool shorthand = false;
    while (true) {
      if (AtEnd()) return Error("has an unclosed '['");
      uint32_t c = Peek();
      if (c == ']') {
        ++pos_;
        break;
      }
      CpRanges item;
      bool item_short = false;
      ++pos_;
      if (c == '\\') {
        auto st = ParseEscape(/*in_class=*/true, &item, &item_short);
        if (!st.ok()) return st;
      } else {
        item.emplace_back(c, c);
      }
      // A range a-b (not when either side is a shorthand class, nor before the closing ']').
      if (!item_short && item.size() == 1 && item[0].first == item[0].second && !AtEnd() &&
          Peek() == '-' && pos_ + 1 < cps_.size() && cps_[pos_ + 1] != ']') {
        ++pos_;
        uint32_t hi = Peek();
        ++pos_;
        if (hi == '\\') {
          CpRanges h;
          bool h_short = false;
          auto st = ParseEscape(true, &h, &h_short);
          if (!st.ok()) return st;
          if (h_short || h.size() != 1) return Error("has a range ending in a class");
          hi = h[0].first;
        }
        if (hi < item[0].first) return Error("has a class range out of order");
        item[0].second = hi;
      }
      shorthand = shorthand || item_short;
      set.insert(set.end(), item.begin(), item.end());
    }
    set = Normalize(std::move(set));
    if (negated) set = Complement(set, shorthand ? 0x7F : 0x10FFFF);
    return SetNode(std::move(set));
  }

  std::string_view src_;
  std::vector<uint32_t> cps_;
  size_t pos_ = 0;
};

bool ContainsAnchor(const Node& n) {
  if (n.kind == Node::Kind::kStart || n.kind == Node::Kind::kEnd) return true;
  for (const auto& k : n.kids)
    if (ContainsAnchor(*k)) return true;
  return false;
}

// Characters matched by a node when that number is fixed, else -1.
int64_t FixedLength(const Node& n) {
  switch (n.kind) {
    case Node::Kind::kSet:
      return 1;
    case Node::Kind::kStart:
    case Node::Kind::kEnd:
      return 0;
    case Node::Kind::kSeq: {
      int64_t total = 0;
      for (const auto& k : n.kids) {
        const int64_t l = FixedLength(*k);
        if (l < 0) return -1;
        total += l;
      }
      return total;
    }
    case Node::Kind::kAlt: {
      int64_t len = -2;
      for (const auto& k : n.kids) {
        const int64_t l = FixedLength(*k);
        if (l < 0 || (len != -2 && l != len)) return -1;
        len = l;
      }
      return len < 0 ? -1 : len;
    }
    case Node::Kind::kRepeat: {
      if (n.max != n.min) return -1;
      const int64_t l = FixedLength(*n.kids[0]);
      return l < 0 ? -1 : l * n.min;
    }
  }
  return -1;
}

// See RegexParser::Compile: moves one bounded single-character repetition of a fully anchored
// sequence into total length bounds. False when the pattern does not have that shape.
bool RelaxRepetition(Node* seq, RegexParser::LengthBounds* out) {
  Node* variable = nullptr;
  int64_t fixed = 0;
  for (auto& k : seq->kids) {
    const int64_t l = FixedLength(*k);
    if (l >= 0) {
      fixed += l;
      continue;
    }
    if (variable != nullptr || k->kind != Node::Kind::kRepeat || FixedLength(*k->kids[0]) != 1)
      return false;
    variable = k.get();
  }
  if (variable == nullptr || (variable->max < 0 && variable->min <= 1)) return false;
  out->min = static_cast<int32_t>(fixed + variable->min);
  out->max = variable->max < 0 ? -1 : static_cast<int32_t>(fixed + variable->max);
  variable->min = 0;
  variable->max = -1;
  return true;
}

Nfa::Frag Build(const Node& n, Nfa* nfa) {
  switch (n.kind) {
    case Node::Kind::kSet:
      return nfa->CodepointSet(n.set);
    case Node::Kind::kSeq: {
      std::vector<Nfa::Frag> parts;
      for (const auto& k : n.kids) parts.push_back(Build(*k, nfa));
      return nfa->Seq(parts);
    }
    case Node::Kind::kAlt: {
      if (n.kids.size() == 1) return Build(*n.kids[0], nfa);
      std::vector<Nfa::Frag> alts;
      for (const auto& k : n.kids) alts.push_back(Build(*k, nfa));
      return nfa->Alt(alts);
    }
    case Node::Kind::kRepeat:
      return nfa->Repeat([&] { return Build(*n.kids[0], nfa); }, n.min, n.max);
    case Node::Kind::kStart:
    case Node::Kind::kEnd:
      return nfa->Empty();
  }
  return nfa->Empty();
}

}  // namespace

StatusOr<Nfa::Frag> RegexParser::Compile(std::string_view pattern, Nfa* nfa,
                                          LengthBounds* relaxed) {
  Parser p(pattern);
  auto root = p.Parse();
  if (!root.ok()) return root.status();
  if (relaxed != nullptr) {
    *relaxed = LengthBounds{};
    auto& alts = (*root)->kids;
    if (alts.size() == 1) {
      auto& kids = alts[0]->kids;
      const bool anchored = kids.size() >= 2 && kids.front()->kind == Node::Kind::kStart &&
                            kids.back()->kind == Node::Kind::kEnd;
      if (anchored && !RelaxRepetition(alts[0].get(), relaxed)) *relaxed = LengthBounds{};
    }
  }
  std::vector<Nfa::Frag> alts;
  for (auto& seq : (*root)->kids) {
    // Anchors: only first / last element of a top-level alternative.
    bool start = false, end = false;
    auto& kids = seq->kids;
    if (!kids.empty() && kids.front()->kind == Node::Kind::kStart) {
      start = true;
      kids.erase(kids.begin());
    }
    if (!kids.empty() && kids.back()->kind == Node::Kind::kEnd) {
      end = true;
      kids.pop_back();
    }
    if (ContainsAnchor(*seq))
      return Unimplemented(
          "JSON schema: 'pattern' uses an anchor inside the pattern, which is not supported");
    auto any = [&] { return nfa->Star(nfa->Codepoints(0, 0x10FFFF)); };
    std::vector<Nfa::Frag> parts;
    if (!start) parts.push_back(any());
    parts.push_back(Build(*seq, nfa));
    if (!end) parts.push_back(any());
    alts.push_back(nfa->Seq(parts));
  }
  return nfa->Alt(alts);
}

}  // namespace mimo
