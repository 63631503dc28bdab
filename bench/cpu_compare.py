#!/usr/bin/env python3
"""pdserve's single-stream CPU engine side by side with llama.cpp and
ik_llama.cpp: one command, one JSON report (readable table on stderr).

  python3 bench/cpu_compare.py [--quick] [--cells GROUPS|KEYS] [--threads 1,2]
      [--rounds 2] [--out bench/results/cpu_compare.json] [--build build]
      [--peers llamacpp,ik] [--list]

Prerequisites (cached under $PDSERVE_CACHE, default ~/.cache/pdserve; none of
them is rebuilt here):
  bench/peers/build_peers.sh        the peers' llama-bench / llama-batched-bench
  python3 bench/make_models.py      the GGUF files (same bytes for every engine)
  /work/dev-build.sh generate_bench engine_decode_bench peak_bench pdserve

What runs, per round (rounds alternate the engines: pdserve, llama.cpp,
ik_llama.cpp, next cell, ...; every figure is the best over rounds and
repetitions, every raw figure is kept):
  probe    build/bench/peak_bench at each thread count: read bandwidth and the
           fp32 FMA / int8 (/ VNNI / bf16 when present) compute peaks
  short    prefill 512 tokens, decode 128 tokens at depth 512
           ours:     generate_bench --prompt-tokens 512 --decode-tokens 128
                     --chunk 512 (decode right after the timed prefill)
           llama.cpp llama-bench -fa 1 -p 512 -n 0   and  -p 0 -n 128 -d 512
           ik:       llama-bench -fa 1 -p 512 -n 0 -gp 512,128 (+ -rtr 1 where
                     run-time repacking is the faster, see IK_RTR)
  long     prefill 8192; decode 128 at depth min(8192, context - 128); ours
           also reports the peak resident memory of that prefill beyond the
           weights and the KV it wrote
  batched  llama-batched-bench -npp 128 -ntg 64 -npl 1,4,16,64 (both peers) vs
           engine_decode_bench --prompt 128 --steps 64 --batches 1,4,16,64:
           aggregate decode tok/s
Each cell reports ours / best peer (naming it), decode as bytes read per token
(weights + KV) x tok/s / probed read bandwidth, and prefill GFLOP/s as a
fraction of the measured compute peak for its weight type.

Cell selection (--cells, comma-separated; --list prints them): a group
(default, quick, all, short, long, batched, 135m, smollm2-1.7b, qwen3-1.7b) or
a cell key such as short:135m-Q4_0, long:qwen3-1.7b-Q4_0, batched:135m-Q4_0.
--quick = --cells quick --rounds 1 --threads 2.
"""

import argparse
import datetime
import json
import os
import platform
import re
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import make_models  # noqa: E402

CACHE = make_models.CACHE
PEERS = {"llamacpp": "llama.cpp", "ik": "ik_llama.cpp"}
ENGINES = ["pdserve"] + list(PEERS)
PROMPT, DECODE, LONG = 512, 128, 8192
BATCH_NPP, BATCH_NTG, BATCH_NPL = 128, 64, [1, 4, 16, 64]
# ik_llama.cpp's run-time repacking (-rtr 1) per weight type: on where it is
# the faster of the two on this machine (measured: see the README of
# bench/results); the report records what ran.
IK_RTR = {"Q4_0": 1, "Q4_1": 1, "Q8_0": 1, "F16": 0, "BF16": 1}
TIMEOUT = 3600


def log(msg):
    print(f"[cpu_compare] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- GGUF shape
GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?",
                10: "Q", 11: "q", 12: "d"}
# ggml type -> (block elements, block bytes)
GGML_BLOCKS = {0: (1, 4), 1: (1, 2), 30: (1, 2), 8: (32, 34), 2: (32, 18),
               3: (32, 20)}


