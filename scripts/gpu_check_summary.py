#!/usr/bin/env python3
"""Summary and verdict of one scripts/gpu-check.sh run.

Reads the results folder gpu-check.sh wrote (phases.txt, junit.xml,
gpu_decode_bench.json, gpu_kernels_bench.log, commit.txt, gpu.txt) and
writes summary.json: the device (name, driver, clocks), every phase's exit,
the gpu test counts, every figure (with its fraction of the device's peak
measured in the same run, and its goal from issue 18 where it has one), and
a verdict. The run passes only when
  - every phase a full run has (configure, build, ctest, gpu_decode_bench,
    gpu_kernels_bench; configure/build not with --skip-build) ran and
    exited 0: a phase that is missing or was skipped is a failure;
  - the gpu tests ran: at least one, none failed, not all skipped;
  - every figure the run exists for is present: the measured HBM read and
    bf16 GEMM peaks, decode at batch 1, 8 and 64, prefill, decode
    attention at 4K and 32K context, batch-1 inter-token latency p99/p50
    and the device's idle fraction between steps, and at least one other
    kernel figure.
Goals are reported (meets_goal per figure, "goals" in the summary) but do
not decide the verdict: a run that measured everything passes.
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
ATTENTION_CONTEXTS = (4096, 32768)
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


def figure(name, kind, value, unit, goal=None, goal_is="min", **extra):
    """One figure; meets_goal when it has a goal and a numeric value."""
    f = {"name": name, "kind": kind, "value": value, "unit": unit}
    f.update(extra)
    if goal is not None:
        f["goal"] = goal
        f["goal_is"] = goal_is
        if isinstance(value, (int, float)):
            f["meets_goal"] = (value >= goal if goal_is == "min"
                               else value <= goal)
    return f


def peak_figures(decode):
    if not isinstance(decode, dict):
        return []
    figures = []
    for key, spec, name, unit in (
            ("hbm_measured_tbps", "hbm_spec_tbps", "HBM read", "TB/s"),
            ("bf16_gemm_measured_tflops", "bf16_spec_tflops",
             "bf16 GEMM (cuBLAS 8192^3)", "TFLOP/s")):
        value = decode.get(key)
        if isinstance(value, (int, float)) and value > 0:
            s = decode.get(spec)
            figures.append(figure(
                f"measured peak: {name}", "peak", value, unit,
                fraction_of_datasheet=(value / s if s else None)))
    return figures


def decode_figures(decode):
    figures = []
    if not isinstance(decode, dict):
        return figures
    peak = f"{decode.get('hbm_peak_tbps')} TB/s"
    for d in decode.get("decode") or []:
        batch = d["batch"]
        figures.append(figure(
            f"decode batch {batch} (context {d['context']})", "decode",
            d["hbm_fraction"], "fraction of HBM peak",
            goal=0.8 if batch == 1 else None, batch=batch,
            hbm_tbps=d["hbm_tbps"], fraction_of_peak=d["hbm_fraction"],
            peak=peak, step_ms=d["step_ms"], tokens_per_s=d["tokens_per_s"]))
        if batch == 1:
            figures.append(figure(
                "decode batch 1 time per token", "decode_ms", d["step_ms"],
                "ms", goal=2.3, goal_is="max"))
    p = decode.get("prefill")
    if p:
        figures.append(figure(
            f"prefill {p['tokens']} tokens", "prefill", p["peak_fraction"],
            "fraction of bf16 GEMM peak", goal=0.5, tflops=p["tflops"],
            fraction_of_peak=p["peak_fraction"],
            peak=f"{decode.get('bf16_peak_tflops')} TFLOP/s", ms=p["ms"]))
    itl = decode.get("itl")
    if isinstance(itl, dict):
        figures.append(figure(
            f"batch-1 inter-token latency p99 / p50 ({itl['steps']} tokens)",
            "itl", itl["p99_over_p50"], "ratio", goal=1.1, goal_is="max",
            p50_ms=itl["p50_ms"], p99_ms=itl["p99_ms"]))
        idle = itl.get("gpu_idle_fraction")
        if isinstance(idle, (int, float)) and idle >= 0:
            figures.append(figure(
                "GPU idle between batch-1 steps (CUDA events)", "idle", idle,
                "fraction of device time", goal=0.02, goal_is="max"))
    return figures


def kernel_figures(rows):
    figures = []
    for row in rows:
        if row.get("bench") == "decode_attention":
            figures.append(figure(
                f"decode attention {row.get('kv')} context {row.get('ctx')} "
                f"batch {row.get('batch')}", "decode_attention",
                row.get("frac_hbm"), "fraction of HBM peak", goal=0.85,
                ctx=row.get("ctx"), fraction_of_peak=row.get("frac_hbm")))
            continue
        for key, val in row.items():
            if (key.startswith("frac") and not key.endswith("_spec")
                    and isinstance(val, (int, float))):
                label = ", ".join(f"{k} {v}" for k, v in row.items()
                                  if not isinstance(v, float) and k != "bench")
                figures.append(figure(
                    f"kernel {row.get('bench')} ({label})", "kernel", val,
                    "fraction", fraction_of_peak=val, peak=key))
    return figures


def missing_figures(figures):
    """A reason for each figure the run must have and lacks."""
    kinds = {f["kind"] for f in figures}
    reasons = []
    for name in ("HBM read", "bf16 GEMM"):
        if not any(f["kind"] == "peak" and name in f["name"] for f in figures):
            reasons.append(f"figure missing: measured peak {name}")
    batches = {f["batch"] for f in figures if f["kind"] == "decode"}
    for batch in DECODE_BATCHES:
        if batch not in batches:
            reasons.append(f"figure missing: decode batch {batch}")
    contexts = {f["ctx"] for f in figures if f["kind"] == "decode_attention"}
    for ctx in ATTENTION_CONTEXTS:
        if ctx not in contexts:
            reasons.append(f"figure missing: decode attention context {ctx}")
    for kind, what in (("prefill", "prefill"),
                       ("itl", "inter-token latency p99/p50"),
                       ("idle", "GPU idle between steps"),
                       ("kernel", "kernel fractions (gpu_kernels_bench)")):
        if kind not in kinds:
            reasons.append(f"figure missing: {what}")
    return reasons


def goals(figures):
    with_goal = [f for f in figures if "meets_goal" in f]
    return {"met": sum(1 for f in with_goal if f["meets_goal"]),
            "missed": [f["name"] for f in with_goal if not f["meets_goal"]]}


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
    failures += missing_figures(summary["figures"])
    for f in summary["figures"]:
        if not isinstance(f.get("value"), (int, float)):
            failures.append(f"figure {f['name']}: no value")
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
        "figures": (peak_figures(decode) + decode_figures(decode) +
                    kernel_figures(kernels)),
        "gpu_decode_bench": decode,
        "gpu_kernels_bench": kernels,
    }
    failures = verdict(summary, skip_build)
    summary["goals"] = goals(summary["figures"])
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
        goal = ""
        if "meets_goal" in fig:
            sign = ">=" if fig["goal_is"] == "min" else "<="
            goal = (f" (goal {sign} {fig['goal']}: "
                    f"{'met' if fig['meets_goal'] else 'MISSED'})")
        value = fig["value"]
        shown = f"{value:.4g}" if isinstance(value, (int, float)) else value
        print(f"{fig['name']}: {shown} {fig['unit']}{goal}")
    print(f"goals met: {summary['goals']['met']}, missed: "
          f"{len(summary['goals']['missed'])}")
    v = summary["verdict"]
    print("verdict: " + ("PASS" if v["pass"] else "FAIL"))
    for reason in v["failures"]:
        print(f"  - {reason}")
    return 0 if v["pass"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
