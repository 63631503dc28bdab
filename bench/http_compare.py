#!/usr/bin/env python3
"""Streaming chats through pdserve's OpenAI-compatible HTTP API side by side
with llama.cpp's llama-server (same GGUF file, same threads), in one run, as
ratios; plus the engine's own decode rate at 16 sequences and a 2,000-stream
overload run against pdserve's front end.

  python3 bench/http_compare.py [--model M] [--threads 2]
      [--concurrency 1,16,64] [--max-tokens 64] [--rounds 1]
      [--streams 2000] [--no-peer] [--out bench/results/http_compare.json]

What runs:
  engine   build/bench/engine_decode_bench --batches 16 --steps MAX_TOKENS:
           the engine's own decode tok/s at 16 sequences, no IPC, no HTTP
  chats    for each concurrency C: C clients at once, each one streaming chat
           (temperature 0, ignore_eos, max_tokens MAX_TOKENS, a short
           prompt); aggregate streamed tok/s (tokens / wall time of the
           wave), TTFT p50/p99, inter-token latency p50/p99 (every gap of
           every stream); ours, then llama-server (-np 16 -c 16*2048
           --threads T), one wave each after a warm-up request
  streams  STREAMS SSE chats opened at once against pdserve (max_tokens 4):
           every one must complete ([DONE]) or be refused with 429 (queue
           full); none lost; the front end's resident memory (VmRSS sampled
           every 50 ms, and VmHWM) before, at peak and after

The peer is ~/.cache/pdserve/peers/llamacpp/bin/llama-server (built by
bench/peers/build_peers.sh); without it (or with --no-peer) the peer columns
are skipped and said so. The client is plain asyncio (no HTTP library), one
connection per stream. The machine is shared: figures are from one run,
ratios taken within it.
"""
import argparse
import asyncio
import json
import os
import pathlib
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
CACHE = pathlib.Path(os.environ.get("PDSERVE_CACHE",
                                    pathlib.Path.home() / ".cache/pdserve"))
PROMPT = "Write a long story about a lighthouse keeper and the sea."


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(values, q):
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(q / 100.0 * len(v)))]


async def stream_chat(port, model, max_tokens, timeout=600):
    """One streaming chat over a fresh connection. Returns a dict: status,
    ttft (s), gaps (s), tokens, done ([DONE] seen)."""
    body = json.dumps({
        "model": model, "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
        "stream": True}).encode()
    t0 = time.perf_counter()
    out = {"status": None, "ttft": None, "gaps": [], "tokens": 0, "done": False,
           "times": []}
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port), timeout)
    except (OSError, asyncio.TimeoutError) as e:
        out["error"] = f"connect: {e}"
        return out
    try:
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\n"
                     b"Content-Type: application/json\r\nConnection: close\r\n"
                     b"Content-Length: " + str(len(body)).encode() +
                     b"\r\n\r\n" + body)
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), timeout)
        out["status"] = int(status_line.split()[1])
        last = None
        while True:
            line = await asyncio.wait_for(reader.readline(), timeout)
            if not line:
                break
            if not line.startswith(b"data: "):
                continue
            data = line[6:].strip()
            if data == b"[DONE]":
                out["done"] = True
                break
            try:
                chunk = json.loads(data)
            except ValueError:
                continue
            for c in chunk.get("choices") or []:
                if (c.get("delta") or {}).get("content"):
                    now = time.perf_counter()
                    if last is None:
                        out["ttft"] = now - t0
                    else:
                        out["gaps"].append(now - last)
                    last = now
                    out["times"].append(now)
                    out["tokens"] += 1
    except (OSError, asyncio.TimeoutError, ValueError, IndexError) as e:
        out["error"] = f"{type(e).__name__}: {e}"
    finally:
        writer.close()
    return out


async def wave(port, model, concurrency, max_tokens):
    t0 = time.perf_counter()
    results = await asyncio.gather(*[stream_chat(port, model, max_tokens)
                                     for _ in range(concurrency)])
    wall = time.perf_counter() - t0
    ok = [r for r in results if r["status"] == 200 and r["done"]]
    tokens = sum(r["tokens"] for r in ok)
    ttfts = [r["ttft"] for r in ok if r["ttft"] is not None]
    gaps = [g for r in ok for g in r["gaps"]]
    steady = steady_rate(ok)
    return {"concurrency": concurrency, "completed": len(ok),
            "failed": len(results) - len(ok), "tokens": tokens,
            "wall_s": round(wall, 3), "tok_s": round(tokens / wall, 2),
            "ttft_p50_ms": ms(pct(ttfts, 50)), "ttft_p99_ms": ms(pct(ttfts, 99)),
            "itl_p50_ms": ms(pct(gaps, 50)), "itl_p99_ms": ms(pct(gaps, 99)),
            "steady_tok_s": steady}


