#!/usr/bin/env python3
"""Checks of deploy/ (manifests, alert rules, dashboard, container files)
against each other and against the metrics the C++ code exports.

    check_deploy.py CHECK      CHECK: one of CHECKS below, or "all"

Exit 0 = pass, 1 = fail, 77 = skipped (a tool is missing; the message says
which and how to get it). Needs Python 3 with PyYAML. Optional tools:
promtool and yamllint (Debian packages `prometheus`, `yamllint`), kubectl
(kustomize rendering; without it a built-in resolver is used), and the
venv made by deploy/tools/setup-validators.sh (kubernetes-validate for the
Kubernetes API schemas, dockerfile for BuildKit's Dockerfile parser).
"""
import json
import os
import re
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (ADAPTER, ALERTS, DASHBOARD, DEPLOY, MON, NAMES_H,  # noqa: E402
                    PROMQL_WORDS, ROOT, SYNTHETIC, Failure, load_yaml_docs,
                    run, skip, tool)
from k8s_checks import (check_kustomize, check_schema, check_selftest,  # noqa: E402
                        containers, validator_python)


# ---------------------------------------------------------------- metrics --

def exported_metrics():
    """{name: type} from common/metrics/metric_names.h: every MetricSpec
    constant, as many as kAllMetrics lists."""
    text = NAMES_H.read_text()
    found = re.findall(
        r'\{\s*"([a-zA-Z_:][a-zA-Z0-9_:]*)",\s*MetricType::k(\w+)', text)
    table = re.search(r"kAllMetrics\[\]\s*=\s*\{(.*?)\};", text, re.S)
    listed = len(re.findall(r"&k\w+", table.group(1))) if table else -1
    if len(found) != listed or listed < 20:
        raise Failure(f"{len(found)} metric specs parsed from {NAMES_H}, "
                      f"kAllMetrics lists {listed}")
    return {name: kind.lower() for name, kind in found}


def recording_rules():
    out = set()
    for group in yaml.safe_load(ALERTS.read_text())["groups"]:
        for rule in group["rules"]:
            if "record" in rule:
                out.add(rule["record"])
    return out


