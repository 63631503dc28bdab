#!/usr/bin/env python3
"""Integration test (label integration): structured output and tool calling
through a real `pdserve serve` (the shipped SmolLM2-135M-Instruct, loopback),
driven by the official `openai` and `anthropic` SDKs; the PyPI `jsonschema`
package validates what comes back.

  - response_format json_schema (strict) for 50 different schemas and
    prompts, each greedy and sampled, streaming and not (200 replies): every
    reply parses and validates;
  - regex and choice constraints (vLLM's structured_outputs), 50 replies
    each over the same four modes: every reply matches;
  - tool calls: a forced tool_choice (named, and required over two tools)
    gives a call whose arguments validate against the tool's parameters,
    the same streamed (deltas: id, name, argument pieces) as not; the round
    trip call -> role "tool" result -> answer; the same on the Anthropic
    API (tool_use, tool_result);
  - gRPC: the same constraint in GenerateRequest.sampling;
  - bad input: a schema / regex / grammar that does not compile, a
    tool_choice naming a tool not given, tool arguments that are not JSON:
    400 with the reason (gRPC: INVALID_ARGUMENT); a nested-quantifier regex
    that would backtrack catastrophically elsewhere is served at once.

    structured_output_test.py --pdserve BUILD/server/cli/pdserve

Runs under $PDSERVE_CACHE/test-venv (scripts/setup-test-venv.sh); exit 0
pass, 1 fail, 77 skipped (says why).
"""
import argparse
import concurrent.futures
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import http_api_test as base  # noqa: E402  (Serve, check, the venv)

check = base.check

PROPERTIES = [
    ("name", {"type": "string", "maxLength": 24}),
    ("age", {"type": "integer", "minimum": 0, "maximum": 120}),
    ("score", {"type": "number", "minimum": 0, "maximum": 100}),
    ("active", {"type": "boolean"}),
    ("color", {"type": "string", "enum": ["red", "green", "blue"]}),
    ("tags", {"type": "array", "items": {"type": "string", "maxLength": 12},
              "minItems": 1, "maxItems": 3}),
    ("point", {"type": "object", "properties": {
        "x": {"type": "integer", "minimum": -100, "maximum": 100},
        "y": {"type": "integer", "minimum": -100, "maximum": 100}},
        "required": ["x", "y"], "additionalProperties": False}),
    ("kind", {"type": "string", "const": "event"}),
    ("note", {"anyOf": [{"type": "string", "maxLength": 16}, {"type": "null"}]}),
    ("level", {"type": "integer", "enum": [1, 2, 3]}),
    ("digits", {"type": "array", "items": {"type": "integer", "minimum": 0,
                                           "maximum": 9}, "maxItems": 4}),
    ("city", {"type": "string", "maxLength": 20}),
]
TOPICS = ["a person", "a city", "a book", "a car", "a movie", "a meeting",
          "a planet", "a recipe", "a song", "a game"]
REGEXES = [r"[0-9]{3}-[0-9]{4}", r"(yes|no|maybe)", r"[A-Z][a-z]{2,8}",
           r"[0-9]{4}-[0-1][0-9]-[0-3][0-9]", r"#[0-9a-f]{6}",
           r"[a-z]{2,8}@[a-z]{2,8}\.(com|org)", r"(red|green|blue) (car|bike)",
           r"[1-9][0-9]{0,2}(\.[0-9]{1,2})?", r"Answer: [A-D]",
           r"\([0-9]{3}\) [0-9]{3}-[0-9]{4}"]
CHOICES = [["yes", "no"], ["Paris", "London", "Berlin", "Rome"],
           ["positive", "negative", "neutral"], ["A", "B", "C", "D"],
           ["cat", "dog", "bird"]]
MODES = [(False, False), (False, True), (True, False), (True, True)]  # sampled, stream


def schema_of(i):
    count = 1 + i % 5
    start = (i * 7) % len(PROPERTIES)
    chosen = [PROPERTIES[(start + k) % len(PROPERTIES)] for k in range(count)]
    return {"type": "object", "properties": dict(chosen),
            "required": [n for n, _ in chosen], "additionalProperties": False}


