#!/usr/bin/env python3
"""Summary and verdict of one scripts/gpu-check.sh run.

Reads the results folder gpu-check.sh wrote (phases.txt, junit.xml,
gpu_decode_bench.json, gpu_kernels_bench.log, commit.txt, gpu.txt) and
writes summary.json: the device (name, driver, clocks), every phase's exit,
the gpu test counts, every figure with its fraction of the device's measured
peak, and a verdict. The run passes only when
  - every phase a full run has (configure, build, ctest, gpu_decode_bench,
    gpu_kernels_bench; configure/build not with --skip-build) ran and
    exited 0: a phase that is missing or was skipped is a failure;
  - the gpu tests ran: at least one, none failed, not all skipped;
  - every figure the run exists for is present: decode at batch 1, 8 and
    64, prefill, and at least one kernel figure.
Exit status 0 when the verdict passes, 1 when not.

    scripts/gpu_check_summary.py OUT_DIR [--skip-build] [--elapsed S]
"""
import argparse
import json
import os
import sys
import xml.etree.ElementTree as ET

BUILD_PHASES = ("configure", "build")
RUN_PHASES = ("ctest", "gpu_decode_bench", "gpu_kernels_bench")
DECODE_BATCHES = (1, 8, 64)
# nvidia-smi --query-gpu fields gpu-check.sh writes to gpu.txt, in order.
GPU_FIELDS = ("name", "driver_version", "clocks.sm", "clocks.mem",
              "clocks.max.sm", "clocks.max.mem", "memory.total",
              "power.limit")


def read_text(out, name):
    try:
        with open(os.path.join(out, name)) as f:
            return f.read()
    except OSError:
        return None


def load_json(out, name):
    """The JSON object in a file (a bench may print log lines first)."""
    text = read_text(out, name)
    if text is None:
        return None
    text = text.strip()
    try:
        return json.loads(text[text.index("{"):])
    except ValueError as e:
        return {"error": f"{name}: {e}"}


def load_json_lines(out, name):
    text = read_text(out, name)
    rows = []
    for line in (text or "").splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass
    return rows


def load_phases(out):
    phases = {}
    for line in (read_text(out, "phases.txt") or "").splitlines():
        if "=" in line:
            key, value = line.strip().split("=", 1)
            phases[key] = value
    return phases


def load_gpu(out):
    """Device facts from gpu.txt (one CSV line of GPU_FIELDS), or Nones."""
    line = (read_text(out, "gpu.txt") or "").strip().splitlines()
    values = [v.strip() for v in line[0].split(",")] if line else []
    gpu = {}
    for i, field in enumerate(GPU_FIELDS):
        value = values[i] if i < len(values) else ""
        gpu[field] = value if value and "N/A" not in value else None
    return gpu


def load_tests(out):
    tests = {"total": 0, "passed": 0, "failed": 0, "skipped": 0,
             "failed_names": []}
    path = os.path.join(out, "junit.xml")
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        tests["error"] = f"junit.xml: {e}"
        return tests
    for case in root.iter("testcase"):
        tests["total"] += 1
        status = case.get("status", "")
        if (case.find("failure") is not None or case.find("error") is not None
                or status == "fail"):
            tests["failed"] += 1
            tests["failed_names"].append(case.get("name"))
        elif case.find("skipped") is not None or status in ("notrun",
                                                             "disabled"):
            tests["skipped"] += 1
        else:
            tests["passed"] += 1
    return tests


def decode_figures(decode):
    figures = []
    if not isinstance(decode, dict):
        return figures
    for d in decode.get("decode") or []:
        figures.append({
            "name": f"decode batch {d['batch']} (context {d['context']})",
            "kind": "decode", "batch": d["batch"],
            "value": d["hbm_tbps"], "unit": "TB/s HBM",
            "fraction_of_peak": d["hbm_fraction"],
            "peak": f"{decode.get('hbm_peak_tbps')} TB/s",
            "step_ms": d["step_ms"], "tokens_per_s": d["tokens_per_s"],
            "goal": 0.8 if d["batch"] == 1 else None})
    p = decode.get("prefill")
    if p:
        figures.append({
            "name": f"prefill {p['tokens']} tokens", "kind": "prefill",
            "value": p["tflops"], "unit": "TFLOP/s",
            "fraction_of_peak": p["peak_fraction"],
            "peak": f"{decode.get('bf16_peak_tflops')} TFLOP/s dense bf16",
            "ms": p["ms"], "goal": 0.5})
    return figures