def gguf_shape(path):
    """Architecture numbers and tensor bytes from a GGUF header (stdlib)."""
    with open(path, "rb") as f:
        def rd(fmt):
            n = struct.calcsize("<" + fmt)
            return struct.unpack("<" + fmt, f.read(n))[0]

        def rd_str():
            return f.read(rd("Q")).decode("utf-8", "replace")

        def rd_val(t):
            if t == 8:
                return rd_str()
            if t == 9:
                et, n = rd("I"), rd("Q")
                if et in GGUF_SCALARS and et != 8:
                    f.seek(n * struct.calcsize(GGUF_SCALARS[et]), 1)
                    return n
                return [rd_val(et) for _ in range(n)] and n
            return rd(GGUF_SCALARS[t])

        if f.read(4) != b"GGUF":
            raise ValueError(f"{path}: not GGUF")
        rd("I")
        n_tensors, n_kv = rd("Q"), rd("Q")
        kv = {}
        for _ in range(n_kv):
            key = rd_str()
            kv[key] = rd_val(rd("I"))
        tensors = {}
        for _ in range(n_tensors):
            name = rd_str()
            dims = [rd("Q") for _ in range(rd("I"))]
            t = rd("I")
            rd("Q")
            n = 1
            for d in dims:
                n *= d
            be, bb = GGML_BLOCKS.get(t, (1, 0))
            tensors[name] = (dims, n // be * bb)
    arch = kv["general.architecture"]
    g = lambda k, d=None: kv.get(f"{arch}.{k}", d)  # noqa: E731
    hidden, heads = g("embedding_length"), g("attention.head_count")
    head_dim = g("attention.key_length", hidden // heads)
    layers = g("block_count")
    weight_bytes = sum(b for _, b in tensors.values())
    embd_bytes = tensors["token_embd.weight"][1]
    matrix_params = sum(
        (lambda d: d[0] * d[1])(dims) for name, (dims, _) in tensors.items()
        if len(dims) == 2 and name.startswith("blk."))
    return dict(arch=arch, layers=layers, hidden=hidden, heads=heads,
                kv_heads=g("attention.head_count_kv", heads), head_dim=head_dim,
                context=g("context_length"), vocab=tensors["token_embd.weight"][0][1],
                weight_bytes=weight_bytes, embd_bytes=embd_bytes,
                tied=("output.weight" not in tensors), layer_matrix_params=matrix_params)


def decode_bytes_per_token(shape, depth, n, kv_elem_bytes):
    """Weight + KV bytes one decode token reads, averaged over n tokens from
    `depth` (every matrix once; the embedding row lookup ignored)."""
    kv_dim = shape["kv_heads"] * shape["head_dim"]
    mean_ctx = depth + (n + 1) / 2
    return (shape["weight_bytes"]
            + shape["layers"] * mean_ctx * kv_dim * 2 * kv_elem_bytes)


def prefill_flops_per_token(shape, prompt):
    """Matrix multiply-adds x 2 of the layers (the LM head runs on the last
    token only) plus causal attention (QK and PV) at mean context."""
    q_dim = shape["heads"] * shape["head_dim"]
    attn = 4 * shape["layers"] * q_dim * (prompt + 1) / 2
    return 2 * shape["layer_matrix_params"] + attn


# ------------------------------------------------------------------- running
def run(cmd, timeout=TIMEOUT):
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}:\n"
                           + "\n".join(r.stderr.strip().splitlines()[-15:]))
    return r.stdout, r.stderr, time.time() - t0


def parse_llama_bench(stdout):
    """-o json output -> list of {n_prompt, n_gen, n_depth, best_ts, samples_ts}."""
    rows = json.loads(stdout[stdout.index("["):])
    return [dict(n_prompt=r["n_prompt"], n_gen=r["n_gen"], n_depth=r.get("n_depth", 0),
                 samples_ts=r["samples_ts"], best_ts=max(r["samples_ts"]),
                 build=r.get("build_commit"), cpu_info=r.get("cpu_info"),
                 type_k=r.get("type_k"), flash_attn=r.get("flash_attn"))
            for r in rows]


