#!/usr/bin/env python3
"""Integration test (label integration): a real Prometheus scrapes the three
pdserve processes started by `pdserve serve` on loopback while a bounded load
runs, then the figures are asserted through Prometheus' HTTP API:

  - every target is up; the alert/recording rules evaluate without error;
  - Generate requests counted OK == chat requests that succeeded == sent;
  - TTFT histogram count == requests; engine steps and tokens recorded;
  - the bandwidth gauge and the engine's probed peak are > 0, and the gauge
    is within 8x the peak (a units slip, bits or kilo, lands far outside;
    above 1x is real: on the CPU the peak is a copy probe taken once at
    start, on a machine busy with other tests, and decode reads only, partly
    from cache; CI once saw 21.5 GB/s against a 20.1 GB/s peak);
  - every metric the Grafana dashboard and the rules name is a live series;
  - `promtool check metrics` accepts every /metrics page.

    prometheus_scrape_test.py --pdserve BUILD/server/cli/pdserve

Exit 0 pass, 1 fail, 77 skipped (says why: no `pdserve serve` yet, no
Prometheus, no model). Load: REQUESTS chat requests, CONCURRENCY at a time,
MAX_TOKENS each; everything on 127.0.0.1 and bounded in time.
"""
import argparse
import concurrent.futures
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "deploy"))
REQUESTS, CONCURRENCY, MAX_TOKENS = 6, 2, 8
SKIP = 77


def skip(why):
    print(f"SKIPPED: {why}")
    sys.exit(SKIP)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class Prometheus:
    def __init__(self, targets, workdir):
        self.port = free_port()
        rules = ROOT / "deploy" / "monitoring" / "prometheus" / "alerts.yml"
        cfg = workdir / "prometheus.yml"
        cfg.write_text(json.dumps({  # JSON is YAML
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rules)],
            "scrape_configs": [{
                "job_name": "pdserve",
                "static_configs": [{"targets": targets}],
            }],
        }))
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={cfg}",
             f"--storage.tsdb.path={workdir / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=open(workdir / "prom.log", "w"))
        self.base = f"http://127.0.0.1:{self.port}"
        wait_for(lambda: "Ready" in http_get(self.base + "/-/ready"), 60,
                 "Prometheus to start")

    def query(self, expr):
        url = self.base + "/api/v1/query?" + urllib.parse.urlencode(
            {"query": expr})
        body = json.loads(http_get(url))
        if body["status"] != "success":
            raise AssertionError(f"query {expr}: {body}")
        return body["data"]["result"]

    def scalar(self, expr):
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else None

    def api(self, path):
        return json.loads(http_get(self.base + path))["data"]

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def start_serve(pdserve, model, workdir):
    port = free_port()
    log = open(workdir / "serve.log", "w+")
    proc = subprocess.Popen([pdserve, "serve", "--model", str(model),
                             "--port", str(port), "--http-port", "0"],
                            stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)

    def ready():
        if proc.poll() is not None:
            raise AssertionError(f"pdserve serve exited {proc.returncode}:\n"
                                 + (workdir / "serve.log").read_text())
        text = (workdir / "serve.log").read_text()
        urls = sorted(set(re.findall(r"http://[\w.:\[\]-]+/metrics", text)))
        return urls if len(urls) >= 3 else None
    urls = wait_for(ready, 240, "`pdserve serve` to print 3 /metrics URLs")
    return proc, f"127.0.0.1:{port}", urls


def chat(pdserve, target, i):
    r = subprocess.run([pdserve, "chat", "--target", target, "--max-tokens",
                        str(MAX_TOKENS), "--temperature", "0",
                        f"Say something about the number {i}."],
                       capture_output=True, text=True, timeout=120)
    return r.returncode, r.stderr[-500:]


def referenced_metrics():
    import check_deploy  # needs PyYAML for the rules
    names = set()
    exported = check_deploy.exported_metrics()
    recorded = check_deploy.recording_rules()
    for _, expr in check_deploy.dashboard_exprs() + check_deploy.alert_exprs():
        for n in check_deploy.promql_metric_names(expr):
            if n in recorded or n in check_deploy.SYNTHETIC:
                continue
            names.add(n + "_bucket" if exported.get(n) == "histogram" else n)
    return names


