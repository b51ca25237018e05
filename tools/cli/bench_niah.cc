// `mimo bench niah`: needle-in-a-haystack through any OpenAI-compatible server. For each context
// length and depth of a grid, a passkey sentence ("The pass key is 48213. Remember it. 48213 is
// the pass key.") is hidden at that depth of filler text about that many tokens long, and the
// model is asked for it at the end; a trial is right when the answer contains the number. Lengths
// are met with the server's own token counts: one calibration request measures the filler's
// tokens per character, and every request's usage.prompt_tokens is recorded. Writes the grid as
// JSON and as an SVG heatmap (depth x length, colour = accuracy) that opens in a browser.
#include <httplib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/http_client.h"

namespace mimo::cli {
namespace {

using Json = nlohmann::json;

// The filler of the passkey-retrieval task (Mohtashami & Jaggi's format): plain sentences every
// tokenizer splits into ordinary word tokens.
const char* const kFiller =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ";
const char* const kTask =
    "There is an important piece of information hidden inside a lot of irrelevant text. Find it "
    "and memorize it. I will quiz you about it.\n\n";
const char* const kQuestion = "\n\nWhat is the pass key? The pass key is";

Completion Ask(const OpenAiServer& s, const std::string& prompt, int max_tokens) {
  Json body = {{"model", s.model}, {"temperature", 0.0}, {"max_tokens", max_tokens}};
  if (s.chat) {
    body["messages"] = Json::array({{{"role", "user"}, {"content", prompt}}});
  } else {
    body["prompt"] = prompt;
  }
  return Complete(s, body);
}

// The haystack of `chars` filler characters with the needle after the sentence nearest to
// depth * chars (0: first, 1: last).
std::string Haystack(size_t chars, double depth, const std::string& needle) {
  std::string filler;
  while (filler.size() < chars) filler += kFiller;
  filler.resize(chars);
  size_t at = static_cast<size_t>(depth * static_cast<double>(chars));
  if (at >= chars) {
    at = chars;
  } else {
    const size_t dot = filler.rfind(". ", at);
    at = dot == std::string::npos ? 0 : dot + 2;
  }
  return std::string(kTask) + filler.substr(0, at) + needle + filler.substr(at) + kQuestion;
}

std::vector<double> ParseList(const std::string& s) {
  std::vector<double> out;
  std::stringstream in(s);
  std::string x;
  while (std::getline(in, x, ',')) {
    char* end = nullptr;
    const double v = std::strtod(x.c_str(), &end);
    if (x.empty() || *end != '\0') return {};
    out.push_back(v);
  }
  return out;
}

// Red (0) through yellow to green (1).
std::string Colour(double acc) {
  const int r = acc < 0.5 ? 220 : static_cast<int>(220 - (acc - 0.5) * 2 * 180);
  const int g = acc < 0.5 ? static_cast<int>(60 + acc * 2 * 140) : 200;
  char buf[16];
  std::snprintf(buf, sizeof(buf), "#%02x%02x%02x", r, g, 60);
  return buf;
}

std::string XmlEscape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else if (c == '&')
      o += "&amp;";
    else if (c == '"')
      o += "&quot;";
    else
      o += c;
  }
  return o;
}