class Runner:
    def __init__(self, args):
        self.args = args
        b = args.build
        self.bins = {k: os.path.join(b, "bench", k) for k in
                     ("generate_bench", "engine_decode_bench", "peak_bench")}
        self.peer_dir = {p: os.path.join(CACHE, "peers", p) for p in args.peers}

    def check(self, cells):
        missing = [p for p in self.bins.values() if not os.access(p, os.X_OK)]
        for p, d in self.peer_dir.items():
            for t in ("llama-bench", "llama-batched-bench"):
                if not os.access(os.path.join(d, "bin", t), os.X_OK):
                    missing.append(os.path.join(d, "bin", t) + " (bench/peers/build_peers.sh)")
        for c in cells:
            if not os.path.exists(c["file"]):
                missing.append(c["file"] + " (bench/make_models.py)")
        if missing:
            sys.exit("missing:\n  " + "\n  ".join(sorted(set(missing))))

    def peer_bin(self, peer, tool):
        return os.path.join(self.peer_dir[peer], "bin", tool)

    # -- probes
    def probe(self, threads):
        out, _, secs = run([self.bins["peak_bench"], "--threads",
                            ",".join(map(str, threads))])
        return json.loads(out)["threads"], secs

    # -- single stream
    def ours(self, cell, threads, reps):
        cmd = [self.bins["generate_bench"], "--model", cell["file"], "--threads",
               str(threads), "--prompt-tokens", str(cell["prompt"]),
               "--decode-tokens", str(cell["decode"]), "--depth", str(cell["depth"]),
               "--chunk", str(self.args.chunk), "--repeat", str(reps)]
        out, _, secs = run(cmd)
        row = json.loads(out)["results"][0]
        return dict(prefill_tok_s=row["prefill_tok_s"], decode_tok_s=row["decode_tok_s"],
                    raw=row, commands=[cmd], seconds=secs)

    def llamacpp(self, cell, threads, reps):
        base = [self.peer_bin("llamacpp", "llama-bench"), "-m", cell["file"], "-t",
                str(threads), "-fa", "1", "-r", str(reps), "-o", "json"]
        pp_cmd = base + ["-p", str(cell["prompt"]), "-n", "0"]
        if cell["kind"] == "long":  # its warm-up would be a whole 8192 prefill
            pp_cmd.append("--no-warmup")
        tg_cmd = base + ["-p", "0", "-n", str(cell["decode"]), "-d", str(cell["depth"])]
        pp_out, _, s1 = run(pp_cmd)
        tg_out, _, s2 = run(tg_cmd)
        pp, tg = parse_llama_bench(pp_out)[0], parse_llama_bench(tg_out)[0]
        return dict(prefill_tok_s=pp["best_ts"], decode_tok_s=tg["best_ts"],
                    raw=dict(prefill=pp, decode=tg), commands=[pp_cmd, tg_cmd],
                    seconds=s1 + s2)

    def ik(self, cell, threads, reps):
        cmd = [self.peer_bin("ik", "llama-bench"), "-m", cell["file"], "-t", str(threads),
               "-fa", "1", "-r", str(reps), "-o", "json",
               "-rtr", str(IK_RTR.get(cell["type"], 0)),
               "-p", str(cell["prompt"]), "-n", "0",
               "-gp", f"{cell['depth']},{cell['decode']}"]
        out, _, secs = run(cmd)
        rows = parse_llama_bench(out)
        pp = [r for r in rows if r["n_gen"] == 0][0]
        tg = [r for r in rows if r["n_gen"] > 0][0]
        return dict(prefill_tok_s=pp["best_ts"], decode_tok_s=tg["best_ts"],
                    raw=dict(prefill=pp, decode=tg), commands=[cmd], seconds=secs)

    # -- batched decode
    def ours_batched(self, cell, threads):
        cmd = [self.bins["engine_decode_bench"], "--model", cell["file"], "--threads",
               str(threads), "--batches", ",".join(map(str, BATCH_NPL)),
               "--prompt", str(BATCH_NPP), "--steps", str(BATCH_NTG),
               "--max-seq-len", str(BATCH_NPP + BATCH_NTG + 16)]
        out, _, secs = run(cmd)
        rows = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
        agg = {r["batch"]: r["decode_tok_s"] for r in rows
               if "decode_tok_s" in r and not r.get("after_release")}
        return dict(tok_s=agg, raw=rows, commands=[cmd], seconds=secs)

    def peer_batched(self, peer, cell, threads):
        """The peer at its best per batch size: flash attention on, and off
        too (ik_llama.cpp 0.1.5's batched bench aborts with flash attention
        past one sequence, GGML_ASSERT(S > 0) in iqk_fa_templates.h); rows
        a run printed before it aborted still count."""
        per_seq = 256
        while per_seq < BATCH_NPP + BATCH_NTG:
            per_seq *= 2
        agg, best_flags, rows, cmds, failures, secs = {}, {}, [], [], [], 0.0
        for fa in ("1", "0"):
            cmd = [self.peer_bin(peer, "llama-batched-bench"), "-m", cell["file"],
                   "-t", str(threads), "-tb", str(threads), "-fa", fa,
                   "-c", str(per_seq * max(BATCH_NPL)),
                   "-npp", str(BATCH_NPP), "-ntg", str(BATCH_NTG),
                   "-npl", ",".join(map(str, BATCH_NPL))]
            if peer == "ik" and IK_RTR.get(cell["type"]):
                cmd += ["-rtr"]
            t0 = time.time()
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
            secs += time.time() - t0
            cmds.append(cmd)
            if r.returncode != 0:
                failures.append(dict(command=cmd, exit=r.returncode,
                                     stderr_tail=r.stderr.strip().splitlines()[-3:]))
            for line in (r.stdout + "\n" + r.stderr).splitlines():
                m = re.match(r"\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|"
                             r"\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)", line)
                if m:
                    pp, tg, pl, nkv, t_pp, s_pp, t_tg, s_tg = m.groups()
                    rows.append(dict(pp=int(pp), tg=int(tg), pl=int(pl), n_kv=int(nkv),
                                     t_pp=float(t_pp), s_pp=float(s_pp), t_tg=float(t_tg),
                                     s_tg=float(s_tg), flash_attn=int(fa)))
                    if float(s_tg) > agg.get(int(pl), 0.0):
                        agg[int(pl)] = float(s_tg)
                        best_flags[int(pl)] = f"-fa {fa}"
        if not agg:
            raise RuntimeError(f"{peer} llama-batched-bench: no result table "
                               f"in its output ({failures})")
        return dict(tok_s=agg, best_flags=best_flags, raw=rows, commands=cmds,
                    failures=failures, seconds=secs)