def complete(client, model, messages, sampled, stream, seed, max_tokens, **kw):
    """The reply text (or the message for tool calls) of one request."""
    args = dict(model=model, messages=messages, max_tokens=max_tokens,
                temperature=0.8 if sampled else 0.0, seed=seed, **kw)
    if not stream:
        r = client.chat.completions.create(**args)
        return r.choices[0].message.content or "", r.choices[0].finish_reason
    text, finish = "", None
    for chunk in client.chat.completions.create(stream=True, **args):
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    return text, finish


def run_all(jobs):
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        return list(pool.map(lambda f: f(), jobs))


def test_json_schemas(s, client):
    import jsonschema
    jobs, meta = [], []
    for i in range(50):
        schema = schema_of(i)
        jsonschema.Draft202012Validator.check_schema(schema)
        prompt = [{"role": "user", "content": f"Describe {TOPICS[i % len(TOPICS)]} as JSON."}]
        rf = {"type": "json_schema",
              "json_schema": {"name": f"s{i}", "strict": True, "schema": schema}}
        for sampled, stream in MODES:
            jobs.append(lambda p=prompt, r=rf, sa=sampled, st=stream, i=i: complete(
                client, s.model, p, sa, st, i, 256, response_format=r))
            meta.append((i, schema, sampled, stream))
    results = run_all(jobs)
    ok = {m: 0 for m in MODES}
    for (i, schema, sampled, stream), (text, finish) in zip(meta, results):
        try:
            jsonschema.validate(json.loads(text), schema)
            ok[(sampled, stream)] += 1
        except Exception as e:  # noqa: BLE001
            print(f"     schema {i} sampled={sampled} stream={stream} "
                  f"finish={finish}: {type(e).__name__}: {str(e)[:200]} in {text!r}")
    for (sampled, stream), n in ok.items():
        check(n == 50, f"json_schema strict, {'sampled' if sampled else 'greedy'}, "
                       f"{'streaming' if stream else 'whole'}: {n}/50 parse and validate")


def test_regex_choice(s, client):
    for kind, items in (("regex", REGEXES), ("choice", CHOICES)):
        jobs, meta = [], []
        for i in range(50):
            sampled, stream = MODES[i % 4]
            item = items[i % len(items)]
            prompt = [{"role": "user", "content": f"Answer briefly ({i})."}]
            jobs.append(lambda p=prompt, it=item, sa=sampled, st=stream, i=i: complete(
                client, s.model, p, sa, st, i, 64,
                extra_body={"structured_outputs": {kind: it}}))
            meta.append(item)
        results = run_all(jobs)
        good = 0
        for item, (text, finish) in zip(meta, results):
            hit = (re.fullmatch(item, text) is not None if kind == "regex"
                   else text in item)
            good += hit
            if not hit:
                print(f"     {kind} {item!r}: {text!r} ({finish})")
        check(good == 50, f"{kind} constraints, all four modes: {good}/50 match")


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 30},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The local time in a time zone.",
    "parameters": {"type": "object", "properties": {
        "zone": {"type": "string", "maxLength": 30}},
        "required": ["zone"], "additionalProperties": False}}}