std::string Svg(const std::string& title, const std::vector<int>& lengths,
                const std::vector<double>& depths, const std::vector<std::vector<double>>& acc) {
  const int cw = 64, ch = 32, left = 90, top = 50;
  const int w = left + cw * static_cast<int>(lengths.size()) + 20;
  const int h = top + ch * static_cast<int>(depths.size()) + 50;
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  o << "<text x=\"" << left << "\" y=\"20\" font-size=\"14\">" << XmlEscape(title) << "</text>\n";
  for (size_t d = 0; d < depths.size(); ++d) {
    char label[32];
    std::snprintf(label, sizeof(label), "%.0f%%", depths[d] * 100);
    o << "<text x=\"" << left - 8 << "\" y=\"" << top + ch * d + ch / 2 + 4
      << "\" text-anchor=\"end\">" << label << "</text>\n";
    for (size_t l = 0; l < lengths.size(); ++l) {
      char v[16];
      std::snprintf(v, sizeof(v), "%.2f", acc[d][l]);
      o << "<rect class=\"cell\" x=\"" << left + cw * l << "\" y=\"" << top + ch * d
        << "\" width=\"" << cw << "\" height=\"" << ch << "\" fill=\"" << Colour(acc[d][l])
        << "\" stroke=\"white\" data-depth=\"" << depths[d] << "\" data-length=\"" << lengths[l]
        << "\" data-accuracy=\"" << v << "\"><title>depth " << label << ", " << lengths[l]
        << " tokens: " << v << "</title></rect>\n";
      o << "<text x=\"" << left + cw * l + cw / 2 << "\" y=\"" << top + ch * d + ch / 2 + 4
        << "\" text-anchor=\"middle\">" << v << "</text>\n";
    }
  }
  for (size_t l = 0; l < lengths.size(); ++l) {
    o << "<text x=\"" << left + cw * l + cw / 2 << "\" y=\"" << top + ch * depths.size() + 18
      << "\" text-anchor=\"middle\">" << lengths[l] << "</text>\n";
  }
  o << "<text x=\"" << left << "\" y=\"" << h - 8
    << "\">context length (tokens) across, needle depth down; colour = retrieval accuracy"
    << "</text>\n</svg>\n";
  return o.str();
}

}  // namespace

