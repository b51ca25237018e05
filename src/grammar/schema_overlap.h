// SchemaOverlap: a conservative proof that no value generated for one JSON schema validates
// against another, which is what makes a 'oneOf' safe to generate as a plain alternation
// (a value matching two branches would be invalid). "Fails" is answered only when certain:
// disjoint types, disjoint enum/const values, enum/const strings that the other side's pattern or
// length bounds reject, or objects told apart by a required property.
#pragma once

#include <cstdint>
#include <functional>

#include "core/status.h"
#include "grammar/json_schema_compiler.h"

namespace mimo {

// Holds only the reference resolver; used by one compile on one thread.
class SchemaOverlap {
 public:
  using Deref = std::function<StatusOr<const SchemaJson*>(const SchemaJson*)>;
  explicit SchemaOverlap(Deref deref) : deref_(std::move(deref)) {}

  // True when every value our grammar generates for `a` is invalid against `b`.
  bool OutputsFail(const SchemaJson& a, const SchemaJson& b, int depth = 0) const;

  // Kinds of JSON values, as bits.
  enum Kind : unsigned {
    kNull = 1, kBool = 2, kInt = 4, kFraction = 8, kString = 16, kObject = 32, kArray = 64,
    kAll = 127
  };
  // Kinds our grammar may generate for s / kinds a validator may accept for s.
  unsigned Generated(const SchemaJson& s, int depth = 0) const;
  unsigned Accepted(const SchemaJson& s, int depth = 0) const;

 private:
  const SchemaJson* Resolved(const SchemaJson& s) const;

  Deref deref_;
  // Calls left: $ref lets a small schema branch exponentially (anyOf of refs to itself); past
  // the budget every answer is the conservative one ("may overlap").
  mutable int64_t budget_ = 1'000'000;
};

}  // namespace mimo