def test_tools_openai(s, client):
    import jsonschema
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    forced = {"type": "function", "function": {"name": "get_weather"}}
    r = client.chat.completions.create(model=s.model, messages=ask, tools=[WEATHER, TIME],
                                       tool_choice=forced, temperature=0, max_tokens=120)
    c = r.choices[0]
    calls = c.message.tool_calls or []
    check(c.finish_reason == "tool_calls" and len(calls) == 1 and
          calls[0].function.name == "get_weather" and calls[0].id.startswith("call_"),
          f"forced tool_choice: one get_weather call ({c.finish_reason}, {calls})")
    args = json.loads(calls[0].function.arguments)
    jsonschema.validate(args, WEATHER["function"]["parameters"])
    check(True, f"tool arguments validate: {args}")
    # Streamed: the id and name first, then argument pieces; the same call.
    name, pieces, ids, finish = None, [], set(), None
    for chunk in client.chat.completions.create(
            model=s.model, messages=ask, tools=[WEATHER, TIME], tool_choice=forced,
            temperature=0, max_tokens=120, stream=True):
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        finish = chunk.choices[0].finish_reason or finish
        for tc in d.tool_calls or []:
            if tc.id:
                ids.add(tc.id)
            if tc.function and tc.function.name:
                name = tc.function.name
            if tc.function and tc.function.arguments:
                pieces.append(tc.function.arguments)
    check(name == "get_weather" and len(ids) == 1 and len(pieces) > 1 and
          json.loads("".join(pieces)) == args and finish == "tool_calls",
          f"streamed tool call: {len(pieces)} argument pieces == the whole call")
    # Round trip: the result goes back as role "tool"; the model answers.
    history = ask + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": calls[0].id, "type": "function",
             "function": {"name": "get_weather", "arguments": calls[0].function.arguments}}]},
        {"role": "tool", "tool_call_id": calls[0].id,
         "content": json.dumps({"temperature": 21, "sky": "sunny"})}]
    r2 = client.chat.completions.create(model=s.model, messages=history,
                                        tools=[WEATHER, TIME], tool_choice="none",
                                        temperature=0, max_tokens=40)
    c2 = r2.choices[0]
    check(c2.finish_reason in ("stop", "length") and (c2.message.content or "").strip()
          and not c2.message.tool_calls,
          f"round trip: an answer after the tool result: {c2.message.content!r}")
    # required over two tools: a call of one of them, arguments valid.
    for seed in range(3):
        r3 = client.chat.completions.create(
            model=s.model, messages=[{"role": "user", "content": "Time in Tokyo?"}],
            tools=[WEATHER, TIME], tool_choice="required", temperature=0.7,
            seed=seed, max_tokens=120)
        tc = (r3.choices[0].message.tool_calls or [None])[0]
        tools = {"get_weather": WEATHER, "get_time": TIME}
        valid = tc is not None and tc.function.name in tools
        if valid:
            jsonschema.validate(json.loads(tc.function.arguments),
                                tools[tc.function.name]["function"]["parameters"])
        check(valid, f"tool_choice required (seed {seed}): {tc}")


def test_tools_anthropic(s, aclient):
    import jsonschema
    tool = {"name": "get_weather", "description": "The current weather in a city.",
            "input_schema": WEATHER["function"]["parameters"]}
    ask = [{"role": "user", "content": "Weather in Oslo?"}]
    m = aclient.messages.create(model=s.model, max_tokens=120, messages=ask,
                                tools=[tool], tool_choice={"type": "tool", "name": "get_weather"},
                                extra_body={"temperature": 0})
    uses = [b for b in m.content if b.type == "tool_use"]
    check(m.stop_reason == "tool_use" and len(uses) == 1 and uses[0].name == "get_weather"
          and uses[0].id.startswith("toolu_"), f"anthropic forced tool_use: {m.content}")
    jsonschema.validate(uses[0].input, tool["input_schema"])
    with aclient.messages.stream(model=s.model, max_tokens=120, messages=ask, tools=[tool],
                                 tool_choice={"type": "tool", "name": "get_weather"},
                                 extra_body={"temperature": 0}) as st:
        final = st.get_final_message()
    fuses = [b for b in final.content if b.type == "tool_use"]
    check(len(fuses) == 1 and fuses[0].input == uses[0].input,
          "anthropic streamed tool_use input == the whole reply's")
    m2 = aclient.messages.create(
        model=s.model, max_tokens=40, extra_body={"temperature": 0}, tools=[tool],
        messages=ask + [{"role": "assistant", "content": [
            {"type": "tool_use", "id": uses[0].id, "name": "get_weather",
             "input": uses[0].input}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": uses[0].id,
                 "content": "4 degrees and snowing"}]}])
    texts = [b.text for b in m2.content if b.type == "text"]
    check(m2.stop_reason in ("end_turn", "max_tokens") and texts and texts[0].strip(),
          f"anthropic round trip: an answer after tool_result: {texts}")


