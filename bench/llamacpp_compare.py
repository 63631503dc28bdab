#!/usr/bin/env python3
"""Runs pdserve's generate_bench and llama.cpp on the same GGUF files, with the
same prompt length, decode length and thread counts, in the same run, and
prints pdserve's prefill / decode tokens/s as ratios to llama.cpp's (JSON).

  python3 bench/llamacpp_compare.py [--bench BUILD/bench/generate_bench]
      [--model A.gguf ...] [--threads 1,2] [--prompt-tokens 512]
      [--decode-tokens 128] [--repeat 2] [--make-variants]

Defaults: the shipped SmolLM2-135M-Instruct Q4_1 from $PDSERVE_CACHE/models
(~/.cache/pdserve/models) plus, with --make-variants (default on), Q8_0 and
F16 files made from it with `pdserve quantize` (cached next to it).

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


def llamacpp_worker(args):
    """Runs inside the llama-cpp-python venv; prints one JSON line per
    (model, threads)."""
    import llama_cpp  # noqa: F401
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
                    logits = llm.scores[llm.n_tokens - 1]
                    tok = int(logits.argmax())
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
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--no-variants", action="store_true")
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
    py = ensure_llamacpp()
    common = ["--threads", ",".join(map(str, args.threads)),
              "--prompt-tokens", str(args.prompt_tokens),
              "--decode-tokens", str(args.decode_tokens),
              "--repeat", str(args.repeat)]
    ours_cmd = [args.bench] + sum([["--model", m] for m in args.model], []) + common
    log("running pdserve: " + " ".join(ours_cmd))
    ours = json.loads(subprocess.run(ours_cmd, check=True, capture_output=True,
                                     text=True).stdout)
    theirs_cmd = [py, os.path.abspath(__file__), "--llamacpp-worker"] + \
        sum([["--model", m] for m in args.model], []) + common
    log("running llama.cpp: " + " ".join(theirs_cmd))
    res = subprocess.run(theirs_cmd, check=True, capture_output=True, text=True)
    theirs = {}
    for line in res.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            theirs[(r["model"], r["threads"])] = r
    rows = []
    for r in ours["results"]:
        t = theirs[(r["model"], r["threads"])]
        rows.append({
            "model": os.path.basename(r["model"]),
            "weights_type": r["weights_type"],
            "threads": r["threads"],
            "pdserve_prefill_tok_s": round(r["prefill_tok_s"], 1),
            "llamacpp_prefill_tok_s": round(t["prefill_tok_s"], 1),
            "prefill_ratio": round(r["prefill_tok_s"] / t["prefill_tok_s"], 3),
            "pdserve_decode_tok_s": round(r["decode_tok_s"], 1),
            "llamacpp_decode_tok_s": round(t["decode_tok_s"], 1),
            "decode_ratio": round(r["decode_tok_s"] / t["decode_tok_s"], 3),
        })
    print(json.dumps({"prompt_tokens": args.prompt_tokens,
                      "decode_tokens": args.decode_tokens,
                      "pdserve_isa": ours.get("isa"),
                      "results": rows}, indent=2))


if __name__ == "__main__":
    main()