# --------------------------------------------------------------------- cells
def make_cells():
    """Every known cell, keyed 'kind:model-TYPE'."""
    cells = {}
    for model in make_models.MODELS:
        short = "135m" if model == "smollm2-135m" else model
        for t in make_models.TYPES:
            f = make_models.model_path(model, t)
            key = f"{short}-{t}"
            cells[f"short:{key}"] = dict(kind="short", key=key, model=model, type=t,
                                         file=f, prompt=PROMPT, decode=DECODE,
                                         depth=PROMPT)
            cells[f"long:{key}"] = dict(kind="long", key=key, model=model, type=t,
                                        file=f, prompt=LONG, decode=DECODE, depth=LONG)
            cells[f"batched:{key}"] = dict(kind="batched", key=key, model=model,
                                           type=t, file=f)
    return cells


GROUPS = {
    "short": [f"short:135m-{t}" for t in ("Q4_0", "Q4_1", "Q8_0", "F16", "BF16")]
    + [f"short:{m}-{t}" for m in ("smollm2-1.7b", "qwen3-1.7b")
       for t in ("Q4_0", "Q8_0", "BF16")],
    "long": ["long:135m-Q4_0", "long:qwen3-1.7b-Q4_0"],
    "batched": ["batched:135m-Q4_0"],
    "quick": ["short:135m-Q4_0", "short:qwen3-1.7b-Q4_0", "long:135m-Q4_0",
              "batched:135m-Q4_0"],
}
GROUPS["default"] = GROUPS["short"] + GROUPS["long"] + GROUPS["batched"]


def select_cells(spec, known):
    out = []
    for item in [s for s in spec.split(",") if s]:
        if item in GROUPS:
            names = GROUPS[item]
        elif item == "all":
            names = [k for k in known if not k.startswith("long:")
                     and not k.startswith("batched:")] + GROUPS["long"] + GROUPS["batched"]
        elif item in ("135m", "smollm2-1.7b", "qwen3-1.7b"):
            names = [k for k in known if k.startswith(f"short:{item}-")]
        elif item in known:
            names = [item]
        else:
            sys.exit(f"unknown cell or group '{item}' (--list shows them)")
        out += [n for n in names if n not in out]
    return out


