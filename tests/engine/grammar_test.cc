// Grammar-constrained decoding (engine/grammar): constraints compiled
// against a real vocabulary (GPT-2's, from the shared vocabulary GGUF), then
// random walks that pick any allowed token (many seeds) must always produce
// output that parses and validates; bad constraints are INVALID_ARGUMENT
// naming the kind; compile time is bounded; the cache serves repeats.
#include "engine/grammar/grammar.h"

#include <cmath>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "server/tokenizer/grammar_vocabulary.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/tokenizer/tokenizer.h"
#include "tests/server/tokenizer_test_util.h"

namespace pdserve::grammar {
namespace {

using Json = nlohmann::json;

// GPT-2's vocabulary from llama.cpp's vocab-test GGUF (the shared data, else
// the pinned llama.cpp sources the peer benchmarks unpack); null when neither
// has it, and every test skips naming the file.
const Tokenizer* Gpt2OrNull() {
  static const Tokenizer* tok = [] {
    auto t = Tokenizer::Load(pdserve::testing::VocabTestPath("gpt-2"));
    return t.ok() ? t->release() : static_cast<Tokenizer*>(nullptr);
  }();
  return tok;
}

const Tokenizer& Gpt2() { return *Gpt2OrNull(); }

class GrammarTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Gpt2OrNull() == nullptr) {
      GTEST_SKIP() << "no GPT-2 vocabulary at "
                   << pdserve::testing::VocabTestPath("gpt-2")
                   << " (../shared, or the llama.cpp sources of "
                      "bench/peers/build_peers.sh)";
    }
  }
};

GrammarCompiler& Compiler() {
  static GrammarCompiler* c = [] {
    auto r = GrammarCompiler::Create(VocabularyOf(Gpt2()), {});
    EXPECT_TRUE(r.ok()) << r.status();
    return r->release();
  }();
  return *c;
}

// Walks the grammar picking allowed tokens (half the time one that holds a
// closing character, so strings and objects end) until a stop id is taken.
// Returns the text, or fails.
std::string Walk(const std::shared_ptr<const CompiledGrammar>& g, uint32_t seed) {
  const Tokenizer& tok = Gpt2();
  GrammarMatcher m(g);
  const int32_t vocab = m.vocab_size();
  std::vector<uint32_t> mask(MaskWords(vocab));
  std::mt19937 rng(seed);
  std::string text;
  const std::vector<int32_t> stops = tok.stop_ids();
  for (int step = 0; step < 400; ++step) {
    m.FillMask(absl::MakeSpan(mask));
    std::vector<int32_t> allowed, closers;
    bool stop_ok = false;
    for (int32_t id = 0; id < vocab; ++id) {
      if (!MaskAllows(mask.data(), id)) continue;
      if (std::find(stops.begin(), stops.end(), id) != stops.end()) {
        stop_ok = true;
        continue;
      }
      allowed.push_back(id);
      const std::string b = tok.TokenBytes(id);
      if (b.find_first_of("\"}],") != std::string::npos) closers.push_back(id);
    }
    if (stop_ok && (allowed.empty() || rng() % 3 == 0 || step > 300)) {
      EXPECT_TRUE(m.Accept(stops[0]).ok());
      EXPECT_TRUE(m.terminated());
      return text;
    }
    if (allowed.empty()) {
      ADD_FAILURE() << "no token allowed after: " << text;
      return text;
    }
    const std::vector<int32_t>& pool =
        !closers.empty() && rng() % 2 == 0 ? closers : allowed;
    const int32_t id = pool[rng() % pool.size()];
    EXPECT_TRUE(m.Accept(id).ok()) << "allowed token " << id << " refused";
    text += tok.TokenBytes(id);
  }
  ADD_FAILURE() << "walk did not end: " << text;
  return text;
}

