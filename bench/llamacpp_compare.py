#!/usr/bin/env python3
"""Runs pdserve's generate_bench and llama.cpp on the same GGUF files, with the
same prompt length, decode length and thread counts, in the same run, and
prints pdserve's prefill / decode tokens/s as ratios to llama.cpp's (JSON).

  python3 bench/llamacpp_compare.py [--bench BUILD/bench/generate_bench]
      [--model A.gguf ...] [--threads 1,2] [--prompt-tokens 512]
      [--decode-tokens 128] [--repeat 1] [--rounds 3] [--no-variants]

Defaults: the shipped SmolLM2-135M-Instruct Q4_1 from $PDSERVE_CACHE/models
(~/.cache/pdserve/models) plus Q8_0 and
F16 files made from it with `pdserve quantize` (cached next to it; skip with
--no-variants). Each figure is the best over --rounds alternations of the two
programs.

llama.cpp comes from the PyPI package llama-cpp-python, installed on first use
into a venv at $PDSERVE_CACHE/llamacpp-venv (pip builds llama.cpp from
source: slow the first time, cached afterwards):
  python3 -m venv $PDSERVE_CACHE/llamacpp-venv
  $PDSERVE_CACHE/llamacpp-venv/bin/pip install llama-cpp-python
The llama.cpp side is measured by a child process of that venv's python
(this file re-invoked with --llamacpp-worker), so this script itself needs
only the standard library.
"""

import argparse
import json
import os
import subprocess
import sys
import time

