// Grammar: a compiled structured-output constraint (JSON Schema, any JSON object, or `mimo` tool
// calls) over one vocabulary: a PushdownAutomaton plus the per-state token sets that make a mask
// cheap. GrammarMatcher runs it for one request.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "grammar/grammar_options.h"
#include "grammar/pushdown_automaton.h"
#include "grammar/state_mask_table.h"
#include "grammar/token_distance.h"
#include "grammar/token_vocabulary.h"

namespace mimo {

// Immutable once built; share one instance between requests and threads.
class Grammar {
 public:
  // InvalidArgument for a malformed or unsatisfiable schema, Unimplemented naming an unsupported
  // feature (e.g. "JSON schema: 'patternProperties' is not supported (at /properties/a)"),
  // ResourceExhausted when the compile would cross options.limits (compile_budget.h) or
  // `cancel` was set (IsCancelledCompile).
  static StatusOr<std::shared_ptr<const Grammar>> FromJsonSchema(
      std::string_view schema_json, std::shared_ptr<const TokenVocabulary> vocab,
      const GrammarOptions& options = {}, const std::atomic<bool>* cancel = nullptr);
  // Any JSON object (response_format json_object).
  static StatusOr<std::shared_ptr<const Grammar>> JsonObject(
      std::shared_ptr<const TokenVocabulary> vocab, const GrammarOptions& options = {},
      const std::atomic<bool>* cancel = nullptr);
  // The `mimo` tool-call format for an OpenAI `tools` array (see tool_call_grammar.h).
  // only_function: "" = any tool (tool_choice "required"), else that one (named tool_choice).
  // parallel: one or more blocks, else exactly one.
  static StatusOr<std::shared_ptr<const Grammar>> ToolCalls(
      std::string_view tools_json, const std::string& only_function, bool parallel,
      std::shared_ptr<const TokenVocabulary> vocab, const GrammarOptions& options = {},
      const std::atomic<bool>* cancel = nullptr);

  const TokenVocabulary& vocab() const { return *vocab_; }
  const std::shared_ptr<const TokenVocabulary>& vocab_ptr() const { return vocab_; }
  const PushdownAutomaton& pda() const { return *pda_; }
  const StateMaskTable& masks() const { return *masks_; }
  const TokenDistance& distance() const { return *distance_; }

  struct Stats {
    double compile_ms = 0;      // schema -> automaton
    double precompute_ms = 0;   // per-state token sets
    double distance_ms = 0;     // token distances (TokenDistance)
    int32_t num_states = 0;
    int32_t num_rules = 0;
    size_t mask_table_bytes = 0;
    size_t text_profile_bytes = 0;  // profiles of this grammar's strings (shared ones included)
    size_t distance_bytes = 0;
    size_t automaton_bytes = 0;  // the pushdown automaton (with its text rules' tables)
  };
  // Memory this grammar holds (what a cache of grammars counts): its automaton, masks,
  // distances and string profiles (shared ones included).
  size_t bytes() const {
    return stats_.automaton_bytes + stats_.mask_table_bytes + stats_.distance_bytes +
           stats_.text_profile_bytes;
  }
  const Stats& stats() const { return stats_; }

 private:
  struct Parts;
  static StatusOr<std::shared_ptr<const Grammar>> Finish(Parts parts);

  std::shared_ptr<const TokenVocabulary> vocab_;
  std::shared_ptr<const PushdownAutomaton> pda_;
  std::unique_ptr<StateMaskTable> masks_;
  std::unique_ptr<TokenDistance> distance_;
  Stats stats_;
};

}  // namespace mimo