# -------------------------------------------------------------------- report
def machine_info():
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    info = {}
    for line in lscpu.splitlines():
        k, _, v = line.partition(":")
        info[k.strip()] = v.strip()
    flags = info.get("Flags", "").split()
    simd = [f for f in flags if re.match(r"(avx|fma|f16c|amx|sse4_2|vnni|bf16)", f)]
    mem = ""
    try:
        mem = open("/proc/meminfo").readline().split(":")[1].strip()
    except OSError:
        pass
    return dict(model=info.get("Model name"), cpu_family=info.get("CPU family"),
                cpu_model=info.get("Model"), cpus=info.get("CPU(s)"),
                hypervisor=info.get("Hypervisor vendor"), l3=info.get("L3 cache"),
                simd_flags=simd, kernel=platform.release(), mem_total=mem,
                load_average_at_start=os.getloadavg())


def git_info():
    def g(*a):
        return subprocess.run(["git", "-C", ROOT, *a], capture_output=True,
                              text=True).stdout.strip()
    return dict(commit=g("rev-parse", "HEAD"), subject=g("log", "-1", "--format=%s"),
                dirty=bool(g("status", "--porcelain", "--untracked-files=no")))


def peer_info(runner):
    out = {}
    for p, d in runner.peer_dir.items():
        try:
            out[p] = json.load(open(os.path.join(d, "peer.json")))
        except OSError:
            out[p] = {"name": p, "error": "no peer.json"}
        out[p]["display_name"] = PEERS[p]
    if "ik" in out:
        out["ik"]["rtr_by_type"] = IK_RTR
    return out


def best(values):
    values = [v for v in values if v]
    return max(values) if values else None


def peak_for(t, probe):
    """(kind, GFLOP/s) of the compute peak a prefill of weight type t is held to."""
    if t in ("Q4_0", "Q4_1", "Q8_0"):
        v = probe.get("int8_vnni_gops", {}).get("value")
        return ("int8_vnni", v) if v else ("int8", probe["int8_gops"])
    if t == "BF16" and probe.get("bf16_gflops", {}).get("value"):
        return "bf16", probe["bf16_gflops"]["value"]
    return "fp32_fma", probe["fp32_fma_gflops"]


def summarize_cell(cell, threads, res, probe, shape):
    """Best figures, ratios to the best peer, fractions of the probed limits."""
    row = dict(cell=f"{cell['kind']}:{cell['key']}", file=cell["file"], type=cell["type"],
               threads=threads, prompt=cell["prompt"], depth=cell["depth"],
               decode=cell["decode"], engines={})
    for e in ENGINES:
        runs = res.get(e, [])
        if not runs:
            continue
        row["engines"][e] = dict(
            prefill_tok_s=best(r["prefill_tok_s"] for r in runs),
            decode_tok_s=best(r["decode_tok_s"] for r in runs),
            rounds=runs)
    ours = row["engines"].get("pdserve")
    peers = {e: v for e, v in row["engines"].items() if e != "pdserve"}
    for what in ("prefill", "decode"):
        if not peers:
            break
        bp = max(peers, key=lambda e: peers[e][f"{what}_tok_s"] or 0)
        row[f"{what}_best_peer"] = bp
        if ours and peers[bp][f"{what}_tok_s"]:
            row[f"{what}_ratio"] = ours[f"{what}_tok_s"] / peers[bp][f"{what}_tok_s"]
    # Decode: bytes read per token x tok/s / read bandwidth (same threads).
    read = probe["read_gb_s"] * 1e9
    kv_bytes = {"llamacpp": 2, "ik": 2}  # the peers' default f16 KV cache
    frac, bytes_tok = {}, {}
    for e, v in row["engines"].items():
        if e == "pdserve":
            raw = min(v["rounds"], key=lambda r: -r["decode_tok_s"])["raw"]
            b = raw.get("decode_weight_bytes_per_token", 0) + raw.get(
                "decode_kv_bytes_per_token", 0)
        else:
            b = decode_bytes_per_token(shape, cell["depth"], cell["decode"], kv_bytes[e])
        bytes_tok[e] = b
        frac[e] = b * v["decode_tok_s"] / read if v["decode_tok_s"] else None
    row["decode_bytes_per_token"] = bytes_tok
    row["decode_fraction_of_read_bw"] = frac
    kind, peak = peak_for(cell["type"], probe)
    flops = prefill_flops_per_token(shape, cell["prompt"])
    row["prefill_flops_per_token"] = flops
    row["prefill_peak"] = dict(kind=kind, gops=peak)
    row["prefill_fraction_of_peak"] = {
        e: v["prefill_tok_s"] * flops / (peak * 1e9) for e, v in row["engines"].items()}
    if ours and cell["kind"] == "long":
        raw = max(ours["rounds"], key=lambda r: r["prefill_tok_s"])["raw"]
        row["ours_prefill_memory"] = {k: raw.get(k) for k in (
            "weight_bytes", "prefill_kv_bytes", "rss_before_load_bytes",
            "peak_rss_bytes", "prefill_peak_beyond_weights_kv_bytes", "chunk")}
    return row


