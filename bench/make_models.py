#!/usr/bin/env python3
"""Makes the GGUF files bench/cpu_compare.py measures, so pdserve and the peers
(llama.cpp, ik_llama.cpp) read the very same bytes.

  python3 bench/make_models.py [--pdserve build/server/cli/pdserve]
      [--models smollm2-135m,smollm2-1.7b,qwen3-1.7b] [--types F16,BF16,Q8_0,Q4_0,Q4_1]
      [--check] [--list]

* SmolLM2-135M: requantized from the shipped SmolLM2-135M-Instruct.Q4_1.gguf
  (scripts/setup.sh) with `pdserve quantize` (its real weights, as Q4_1
  dequantizes them).
* smollm2-1.7b: SmolLM2-1.7B's shape (llama; hidden 2048, 24 layers, 32 heads,
  32 KV heads, FFN 8192, context 8192, tied embeddings).
* qwen3-1.7b: Qwen3-1.7B's GQA shape (qwen3 arch with per-head Q/K RMSNorm;
  hidden 2048, 28 layers, 16 heads, 8 KV heads, head_dim 128, FFN 6144,
  tied embeddings).
  Both 1.7B shapes carry random weights (normal, std 0.02; norms 1) written
  as F16 by this script, then `pdserve quantize` makes the other types. They
  use SmolLM2's real vocabulary and tokenizer metadata, copied from the
  shipped file.

Files go to $PDSERVE_CACHE/models/bench (default ~/.cache/pdserve); existing
files are kept (idempotent). Writing the F16 files needs the PyPI packages
`gguf` and `numpy`; when this python lacks them the script re-runs itself in
a venv at $PDSERVE_CACHE/bench-venv (created on first use).
--check loads every file with pdserve (`pdserve generate -n 8`) and, when
bench/peers/build_peers.sh has built them, with both peers' llama-bench
(one 8-token prompt); it prints one line per file and engine.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

CACHE = os.environ.get("PDSERVE_CACHE", os.path.expanduser("~/.cache/pdserve"))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIPPED = os.path.join(CACHE, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
OUT_DIR = os.path.join(CACHE, "models", "bench")
VENV = os.path.join(CACHE, "bench-venv")
TYPES = ["F16", "BF16", "Q8_0", "Q4_0", "Q4_1"]

# Random-weight shapes (tied embeddings: no output.weight, like the originals).
SHAPES = {
    "smollm2-1.7b": dict(arch="llama", hidden=2048, layers=24, heads=32,
                         kv_heads=32, head_dim=64, ffn=8192, context=8192,
                         rope_base=130000.0, eps=1e-5, qk_norm=False),
    "qwen3-1.7b": dict(arch="qwen3", hidden=2048, layers=28, heads=16,
                       kv_heads=8, head_dim=128, ffn=6144, context=40960,
                       rope_base=1000000.0, eps=1e-6, qk_norm=True),
}
MODELS = ["smollm2-135m"] + list(SHAPES)


def log(msg):
    print(f"[make_models] {msg}", file=sys.stderr, flush=True)


def model_path(model, dtype):
    return os.path.join(OUT_DIR, f"{model}.{dtype}.gguf")


def ensure_gguf_python():
    """Returns a python with gguf and numpy (this one or the cache venv)."""
    try:
        import gguf  # noqa: F401
        import numpy  # noqa: F401
        return sys.executable
    except ImportError:
        pass
    py = os.path.join(VENV, "bin", "python")
    probe = [py, "-c", "import gguf, numpy"]
    if os.path.exists(py) and subprocess.run(probe, capture_output=True).returncode == 0:
        return py
    log(f"creating {VENV} with the PyPI packages gguf and numpy")
    if not os.path.exists(py):
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
    subprocess.run([py, "-m", "pip", "install", "--quiet", "gguf==0.17.1", "numpy"],
                   check=True)
    return py


def write_random_f16(name, out):
    """Writes the F16 random-weight model `name` to `out` (runs under a
    python with gguf + numpy)."""
    import gguf
    import numpy as np
    s = SHAPES[name]
    src = gguf.GGUFReader(SHIPPED)
    vocab = len(src.fields["tokenizer.ggml.tokens"].data)
    w = gguf.GGUFWriter(out + ".tmp", s["arch"])
    a = s["arch"]
    w.add_name(f"random {name} (pdserve bench)")
    w.add_uint32(f"{a}.block_count", s["layers"])
    w.add_uint32(f"{a}.context_length", s["context"])
    w.add_uint32(f"{a}.embedding_length", s["hidden"])
    w.add_uint32(f"{a}.feed_forward_length", s["ffn"])
    w.add_uint32(f"{a}.attention.head_count", s["heads"])
    w.add_uint32(f"{a}.attention.head_count_kv", s["kv_heads"])
    w.add_uint32(f"{a}.attention.key_length", s["head_dim"])
    w.add_uint32(f"{a}.attention.value_length", s["head_dim"])
    w.add_float32(f"{a}.rope.freq_base", s["rope_base"])
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", s["eps"])
    w.add_uint32(f"{a}.vocab_size", vocab)
    w.add_uint32(f"{a}.rope.dimension_count", s["head_dim"])
    w.add_uint32("general.file_type", 1)  # MOSTLY_F16
    w.add_uint32("general.quantization_version", 2)
    # SmolLM2's tokenizer, copied field by field.
    for key, field in src.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            w.add_array(key, field.contents())
        else:
            w.add_key_value(key, field.contents(), vtype)
    hd, kvd, h, f = s["head_dim"], s["kv_heads"] * s["head_dim"], s["hidden"], s["ffn"]
    qd = s["heads"] * hd
    # (name, numpy shape = (rows, cols) with cols contiguous, is_norm)
    tensors = [("token_embd.weight", (vocab, h), False), ("output_norm.weight", (h,), True)]
    for i in range(s["layers"]):
        b = f"blk.{i}."
        tensors += [(b + "attn_norm.weight", (h,), True),
                    (b + "attn_q.weight", (qd, h), False),
                    (b + "attn_k.weight", (kvd, h), False),
                    (b + "attn_v.weight", (kvd, h), False),
                    (b + "attn_output.weight", (h, qd), False),
                    (b + "ffn_norm.weight", (h,), True),
                    (b + "ffn_gate.weight", (f, h), False),
                    (b + "ffn_up.weight", (f, h), False),
                    (b + "ffn_down.weight", (h, f), False)]
        if s["qk_norm"]:
            tensors += [(b + "attn_q_norm.weight", (hd,), True),
                        (b + "attn_k_norm.weight", (hd,), True)]
    for tname, shape, norm in tensors:
        dt = np.float32 if norm else np.float16
        n = int(np.prod(shape))
        w.add_tensor_info(tname, shape, np.dtype(dt), n * np.dtype(dt).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(20240612)
    for tname, shape, norm in tensors:
        if norm:
            w.write_tensor_data(np.ones(shape, dtype=np.float32))
        else:
            x = rng.standard_normal(shape, dtype=np.float32)
            x *= 0.02
            w.write_tensor_data(x.astype(np.float16))
    w.close()
    os.replace(out + ".tmp", out)


def quantize(pdserve, src, dtype, out):
    t0 = time.time()
    log(f"pdserve quantize --type {dtype} -> {out}")
    subprocess.run([pdserve, "quantize", "--model", src, "--type", dtype,
                    "--out", out + ".tmp"], check=True, stdout=subprocess.DEVNULL)
    os.replace(out + ".tmp", out)
    log(f"  {os.path.getsize(out) / 1e9:.2f} GB in {time.time() - t0:.0f} s")


def make(pdserve, model, types):
    os.makedirs(OUT_DIR, exist_ok=True)
    if model == "smollm2-135m":
        if not os.path.exists(SHIPPED):
            sys.exit(f"{SHIPPED} missing: run scripts/setup.sh first")
        src = SHIPPED
    else:
        src = model_path(model, "F16")
        if not os.path.exists(src):
            py = ensure_gguf_python()
            t0 = time.time()
            log(f"writing {src} (random weights, F16)")
            subprocess.run([py, os.path.abspath(__file__), "--write-random", model,
                            "--out", src], check=True)
            log(f"  {os.path.getsize(src) / 1e9:.2f} GB in {time.time() - t0:.0f} s")
    for dtype in types:
        out = model_path(model, dtype)
        if os.path.exists(out):
            log(f"{out} exists")
            continue
        quantize(pdserve, src, dtype, out)


def peer_bins():
    bins = {}
    for name in ("llamacpp", "ik"):
        b = os.path.join(CACHE, "peers", name, "bin", "llama-bench")
        if os.path.exists(b):
            bins[name] = b
    return bins


def check(pdserve, files):
    """Loads every file with pdserve and each built peer; returns failures."""
    failures = 0
    for path in files:
        cmds = {"pdserve": [pdserve, "generate", "--model", path, "-n", "8",
                            "--threads", "2", "--prompt", "The capital of France is",
                            "--ignore-eos"]}
        for name, b in peer_bins().items():
            cmds[name] = [b, "-m", path, "-p", "8", "-n", "0", "-r", "1",
                          "-t", "2", "-o", "json"]
        for engine, cmd in cmds.items():
            r = subprocess.run(cmd, capture_output=True, text=True)
            ok = r.returncode == 0
            failures += not ok
            out = (r.stdout if ok else r.stderr).strip().replace("\n", " ")
            if ok and engine != "pdserve":
                m = re.search(r'"avg_ts":\s*([\d.]+)', out)
                out = f"loaded; 8-token prompt at {float(m.group(1)):.1f} tok/s" if m else out
            print(f"{'ok  ' if ok else 'FAIL'} {engine:9s} {os.path.basename(path)}: "
                  f"{out[-120:]}", flush=True)
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pdserve", default=os.path.join(ROOT, "build/server/cli/pdserve"))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--check", action="store_true",
                    help="load every file with pdserve and the built peers")
    ap.add_argument("--list", action="store_true", help="print the file paths")
    ap.add_argument("--write-random", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.write_random:
        write_random_f16(args.write_random, args.out)
        return 0
    models = [m for m in args.models.split(",") if m]
    types = [t.upper() for t in args.types.split(",") if t]
    for m in models:
        if m not in MODELS:
            sys.exit(f"unknown model {m}; known: {', '.join(MODELS)}")
    files = [model_path(m, t) for m in models for t in types]
    if args.list:
        print("\n".join(files))
        return 0
    if not os.access(args.pdserve, os.X_OK):
        sys.exit(f"{args.pdserve} not found: build it (cmake --build build --target pdserve)")
    for m in models:
        make(args.pdserve, m, types)
    if args.check:
        return 1 if check(args.pdserve, files) else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
