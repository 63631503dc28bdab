#!/usr/bin/env python3
"""Generates tests/data/chat/qwen3_tool_request_goldens.json: OpenAI chat
requests with tools, assistant tool_calls, role "tool" results and
reasoning, and the prompt Hugging Face transformers' real
`apply_chat_template(messages, tools=..., add_generation_prompt=True,
tokenize=False)` renders for them with the shared Qwen3 template.

As vLLM does, a tool call's `arguments` (JSON text in the OpenAI request) is
given to the template as the parsed object. The C++ test
(tests/server/http_api_tools_test.cc) parses each request with the HTTP
API's translator and renders it on the request path; the prompt must match
byte for byte.

Environment (once):  python3 -m venv V && V/bin/pip install transformers jinja2 tokenizers
Run from the repository root:  V/bin/python tests/tools/tool_request_goldens.py
"""

import copy
import json
import os

from transformers import AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "chat", "qwen3_tool_request_goldens.json")
QWEN3 = os.path.join(ROOT, "..", "shared", "tokenizers", "qwen3")

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city (°C).",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. Zürich"},
        "days": {"type": "integer"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {}}}
SYS = {"role": "system", "content": "You are a helpful assistant."}
USER = {"role": "user", "content": "Weather in Zürich and the time?"}
CALLS = {"role": "assistant", "content": "", "tool_calls": [
    {"id": "call_1", "type": "function",
     "function": {"name": "get_weather", "arguments": "{\"city\": \"Zürich\", \"days\": 1}"}},
    {"id": "call_2", "type": "function",
     "function": {"name": "get_time", "arguments": "{}"}}]}
RESULTS = [{"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"},
           {"role": "tool", "tool_call_id": "call_2", "content": "12:00"}]


def template_messages(messages):
    """The request's messages as vLLM gives them to the template."""
    out = copy.deepcopy(messages)
    for m in out:
        for c in m.get("tool_calls", []):
            c["function"]["arguments"] = json.loads(c["function"]["arguments"])
    return out


def main():
    tok = AutoTokenizer.from_pretrained(QWEN3)
    cases = [
        ("tools_offered", {"messages": [SYS, {"role": "user", "content": "Hi!"}],
                           "tools": [WEATHER, TIME]}),
        ("tools_no_system", {"messages": [{"role": "user", "content": "Time?"}],
                             "tools": [TIME], "tool_choice": "required"}),
        ("round_trip", {"messages": [SYS, USER, CALLS] + RESULTS,
                        "tools": [WEATHER, TIME]}),
        ("round_trip_no_thinking", {"messages": [USER, CALLS] + RESULTS,
                                    "tools": [WEATHER, TIME],
                                    "chat_template_kwargs": {"enable_thinking": False}}),
        ("reasoning_then_call", {"messages": [
            USER, dict(CALLS, reasoning_content="I need both tools."),
            RESULTS[0], RESULTS[1],
            {"role": "assistant", "content": "It is 21 °C at 12:00."},
            {"role": "user", "content": "Thanks!"}], "tools": [WEATHER, TIME]}),
    ]
    out = []
    for name, request in cases:
        kwargs = request.get("chat_template_kwargs", {})
        expected = tok.apply_chat_template(
            template_messages(request["messages"]), tools=request["tools"],
            add_generation_prompt=True, tokenize=False, **kwargs)
        out.append({"name": name, "request": dict(request, model="qwen3"),
                    "expected": expected})
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump({"generator": "tests/tools/tool_request_goldens.py",
                   "cases": out}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(out)} cases to {OUT}")


if __name__ == "__main__":
    main()