def summarize_batched(cell, threads, res):
    row = dict(cell=f"batched:{cell['key']}", file=cell["file"], type=cell["type"],
               threads=threads, npp=BATCH_NPP, ntg=BATCH_NTG, engines={}, ratio={},
               best_peer={})
    for e, runs in res.items():
        agg = {}
        for r in runs:
            for n, v in r["tok_s"].items():
                agg[int(n)] = max(agg.get(int(n), 0), v)
        row["engines"][e] = dict(tok_s=agg, rounds=runs)
    ours = row["engines"].get("pdserve", {}).get("tok_s", {})
    for n in BATCH_NPL:
        peer_vals = {e: v["tok_s"].get(n) for e, v in row["engines"].items()
                     if e != "pdserve" and v["tok_s"].get(n)}
        if peer_vals and ours.get(n):
            bp = max(peer_vals, key=peer_vals.get)
            row["best_peer"][str(n)] = bp
            row["ratio"][str(n)] = ours[n] / peer_vals[bp]
    return row


def fmt(v, spec=".2f"):
    return "-" if v is None else format(v, spec)


def print_table(report):
    p = lambda s="": print(s, file=sys.stderr)  # noqa: E731
    p()
    p("cell                          thr | prefill tok/s  ours / llama / ik   ours÷best | "
      "decode tok/s  ours / llama / ik   ours÷best | ours decode %bw, prefill %peak")
    for r in report["cells"]:
        e = r["engines"]
        g = lambda n, k: e.get(n, {}).get(k)  # noqa: E731
        p(f"{r['cell']:30s}{r['threads']:3d} | "
          f"{fmt(g('pdserve', 'prefill_tok_s'), '7.1f')} {fmt(g('llamacpp', 'prefill_tok_s'), '7.1f')} "
          f"{fmt(g('ik', 'prefill_tok_s'), '7.1f')}  {fmt(r.get('prefill_ratio'))} "
          f"({r.get('prefill_best_peer', '-'):8s}) | "
          f"{fmt(g('pdserve', 'decode_tok_s'), '7.1f')} {fmt(g('llamacpp', 'decode_tok_s'), '7.1f')} "
          f"{fmt(g('ik', 'decode_tok_s'), '7.1f')}  {fmt(r.get('decode_ratio'))} "
          f"({r.get('decode_best_peer', '-'):8s}) | "
          f"{fmt(100 * (r['decode_fraction_of_read_bw'].get('pdserve') or 0), '.0f')}%, "
          f"{fmt(100 * (r['prefill_fraction_of_peak'].get('pdserve') or 0), '.0f')}% "
          f"{r['prefill_peak']['kind']}")
        if r.get("ours_prefill_memory"):
            m = r["ours_prefill_memory"]
            p(f"{'':33s}ours: {m.get('prompt', r['prompt'])}-token prefill peak RSS "
              f"{fmt((m['peak_rss_bytes'] or 0) / 2**20, '.0f')} MiB, beyond weights "
              f"+ KV: {fmt((m.get('prefill_peak_beyond_weights_kv_bytes') or 0) / 2**20, '.0f')} MiB")
    for r in report["batched"]:
        p(f"{r['cell']} threads={r['threads']} aggregate decode tok/s (ours / llama / ik, ours÷best):")
        for n in BATCH_NPL:
            v = [r["engines"].get(e, {}).get("tok_s", {}).get(n) for e in ENGINES]
            p(f"    {n:3d} seqs: {' / '.join(fmt(x, '.1f') for x in v)}   "
              f"{fmt(r['ratio'].get(str(n)))} ({r['best_peer'].get(str(n), '-')})")
    for e, by_t in report.get("decode_overhead_fit", {}).items():
        for t, f in by_t.items():
            p(f"decode time vs bytes, {e} threads={t}: intercept "
              f"{f['intercept_us']:.0f} us/token, streaming "
              f"{fmt(f['streaming_gb_s'], '.1f')} GB/s ({f['points']} cells)")
    for t, pr in report["probes"].items():
        p(f"probe threads={t}: read {pr['read_gb_s']:.1f} GB/s, fp32 FMA "
          f"{pr['fp32_fma_gflops']:.0f} GFLOP/s, int8 {pr['int8_gops']:.0f} GOP/s")
    p(f"elapsed {report['elapsed_s'] / 60:.1f} min")


