// Unit tests of the Jinja subset interpreter: parse-time rejection of
// unsupported constructs (with line/column), runtime errors, limits, and
// value formatting. Rendering semantics are pinned against jinja2 itself by
// chat_golden_test (fixtures generated with transformers).
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/chat/jinja/template.h"
#include "server/chat/jinja/value.h"

namespace pdserve::jinja {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

absl::StatusOr<std::string> RenderWith(const std::string& src, const ValueDict& vars,
                                       const RenderOptions& options = {}) {
  absl::StatusOr<Template> t = Template::Parse(src);
  if (!t.ok()) return t.status();
  return t->Render(vars, options);
}

absl::StatusOr<std::string> Render(const std::string& src) {
  return RenderWith(src, ValueDict());
}

std::string ParseError(const std::string& src) {
  absl::StatusOr<Template> t = Template::Parse(src);
  EXPECT_FALSE(t.ok()) << "parsed: " << src;
  if (t.ok()) return "";
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(t.status().message());
}

TEST(JinjaParseTest, UnsupportedStatementsNameConstructAndPosition) {
  EXPECT_THAT(ParseError("ok\n  {% include 'other.jinja' %}"),
              AllOf(HasSubstr("line 2 col 3"), HasSubstr("'{% include %}'")));
  EXPECT_THAT(ParseError("{% extends 'base' %}"), HasSubstr("'{% extends %}'"));
  EXPECT_THAT(ParseError("{% import 'm' as m %}"), HasSubstr("'{% import %}'"));
  EXPECT_THAT(ParseError("{% call m() %}x{% endcall %}"), HasSubstr("'{% call %}'"));
  EXPECT_THAT(ParseError("{% for x in y recursive %}{% endfor %}"),
              HasSubstr("recursive for loops"));
}

TEST(JinjaParseTest, UnknownFiltersTestsMethodsFunctionsAreParseErrors) {
  EXPECT_THAT(ParseError("{{ 'a' }}\n{{ x | frobnicate }}"),
              AllOf(HasSubstr("line 2 col 8"), HasSubstr("filter 'frobnicate'")));
  EXPECT_THAT(ParseError("{% if x is frob %}{% endif %}"), HasSubstr("test 'frob'"));
  EXPECT_THAT(ParseError("{{ x.frob(1) }}"), HasSubstr("method 'frob()'"));
  EXPECT_THAT(ParseError("{{ lipsum(3) }}"), HasSubstr("unknown function 'lipsum'"));
  EXPECT_THAT(ParseError("{{ loop.cycle('a', 'b') }}"), HasSubstr("method 'cycle()'"));
  EXPECT_THAT(ParseError("{{ range(*xs) }}"), HasSubstr("*args"));
  EXPECT_THAT(ParseError("{{ (x|first)(1) }}"), HasSubstr("unsupported construct"));
}

TEST(JinjaParseTest, MacrosDefinedAnywhereAreCallable) {
  EXPECT_EQ(*Render("{% macro f(x) %}<{{ x }}>{% endmacro %}{{ f(1) }}"), "<1>");
}

TEST(JinjaParseTest, SyntaxErrors) {
  EXPECT_THAT(ParseError("{% if true %}never closed"), HasSubstr("'{% endif %}'"));
  EXPECT_THAT(ParseError("{{ 'abc }}"), HasSubstr("unterminated string"));
  EXPECT_THAT(ParseError("{{ x ] }}"), HasSubstr("unexpected ']'"));
  EXPECT_THAT(ParseError("{{ x "), HasSubstr("unclosed '{{'"));
  EXPECT_THAT(ParseError("{# no end"), HasSubstr("comment"));
  EXPECT_THAT(ParseError("{% break %}"), HasSubstr("outside of a for loop"));
  EXPECT_THAT(ParseError("{% endif %}"), HasSubstr("unexpected '{% endif %}'"));
  EXPECT_THAT(ParseError("{{ 1 $ 2 }}"), HasSubstr("unexpected character '$'"));
  EXPECT_THAT(ParseError("{{ 99999999999999999999 }}"), HasSubstr("out of range"));
}

TEST(JinjaParseTest, DeepNestingIsAnErrorNotACrash) {
  std::string parens = std::string(20000, '(') + "1" + std::string(20000, ')');
  EXPECT_THAT(ParseError("{{ " + parens + " }}"), HasSubstr("nesting deeper than"));
  std::string lists = std::string(20000, '[') + std::string(20000, ']');
  EXPECT_THAT(ParseError("{{ " + lists + " }}"), HasSubstr("nesting deeper than"));
  std::string nots;
  for (int i = 0; i < 20000; ++i) nots += "not ";
  EXPECT_THAT(ParseError("{{ " + nots + "x }}"), HasSubstr("nesting deeper than"));
  std::string chain = "a";
  for (int i = 0; i < 50000; ++i) chain += " + a";
  EXPECT_THAT(ParseError("{{ " + chain + " }}"), HasSubstr("nesting deeper than"));
  std::string attrs = "a";
  for (int i = 0; i < 50000; ++i) attrs += ".b";
  EXPECT_THAT(ParseError("{{ " + attrs + " }}"), HasSubstr("nesting deeper than"));
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  for (int i = 0; i < 5000; ++i) ifs += "{% endif %}";
  EXPECT_THAT(ParseError(ifs), HasSubstr("nesting deeper than"));
  // Moderate nesting is fine.
  EXPECT_EQ(*Render("{{ " + std::string(30, '(') + "7" + std::string(30, ')') + " }}"), "7");
}

TEST(JinjaRenderTest, RaiseExceptionSurfacesTheMessage) {
  absl::StatusOr<std::string> r =
      Render("a\n{{ raise_exception('Conversation roles must alternate') }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(),
              AllOf(HasSubstr("line 2"), HasSubstr("Conversation roles must alternate")));
}

TEST(JinjaRenderTest, UndefinedBehavesLikeJinjaDefaultUndefined) {
  EXPECT_EQ(*Render("[{{ x }}][{{ x | default('d') }}][{% if x %}t{% endif %}]"
                    "[{{ x is defined }}][{% for i in x %}i{% endfor %}][{{ x | length }}]"),
            "[][d][][False][][0]");
  // Missing keys of a dict are undefined (no error) ...
  ValueDict vars;
  ValueDict msg;
  msg.Set("role", Value::String("user"));
  vars.Set("m", Value::Dict(msg));
  EXPECT_EQ(*RenderWith("[{{ m.content }}][{{ m['content'] is defined }}]", vars),
            "[][False]");
  // ... but using an undefined value further is, naming what was missing.
  absl::StatusOr<std::string> r = RenderWith("{{ m.content.strip() }}", vars);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("has no attribute 'content'"));
  r = RenderWith("{{ 'x' + m.content }}", vars);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("has no attribute 'content'"));
  r = Render("{{ y.z }}");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), AllOf(HasSubstr("'y' is undefined"), HasSubstr("line 1")));
}

