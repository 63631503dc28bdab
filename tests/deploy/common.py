"""Shared paths and helpers of the deploy/ checks (tests/deploy)."""
import pathlib
import shutil
import subprocess

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
MON = DEPLOY / "monitoring"
ALERTS = MON / "prometheus" / "alerts.yml"
DASHBOARD = MON / "grafana" / "pdserve.json"
ADAPTER = MON / "prometheus" / "adapter-values.yaml"
NAMES_H = ROOT / "common" / "metrics" / "metric_names.h"
OVERLAYS = {"cpu": DEPLOY / "kubernetes" / "overlays" / "cpu",
            "gpu": DEPLOY / "kubernetes" / "overlays" / "gpu",
            "cells": DEPLOY / "kubernetes" / "overlays" / "cells",
            "pd": DEPLOY / "kubernetes" / "overlays" / "pd",
            "gateway": DEPLOY / "kubernetes" / "overlays" / "gateway"}
# The workloads each overlay must render (kind, name).
WORKLOADS = {
    "cpu": [("Deployment", n) for n in
            ("pdserve-frontend", "pdserve-scheduler", "pdserve-engine")],
    "cells": [("Deployment", "pdserve-frontend"),
              ("StatefulSet", "pdserve-cell")],
    "pd": [("Deployment", "pdserve-frontend"),
           ("StatefulSet", "pdserve-cell"),
           ("StatefulSet", "pdserve-prefill-cell")],
}
WORKLOADS["gpu"] = WORKLOADS["cpu"]
WORKLOADS["gateway"] = WORKLOADS["cells"] + [("Deployment", "pdserve-epp")]
SKIP = 77
# Series Prometheus makes itself, not exported by any process.
SYNTHETIC = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
PROMQL_WORDS = {
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk",
    "bottomk", "quantile", "count_values", "group", "by", "without", "on",
    "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
    "offset", "inf", "nan", "le"}


class Failure(Exception):
    pass


def tool(name):
    return shutil.which(name)


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def load_yaml_docs(path_or_text):
    text = (path_or_text.read_text() if isinstance(path_or_text, pathlib.Path)
            else path_or_text)
    return [d for d in yaml.safe_load_all(text) if d is not None]


def skip(message):
    print(f"SKIPPED: {message}")
    raise SystemExit(SKIP)


def pod_spec(doc):
    if doc["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
        return doc["spec"]["template"]["spec"]
    return None


def containers(doc):
    spec = pod_spec(doc)
    return spec["containers"] if spec else []


def flag_value(args, flag):
    for a in args:
        if a.startswith(f"--{flag}="):
            return a.split("=", 1)[1]
    return None