// The JSON Schema keywords the test schemas use.
bool Valid(const Json& schema, const Json& v, std::string* why) {
  if (schema.contains("const") && v != schema["const"]) {
    *why = "const";
    return false;
  }
  if (schema.contains("enum")) {
    bool found = false;
    for (const Json& e : schema["enum"]) found |= e == v;
    if (!found) {
      *why = "enum " + v.dump();
      return false;
    }
  }
  if (schema.contains("anyOf")) {
    bool any = false;
    for (const Json& s : schema["anyOf"]) any |= Valid(s, v, why);
    if (!any) return false;
  }
  const std::string type = schema.value("type", "");
  if (type == "object") {
    if (!v.is_object()) return *why = "not an object", false;
    for (const Json& r : schema.value("required", Json::array())) {
      if (!v.contains(r.get<std::string>())) return *why = "missing " + r.dump(), false;
    }
    const Json props = schema.value("properties", Json::object());
    for (const auto& [k, x] : v.items()) {
      if (!props.contains(k)) {
        if (schema.value("additionalProperties", true) == false) {
          return *why = "extra " + k, false;
        }
        continue;
      }
      if (!Valid(props[k], x, why)) return false;
    }
  } else if (type == "array") {
    if (!v.is_array()) return *why = "not an array", false;
    if (schema.contains("minItems") && v.size() < schema["minItems"].get<size_t>()) {
      return *why = "minItems", false;
    }
    if (schema.contains("maxItems") && v.size() > schema["maxItems"].get<size_t>()) {
      return *why = "maxItems", false;
    }
    for (const Json& x : v) {
      if (schema.contains("items") && !Valid(schema["items"], x, why)) return false;
    }
  } else if (type == "string") {
    if (!v.is_string()) return *why = "not a string", false;
  } else if (type == "integer") {
    // Integers past 64 bits parse as doubles here; they are still integers.
    if (!v.is_number_integer() &&
        !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>())) {
      return *why = "not an integer", false;
    }
  } else if (type == "number") {
    if (!v.is_number()) return *why = "not a number", false;
  } else if (type == "boolean") {
    if (!v.is_boolean()) return *why = "not a boolean", false;
  } else if (type == "null") {
    if (!v.is_null()) return *why = "not null", false;
  }
  if (v.is_number() && schema.contains("minimum") && v < schema["minimum"]) {
    return *why = "minimum", false;
  }
  if (v.is_number() && schema.contains("maximum") && v > schema["maximum"]) {
    return *why = "maximum", false;
  }
  return true;
}

GrammarSpec Spec(GrammarSpec::Kind kind, std::string text) {
  GrammarSpec s;
  s.kind = kind;
  s.text = std::move(text);
  return s;
}

const char* kSchemas[] = {
    R"({"type": "object", "properties": {"name": {"type": "string"},
        "age": {"type": "integer"}}, "required": ["name", "age"],
        "additionalProperties": false})",
    R"({"type": "object", "properties": {"ok": {"type": "boolean"},
        "color": {"enum": ["red", "green", "blue"]},
        "score": {"type": "number", "minimum": 0, "maximum": 10}},
        "required": ["ok", "color", "score"], "additionalProperties": false})",
    R"({"type": "object", "properties": {"tags": {"type": "array",
        "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
        "point": {"type": "object", "properties": {"x": {"type": "integer"},
        "y": {"type": "integer"}}, "required": ["x", "y"],
        "additionalProperties": false}}, "required": ["tags", "point"],
        "additionalProperties": false})",
    R"({"type": "object", "properties": {"kind": {"const": "event"},
        "when": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
        "required": ["kind", "when"], "additionalProperties": false})",
    R"({"type": "array", "items": {"type": "integer"}, "minItems": 2,
        "maxItems": 4})",
};

TEST_F(GrammarTest, JsonSchemaWalksAlwaysValidate) {
  for (const char* text : kSchemas) {
    const Json schema = Json::parse(text);
    auto g = Compiler().Compile(Spec(GrammarSpec::Kind::kJsonSchema, text));
    ASSERT_TRUE(g.ok()) << g.status();
    for (uint32_t seed = 0; seed < 25; ++seed) {
      const std::string out = Walk(*g, seed);
      const Json v = Json::parse(out, nullptr, /*allow_exceptions=*/false);
      ASSERT_FALSE(v.is_discarded()) << "not JSON: " << out;
      std::string why;
      EXPECT_TRUE(Valid(schema, v, &why)) << why << ": " << out;
    }
  }
}