def run(args, workdir):
    failures, passes = [], []

    def check(ok, message):
        print(("PASS " if ok else "FAIL ") + message)
        (passes if ok else failures).append(message)

    serve, target, urls = start_serve(args.pdserve, args.model, workdir)
    prom = None
    try:
        targets = [u.split("//")[1].split("/")[0] for u in urls]
        prom = Prometheus(targets, workdir)
        wait_for(lambda: prom.scalar("sum(up)") == len(targets), 30,
                 "all targets up")
        with concurrent.futures.ThreadPoolExecutor(CONCURRENCY) as pool:
            results = list(pool.map(lambda i: chat(args.pdserve, target, i),
                                    range(REQUESTS)))
        ok = sum(1 for rc, _ in results if rc == 0)
        check(ok == REQUESTS, f"{ok}/{REQUESTS} chat requests succeeded "
              f"{[e for rc, e in results if rc != 0][:1]}")
        wait_for(lambda: prom.scalar(
            'sum(pdserve_frontend_requests_total{method="Generate"})') ==
            REQUESTS, 30, "Prometheus to see every request")
        time.sleep(2)  # one more scrape of every target
        ok_count = prom.scalar('sum(pdserve_frontend_requests_total'
                               '{method="Generate",code="OK"})')
        check(ok_count == ok, f"requests_total{{code=OK}} {ok_count} == {ok}")
        ttft = prom.scalar(
            "sum(pdserve_frontend_time_to_first_token_seconds_count)")
        check(ttft == REQUESTS, f"TTFT count {ttft} == {REQUESTS}")
        steps = prom.scalar("sum(pdserve_engine_step_duration_seconds_count)")
        check(steps is not None and steps > 0, f"engine steps {steps} > 0")
        decoded = prom.scalar('sum(pdserve_engine_tokens_total{kind="decode"})')
        check(decoded is not None and decoded >= REQUESTS,
              f"decode tokens {decoded} >= {REQUESTS}")
        bw = prom.scalar("max(pdserve_engine_memory_bandwidth_bytes_per_second)")
        peak = prom.scalar(
            "max(pdserve_engine_peak_memory_bandwidth_bytes_per_second)")
        check(bw is not None and peak is not None and bw > 0 and peak > 0
              and bw < 8 * peak,
              f"bandwidth gauge 0 < {bw} < 8 x peak {peak}")
        live = set(prom.api("/api/v1/label/__name__/values"))
        missing = sorted(referenced_metrics() - live)
        check(not missing, f"dashboard/rule metrics live (missing: {missing})")
        groups = prom.api("/api/v1/rules")["groups"]
        bad = [r["name"] for g in groups for r in g["rules"]
               if r.get("health") not in ("ok", "unknown")]
        check(not bad and groups, f"rules evaluate cleanly (bad: {bad})")
        for url in urls:
            page = http_get(url)
            r = subprocess.run(["promtool", "check", "metrics"], input=page,
                               capture_output=True, text=True)
            lint = [line for line in (r.stdout + r.stderr).splitlines()
                    if line.strip() and not line.startswith("vllm:")]
            check(not lint, f"promtool check metrics {url} {lint[:3]}")
    finally:
        if prom:
            prom.stop()
        if serve.poll() is None:
            os.killpg(serve.pid, signal.SIGTERM)
            try:
                serve.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(serve.pid, signal.SIGKILL)
    return len(passes), failures


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--pdserve", required=True)
    p.add_argument("--model", default=None)
    args = p.parse_args()
    if not os.path.exists(args.pdserve):
        skip(f"{args.pdserve} not built")
    help_text = subprocess.run([args.pdserve, "--help"], capture_output=True,
                               text=True).stdout
    if not re.search(r"^\s*serve\b", help_text, re.M):
        skip("`pdserve serve` does not exist yet (issue 5)")
    with open(args.pdserve, "rb") as f:
        if b"pdserve_build_info" not in f.read():
            skip("pdserve does not link common/metrics yet: its processes "
                 "serve no /metrics (wiring listed in "
                 "common/metrics/process_metrics.h)")
    for tool_name in ("prometheus", "promtool"):
        if not shutil.which(tool_name):
            skip(f"{tool_name} not installed (Debian package prometheus)")
    cache = pathlib.Path(os.environ.get(
        "PDSERVE_CACHE", pathlib.Path.home() / ".cache" / "pdserve"))
    args.model = pathlib.Path(
        args.model or cache / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not args.model.exists():
        skip(f"model {args.model} absent (scripts/setup.sh fetches it)")
    with tempfile.TemporaryDirectory(prefix="pdserve-prom-") as tmp:
        passed, failures = run(args, pathlib.Path(tmp))
    print(f"{passed} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
