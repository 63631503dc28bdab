#!/usr/bin/env python3
"""Integration test (label integration): the OpenAI- and Anthropic-compatible
HTTP API of a real `pdserve serve` (SmolLM2-135M, loopback), driven by the
official `openai` and `anthropic` Python SDKs, with the gRPC API beside it
for comparison:

  - chat streaming and not; completions from a string and from token ids;
    /v1/models, /tokenize, /detokenize, /health, /version;
  - greedy HTTP output == the gRPC stream's tokens for the same request;
  - n=3 with a seed: three samples, the same on a second run, siblings taking
    the prompt from the prefix cache (engine counters);
  - top_logprobs=5: five alternatives per token whose log-probabilities
    match the gRPC Delta's;
  - usage counts, and cached prompt tokens on a second chat turn;
  - Anthropic messages (events message_start ... message_stop) and
    count_tokens;
  - every error case: 400 (values with the gRPC API's numbers, types), 401,
    404 (route, model), 413, 429 (queue full), 503 (draining), each with its
    status and body;
  - a client that disconnects mid-stream: its pages are free again within a
    few engine steps;
  - Prometheus: HTTP requests by route and code, TTFT labelled api="http".

    http_api_test.py --pdserve BUILD/server/cli/pdserve

Runs under $PDSERVE_CACHE/test-venv (scripts/setup-test-venv.sh); exit 0
pass, 1 fail, 77 skipped (says why: no venv, no model).
"""
import argparse
import concurrent.futures
import importlib
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]
CACHE = pathlib.Path(os.environ.get("PDSERVE_CACHE",
                                    pathlib.Path.home() / ".cache/pdserve"))
VENV_PY = CACHE / "test-venv/bin/python"
MODEL = CACHE / "models/SmolLM2-135M-Instruct.Q4_1.gguf"
KEY = "sk-test-key-0123456789"
SKIP = 77
FAILURES = []


def skip(why):
    print(f"SKIPPED: {why}")
    sys.exit(SKIP)


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILURES.append(what)