TEST(JinjaRenderTest, TypeErrorsAreClear) {
  absl::StatusOr<std::string> r = Render("{{ 1 + 'a' }}");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("unsupported operand type(s) for +: 'int' and 'str'"));
  r = Render("{{ 1 / 0 }}");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("ZeroDivisionError"));
  r = Render("{{ 2 ** 64 }}");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("overflow"));
  r = Render("{{ [1].append(2) }}");
  EXPECT_FALSE(Template::Parse("{{ [1].append(2) }}").ok());
  r = Render("{{ {'a': 1}.items().x }}");
  EXPECT_TRUE(r.ok());
  r = Render("{{ '%s' % 1 }}");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("printf-style"));
}

TEST(JinjaRenderTest, LimitsAreErrorsNamingTheLimit) {
  RenderOptions small;
  small.limits.max_output_bytes = 1000;
  small.limits.max_loop_iterations = 500;
  small.limits.max_call_depth = 10;
  absl::StatusOr<std::string> r =
      RenderWith("{% for i in range(100) %}{{ 'x' * 20 }}{% endfor %}", {}, small);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("exceed 1000 bytes"));
  r = RenderWith("{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}",
                 {}, small);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("more than 500 iterations"));
  r = RenderWith("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", {}, small);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("nested deeper than 10"));
  r = Render("{{ range(1000000) | length }}");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("more than 100000 items"));
  r = Render("{{ 'abc' * 1000000000000 }}");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("string repetition"));
}