int RunBenchNiah(int argc, char** argv) {
  Args a;
  std::string err;
  if (!a.Parse(argc, argv,
               {"base-url", "model", "api-key", "endpoint", "lengths", "depths", "trials", "seed",
                "output", "svg", "max-tokens"},
               {}, &err) ||
      !a.Has("base-url") || !a.Has("model")) {
    std::fprintf(stderr,
                 "bench niah: %s\nusage: mimo bench niah --base-url URL --model NAME "
                 "[--lengths 1024,2048,4096] [--depths 0,0.25,0.5,0.75,1] [--trials 2] "
                 "[--seed 0] [--endpoint chat|completions] [--max-tokens 16] [--output F.json] "
                 "[--svg F.svg] [--api-key K]\n",
                 err.empty() ? "need --base-url and --model" : err.c_str());
    return 2;
  }
  OpenAiServer s;
  if (!ServerFromFlags("bench niah", a, &s)) return 2;
  const std::string endpoint = s.chat ? "chat" : "completions";
  const std::vector<double> len_list = ParseList(a.Get("lengths", "1024,2048,4096"));
  const std::vector<double> depths = ParseList(a.Get("depths", "0,0.25,0.5,0.75,1"));
  const int trials = static_cast<int>(a.GetInt("trials", 2));
  const int max_tokens = static_cast<int>(a.GetInt("max-tokens", 16));
  std::vector<int> lengths;
  for (double l : len_list) lengths.push_back(static_cast<int>(l));
  const bool bad_len =
      len_list.empty() || std::any_of(len_list.begin(), len_list.end(),
                                      [](double l) { return l < 64 || l != static_cast<int>(l); });
  const bool bad_depth = depths.empty() || std::any_of(depths.begin(), depths.end(), [](double d) {
                           return !(d >= 0 && d <= 1);
                         });
  if (bad_len || bad_depth || trials <= 0 || max_tokens <= 0) {
    std::fprintf(stderr,
                 "bench niah: --lengths: whole token counts >= 64; --depths: fractions in [0, 1]; "
                 "--trials and --max-tokens positive\n");
    return 2;
  }

  // Calibration: the tokens of the prompt around an empty haystack, and per filler character.
  const size_t probe = 4000;
  const Completion base = Ask(s, Haystack(0, 0, ""), 1);
  const Completion full = Ask(s, Haystack(probe, 0, ""), 1);
  if (!base.ok || !full.ok || base.prompt_tokens <= 0 || full.prompt_tokens <= base.prompt_tokens) {
    std::fprintf(stderr, "bench niah: calibration failed (%s): the server must report usage\n",
                 (!base.ok   ? base.error
                  : !full.ok ? full.error
                             : "no prompt_tokens")
                     .c_str());
    return 1;
  }
  const double tokens_per_char =
      static_cast<double>(full.prompt_tokens - base.prompt_tokens) / static_cast<double>(probe);

  std::mt19937 rng(static_cast<uint32_t>(a.GetInt("seed", 0)));
  std::uniform_int_distribution<int> key(10000, 99999);
  std::vector<std::vector<double>> acc(depths.size(), std::vector<double>(lengths.size(), 0.0));
  Json cells = Json::array();
  int failed = 0;
  for (size_t l = 0; l < lengths.size(); ++l) {
    for (size_t d = 0; d < depths.size(); ++d) {
      int right = 0;
      Json trials_json = Json::array();
      for (int t = 0; t < trials; ++t) {
        const std::string k = std::to_string(key(rng));
        const std::string needle =
            "The pass key is " + k + ". Remember it. " + k + " is the pass key. ";
        const int room = std::max(0, lengths[l] - base.prompt_tokens - 20);
        const size_t chars = static_cast<size_t>(room / tokens_per_char);
        const Completion r = Ask(s, Haystack(chars, depths[d], needle), max_tokens);
        const bool ok = r.ok && r.text.find(k) != std::string::npos;
        right += ok;
        failed += !r.ok;
        Json tj = {
            {"key", k}, {"prompt_tokens", r.prompt_tokens}, {"answer", r.text}, {"correct", ok}};
        if (!r.ok) tj["error"] = r.error;
        trials_json.push_back(tj);
      }
      acc[d][l] = static_cast<double>(right) / trials;
      cells.push_back({{"length", lengths[l]},
                       {"depth", depths[d]},
                       {"accuracy", acc[d][l]},
                       {"trials", trials_json}});
      std::fprintf(stderr, "bench niah: %d tokens, depth %.2f: %d / %d\n", lengths[l], depths[d],
                   right, trials);
    }
  }

  std::printf("Needle in a haystack: %s (%s), %d trials per cell, accuracy\n", s.origin.c_str(),
              s.model.c_str(), trials);
  std::printf("%-8s", "depth");
  for (int len : lengths) std::printf(" %8d", len);
  std::printf("\n");
  double total = 0;
  for (size_t d = 0; d < depths.size(); ++d) {
    std::printf("%-8.2f", depths[d]);
    for (size_t l = 0; l < lengths.size(); ++l) {
      std::printf(" %8.2f", acc[d][l]);
      total += acc[d][l];
    }
    std::printf("\n");
  }
  const double mean = total / static_cast<double>(depths.size() * lengths.size());
  std::printf("mean accuracy %.3f; failed requests %d\n", mean, failed);
  const Json result = {{"base_url", s.origin},  {"model", s.model},   {"endpoint", endpoint},
                       {"trials", trials},      {"lengths", lengths}, {"depths", depths},
                       {"mean_accuracy", mean}, {"failed", failed},   {"cells", cells}};
  if (a.Has("output")) {
    std::ofstream f(a.Get("output"));
    if (!f) {
      std::fprintf(stderr, "bench niah: cannot write %s\n", a.Get("output").c_str());
      return 1;
    }
    f << result.dump(2) << "\n";
  }
  if (a.Has("svg")) {
    std::ofstream f(a.Get("svg"));
    if (!f) {
      std::fprintf(stderr, "bench niah: cannot write %s\n", a.Get("svg").c_str());
      return 1;
    }
    f << Svg("Needle in a haystack: " + s.model, lengths, depths, acc);
  }
  return 0;
}

}  // namespace mimo::cli