def decode_overhead_fit(cells):
    """Per engine and thread count, a least-squares line through the short
    cells' decode time per token against the bytes it reads: the intercept is
    the fixed per-token cost (thread-pool regions, norms, sampling, ...), the
    slope's inverse the bandwidth the kernels stream at."""
    pts = {}
    for r in cells:
        if not r["cell"].startswith("short:"):
            continue
        for e, v in r["engines"].items():
            b = r["decode_bytes_per_token"].get(e)
            if v.get("decode_tok_s") and b:
                pts.setdefault((e, r["threads"]), []).append((b, 1.0 / v["decode_tok_s"]))
    out = {}
    for (e, t), xy in sorted(pts.items()):
        if len({b for b, _ in xy}) < 2:
            continue
        n = len(xy)
        mx = sum(b for b, _ in xy) / n
        my = sum(s for _, s in xy) / n
        sxx = sum((b - mx) ** 2 for b, _ in xy)
        slope = sum((b - mx) * (s - my) for b, s in xy) / sxx
        icpt = my - slope * mx
        out.setdefault(e, {})[str(t)] = dict(
            points=n, intercept_us=icpt * 1e6,
            streaming_gb_s=(1e-9 / slope) if slope > 0 else None)
    return out


def best_probe(runs):
    out = {}
    for k in ("read_gb_s", "copy_gb_s", "fp32_fma_gflops", "int8_gops"):
        out[k] = max(r[k] for r in runs)
    if all("fp32_fma256_gflops" in r for r in runs):
        out["fp32_fma256_gflops"] = max(r["fp32_fma256_gflops"] for r in runs)
    for k in ("int8_vnni_gops", "bf16_gflops"):
        vals = [r[k]["value"] for r in runs if r[k].get("value")]
        out[k] = {"value": max(vals)} if vals else runs[0][k]
    out["runs"] = runs
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cells", default="default")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--long-threads", default=None,
                    help="threads for long cells (default: the largest of --threads)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--rounds-large", type=int, default=1,
                    help="rounds for long cells and files over 0.5 GB (default 1): "
                         "they take minutes each")
    ap.add_argument("--reps", type=int, default=None,
                    help="repetitions inside each invocation (default: 3 for files "
                         "under 1 GB, else 1)")
    ap.add_argument("--batched-npl", default=",".join(map(str, BATCH_NPL)),
                    help="parallel sequences of the batched cells")
    ap.add_argument("--chunk", type=int, default=512, help="our prefill chunk (tokens)")
    ap.add_argument("--peers", default=",".join(PEERS))
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results",
                                                  "cpu_compare.json"))
    ap.add_argument("--quick", action="store_true",
                    help="--cells quick --rounds 1 --threads 2")
    ap.add_argument("--list", action="store_true", help="print cells and groups")
    args = ap.parse_args()
    if args.quick:
        args.cells, args.rounds, args.threads = "quick", 1, "2"
    args.peers = [p for p in args.peers.split(",") if p]
    BATCH_NPL[:] = [int(n) for n in args.batched_npl.split(",")]
    for p in args.peers:
        if p not in PEERS:
            sys.exit(f"unknown peer {p}: {', '.join(PEERS)}")
    known = make_cells()
    if args.list:
        for g, names in GROUPS.items():
            print(f"{g}: {','.join(names)}")
        print("all: every short cell, plus long and batched")
        print("keys: " + " ".join(known))
        return 0
    threads = [int(t) for t in args.threads.split(",")]
    long_threads = ([int(t) for t in args.long_threads.split(",")]
                    if args.long_threads else [max(threads)])
    names = select_cells(args.cells, known)
    cells = [known[n] for n in names]
    runner = Runner(args)
    runner.check(cells)
    shapes = {c["file"]: gguf_shape(c["file"]) for c in cells}
    for c in cells:  # decode depth within the model's context
        if c["kind"] == "long":
            c["depth"] = min(LONG, shapes[c["file"]]["context"] - DECODE)
    all_threads = sorted(set(threads) | set(long_threads))
    report = dict(command=sys.argv, started=datetime.datetime.now().isoformat(
        timespec="seconds"), machine=machine_info(), pdserve=git_info(),
        peers=peer_info(runner), settings=dict(
            cells=names, threads=threads, long_threads=long_threads, rounds=args.rounds,
            rounds_large=args.rounds_large, reps=args.reps or "3, or 1 when large",
            chunk=args.chunk, prompt=PROMPT, decode=DECODE, long=LONG,
            batched=dict(npp=BATCH_NPP, ntg=BATCH_NTG, npl=BATCH_NPL)))
    t_start = time.time()
    probes = {t: [] for t in all_threads}
    results = {}  # (name, threads) -> engine -> [runs]
    errors = []
    for rnd in range(max(args.rounds, args.rounds_large)):
        log(f"round {rnd + 1}/{args.rounds}: probe")
        pr, _ = runner.probe(all_threads)
        for t in all_threads:
            probes[t].append(pr[str(t)])
        for name, c in zip(names, cells):
            large = c["kind"] == "long" or os.path.getsize(c["file"]) > 5e8
            if rnd >= (args.rounds_large if large else args.rounds):
                continue
            ts = long_threads if c["kind"] == "long" else threads
            if c["kind"] == "batched":
                ts = [max(threads)]
            for t in ts:
                reps = args.reps or (1 if large else 3)
                slot = results.setdefault((name, t), {})
                for e in ENGINES:
                    if e != "pdserve" and e not in args.peers:
                        continue
                    try:
                        if c["kind"] == "batched":
                            r = (runner.ours_batched(c, t) if e == "pdserve"
                                 else runner.peer_batched(e, c, t))
                            log(f"  {name} t={t} {e}: " + " ".join(
                                f"{n}:{v:.0f}" for n, v in sorted(r["tok_s"].items()))
                                + f" tok/s ({r['seconds']:.0f}s)")
                        else:
                            r = getattr(runner, "ours" if e == "pdserve" else e)(c, t, reps)
                            log(f"  {name} t={t} {e}: prefill {r['prefill_tok_s']:.1f} "
                                f"decode {r['decode_tok_s']:.1f} tok/s ({r['seconds']:.0f}s)")
                        r["round"] = rnd
                        r["loadavg_after"] = os.getloadavg()[0]
                        slot.setdefault(e, []).append(r)
                    except (RuntimeError, subprocess.TimeoutExpired, ValueError,
                            KeyError, IndexError) as ex:
                        errors.append(dict(cell=name, threads=t, engine=e, round=rnd,
                                           error=str(ex)[-2000:]))
                        log(f"  {name} t={t} {e}: FAILED {str(ex)[-300:]}")
    report["probes"] = {str(t): best_probe(v) for t, v in probes.items()}
    report["cells"], report["batched"] = [], []
    for name, c in zip(names, cells):
        for (n, t), res in results.items():
            if n != name:
                continue
            if c["kind"] == "batched":
                report["batched"].append(summarize_batched(c, t, res))
            else:
                report["cells"].append(summarize_cell(
                    c, t, res, report["probes"][str(t)], shapes[c["file"]]))
    report["decode_overhead_fit"] = decode_overhead_fit(report["cells"])
    report["shapes"] = {os.path.basename(f): s for f, s in shapes.items()}
    report["errors"] = errors
    report["elapsed_s"] = time.time() - t_start
    report["load_average_at_end"] = os.getloadavg()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    print_table(report)
    log(f"wrote {args.out}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
