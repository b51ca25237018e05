// Jinja built-ins with Python/jinja2 semantics: operators, attribute/item access, filters, tests,
// str/dict/list methods and the globals transformers provides. All throw JinjaError on misuse.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "jinja/jinja_value.h"

namespace mimo::jinja {

// jinja2's environment.getattr / getitem: missing keys give Undefined, access on Undefined throws.
JinjaValue GetAttr(const JinjaValue& obj, const std::string& name);
JinjaValue GetItem(const JinjaValue& obj, const JinjaValue& key);
// obj[start:stop:step]; null/None bounds are "omitted".
JinjaValue SliceValue(const JinjaValue& obj, const JinjaValue& start, const JinjaValue& stop,
                      const JinjaValue& step);

// Python binary operators: + - * / // % **.
JinjaValue BinaryOp(const std::string& op, const JinjaValue& a, const JinjaValue& b);
// Python `item in container`.
bool Contains(const JinjaValue& container, const JinjaValue& item);
// Python iter(v) as a list (dict -> keys, str -> characters, Undefined -> nothing).
ValueList Iterate(const JinjaValue& v);

bool HasFilter(const std::string& name);
bool HasTest(const std::string& name);
JinjaValue ApplyFilter(const std::string& name, const JinjaValue& value, const CallArgs& args);
bool ApplyTest(const std::string& name, const JinjaValue& value, const CallArgs& args);

// Calls obj.name(args) when obj is a str/dict/list and name is a supported method. Returns false
// when there is no such method (the caller then falls back to attribute lookup).
bool CallMethod(const JinjaValue& obj, const std::string& name, const CallArgs& args,
                JinjaValue* result);

// The globals transformers' chat-template environment defines: range, dict, namespace,
// raise_exception, strftime_now.
std::vector<std::pair<std::string, JinjaValue>> BuiltinGlobals();

// Wraps a C++ function as a callable template value.
JinjaValue MakeFunction(std::string name, std::function<JinjaValue(const CallArgs&)> fn);
// HTML-escapes like markupsafe.escape (& < > " ').
std::string HtmlEscape(const std::string& s);

// Python str helpers shared by methods and filters.
// str.strip/lstrip/rstrip: chars None (not given) strips Unicode whitespace.
std::string PyStrip(const std::string& s, const JinjaValue& chars, bool left, bool right);
// str.split(sep, maxsplit); sep None splits on whitespace runs.
ValueList PySplit(const std::string& s, const JinjaValue& sep, int64_t maxsplit);
std::string PyReplace(const std::string& s, const std::string& old, const std::string& repl,
                      int64_t count);
std::string AsciiLower(std::string s);
std::string AsciiUpper(std::string s);
// printf-style `fmt % args` (%s %r %d %i %f %x %%).
std::string PyPercentFormat(const std::string& fmt, const JinjaValue& args);
// Python int()/float() conversions used by the int/float filters; false if not convertible.
bool ParsePyInt(const std::string& s, int64_t* out);
bool ParsePyFloat(const std::string& s, double* out);

}  // namespace mimo::jinja