def steady_rate(streams):
    """Tokens per second while every stream of the wave is decoding: the
    window from the last stream's first token to the first stream's last
    token, counting every token of every stream that arrives inside it (the
    same quantity engine_decode_bench reports, decode at a full batch, with
    the prefill wave and the tail excluded)."""
    live = [r["times"] for r in streams if len(r["times"]) >= 2]
    if len(live) < len(streams) or not live:
        return None
    start = max(t[0] for t in live)
    end = min(t[-1] for t in live)
    if end - start <= 0:
        return None
    inside = sum(1 for t in live for x in t if start < x <= end)
    return round(inside / (end - start), 2)


def ms(s):
    return None if s is None else round(s * 1000, 2)


def wait_port(port, proc, timeout, log):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"server exited early; log:\n{open(log).read()[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), 1):
                return
        except OSError:
            time.sleep(0.2)
    sys.exit(f"server not up on {port} after {timeout} s")


def start_pdserve(args, http_port):
    log = tempfile.mktemp(prefix="http-compare-pdserve-", suffix=".log")
    proc = subprocess.Popen(
        [args.pdserve, "serve", "--model", args.model, "--port", str(free_port()),
         "--http-port", str(http_port), "--threads", str(args.threads)],
        stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 300
    # serve's ready summary ends with the engine's line.
    while not re.search(r"^\s+engine\s+pid", open(log).read(), re.M):
        if proc.poll() is not None or time.monotonic() > deadline:
            sys.exit(f"pdserve serve failed:\n{open(log).read()[-3000:]}")
        time.sleep(0.2)
    m = re.search(r"frontend\s+pid (\d+)", open(log).read())
    return proc, int(m.group(1)), log


def start_llama_server(args, port):
    log = tempfile.mktemp(prefix="http-compare-llama-", suffix=".log")
    proc = subprocess.Popen(
        [args.llama_server, "-m", args.model, "--host", "127.0.0.1", "--port",
         str(port), "-t", str(args.threads), "-tb", str(args.threads),
         "-np", "16", "-c", str(16 * 2048)],
        stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
    wait_port(port, proc, 300, log)
    # /health answers 503 while the model loads.
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            import urllib.request
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    break
        except Exception:
            time.sleep(0.5)
    return proc, log


def stop(proc):
    if proc is not None and proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def rss_kib(pid, field="VmRSS"):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


async def many_streams(port, model, n, pid):
    before = rss_kib(pid)
    peak = [before or 0]
    stop_flag = asyncio.Event()

    async def sample():
        while not stop_flag.is_set():
            v = rss_kib(pid)
            if v:
                peak[0] = max(peak[0], v)
            await asyncio.sleep(0.05)

    sampler = asyncio.create_task(sample())
    t0 = time.perf_counter()
    results = await asyncio.gather(*[stream_chat(port, model, 4, timeout=900)
                                     for _ in range(n)])
    wall = time.perf_counter() - t0
    stop_flag.set()
    await sampler
    await asyncio.sleep(1.0)
    completed = sum(1 for r in results if r["status"] == 200 and r["done"])
    refused = sum(1 for r in results if r["status"] == 429)
    lost = n - completed - refused
    return {"streams": n, "completed": completed, "refused_429": refused,
            "lost": lost, "wall_s": round(wall, 2),
            "frontend_rss_kib_before": before, "frontend_rss_kib_peak": peak[0],
            "frontend_rss_kib_after": rss_kib(pid),
            "frontend_hwm_kib": rss_kib(pid, "VmHWM"),
            "errors": sorted({r.get("error", "") for r in results
                              if r.get("error")})[:5]}


def engine_rate(args):
    exe = ROOT / args.build / "bench/engine_decode_bench"
    if not exe.exists():
        return {"skipped": f"{exe} not built"}
    out = subprocess.run([str(exe), "--model", args.model, "--threads",
                          str(args.threads), "--batches", "16", "--steps",
                          str(args.max_tokens)], capture_output=True, text=True)
    for line in out.stdout.splitlines():
        j = json.loads(line)
        if j.get("batch") == 16 and "decode_tok_s" in j:
            return {"batch16_decode_tok_s": j["decode_tok_s"]}
    return {"skipped": "engine_decode_bench printed no batch-16 figure",
            "stderr": out.stderr[-500:]}


def ratio(a, b):
    return None if not a or not b else round(a / b, 3)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(CACHE / "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--build", default="build")
    ap.add_argument("--pdserve", default=None)
    ap.add_argument("--llama-server",
                    default=str(CACHE / "peers/llamacpp/bin/llama-server"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--concurrency", default="1,16,64")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--streams", type=int, default=2000)
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "bench/results/http_compare.json"))
    args = ap.parse_args()
    args.pdserve = args.pdserve or str(ROOT / args.build / "server/cli/pdserve")
    # One socket per stream: lift the soft descriptor limit.
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    levels = [int(c) for c in args.concurrency.split(",") if c]
    model_name = pathlib.Path(args.model).name.removesuffix(".gguf")
    report = {"model": args.model, "threads": args.threads,
              "max_tokens": args.max_tokens, "loadavg_start": os.getloadavg()}
    report["engine"] = engine_rate(args)
    print(f"engine: {report['engine']}", file=sys.stderr)

    port = free_port()
    proc, front_pid, _ = start_pdserve(args, port)
    try:
        asyncio.run(stream_chat(port, model_name, 8))  # warm-up
        report["pdserve"] = []
        for c in levels:
            r = asyncio.run(wave(port, model_name, c, args.max_tokens))
            report["pdserve"].append(r)
            print(f"pdserve  {r}", file=sys.stderr)
        if args.streams > 0:
            report["streams"] = asyncio.run(
                many_streams(port, model_name, args.streams, front_pid))
            print(f"streams  {report['streams']}", file=sys.stderr)
    finally:
        stop(proc)

    have_peer = not args.no_peer and os.access(args.llama_server, os.X_OK)
    if have_peer:
        lport = free_port()
        lproc, _ = start_llama_server(args, lport)
        try:
            asyncio.run(stream_chat(lport, model_name, 8))
            report["llama_server"] = []
            for c in levels:
                r = asyncio.run(wave(lport, model_name, c, args.max_tokens))
                report["llama_server"].append(r)
                print(f"llama    {r}", file=sys.stderr)
        finally:
            stop(lproc)
    else:
        report["llama_server"] = {"skipped": f"no peer at {args.llama_server}"
                                  if not args.no_peer else "--no-peer"}

    rows = []
    eng = report["engine"].get("batch16_decode_tok_s")
    for i, c in enumerate(levels):
        ours = report["pdserve"][i]
        peer = report["llama_server"][i] if have_peer else {}
        rows.append({
            "concurrency": c,
            "tok_s_vs_llama_server": ratio(ours["tok_s"], peer.get("tok_s")),
            "ttft_p50_vs": ratio(ours["ttft_p50_ms"], peer.get("ttft_p50_ms")),
            "ttft_p99_vs": ratio(ours["ttft_p99_ms"], peer.get("ttft_p99_ms")),
            "itl_p50_vs": ratio(ours["itl_p50_ms"], peer.get("itl_p50_ms")),
            "itl_p99_vs": ratio(ours["itl_p99_ms"], peer.get("itl_p99_ms")),
            "tok_s_vs_engine_b16": ratio(ours["tok_s"], eng) if c == 16 else None,
            "steady_tok_s_vs_engine_b16":
                ratio(ours.get("steady_tok_s"), eng) if c == 16 else None,
        })
    report["ratios"] = rows
    report["loadavg_end"] = os.getloadavg()
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print("\nconcurrency  ours tok/s  ÷llama-server  ÷engine(b16)  "
          "TTFT p50/p99 ÷peer  ITL p50/p99 ÷peer", file=sys.stderr)
    for i, r in enumerate(rows):
        print(f"{r['concurrency']:>11}  {report['pdserve'][i]['tok_s']:>10}  "
              f"{r['tok_s_vs_llama_server']!s:>13}  {r['tok_s_vs_engine_b16']!s:>12}  "
              f"{r['ttft_p50_vs']!s}/{r['ttft_p99_vs']!s}  "
              f"{r['itl_p50_vs']!s}/{r['itl_p99_vs']!s}", file=sys.stderr)
    print(f"report: {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