def kernel_figures(rows):
    figures = []
    for row in rows:
        for key, val in row.items():
            if key.startswith("frac") and isinstance(val, (int, float)):
                label = ", ".join(f"{k} {v}" for k, v in row.items()
                                  if not isinstance(v, float) and k != "bench")
                figures.append({
                    "name": f"kernel {row.get('bench')} ({label})",
                    "kind": "kernel", "fraction_of_peak": val, "peak": key,
                    "value": val, "unit": "fraction"})
    return figures


def verdict(summary, skip_build):
    """The reasons the run fails (empty: it passes)."""
    failures = []
    phases = summary["phases"]
    expected = RUN_PHASES if skip_build else BUILD_PHASES + RUN_PHASES
    for name in expected:
        status = phases.get(name)
        if status is None:
            failures.append(f"phase {name} did not run")
        elif status != "0":
            failures.append(f"phase {name}: {status}")
    for name, status in phases.items():
        if name not in expected and status != "0":
            failures.append(f"phase {name}: {status}")
    tests = summary["tests"]
    if "error" in tests:
        failures.append(f"no test results ({tests['error']})")
    elif tests["total"] == 0:
        failures.append("no gpu test ran")
    else:
        if tests["failed"]:
            failures.append(f"{tests['failed']} of {tests['total']} gpu tests "
                            f"failed: {', '.join(tests['failed_names'])}")
        if tests["passed"] == 0:
            failures.append(f"all {tests['total']} gpu tests skipped (no "
                            "device seen?)")
    figures = summary["figures"]
    batches = {f["batch"] for f in figures if f["kind"] == "decode"}
    for batch in DECODE_BATCHES:
        if batch not in batches:
            failures.append(f"figure missing: decode batch {batch}")
    if not any(f["kind"] == "prefill" for f in figures):
        failures.append("figure missing: prefill")
    if not any(f["kind"] == "kernel" for f in figures):
        failures.append("figure missing: kernel fractions "
                        "(gpu_kernels_bench)")
    for f in figures:
        if not isinstance(f.get("fraction_of_peak"), (int, float)):
            failures.append(f"figure {f['name']}: no fraction of peak")
    if summary["gpu"]["name"] is None:
        failures.append("no GPU name (nvidia-smi failed)")
    return failures


def summarize(out, skip_build, elapsed_s):
    decode = load_json(out, "gpu_decode_bench.json")
    kernels = load_json_lines(out, "gpu_kernels_bench.log")
    summary = {
        "gpu": load_gpu(out),
        "commit": (read_text(out, "commit.txt") or "unknown").strip(),
        "elapsed_s": elapsed_s,
        "phases": load_phases(out),
        "tests": load_tests(out),
        "figures": decode_figures(decode) + kernel_figures(kernels),
        "gpu_decode_bench": decode,
        "gpu_kernels_bench": kernels,
    }
    failures = verdict(summary, skip_build)
    summary["verdict"] = {"pass": not failures, "failures": failures}
    return summary


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("--skip-build", action="store_true")
    parser.add_argument("--elapsed", type=int, default=None)
    args = parser.parse_args(argv)
    summary = summarize(args.out, args.skip_build, args.elapsed)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps({k: summary[k] for k in ("gpu", "elapsed_s", "phases",
                                              "tests")}, indent=2))
    for fig in summary["figures"]:
        print(f"{fig['name']}: {fig['value']:.3f} {fig['unit']} = "
              f"{100 * fig['fraction_of_peak']:.1f}% of {fig['peak']}")
    v = summary["verdict"]
    print("verdict: " + ("PASS" if v["pass"] else "FAIL"))
    for reason in v["failures"]:
        print(f"  - {reason}")
    return 0 if v["pass"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
