#!/usr/bin/env python3
"""Chat template render time: pdserve's C++ interpreter vs Hugging Face.

    python3 -m venv V && V/bin/pip install transformers jinja2
    cmake --build BUILD --target chat_template_bench
    V/bin/python bench/chat_compare.py --bench BUILD/bench/chat_template_bench \
        [--tokenizer ../shared/tokenizers/qwen3] [--messages 8,64,512] [--iters 200]

For each conversation size, builds a deterministic alternating user/assistant
conversation (assistant turns carry <think> blocks), renders it with the Qwen3
template via (a) pdserve (parse once, render many), (b) transformers'
apply_chat_template(tokenize=False) and (c) the same template compiled once by
jinja2 with transformers' environment (its render() alone, the fairest peer),
checks all three prompts are byte-identical, and prints best-of and median
ratios as JSON lines.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import tempfile
import time

from transformers import AutoTokenizer
from transformers.utils.chat_template_utils import _compile_jinja_template

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def conversation(n, seed=7):
    rng = random.Random(seed)
    words = ("the model server token stream latency cache batch prefill decode "
             "schedule memory 世界 héllo {{ not_a_var }} <|im_end|>").split()
    msgs = [{"role": "system", "content": "You are a helpful assistant."}]
    for i in range(n):
        text = " ".join(rng.choice(words) for _ in range(40))
        if i % 2 == 0:
            msgs.append({"role": "user", "content": text})
        else:
            msgs.append({"role": "assistant",
                         "content": "<think>\nreasoning " + text[:60] + "\n</think>\n\n" + text})
    if msgs[-1]["role"] != "user":
        msgs.append({"role": "user", "content": "last question"})
    return msgs


def best_and_median(fn, iters):
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "..", "shared", "tokenizers", "qwen3"))
    ap.add_argument("--messages", default="8,64,512")
    ap.add_argument("--iters", type=int, default=200)
    args = ap.parse_args()
    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    template_path = os.path.join(args.tokenizer, "chat_template.jinja")
    with open(template_path, encoding="utf-8") as f:
        source = f.read()
    compiled = _compile_jinja_template(source)
    for n in [int(x) for x in args.messages.split(",")]:
        msgs = conversation(n)
        with tempfile.TemporaryDirectory() as d:
            mpath = os.path.join(d, "m.json")
            dump = os.path.join(d, "out.txt")
            with open(mpath, "w", encoding="utf-8") as f:
                json.dump(msgs, f, ensure_ascii=False)
            iters = max(5, args.iters * 8 // max(8, n))
            proc = subprocess.run([args.bench, template_path, mpath, str(iters)],
                                  check=True, capture_output=True, text=True,
                                  env=dict(os.environ, CHAT_BENCH_DUMP=dump))
            ours = json.loads(proc.stdout)
            with open(dump, encoding="utf-8", newline="") as f:
                ours_text = f.read()
        hf_text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        kwargs = dict(messages=msgs, tools=None, documents=None, add_generation_prompt=True,
                      **tok.special_tokens_map)
        jinja_text = compiled.render(**kwargs)
        hf_best, hf_med = best_and_median(lambda: tok.apply_chat_template(
            msgs, tokenize=False, add_generation_prompt=True), iters)
        jinja_best, jinja_med = best_and_median(lambda: compiled.render(**kwargs), iters)
        ours_best = ours["render_us_best"] / 1e6
        ours_med = ours["render_us_median"] / 1e6
        # Best-of times are the robust figure on a shared machine; medians too.
        print(json.dumps({
            "messages": len(msgs), "prompt_bytes": len(ours_text.encode()),
            "identical": ours_text == hf_text == jinja_text,
            "pdserve_parse_us": round(ours["parse_us"], 1),
            "pdserve_render_us_best": round(ours_best * 1e6, 1),
            "hf_apply_chat_template_us_best": round(hf_best * 1e6, 1),
            "jinja2_render_us_best": round(jinja_best * 1e6, 1),
            "speedup_vs_hf_best": round(hf_best / ours_best, 2),
            "speedup_vs_jinja2_render_best": round(jinja_best / ours_best, 2),
            "speedup_vs_jinja2_render_median": round(jinja_med / ours_med, 2),
        }))


if __name__ == "__main__":
    main()