TEST_F(GrammarTest, JsonObjectRegexChoiceAndEbnf) {
  auto obj = Compiler().Compile(Spec(GrammarSpec::Kind::kJsonObject, ""));
  ASSERT_TRUE(obj.ok()) << obj.status();
  const std::regex re("[0-9]{3}-[a-z]{2,4}(!|\\?)");
  auto rx = Compiler().Compile(
      Spec(GrammarSpec::Kind::kRegex, "[0-9]{3}-[a-z]{2,4}(!|\\?)"));
  ASSERT_TRUE(rx.ok()) << rx.status();
  GrammarSpec choice;
  choice.kind = GrammarSpec::Kind::kChoice;
  choice.choices = {"yes", "no", "maybe \"so\"\n"};
  auto ch = Compiler().Compile(choice);
  ASSERT_TRUE(ch.ok()) << ch.status();
  auto eb = Compiler().Compile(Spec(GrammarSpec::Kind::kEbnf,
                                    "root ::= \"n=\" [1-9] [0-9]* (\",\" [0-9])?"));
  ASSERT_TRUE(eb.ok()) << eb.status();
  const std::regex eb_re("n=[1-9][0-9]*(,[0-9])?");
  for (uint32_t seed = 0; seed < 30; ++seed) {
    const std::string o = Walk(*obj, seed);
    EXPECT_TRUE(Json::parse(o, nullptr, false).is_object()) << o;
    const std::string r = Walk(*rx, seed);
    EXPECT_TRUE(std::regex_match(r, re)) << r;
    const std::string c = Walk(*ch, seed);
    EXPECT_TRUE(c == "yes" || c == "no" || c == "maybe \"so\"\n") << c;
    const std::string e = Walk(*eb, seed);
    EXPECT_TRUE(std::regex_match(e, eb_re)) << e;
  }
}

TEST_F(GrammarTest, PrefixAndSuffixFrameTheBody) {
  GrammarSpec s = Spec(GrammarSpec::Kind::kJsonSchema, kSchemas[0]);
  s.prefix = "<tool_call>\n";
  s.suffix = "\n</tool_call>";
  auto g = Compiler().Compile(s);
  ASSERT_TRUE(g.ok()) << g.status();
  for (uint32_t seed = 0; seed < 10; ++seed) {
    const std::string out = Walk(*g, seed);
    ASSERT_EQ(out.rfind("<tool_call>\n", 0), 0u) << out;
    ASSERT_GE(out.size(), 25u);
    ASSERT_EQ(out.substr(out.size() - 13), "\n</tool_call>") << out;
    EXPECT_TRUE(Json::parse(out.substr(12, out.size() - 25), nullptr, false)
                    .is_object()) << out;
  }
}

TEST_F(GrammarTest, NestedQuantifiersDoNotBacktrack) {
  // (a+)+b would backtrack exponentially in a backtracking regex engine;
  // here it is an automaton like any other.
  auto g = Compiler().Compile(Spec(GrammarSpec::Kind::kRegex, "(a+)+b"));
  ASSERT_TRUE(g.ok()) << g.status();
  GrammarMatcher m(*g);
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(m.AcceptText("a").ok());
  ASSERT_TRUE(m.AcceptText("b").ok());
  EXPECT_TRUE(m.completed());
}

TEST_F(GrammarTest, RefusedTokenLeavesTheMatcherAsItWas) {
  auto g = Compiler().Compile(Spec(GrammarSpec::Kind::kRegex, "ab"));
  ASSERT_TRUE(g.ok());
  GrammarMatcher m(*g);
  const int32_t b = Gpt2().FindToken("b");
  const int32_t a = Gpt2().FindToken("a");
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  EXPECT_FALSE(m.Accept(b).ok());
  EXPECT_TRUE(m.Accept(a).ok());
  EXPECT_TRUE(m.Accept(b).ok());
  EXPECT_TRUE(m.completed());
}