def promql_metric_names(expr):
    """Metric names referenced by a PromQL expression (best effort lexer:
    drops strings, label matchers, grouping clauses, durations, functions)."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"'(?:[^'\\]|\\.)*'", "''", e)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)",
               " ", e)
    e = re.sub(r"\$\{?\w+\}?", " ", e)
    names = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", e):
        word = m.group(0)
        rest = e[m.end():].lstrip()
        if rest.startswith("("):
            continue  # a function or aggregation
        if word.lower() in PROMQL_WORDS:
            continue
        prev = e[:m.start()].rstrip()
        if prev and (prev[-1].isdigit() or prev[-1] == "."):
            continue  # exponent or unit of a number, e.g. 1e9
        names.add(word)
    return names


def resolve_name(name, exported, recorded):
    if name in exported or name in recorded or name in SYNTHETIC:
        return True
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and exported.get(
                name[: -len(suffix)]) == "histogram":
            return True
    return False


def dashboard_exprs():
    dash = json.loads(DASHBOARD.read_text())
    out = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                out.append((p["title"], t["expr"]))
            walk(p.get("panels", []))
    walk(dash["panels"])
    for var in dash.get("templating", {}).get("list", []):
        q = var.get("query")
        if isinstance(q, dict) and q.get("query"):
            m = re.match(r"label_values\((\w+)", q["query"])
            if m:
                out.append((f"variable {var['name']}", m.group(1)))
    return out


def alert_exprs():
    out = []
    for group in yaml.safe_load(ALERTS.read_text())["groups"]:
        for rule in group["rules"]:
            out.append((rule.get("alert") or rule.get("record"), rule["expr"]))
    return out


def adapter_exprs():
    values = yaml.safe_load(ADAPTER.read_text())
    out = []
    for kind in ("custom", "external"):
        for rule in values["rules"].get(kind, []):
            out.append((f"adapter {kind}", rule["seriesQuery"]))
    return out


def check_promql_names():
    exported = exported_metrics()
    recorded = recording_rules()
    problems, count = [], 0
    for where, expr in dashboard_exprs() + alert_exprs() + adapter_exprs():
        names = promql_metric_names(expr)
        if not names:
            problems.append(f"{where}: no metric found in {expr!r}")
        for name in names:
            count += 1
            if not resolve_name(name, exported, recorded):
                problems.append(f"{where}: {name} is not exported "
                                f"(common/metrics/metric_names.h)")
    if problems:
        raise Failure("\n".join(problems))
    # The lexer itself must see through the syntax it skips.
    probe = ('sum by (le, kind) (rate(pdserve_x_bucket{a="b{c}"}[5m])) '
             '/ on(pod) group_left(node) foo:bar * 1e9')
    if promql_metric_names(probe) != {"pdserve_x_bucket", "foo:bar"}:
        raise Failure(f"PromQL lexer broken: {promql_metric_names(probe)}")
    return f"{count} metric references, all exported"


def check_promql_syntax():
    """Every dashboard expression parses: wrapped as recording rules for
    `promtool check rules` (Grafana variables replaced by literals)."""
    if not tool("promtool"):
        return skip("promtool not installed (Debian package prometheus; "
                    "scripts/setup.sh installs it)")
    rules = []
    for i, (where, expr) in enumerate(dashboard_exprs()):
        e = (expr.replace("$__rate_interval", "1m")
             .replace("$namespace", ".*").replace("${datasource}", ""))
        rules.append({"record": f"pdserve_dashboard:expr_{i}", "expr": e})
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
    try:
        r = run(["promtool", "check", "rules", f.name])
    finally:
        os.unlink(f.name)
    if r.returncode != 0:
        raise Failure(r.stdout + r.stderr)
    return f"{len(rules)} dashboard expressions parse"


def check_dashboard():
    dash = json.loads(DASHBOARD.read_text())
    for key in ("title", "uid", "panels", "schemaVersion"):
        if key not in dash:
            raise Failure(f"dashboard lacks {key}")
    ids, titles = set(), []
    for p in dash["panels"]:
        if p["id"] in ids:
            raise Failure(f"duplicate panel id {p['id']}")
        ids.add(p["id"])
        titles.append(p["title"].lower())
        if p["type"] != "row" and not p.get("targets"):
            raise Failure(f"panel {p['title']!r} has no queries")
    text = " ".join(titles)
    for needed in ("time to first token", "inter-token", "tokens per second",
                   "bandwidth", "kv pool", "queue", "error"):
        if needed not in text:
            raise Failure(f"dashboard has no panel about {needed!r}")
    for script in ("gen_dashboard.py", "gen_prometheus_rule.py"):
        r = run([sys.executable, str(DEPLOY / "tools" / script), "--check"])
        if r.returncode != 0:
            raise Failure(r.stderr)
    return f"{len(ids)} panels; generated files up to date"


def check_docs():
    readme = (DEPLOY / "README.md").read_text()
    missing = [n for n in exported_metrics() if f"`{n}`" not in readme]
    if missing:
        raise Failure("deploy/README.md metrics reference lacks: " +
                      ", ".join(missing))
    return "every exported metric is documented"


# ------------------------------------------------------------ promtool ---

def check_rules():
    if not tool("promtool"):
        return skip("promtool not installed (Debian package prometheus; "
                    "scripts/setup.sh installs it)")
    cwd = MON / "prometheus"
    for cmd in (["promtool", "check", "rules", "alerts.yml"],
                ["promtool", "test", "rules", "alerts_test.yml"],
                ["promtool", "check", "config", "prometheus.yml"]):
        r = run(cmd, cwd=cwd)
        if r.returncode != 0:
            raise Failure(" ".join(cmd) + "\n" + r.stdout + r.stderr)
    # The PrometheusRule carries exactly the rule file's groups.
    rule = load_yaml_docs(MON / "prometheus-rules.yaml")[0]
    if rule["spec"] != yaml.safe_load(ALERTS.read_text()):
        raise Failure("prometheus-rules.yaml differs from alerts.yml")
    names = {r.get("alert") for g in rule["spec"]["groups"] for r in g["rules"]}
    for needed in ("PdserveTimeToFirstTokenHigh", "PdserveErrorRateHigh",
                   "PdserveKvPoolExhausted"):
        if needed not in names:
            raise Failure(f"alert {needed} missing")
    return "rules valid, rule unit tests pass, config valid"


def check_yamllint():
    if not tool("yamllint"):
        return skip("yamllint not installed (Debian package yamllint; "
                    "scripts/setup.sh installs it)")
    r = run(["yamllint", "--strict", "-c", str(DEPLOY / ".yamllint.yaml"),
             str(DEPLOY)])
    if r.returncode != 0:
        raise Failure(r.stdout + r.stderr)
    return "yamllint clean"


# --------------------------------------------------------- Dockerfiles ---

def dockerfile_instructions(path):
    """[(INSTRUCTION, flags, value)] with continuation lines joined."""
    py = validator_python()
    if py is not None:
        code = ("import dockerfile, json, sys; print(json.dumps([[c.cmd, "
                "list(c.flags), c.original] for c in "
                "dockerfile.parse_file(sys.argv[1])]))")
        r = run([str(py), "-c", code, str(path)])
        if r.returncode == 0:
            return [(c.upper(), f, o) for c, f, o in json.loads(r.stdout)]
        if "No module named" not in r.stderr:
            raise Failure(f"{path}: BuildKit parser: {r.stderr}")
    out, cur = [], ""
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#") and not cur:
            continue
        cur += line.rstrip("\\") + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            if cur.strip():
                word = cur.split()[0].upper()
                flags = [w for w in cur.split()[1:] if w.startswith("--")]
                out.append((word, flags, cur))
            cur = ""
    return out


def setup_packages():
    text = (ROOT / "scripts" / "setup.sh").read_text()
    m = re.search(r"PACKAGES=\((.*?)\)", text, re.S)
    return set(m.group(1).split()) if m else set()


def apt_candidates(packages):
    """The packages apt knows no candidate for; None when apt has no lists."""
    if not tool("apt-cache"):
        return None

    def candidate(p):
        r = run(["apt-cache", "policy", p])
        m = re.search(r"Candidate:\s*(\S+)", r.stdout)
        return m and m.group(1) != "(none)"
    if not candidate("zlib1g"):
        return None
    return sorted(p for p in packages if not candidate(p))


def check_dockerfiles():
    known = setup_packages()
    runtime_pkgs = set()
    k8s_ports = set()
    for name in ("frontend", "scheduler", "engine"):
        for d in load_yaml_docs(DEPLOY / "kubernetes" / "base" / f"{name}.yaml"):
            for c in containers(d):
                k8s_ports |= {p["containerPort"] for p in c["ports"]}
    for variant in ("cpu", "cuda"):
        path = DEPLOY / "docker" / f"Dockerfile.{variant}"
        ins = dockerfile_instructions(path)
        stages, installed = [], None
        for cmd, flags, text in ins:
            if cmd == "FROM":
                m = re.search(r"\bAS\s+(\S+)", text, re.I)
                stages.append(m.group(1) if m else None)
            if cmd == "COPY":
                for f in flags:
                    if f.startswith("--from=") and f[7:] not in stages:
                        raise Failure(f"{path}: COPY {f} names no earlier "
                                      f"stage ({stages})")
            if cmd == "RUN" and "install -D" in text:
                m = re.search(r"install -D -m \d+ (\S+) (\S+)", text)
                installed = m.group(2) if m else None
            if cmd == "RUN" and "apt-get install" in text and \
                    stages[-1] == "build":
                pkgs = re.findall(r"(?<![\w$-])([a-z0-9][a-z0-9+.-]+-dev|"
                                  r"cmake|pkg-config|build-essential|"
                                  r"protobuf-compiler(?:-grpc)?)\b", text)
                stray = sorted(p for p in pkgs if p not in known and
                               not p.startswith(("cuda-", "libcublas")))
                if stray:
                    raise Failure(f"{path}: build packages not in "
                                  f"scripts/setup.sh: {stray}")
            if cmd == "RUN" and "apt-get install" in text and \
                    stages[-1] == "runtime":
                runtime_pkgs |= {w for w in re.findall(
                    r"(?<![\w$/-])(lib[a-z0-9+.-]+|zlib1g|ca-certificates)\b",
                    text) if "$" not in w and not w.startswith("libcublas")}
            if cmd == "EXPOSE":
                ports = {int(p) for p in text.split()[1:]}
                if not k8s_ports <= ports:
                    raise Failure(f"{path}: EXPOSE {sorted(ports)} misses "
                                  f"{sorted(k8s_ports - ports)}")
            if cmd == "USER" and not re.search(r"\b65532\b", text):
                raise Failure(f"{path}: runs as {text}, manifests expect 65532")
        final = installed
        for cmd, flags, text in ins:
            words = text.split()
            if cmd == "COPY" and installed and installed in words:
                final = words[-1]
        entry = [t for c, _, t in ins if c == "ENTRYPOINT"]
        if not entry or final is None or final not in entry[-1]:
            raise Failure(f"{path}: ENTRYPOINT {entry} is not the installed "
                          f"binary {installed}")
        if "USER" not in [c for c, _, _ in ins]:
            raise Failure(f"{path}: must not run as root")
        ignore = path.with_name(path.name + ".dockerignore")
        if "**/build" not in ignore.read_text().split():
            raise Failure(f"{ignore}: build folders must stay out of the "
                          f"context")
    unknown = apt_candidates(runtime_pkgs)
    if unknown:
        raise Failure(f"runtime packages apt does not know: {unknown}")
    return (f"Dockerfile.cpu and Dockerfile.cuda consistent; runtime packages "
            f"{'checked with apt' if unknown is not None else 'not checked (no apt lists)'}: "
            f"{sorted(runtime_pkgs)}")


CHECKS = {
    "yamllint": check_yamllint,
    "rules": check_rules,
    "promql_names": check_promql_names,
    "promql_syntax": check_promql_syntax,
    "dashboard": check_dashboard,
    "docs": check_docs,
    "kustomize": check_kustomize,
    "schema": check_schema,
    "dockerfiles": check_dockerfiles,
    "selftest": check_selftest,
}


def main(argv):
    names = list(CHECKS) if argv[1:] == ["all"] else argv[1:]
    if not names or any(n not in CHECKS for n in names):
        print(__doc__ + "\nchecks: " + ", ".join(CHECKS), file=sys.stderr)
        return 2
    failed = 0
    for n in names:
        try:
            print(f"[{n}] PASS: {CHECKS[n]()}")
        except Failure as e:
            print(f"[{n}] FAIL:\n{e}")
            failed += 1
        except SystemExit as e:
            if len(names) == 1:
                raise
            print(f"[{n}] skipped ({e.code})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