TEST(JinjaRenderTest, ValuesBuiltWhileRenderingStayShallow) {
  // Growing a nested list in a loop is stopped before printing or freeing
  // it could exhaust the stack.
  absl::StatusOr<std::string> r = Render(
      "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}"
      "{% endfor %}{{ ns.x }}");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("nested deeper than 200"));
  // A namespace that contains itself prints (cut off) instead of recursing.
  r = Render("{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns.me.a }}"
             "{{ (ns | string)[:30] }}");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "1<Namespace {'a': 1, 'me': <Nam");
}

TEST(JinjaRenderTest, StrftimeNowUsesTheGivenClock) {
  RenderOptions options;
  options.now = absl::FromUnixSeconds(1721952000);  // 2024-07-26 00:00:00 UTC
  EXPECT_EQ(*RenderWith("{{ strftime_now('%d %b %Y') }}", {}, options), "26 Jul 2024");
  absl::StatusOr<std::string> r = Render("{{ strftime_now('%Y') }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(JinjaRenderTest, RendersAreIndependent) {
  absl::StatusOr<Template> t = Template::Parse(
      "{% set ns = namespace(n=0) %}{% for m in xs %}{% set ns.n = ns.n + m %}{% endfor %}"
      "{{ ns.n }}");
  ASSERT_TRUE(t.ok());
  ValueDict vars;
  vars.Set("xs", Value::List({Value::Int(1), Value::Int(2)}));
  EXPECT_EQ(*t->Render(vars, {}), "3");
  EXPECT_EQ(*t->Render(vars, {}), "3");
}

TEST(JinjaValueTest, PythonFloatRepr) {
  EXPECT_EQ(FormatPythonFloat(1.0), "1.0");
  EXPECT_EQ(FormatPythonFloat(0.1), "0.1");
  EXPECT_EQ(FormatPythonFloat(1e16), "1e+16");
  EXPECT_EQ(FormatPythonFloat(123456789012345.6), "123456789012345.6");
  EXPECT_EQ(FormatPythonFloat(1.5e-7), "1.5e-07");
  EXPECT_EQ(FormatPythonFloat(-2.5), "-2.5");
  EXPECT_EQ(FormatPythonFloat(1e300 * 1e10), "inf");
}

TEST(JinjaValueTest, JsonDumpMatchesPython) {
  ValueDict d;
  d.Set("b", Value::List({Value::Int(1), Value::Float(2.0), Value::None(), Value::Bool(false)}));
  d.Set("a", Value::String("é\"\\\n\x01"));
  JsonDumpOptions o;
  EXPECT_EQ(*DumpJson(Value::Dict(d), o),
            "{\"b\": [1, 2.0, null, false], \"a\": \"é\\\"\\\\\\n\\u0001\"}");
  o.sort_keys = true;
  o.ensure_ascii = true;
  EXPECT_EQ(*DumpJson(Value::Dict(d), o),
            "{\"a\": \"\\u00e9\\\"\\\\\\n\\u0001\", \"b\": [1, 2.0, null, false]}");
  EXPECT_FALSE(DumpJson(Value::Undefined(), o).ok());
}

TEST(JinjaValueTest, FromJsonKeepsOrderAndLimitsDepth) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(R"({"z": 1, "a": [true, null, 1.5, "s"]})");
  absl::StatusOr<Value> v = Value::FromJson(j);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->Str(), "{'z': 1, 'a': [True, None, 1.5, 's']}");
  nlohmann::ordered_json deep = nlohmann::ordered_json::array();
  for (int i = 0; i < 1000; ++i) deep = nlohmann::ordered_json::array({deep});
  absl::StatusOr<Value> dv = Value::FromJson(deep);
  ASSERT_FALSE(dv.ok());
  EXPECT_THAT(dv.status().message(), HasSubstr("nested too deeply"));
}

}  // namespace
}  // namespace pdserve::jinja
