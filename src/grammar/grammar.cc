// Grammar factories: compile rules, then precompute the per-state token sets.
#include "grammar/grammar.h"

#include <chrono>
#include <set>

#include "grammar/grammar_builder.h"
#include "grammar/json_schema_compiler.h"
#include "grammar/tool_call_grammar.h"

namespace mimo {
namespace {

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

struct Grammar::Parts {
  std::shared_ptr<const TokenVocabulary> vocab;
  GrammarBuilder* builder;
  int32_t root;
  std::chrono::steady_clock::time_point t0;
};

StatusOr<std::shared_ptr<const Grammar>> Grammar::Finish(Parts parts) {
  CompileBudget* budget = parts.builder->budget();
  auto pda = parts.builder->Build(parts.root);
  if (!pda.ok()) return pda.status();
  auto g = std::shared_ptr<Grammar>(new Grammar());
  g->vocab_ = parts.vocab;
  g->pda_ = std::move(pda).value();
  g->stats_.compile_ms = MsSince(parts.t0);
  const auto t1 = std::chrono::steady_clock::now();
  g->masks_ = StateMaskTable::Build(*g->pda_, *g->vocab_, budget);
  if (g->masks_ == nullptr) return budget->status();
  g->stats_.precompute_ms = MsSince(t1);
  const auto t2 = std::chrono::steady_clock::now();
  g->distance_ = TokenDistance::Build(*g->pda_, *g->vocab_, budget);
  if (g->distance_ == nullptr) return budget->status();
  g->stats_.distance_ms = MsSince(t2);
  g->stats_.distance_bytes = g->distance_->bytes();
  g->stats_.num_states = g->pda_->num_states();
  g->stats_.num_rules = g->pda_->num_rules();
  g->stats_.mask_table_bytes = g->masks_->bytes();
  std::set<const TextProfile*> profiles;
  for (int32_t t = 0; t < g->pda_->num_text_rules(); ++t)
    profiles.insert(g->pda_->text_rule(t).profile.get());
  for (const TextProfile* p : profiles) g->stats_.text_profile_bytes += p->bytes();
  g->stats_.automaton_bytes = g->pda_->bytes();
  return std::shared_ptr<const Grammar>(std::move(g));
}

StatusOr<std::shared_ptr<const Grammar>> Grammar::FromJsonSchema(
    std::string_view schema_json, std::shared_ptr<const TokenVocabulary> vocab,
    const GrammarOptions& options, const std::atomic<bool>* cancel) {
  const auto t0 = std::chrono::steady_clock::now();
  SchemaJson schema = SchemaJson::parse(schema_json, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return InvalidArgument("JSON schema: not valid JSON");
  CompileBudget budget(options.limits, cancel);
  GrammarBuilder builder(&budget);
  JsonSchemaCompiler compiler(&builder, vocab, options, /*tool_safe=*/false);
  compiler.SetDocument(&schema);
  const int32_t root = builder.DeclareRule("root");
  auto body = compiler.Value(schema, "");
  if (!body.ok()) return body.status();
  builder.DefineRule(root, *body);
  return Finish({vocab, &builder, root, t0});
}

StatusOr<std::shared_ptr<const Grammar>> Grammar::JsonObject(
    std::shared_ptr<const TokenVocabulary> vocab, const GrammarOptions& options,
    const std::atomic<bool>* cancel) {
  const auto t0 = std::chrono::steady_clock::now();
  CompileBudget budget(options.limits, cancel);
  GrammarBuilder builder(&budget);
  JsonSchemaCompiler compiler(&builder, vocab, options, /*tool_safe=*/false);
  const int32_t root = builder.DeclareRule("root");
  builder.DefineRule(root, builder.nfa().CallRule(compiler.AnyObjectRule()));
  return Finish({vocab, &builder, root, t0});
}

StatusOr<std::shared_ptr<const Grammar>> Grammar::ToolCalls(
    std::string_view tools_json, const std::string& only_function, bool parallel,
    std::shared_ptr<const TokenVocabulary> vocab, const GrammarOptions& options,
    const std::atomic<bool>* cancel) {
  const auto t0 = std::chrono::steady_clock::now();
  CompileBudget budget(options.limits, cancel);
  GrammarBuilder builder(&budget);
  auto root = ToolCallGrammar::Compile(tools_json, only_function, parallel, vocab, options,
                                       &builder);
  if (!root.ok()) return root.status();
  return Finish({vocab, &builder, *root, t0});
}

}  // namespace mimo
