#!/usr/bin/env python3
"""scripts/gpu_check_summary.py: the verdict of a gpu-check.sh run.

Each case writes a results folder as gpu-check.sh leaves it and checks the
verdict: a complete run passes; a missing or skipped phase, all gpu tests
skipped, a failed test, a missing figure (measured peaks, decode batches,
prefill, decode attention at 4K/32K, ITL p99/p50, GPU idle, kernel rows)
or no device name each fail it with a reason naming what is wrong, and the
exit status follows. Goals are reported per figure and never fail a run.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCRIPT = os.path.join(ROOT, "scripts", "gpu_check_summary.py")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import gpu_check_summary  # noqa: E402

PHASES = {"configure": 0, "build": 0, "ctest": 0, "gpu_decode_bench": 0,
          "gpu_kernels_bench": 0}
GPU_LINE = ("NVIDIA H200, 570.86.15, 1980 MHz, 2619 MHz, 1980 MHz, 2619 MHz, "
            "143771 MiB, 700.00 W")


def junit(passed=3, skipped=0, failed=0):
    cases = ['<testcase name="Pass.%d" status="run"/>' % i
             for i in range(passed)]
    cases += ['<testcase name="Skip.%d" status="run"><skipped/></testcase>' % i
              for i in range(skipped)]
    cases += ['<testcase name="Fail.%d" status="fail"><failure/></testcase>'
              % i for i in range(failed)]
    return "<testsuite>%s</testsuite>" % "".join(cases)


def decode_bench(batches=(1, 8, 64), prefill=True, peaks=True, itl=True,
                 batch1_ms=2.1):
    doc = {"hbm_peak_tbps": 4.1, "bf16_peak_tflops": 700.0,
           "hbm_spec_tbps": 4.8, "bf16_spec_tflops": 989.0, "decode": [
               {"batch": b, "context": 512, "hbm_tbps": 3.4,
                "hbm_fraction": 0.83, "step_ms": batch1_ms if b == 1 else 2.5,
                "tokens_per_s": 476.0 * b} for b in batches]}
    if peaks:
        doc["hbm_measured_tbps"] = 4.1
        doc["bf16_gemm_measured_tflops"] = 700.0
    if prefill:
        doc["prefill"] = {"tokens": 4096, "tflops": 380.0,
                          "peak_fraction": 0.54, "ms": 250.0}
    if itl:
        doc["itl"] = {"batch": 1, "steps": 512, "p50_ms": 2.1, "p99_ms": 2.2,
                      "p99_over_p50": 1.05, "gpu_idle_fraction": 0.01}
    return "decode bench log line\n" + json.dumps(doc)


ABSENT = object()  # run_case: do not write that file


def kernels_log(contexts=(4096, 32768), other=True):
    rows = [{"bench": "decode_attention", "kv": "bf16", "ctx": c, "batch": 8,
             "us": 100.0, "frac_hbm": 0.87, "frac_hbm_spec": 0.8}
            for c in contexts]
    if other:
        rows.append({"bench": "matvec", "type": "bf16", "rows": 4096,
                     "us": 30.0, "frac_hbm": 0.9, "frac_hbm_spec": 0.8})
    return "".join(json.dumps(r) + "\n" for r in rows)


KERNELS = kernels_log()


class VerdictTest(unittest.TestCase):
    def run_case(self, phases=None, tests=None, decode=None, kernels=KERNELS,
                 gpu=GPU_LINE, args=()):
        out = tempfile.mkdtemp()
        files = {
            "phases.txt": "".join(f"{k}={v}\n" for k, v in
                                  (PHASES if phases is None else phases).items()),
            "junit.xml": junit() if tests is None else tests,
            "gpu_decode_bench.json": decode_bench() if decode is None else decode,
            "gpu_kernels_bench.log": kernels,
            "gpu.txt": gpu,
            "commit.txt": "abc123\n",
        }
        for name, text in files.items():
            if text is not ABSENT:
                with open(os.path.join(out, name), "w") as f:
                    f.write(text)
        proc = subprocess.run([sys.executable, SCRIPT, out, *args],
                              capture_output=True, text=True)
        with open(os.path.join(out, "summary.json")) as f:
            summary = json.load(f)
        return proc.returncode, summary

    def assert_fails_with(self, text, **kwargs):
        code, summary = self.run_case(**kwargs)
        self.assertEqual(code, 1, summary["verdict"])
        self.assertFalse(summary["verdict"]["pass"])
        self.assertTrue(any(text in r for r in summary["verdict"]["failures"]),
                        summary["verdict"]["failures"])

    def test_a_complete_run_passes_with_device_and_clocks(self):
        code, summary = self.run_case()
        self.assertEqual(code, 0, summary["verdict"])
        self.assertEqual(summary["verdict"], {"pass": True, "failures": []})
        self.assertEqual(summary["gpu"]["name"], "NVIDIA H200")
        self.assertEqual(summary["gpu"]["driver_version"], "570.86.15")
        self.assertEqual(summary["gpu"]["clocks.sm"], "1980 MHz")
        self.assertEqual(summary["gpu"]["clocks.max.mem"], "2619 MHz")
        self.assertEqual(summary["tests"]["passed"], 3)
        kinds = sorted(f["kind"] for f in summary["figures"])
        self.assertEqual(kinds, ["decode"] * 3 + ["decode_attention"] * 2 +
                         ["decode_ms", "idle", "itl", "kernel", "peak", "peak",
                          "prefill"])
        self.assertEqual(summary["goals"], {"met": 7, "missed": []})

    def test_a_missing_phase_fails(self):
        phases = dict(PHASES)
        phases["gpu_kernels_bench"] = "missing"
        self.assert_fails_with("phase gpu_kernels_bench: missing",
                               phases=phases)
        del phases["gpu_kernels_bench"]
        self.assert_fails_with("phase gpu_kernels_bench did not run",
                               phases=phases)

    def test_a_skipped_build_fails_unless_asked_for(self):
        phases = dict(PHASES)
        phases["build"] = "skipped"
        self.assert_fails_with("phase build: skipped", phases=phases)
        no_build = {k: v for k, v in PHASES.items()
                    if k not in ("configure", "build")}
        code, summary = self.run_case(phases=no_build, args=["--skip-build"])
        self.assertEqual(code, 0, summary["verdict"])

    def test_a_timed_out_phase_fails(self):
        phases = dict(PHASES)
        phases["ctest"] = 124
        self.assert_fails_with("phase ctest: 124", phases=phases)

    def test_all_tests_skipped_fails(self):
        self.assert_fails_with("all 4 gpu tests skipped",
                               tests=junit(passed=0, skipped=4))

    def test_no_tests_or_no_junit_fails(self):
        self.assert_fails_with("no gpu test ran", tests=junit(0, 0, 0))
        self.assert_fails_with("no test results", tests=ABSENT)

    def test_a_failed_test_is_named(self):
        self.assert_fails_with("1 of 4 gpu tests failed: Fail.0",
                               tests=junit(passed=3, failed=1))

    def test_each_missing_figure_is_named(self):
        self.assert_fails_with("figure missing: decode batch 64",
                               decode=decode_bench(batches=(1, 8)))
        self.assert_fails_with("figure missing: prefill",
                               decode=decode_bench(prefill=False))
        self.assert_fails_with("figure missing: measured peak HBM read",
                               decode=decode_bench(peaks=False))
        self.assert_fails_with("figure missing: measured peak bf16 GEMM",
                               decode=decode_bench(peaks=False))
        self.assert_fails_with("figure missing: inter-token latency",
                               decode=decode_bench(itl=False))
        self.assert_fails_with("figure missing: GPU idle between steps",
                               decode=decode_bench(itl=False))
        self.assert_fails_with("figure missing: decode attention context "
                               "32768", kernels=kernels_log(contexts=(4096,)))
        self.assert_fails_with("figure missing: kernel fractions",
                               kernels=kernels_log(other=False))
        self.assert_fails_with("figure missing: kernel fractions",
                               kernels="no json here\n")
        self.assert_fails_with("figure missing: decode batch 1",
                               decode="not json at all")

    def test_a_missed_goal_is_reported_but_does_not_fail(self):
        code, summary = self.run_case(decode=decode_bench(batch1_ms=2.9))
        self.assertEqual(code, 0, summary["verdict"])
        self.assertEqual(summary["goals"]["missed"],
                         ["decode batch 1 time per token"])
        ms = [f for f in summary["figures"] if f["kind"] == "decode_ms"]
        self.assertEqual(ms[0]["goal"], 2.3)
        self.assertFalse(ms[0]["meets_goal"])

    def test_no_device_name_fails(self):
        self.assert_fails_with("no GPU name", gpu="")
        code, summary = self.run_case(gpu=ABSENT)
        self.assertEqual(code, 1)
        self.assertIsNone(summary["gpu"]["clocks.sm"])

    def test_verdict_is_a_pure_function_of_the_summary(self):
        summary = {"phases": dict((k, "0") for k in PHASES),
                   "tests": {"total": 1, "passed": 1, "failed": 0,
                             "skipped": 0, "failed_names": []},
                   "figures": [], "gpu": {"name": "x"}}
        reasons = gpu_check_summary.verdict(summary, skip_build=False)
        self.assertEqual(len([r for r in reasons if "figure missing" in r]),
                         11, reasons)


if __name__ == "__main__":
    unittest.main()