TEST_F(GrammarTest, BadConstraintsNameTheirKind) {
  struct Case {
    GrammarSpec::Kind kind;
    std::string text;
    std::string want;
  } cases[] = {
      {GrammarSpec::Kind::kJsonSchema, "{not json", "json_schema does not compile"},
      {GrammarSpec::Kind::kJsonSchema, R"({"type": "nonsense"})",
       "json_schema does not compile"},
      {GrammarSpec::Kind::kRegex, "(unclosed", "regex does not compile"},
      {GrammarSpec::Kind::kEbnf, "root ::= missing_rule", "grammar does not compile"},
      {GrammarSpec::Kind::kEbnf, "", "grammar is empty"},
      {GrammarSpec::Kind::kJsonSchema, std::string(kMaxGrammarTextBytes + 1, ' '),
       "json_schema has 65537 bytes"},
  };
  for (const Case& c : cases) {
    auto g = Compiler().Compile(Spec(c.kind, c.text));
    ASSERT_FALSE(g.ok()) << c.text;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().message().find(c.want), std::string::npos)
        << g.status();
  }
  GrammarSpec empty_choice;
  empty_choice.kind = GrammarSpec::Kind::kChoice;
  EXPECT_FALSE(Compiler().Compile(empty_choice).ok());
}

TEST_F(GrammarTest, CacheServesRepeats) {
  auto compiler = GrammarCompiler::Create(VocabularyOf(Gpt2()), {});
  ASSERT_TRUE(compiler.ok());
  const GrammarSpec s = Spec(GrammarSpec::Kind::kJsonSchema, kSchemas[1]);
  auto a = (*compiler)->Compile(s);
  auto b = (*compiler)->Compile(s);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->get(), b->get());
  EXPECT_EQ((*compiler)->compiled_count(), 1);
  EXPECT_EQ((*compiler)->cache_hits(), 1);
}

TEST_F(GrammarTest, PrefetchStartsTheCompilationCompileWaitsForIt) {
  auto compiler = GrammarCompiler::Create(VocabularyOf(Gpt2()), {});
  ASSERT_TRUE(compiler.ok());
  const GrammarSpec s = Spec(GrammarSpec::Kind::kJsonSchema, kSchemas[2]);
  (*compiler)->Prefetch(s);
  (*compiler)->Prefetch(s);  // under way: not started twice
  auto g = (*compiler)->Compile(s);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*compiler)->compiled_count(), 1);
  (*compiler)->Prefetch(Spec(GrammarSpec::Kind::kRegex, "(bad"));  // no throw
  EXPECT_FALSE((*compiler)->Compile(Spec(GrammarSpec::Kind::kRegex, "(bad")).ok());
}

TEST_F(GrammarTest, CompileTimeIsBounded) {
  GrammarCompiler::Options o;
  o.compile_timeout = absl::Milliseconds(1);
  auto compiler = GrammarCompiler::Create(VocabularyOf(Gpt2()), o);
  ASSERT_TRUE(compiler.ok());
  // 60 properties of nested objects: far more than 1 ms to compile.
  Json props = Json::object();
  for (int i = 0; i < 60; ++i) {
    props["p" + std::to_string(i)] = {
        {"type", "object"},
        {"properties", {{"a", {{"type", "string"}}}, {"b", {{"type", "number"}}}}},
        {"required", {"a", "b"}}};
  }
  const Json schema = {{"type", "object"}, {"properties", props}};
  auto g = (*compiler)->Compile(Spec(GrammarSpec::Kind::kJsonSchema, schema.dump()));
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("took more than 1 ms to compile"),
            std::string::npos) << g.status();
}

}  // namespace
}  // namespace pdserve::grammar