CACHE = os.environ.get("PDSERVE_CACHE", os.path.expanduser("~/.cache/pdserve"))
VENV = os.path.join(CACHE, "llamacpp-venv")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.join(CACHE, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def log(msg):
    print(f"[llamacpp_compare] {msg}", file=sys.stderr, flush=True)


def ensure_llamacpp():
    py = os.path.join(VENV, "bin", "python")
    probe = [py, "-c", "import llama_cpp"]
    if os.path.exists(py) and subprocess.run(probe, capture_output=True).returncode == 0:
        return py
    log(f"installing llama-cpp-python into {VENV} (builds llama.cpp; slow once)")
    if not os.path.exists(py):
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
    subprocess.run([py, "-m", "pip", "install", "--quiet", "llama-cpp-python"],
                   check=True)
    return py


def prompt_ids(n, vocab):
    # Same synthetic ids as generate_bench.
    return [(i * 7919 + 17) % vocab for i in range(n)]


def _argmax(floats, n):
    import numpy as np
    return int(np.frombuffer(floats, dtype=np.float32, count=n).argmax())


def llamacpp_worker(args):
    """Runs inside the llama-cpp-python venv; prints one JSON line per
    (model, threads)."""
    import ctypes
    import llama_cpp
    from llama_cpp import Llama
    for model in args.model:
        for threads in args.threads:
            llm = Llama(model_path=model, n_ctx=args.prompt_tokens +
                        args.decode_tokens + 16, n_batch=args.prompt_tokens,
                        n_ubatch=args.prompt_tokens, n_threads=threads,
                        n_threads_batch=threads, verbose=False)
            vocab = llm.n_vocab()
            prompt = prompt_ids(args.prompt_tokens, vocab)
            llm.reset()
            llm.eval(prompt[:16])  # warm-up: page the weights in
            best_p, best_d = 1e30, 1e30
            for _ in range(args.repeat):
                llm.reset()  # n_tokens = 0: the prompt overwrites the cache
                t0 = time.perf_counter()
                llm.eval(prompt)
                best_p = min(best_p, time.perf_counter() - t0)
                tok = 0
                t0 = time.perf_counter()
                for _ in range(args.decode_tokens):
                    # Greedy over the last logits row, as generate_bench does.
                    p = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
                    row = ctypes.cast(p, ctypes.POINTER(ctypes.c_float * vocab))
                    tok = _argmax(row.contents, vocab)
                    llm.eval([tok])
                best_d = min(best_d, time.perf_counter() - t0)
            print(json.dumps({"model": model, "threads": threads,
                              "prefill_tok_s": args.prompt_tokens / best_p,
                              "decode_tok_s": args.decode_tokens / best_d}),
                  flush=True)
            del llm


def make_variants(pdserve, base):
    out = [base]
    for t in ("Q8_0", "F16"):
        path = base.replace(".Q4_1.gguf", f".{t}.gguf")
        if path == base:
            path = base + f".{t}.gguf"
        if not os.path.exists(path):
            log(f"making {path} with pdserve quantize")
            subprocess.run([pdserve, "quantize", "--model", base, "--type", t,
                            "--out", path + ".part"], check=True)
            os.replace(path + ".part", path)
        out.append(path)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bench", default=os.path.join(ROOT, "build", "bench",
                                                   "generate_bench"))
    p.add_argument("--pdserve", default=None,
                   help="pdserve binary for quantize (default: next to --bench)")
    p.add_argument("--model", action="append")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--prompt-tokens", type=int, default=512)
    p.add_argument("--decode-tokens", type=int, default=128)
    p.add_argument("--repeat", type=int, default=1,
                   help="timed runs per figure inside each program")
    p.add_argument("--rounds", type=int, default=3,
                   help="alternations of the two programs (best is kept)")
    p.add_argument("--no-variants", action="store_true")
    p.add_argument("--llamacpp-python", default=None,
                   help="a python that can already import llama_cpp "
                        "(default: the cached venv, installed on first use)")
    p.add_argument("--llamacpp-worker", action="store_true",
                   help=argparse.SUPPRESS)
    args = p.parse_args()
    args.threads = [int(t) for t in str(args.threads).split(",") if t]
    if args.llamacpp_worker:
        llamacpp_worker(args)
        return
    if not args.model:
        if not os.path.exists(DEFAULT_MODEL):
            sys.exit(f"{DEFAULT_MODEL} absent: run scripts/setup.sh")
        pdserve = args.pdserve or os.path.join(
            os.path.dirname(os.path.dirname(args.bench)), "server", "cli",
            "pdserve")
        args.model = ([DEFAULT_MODEL] if args.no_variants
                      else make_variants(pdserve, DEFAULT_MODEL))
    py = args.llamacpp_python or ensure_llamacpp()
    common = ["--threads", ",".join(map(str, args.threads)),
              "--prompt-tokens", str(args.prompt_tokens),
              "--decode-tokens", str(args.decode_tokens),
              "--repeat", str(args.repeat)]
    ours_cmd = [args.bench] + sum([["--model", m] for m in args.model], []) + common
    theirs_cmd = [py, os.path.abspath(__file__), "--llamacpp-worker"] + \
        sum([["--model", m] for m in args.model], []) + common
    # Alternate the two programs for --rounds rounds and keep each figure's
    # best: on a shared machine the load drifts, and interleaving exposes
    # both to the same conditions.
    ours, theirs = {}, {}

    def keep_best(table, key, prefill, decode):
        old = table.get(key, (0.0, 0.0))
        table[key] = (max(old[0], prefill), max(old[1], decode))

    isa = None
    for rnd in range(args.rounds):
        log(f"round {rnd + 1}/{args.rounds}: pdserve")
        res = subprocess.run(ours_cmd, capture_output=True, text=True)
        if res.returncode != 0:
            sys.exit(f"generate_bench failed:\n{res.stderr}")
        doc = json.loads(res.stdout)
        isa = doc.get("isa")
        for r in doc["results"]:
            keep_best(ours, (r["model"], r["threads"], r["weights_type"]),
                      r["prefill_tok_s"], r["decode_tok_s"])
        log(f"round {rnd + 1}/{args.rounds}: llama.cpp")
        res = subprocess.run(theirs_cmd, capture_output=True, text=True)
        if res.returncode != 0:
            sys.exit(f"llama.cpp worker failed:\n{res.stderr}")
        for line in res.stdout.splitlines():
            if line.startswith("{"):
                r = json.loads(line)
                keep_best(theirs, (r["model"], r["threads"]),
                          r["prefill_tok_s"], r["decode_tok_s"])
    rows = []
    for (model, threads, wtype), (op, od) in ours.items():
        tp, td = theirs[(model, threads)]
        rows.append({
            "model": os.path.basename(model),
            "weights_type": wtype,
            "threads": threads,
            "pdserve_prefill_tok_s": round(op, 1),
            "llamacpp_prefill_tok_s": round(tp, 1),
            "prefill_ratio": round(op / tp, 3),
            "pdserve_decode_tok_s": round(od, 1),
            "llamacpp_decode_tok_s": round(td, 1),
            "decode_ratio": round(od / td, 3),
        })
    print(json.dumps({"prompt_tokens": args.prompt_tokens,
                      "decode_tokens": args.decode_tokens,
                      "rounds": args.rounds, "repeat": args.repeat,
                      "pdserve_isa": isa,
                      "results": rows}, indent=2))


if __name__ == "__main__":
    main()