def ensure_venv():
    try:
        import openai  # noqa: F401
        import anthropic  # noqa: F401
        import grpc  # noqa: F401
        return
    except ImportError:
        pass
    if VENV_PY.exists() and pathlib.Path(sys.executable) != VENV_PY:
        os.execv(str(VENV_PY), [str(VENV_PY)] + sys.argv)
    skip(f"no openai/anthropic SDKs (run scripts/setup-test-venv.sh; {VENV_PY})")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, body=None, headers=None, raw=None, timeout=60):
    """Returns (status, parsed JSON or text)."""
    data = raw if raw is not None else (
        json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


class Serve:
    def __init__(self, pdserve, extra):
        self.grpc_port = free_port()
        self.http_port = free_port()
        self.log = tempfile.NamedTemporaryFile("w+", prefix="pdserve-http-",
                                               suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [pdserve, "serve", "--model", str(MODEL), "--port",
             str(self.grpc_port), "--http-port", str(self.http_port),
             "--threads", "2", "--api-key", KEY] + extra,
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 180
        text = ""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("serve exited:\n" + open(self.log.name).read())
            text = open(self.log.name).read()
            if "HTTP API" in text and re.search(r"engine\s+pid", text):
                break
            time.sleep(0.2)
        else:
            raise RuntimeError("serve not ready:\n" + text)
        self.engine_target = re.search(r"engine\s+pid \d+\s+(\S+)", text).group(1)
        self.frontend_metrics = re.search(
            r"frontend\s+pid \d+\s+metrics (\S+)", text).group(1)
        self.base = f"http://127.0.0.1:{self.http_port}"
        self.url = self.base + "/v1"

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)


def load_grpc_stubs():
    from grpc_tools import protoc
    out = tempfile.mkdtemp(prefix="pdserve-py-")
    rc = protoc.main(["protoc", "-I" + str(ROOT / "proto"),
                      "-I" + os.path.join(os.path.dirname(protoc.__file__), "_proto"),
                      "--python_out=" + out, "--grpc_python_out=" + out,
                      "pdserve/v1/common.proto", "pdserve/v1/api.proto",
                      "pdserve/v1/engine.proto"])
    if rc != 0:
        raise RuntimeError(f"protoc failed: {rc}")
    sys.path.insert(0, out)
    return {n: importlib.import_module(f"pdserve.v1.{n}")
            for n in ("api_pb2", "api_pb2_grpc", "engine_pb2",
                      "engine_pb2_grpc")}


def grpc_generate(stubs, target, **fields):
    import grpc
    api = stubs["api_pb2"]
    with grpc.insecure_channel(target) as ch:
        stub = stubs["api_pb2_grpc"].InferenceStub(ch)
        req = api.GenerateRequest(**fields)
        ids, lps, tops, text = [], [], [], ""
        for resp in stub.Generate(req, timeout=120):
            if resp.HasField("delta"):
                d = resp.delta
                text += d.text
                ids += list(d.token_ids)
                lps += list(d.logprobs)
                tops += [[(a.token_id, a.logprob) for a in t.alternatives]
                         for t in d.top_logprobs]
        return text, ids, lps, tops


def engine_info(stubs, target):
    import grpc
    with grpc.insecure_channel(target) as ch:
        stub = stubs["engine_pb2_grpc"].EngineStub(ch)
        return stub.GetInfo(stubs["engine_pb2"].GetInfoRequest(), timeout=10)


def wait_idle(stubs, target, timeout=30):
    deadline = time.monotonic() + timeout
    info = engine_info(stubs, target)
    while info.active_sequences > 0 and time.monotonic() < deadline:
        time.sleep(0.05)
        info = engine_info(stubs, target)
    return info


CHAT = [{"role": "user", "content": "Name three colours."}]


def test_chat(s, client, stubs):
    r = client.chat.completions.create(model=s.model, messages=CHAT,
                                       max_tokens=12, temperature=0)
    c = r.choices[0]
    check(r.object == "chat.completion" and c.message.role == "assistant" and
          len(c.message.content) > 0, f"chat: a reply ({c.message.content!r})")
    check(c.finish_reason in ("stop", "length"), f"chat: finish {c.finish_reason}")
    n_prompt = http("POST", s.base + "/tokenize", {"messages": CHAT},
                    {"Authorization": f"Bearer {KEY}"})[1]["count"]
    check(r.usage.prompt_tokens == n_prompt and
          r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
          and 0 < r.usage.completion_tokens <= 12,
          f"chat: usage {r.usage.prompt_tokens}+{r.usage.completion_tokens} "
          f"(tokenize says {n_prompt})")
    # Streaming: role chunk, text deltas, finish chunk, usage chunk.
    chunks = list(client.chat.completions.create(
        model=s.model, messages=CHAT, max_tokens=12, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    finishes = [ch.choices[0].finish_reason for ch in chunks
                if ch.choices and ch.choices[0].finish_reason]
    check(text == c.message.content, "chat: streamed text == non-streamed text")
    check(finishes == [c.finish_reason], f"chat: one finish chunk {finishes}")
    check(chunks[-1].usage is not None and not chunks[-1].choices and
          chunks[-1].usage.completion_tokens == r.usage.completion_tokens,
          "chat: the last chunk carries usage (include_usage)")
    # Greedy HTTP == gRPC tokens: the same request through pdserve.v1.
    api = stubs["api_pb2"]
    gtext, gids, _, _ = grpc_generate(
        stubs, f"127.0.0.1:{s.grpc_port}",
        messages=[api.ChatMessage(role="user", content=CHAT[0]["content"])],
        max_tokens=12, return_token_ids=True)
    lp = client.chat.completions.create(model=s.model, messages=CHAT, max_tokens=12,
                                        temperature=0, logprobs=True)
    http_bytes = b"".join(bytes(t.bytes) for t in lp.choices[0].logprobs.content)
    grpc_bytes = b"".join(
        bytes(http("POST", s.base + "/detokenize", {"tokens": [i]},
                   {"Authorization": f"Bearer {KEY}"})[1]["prompt"], "utf-8")
        for i in gids)
    check(gtext == c.message.content, f"greedy: gRPC text == HTTP text ({gtext!r})")
    check(len(lp.choices[0].logprobs.content) == len(gids) and
          http_bytes == grpc_bytes,
          f"greedy: HTTP tokens == gRPC tokens ({len(gids)} tokens)")


def test_logprobs(s, client, stubs):
    r = client.chat.completions.create(model=s.model, messages=CHAT, max_tokens=6,
                                       temperature=0, logprobs=True,
                                       top_logprobs=5)
    content = r.choices[0].logprobs.content
    check(len(content) == r.usage.completion_tokens and
          all(len(t.top_logprobs) == 5 for t in content),
          f"top_logprobs=5: five alternatives for each of {len(content)} tokens")
    check(all(t.top_logprobs[0].logprob >= t.top_logprobs[-1].logprob and
              abs(t.logprob - t.top_logprobs[0].logprob) < 1e-6 for t in content),
          "top_logprobs: sorted; greedy token is the first alternative")
    api = stubs["api_pb2"]
    _, ids, lps, tops = grpc_generate(
        stubs, f"127.0.0.1:{s.grpc_port}",
        messages=[api.ChatMessage(role="user", content=CHAT[0]["content"])],
        max_tokens=6, return_token_ids=True, return_logprobs=True, top_logprobs=5)
    ok = len(tops) == len(content)
    for t, g_lp, g_top in zip(content, lps, tops):
        ok &= abs(t.logprob - g_lp) < 1e-4
        ok &= all(abs(a.logprob - b[1]) < 1e-4 for a, b in zip(t.top_logprobs, g_top))
    check(ok, "top_logprobs: log-probabilities match the gRPC Delta's")
    bad = http("POST", s.url + "/chat/completions",
               {"messages": CHAT, "logprobs": True, "top_logprobs": 21},
               {"Authorization": f"Bearer {KEY}"})
    check(bad[0] == 400 and "top_logprobs 21 must be in [0, 20]" in
          bad[1]["error"]["message"], f"top_logprobs=21: 400 {bad[1]}")


def test_n(s, client, stubs):
    before = engine_info(stubs, s.engine_target)
    kw = dict(model=s.model, messages=CHAT, max_tokens=8, temperature=1.0,
              seed=1234, n=3)
    a = client.chat.completions.create(**kw)
    after = engine_info(stubs, s.engine_target)
    b = client.chat.completions.create(**kw)
    ta = [c.message.content for c in a.choices]
    tb = [c.message.content for c in b.choices]
    check(len(ta) == 3 and [c.index for c in a.choices] == [0, 1, 2],
          f"n=3: three choices {ta}")
    check(ta == tb, "n=3 with a seed: the same three samples on a second run")
    check(len(set(ta)) > 1, "n=3: the samples differ from each other")
    page = 16
    shared = (a.usage.prompt_tokens - 1) // page * page
    hits = after.prefix_cache_hit_tokens - before.prefix_cache_hit_tokens
    check(hits >= 2 * shared, f"n=3: siblings took >= 2 x {shared} prompt tokens "
          f"from the prefix cache ({hits})")
    streamed = list(client.chat.completions.create(stream=True, **kw))
    by_index = {}
    for ch in streamed:
        for c in ch.choices:
            by_index[c.index] = by_index.get(c.index, "") + (c.delta.content or "")
    check([by_index.get(i) for i in range(3)] == ta,
          "n=3 streamed: the same samples, by index")


def test_cached_turn(s, client):
    first = client.chat.completions.create(model=s.model, messages=CHAT,
                                           max_tokens=8, temperature=0)
    turn2 = CHAT + [{"role": "assistant", "content": first.choices[0].message.content},
                    {"role": "user", "content": "And three more?"}]
    second = client.chat.completions.create(model=s.model, messages=turn2,
                                            max_tokens=8, temperature=0)
    cached = second.usage.prompt_tokens_details.cached_tokens
    check(cached >= 16 and cached < second.usage.prompt_tokens,
          f"second turn: {cached} of {second.usage.prompt_tokens} prompt tokens "
          "cached")


def test_completions(s, client):
    r = client.completions.create(model=s.model, prompt="The capital of France is",
                                  max_tokens=5, temperature=0)
    check(r.object == "text_completion" and len(r.choices[0].text) > 0,
          f"completions: text {r.choices[0].text!r}")
    ids = http("POST", s.base + "/tokenize", {"prompt": "The capital of France is"},
               {"Authorization": f"Bearer {KEY}"})[1]["tokens"]
    r2 = client.completions.create(model=s.model, prompt=ids, max_tokens=5,
                                   temperature=0)
    check(r2.choices[0].text == r.choices[0].text and
          r2.usage.prompt_tokens == len(ids),
          "completions: token-id prompt == string prompt")
    stream = list(client.completions.create(model=s.model, prompt="Once upon a",
                                            max_tokens=5, temperature=0,
                                            stream=True, logprobs=2))
    check(any(ch.choices and ch.choices[0].logprobs for ch in stream),
          "completions: streamed with logprobs")
    st, body = http("POST", s.base + "/detokenize", {"tokens": ids},
                    {"Authorization": f"Bearer {KEY}"})
    check(st == 200 and body["prompt"] == "The capital of France is",
          "detokenize(tokenize(x)) == x")


def test_models_health(s, client):
    models = client.models.list()
    check([m.id for m in models.data] == ["SmolLM2-135M-Instruct.Q4_1"],
          f"/v1/models: the file's stem {[m.id for m in models.data]}")
    check(http("GET", s.base + "/health")[0] == 200, "/health 200 while ready")
    st, v = http("GET", s.base + "/version")
    check(st == 200 and "version" in v, f"/version {v}")


def test_anthropic(s, aclient):
    # Sampling fields through extra_body: newer SDKs no longer name them.
    greedy = {"temperature": 0}
    m = aclient.messages.create(model=s.model, max_tokens=10,
                                system="You are terse.", messages=CHAT,
                                extra_body=greedy)
    check(m.type == "message" and m.content[0].type == "text" and
          m.stop_reason in ("end_turn", "max_tokens") and m.usage.output_tokens > 0,
          f"anthropic: message {m.content[0].text!r} ({m.stop_reason})")
    with aclient.messages.stream(model=s.model, max_tokens=10, messages=CHAT,
                                 system="You are terse.",
                                 extra_body=greedy) as st:
        types = [e.type for e in st]
        final = st.get_final_message()
    raw = [t for t in types if t in ("message_start", "content_block_start",
                                     "content_block_delta", "content_block_stop",
                                     "message_delta", "message_stop")]
    check(raw[:2] == ["message_start", "content_block_start"] and
          raw[-3:] == ["content_block_stop", "message_delta", "message_stop"] and
          "content_block_delta" in raw, f"anthropic stream events {raw[:3]}...")
    check(final.content[0].text == m.content[0].text,
          "anthropic: streamed text == non-streamed text")
    count = aclient.messages.count_tokens(model=s.model, messages=CHAT,
                                          system="You are terse.")
    check(count.input_tokens == m.usage.input_tokens,
          f"anthropic count_tokens {count.input_tokens} == input_tokens "
          f"{m.usage.input_tokens}")
    import anthropic
    try:
        aclient.messages.create(model=s.model, max_tokens=0, messages=CHAT)
        check(False, "anthropic max_tokens=0 refused")
    except anthropic.BadRequestError as e:
        check(e.status_code == 400 and e.body["type"] == "error" and
              "max_tokens 0 must be >= 1" in e.body["error"]["message"],
              f"anthropic: 400 in Anthropic's shape {e.body}")


def test_errors(s):
    auth = {"Authorization": f"Bearer {KEY}"}
    chat = s.url + "/chat/completions"

    def expect(body, status, param, text, headers=auth, url=chat, raw=None):
        st, b = http("POST", url, body, headers, raw=raw)
        err = b.get("error", {}) if isinstance(b, dict) else {}
        good = (st == status and text in err.get("message", "") and
                err.get("param") == param and "type" in err)
        check(good, f"error {status} param={param}: {st} {b}")
        return b

    expect({"messages": CHAT, "temperature": -1}, 400, "temperature",
           "temperature -1 must be a finite number >= 0")
    expect({"messages": CHAT, "top_p": 1.5}, 400, "top_p",
           "top_p 1.5 must be in [0, 1]")
    expect({"messages": CHAT, "max_tokens": 100000}, 400, "max_tokens",
           "max_tokens 100000 must be in [1, 8192]")
    expect({"messages": CHAT, "presence_penalty": 3}, 400, "presence_penalty",
           "presence_penalty 3 must be in [-2, 2]")
    expect({"messages": CHAT, "logit_bias": {"999999": 1}}, 400, "logit_bias",
           "logit_bias token 999999 is outside the vocabulary [0, 49152)")
    expect({"messages": CHAT, "temperature": "hot"}, 400, "temperature",
           "temperature must be a number, got string")
    expect({"messages": CHAT, "n": 17}, 400, "n", "n 17 must be in [1, 16]")
    expect({"messages": [{"role": "wizard", "content": "x"}]}, 400,
           "messages[0].role", "is not one of system, user, assistant, tool")
    expect(None, 400, None, "not valid JSON", raw=b"{not json")
    b = expect({"messages": CHAT, "model": "gpt-9"}, 404, "model",
               "model 'gpt-9' is not served here")
    check(b.get("error", {}).get("code") == "model_not_found",
          "unknown model: code model_not_found")
    expect({"messages": [{"role": "user", "content": "word " * 9000}]}, 400,
           "prompt", "exceeds the sequence capacity of 8192 tokens")
    st, b = http("POST", s.url + "/nowhere", {}, auth)
    check(st == 404 and "error" in b, f"unknown route: 404 {b}")
    st, b = http("POST", chat, None, auth, raw=b"x" * 300_000)
    check(st == 413 and "exceeds the limit of 262144 bytes" in
          b["error"]["message"], f"body over --http-max-body: 413 {b}")
    for headers, why in (({}, "no key"),
                         ({"Authorization": "Bearer wrong"}, "wrong key")):
        st, b = http("POST", chat, {"messages": CHAT}, headers)
        check(st == 401 and b["error"]["type"] == "authentication_error",
              f"{why}: 401 {b}")
    st, _ = http("POST", chat, {"messages": CHAT, "max_tokens": 1},
                 {"x-api-key": KEY})
    check(st == 200, "x-api-key header accepted")


def test_queue_full(s):
    """--max-running 4 --max-queue 2: a burst of long requests overflows."""
    body = {"messages": CHAT, "max_tokens": 64, "temperature": 0,
            "ignore_eos": True}
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        results = list(pool.map(
            lambda _: http("POST", s.url + "/chat/completions", body,
                           {"Authorization": f"Bearer {KEY}"}, timeout=300),
            range(12)))
    codes = sorted(st for st, _ in results)
    refused = [b for st, b in results if st == 429]
    check(set(codes) <= {200, 429} and refused and codes.count(200) >= 2,
          f"burst of 12 with 4 running + 2 queued: 200 or 429 {codes}")
    check(all(b["error"]["type"] == "rate_limit_error" and
              "queue" in b["error"]["message"] for b in refused),
          f"429 body names the queue {refused[:1]}")
    done = [b for st, b in results if st == 200]
    check(all(b["usage"]["completion_tokens"] == 64 for b in done),
          "ignore_eos: every accepted reply ran to max_tokens")


def test_disconnect(s, stubs):
    idle = wait_idle(stubs, s.engine_target)
    body = json.dumps({"messages": CHAT, "max_tokens": 2000, "temperature": 0,
                       "ignore_eos": True, "stream": True}).encode()
    sock = socket.create_connection(("127.0.0.1", s.http_port))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                 b"Authorization: Bearer " + KEY.encode() + b"\r\n"
                 b"Content-Type: application/json\r\nContent-Length: " +
                 str(len(body)).encode() + b"\r\n\r\n" + body)
    got = b""
    while got.count(b"data: ") < 6:
        got += sock.recv(65536)
    busy = engine_info(stubs, s.engine_target)
    sock.close()
    # Count engine steps from the close on (a snapshot taken before it would
    # also count the steps this client process spends between the two calls
    # when the machine is loaded).
    t0 = time.monotonic()
    closed = engine_info(stubs, s.engine_target)
    info = wait_idle(stubs, s.engine_target)
    steps = info.steps - closed.steps
    check(busy.active_sequences == 1 and info.active_sequences == 0 and
          info.free_pages == idle.free_pages,
          f"disconnect: the sequence is gone and its pages free "
          f"({info.free_pages} == {idle.free_pages})")
    check(steps <= 4, f"disconnect: freed within {steps} engine steps "
          f"({(time.monotonic() - t0) * 1000:.0f} ms after close)")


def test_metrics(s):
    with urllib.request.urlopen(s.frontend_metrics, timeout=10) as r:
        text = r.read().decode()
    m = re.search(r'pdserve_frontend_http_requests_total\{code="200",'
                  r'route="/v1/chat/completions"\} (\d+)', text)
    check(m is not None and int(m.group(1)) > 0,
          "metrics: HTTP requests by route and code")
    check(re.search(r'pdserve_frontend_http_requests_total\{code="429"', text)
          is not None, "metrics: 429s counted")
    m = re.search(r'pdserve_frontend_time_to_first_token_seconds_count'
                  r'\{api="http"\} (\d+)', text)
    check(m is not None and int(m.group(1)) > 0, "metrics: TTFT api=\"http\"")


def test_draining(s):
    """SIGTERM: while a stream drains, new requests and /health get 503."""
    body = json.dumps({"messages": CHAT, "max_tokens": 400, "temperature": 0,
                       "ignore_eos": True, "stream": True}).encode()
    sock = socket.create_connection(("127.0.0.1", s.http_port))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                 b"Authorization: Bearer " + KEY.encode() + b"\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" +
                 body)
    sock.recv(4096)
    os.kill(s.proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    st = 200
    while st == 200 and time.monotonic() < deadline:
        st, b = http("POST", s.url + "/chat/completions",
                     {"messages": CHAT, "max_tokens": 1},
                     {"Authorization": f"Bearer {KEY}"})
    check(st == 503 and b["error"]["type"] == "overloaded_error",
          f"draining: 503 {st} {b}")
    check(http("GET", s.base + "/health")[0] == 503, "draining: /health 503")
    sock.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pdserve", required=True)
    args = ap.parse_args()
    if not MODEL.exists():
        skip(f"no model at {MODEL} (scripts/setup.sh fetches it)")
    ensure_venv()
    import anthropic
    import openai
    stubs = load_grpc_stubs()
    s = Serve(args.pdserve, ["--max-running", "4", "--max-queue", "2",
                             "--http-max-body", "262144"])
    s.model = "SmolLM2-135M-Instruct.Q4_1"
    try:
        client = openai.OpenAI(base_url=s.url, api_key=KEY, max_retries=0)
        aclient = anthropic.Anthropic(base_url=s.base, api_key=KEY, max_retries=0)
        for name, fn in (("models", lambda: test_models_health(s, client)),
                         ("chat", lambda: test_chat(s, client, stubs)),
                         ("logprobs", lambda: test_logprobs(s, client, stubs)),
                         ("n", lambda: test_n(s, client, stubs)),
                         ("cached", lambda: test_cached_turn(s, client)),
                         ("completions", lambda: test_completions(s, client)),
                         ("anthropic", lambda: test_anthropic(s, aclient)),
                         ("errors", lambda: test_errors(s)),
                         ("queue", lambda: test_queue_full(s)),
                         ("disconnect", lambda: test_disconnect(s, stubs)),
                         ("metrics", lambda: test_metrics(s)),
                         ("draining", lambda: test_draining(s))):
            try:
                fn()
            except Exception as e:  # a crash in one part fails it, not the run
                check(False, f"{name}: {type(e).__name__}: {e}")
    finally:
        s.stop()
        if FAILURES:
            print(open(s.log.name).read()[-4000:])
    print(f"{len(FAILURES)} failed")
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