def test_grpc(s, stubs):
    import grpc
    import jsonschema
    api = stubs["api_pb2"]
    common = importlib_common()
    schema = schema_of(3)
    req = api.GenerateRequest(
        messages=[api.ChatMessage(role="user", content="A person as JSON.")],
        max_tokens=200, sampling=common.SamplingParams(
            temperature=0.7, seed=9,
            constraint=common.GrammarConstraint(json_schema=json.dumps(schema),
                                                strict=True)))
    with grpc.insecure_channel(s.grpc_target) as ch:
        stub = stubs["api_pb2_grpc"].InferenceStub(ch)
        text = "".join(r.delta.text for r in stub.Generate(req, timeout=120)
                       if r.HasField("delta"))
        jsonschema.validate(json.loads(text), schema)
        check(True, f"gRPC sampling.constraint: {text!r} validates")
        bad = api.GenerateRequest(
            messages=[api.ChatMessage(role="user", content="x")],
            sampling=common.SamplingParams(
                constraint=common.GrammarConstraint(regex="(unclosed")))
        try:
            list(stub.Generate(bad, timeout=60))
            check(False, "gRPC bad regex refused")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and
                  "regex does not compile" in e.details(),
                  f"gRPC bad regex: INVALID_ARGUMENT {e.details()!r}")


def importlib_common():
    import importlib
    return importlib.import_module("pdserve.v1.common_pb2")


def test_errors(s, client):
    import openai
    ask = [{"role": "user", "content": "x"}]
    cases = [
        (dict(response_format={"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "object", "properties": {
                "a": {"type": "frobnicate"}}}}}), "json_schema does not compile"),
        (dict(extra_body={"structured_outputs": {"regex": "[a-"}}), "regex does not compile"),
        (dict(extra_body={"structured_outputs": {"grammar": "root ::= undefined_rule"}}),
         "grammar does not compile"),
        (dict(tools=[WEATHER], tool_choice={"type": "function",
                                            "function": {"name": "get_time"}}),
         "tool_choice names 'get_time', which is not among the 1 tools given"),
        (dict(messages=ask + [{"role": "assistant", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{city: Paris"}}]}],
            tools=[WEATHER]), "messages[1].tool_calls[0].arguments is not a JSON object"),
    ]
    for kw, want in cases:
        kw = dict(kw)
        messages = kw.pop("messages", ask)
        try:
            client.chat.completions.create(model=s.model, messages=messages,
                                           max_tokens=5, **kw)
            check(False, f"refused: {want}")
        except openai.BadRequestError as e:
            msg = e.body.get("message", "") if isinstance(e.body, dict) else str(e.body)
            check(e.status_code == 400 and want in msg, f"400 {want!r}: {msg[:120]!r}")
    text, _ = complete(client, s.model, [{"role": "user", "content": "Say a"}], False, False,
                       0, 40, extra_body={"structured_outputs": {"regex": "(a+)+b"}})
    check(re.fullmatch("(a+)+b", text) is not None,
          f"nested-quantifier regex (a+)+b served: {text!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pdserve", required=True)
    args = ap.parse_args()
    if not base.MODEL.exists():
        base.skip(f"no model at {base.MODEL} (scripts/setup.sh fetches it)")
    base.ensure_venv()
    try:
        import jsonschema  # noqa: F401
    except ImportError:
        base.skip("no jsonschema in the test venv (run scripts/setup-test-venv.sh)")
    import anthropic
    import openai
    stubs = base.load_grpc_stubs()
    s = base.Serve(args.pdserve, ["--max-running", "16"])
    s.model = "SmolLM2-135M-Instruct.Q4_1"
    s.grpc_target = f"127.0.0.1:{s.grpc_port}"
    try:
        client = openai.OpenAI(base_url=s.url, api_key=base.KEY, max_retries=0,
                               timeout=300)
        aclient = anthropic.Anthropic(base_url=s.base, api_key=base.KEY, max_retries=0)
        for name, fn in (("errors", lambda: test_errors(s, client)),
                         ("tools", lambda: test_tools_openai(s, client)),
                         ("anthropic", lambda: test_tools_anthropic(s, aclient)),
                         ("grpc", lambda: test_grpc(s, stubs)),
                         ("regex/choice", lambda: test_regex_choice(s, client)),
                         ("json_schema", lambda: test_json_schemas(s, client))):
            try:
                fn()
            except Exception as e:  # noqa: BLE001  a crash fails its part only
                check(False, f"{name}: {type(e).__name__}: {e}")
    finally:
        s.stop()
        if base.FAILURES:
            print(open(s.log.name).read()[-4000:])
    print(f"{len(base.FAILURES)} failed")
    sys.exit(1 if base.FAILURES else 0)


if __name__ == "__main__":
    main()
