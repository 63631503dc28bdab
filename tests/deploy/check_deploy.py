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
import copy
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
MON = DEPLOY / "monitoring"
ALERTS = MON / "prometheus" / "alerts.yml"
DASHBOARD = MON / "grafana" / "pdserve.json"
ADAPTER = MON / "prometheus" / "adapter-values.yaml"
NAMES_H = ROOT / "server" / "metrics" / "metric_names.h"
OVERLAYS = {"cpu": DEPLOY / "kubernetes" / "overlays" / "cpu",
            "gpu": DEPLOY / "kubernetes" / "overlays" / "gpu"}
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


# ---------------------------------------------------------------- metrics --

def exported_metrics():
    """{name: type} from server/metrics/metric_names.h."""
    text = NAMES_H.read_text()
    found = re.findall(
        r'\{\s*"([a-zA-Z_:][a-zA-Z0-9_:]*)",\s*MetricType::k(\w+)', text)
    if len(found) < 20:
        raise Failure(f"only {len(found)} metric specs parsed from {NAMES_H}")
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
                                f"(server/metrics/metric_names.h)")
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

def skip(message):
    print(f"SKIPPED: {message}")
    raise SystemExit(SKIP)


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


# ----------------------------------------------------------- kustomize ---

def kustomize_builtin(directory):
    """Minimal kustomize: resources (files and directories), namespace,
    images, strategic-merge patches by kind+name (lists of named items merge
    by name), configMapGenerator files (no hash suffix)."""
    kfile = directory / "kustomization.yaml"
    if not kfile.exists():
        raise Failure(f"{directory} has no kustomization.yaml")
    k = yaml.safe_load(kfile.read_text())
    docs = []
    for res in k.get("resources", []):
        path = (directory / res).resolve()
        if path.is_dir():
            docs += kustomize_builtin(path)
        elif path.exists():
            docs += load_yaml_docs(path)
        else:
            raise Failure(f"{kfile}: resource {res} does not exist")
    for gen in k.get("configMapGenerator", []):
        data = {}
        for spec in gen.get("files", []):
            key, _, src = spec.partition("=")
            src = src or key
            path = directory / src
            if not path.exists():
                raise Failure(f"{kfile}: generator file {src} does not exist")
            data[pathlib.Path(key).name] = path.read_text()
        docs.append({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": gen["name"]}, "data": data})
    for patch in k.get("patches", []):
        path = directory / patch["path"]
        if not path.exists():
            raise Failure(f"{kfile}: patch {patch['path']} does not exist")
        for p in load_yaml_docs(path):
            targets = [d for d in docs if d["kind"] == p["kind"] and
                       d["metadata"]["name"] == p["metadata"]["name"]]
            if not targets:
                raise Failure(f"{path}: patch matches no {p['kind']} "
                              f"{p['metadata']['name']}")
            for t in targets:
                merge(t, p)
    for doc in docs:
        if "namespace" in k and doc["kind"] != "Namespace":
            doc["metadata"]["namespace"] = k["namespace"]
        for image in k.get("images", []):
            for c in containers(doc):
                if c.get("image", "").split(":")[0] == image["name"]:
                    c["image"] = f"{image['newName']}:{image['newTag']}"
    return docs


def merge(dst, src):
    for key, value in src.items():
        if isinstance(value, dict) and isinstance(dst.get(key), dict):
            merge(dst[key], value)
        elif (isinstance(value, list) and isinstance(dst.get(key), list) and
              value and all(isinstance(v, dict) and "name" in v
                            for v in value + dst[key])):
            for item in value:
                same = [d for d in dst[key] if d["name"] == item["name"]]
                if same:
                    merge(same[0], item)
                else:
                    dst[key].append(copy.deepcopy(item))
        else:
            dst[key] = copy.deepcopy(value)


def render(overlay):
    if tool("kubectl"):
        r = run(["kubectl", "kustomize", str(OVERLAYS[overlay])])
        if r.returncode != 0:
            raise Failure(f"kubectl kustomize {overlay}: {r.stderr}")
        return load_yaml_docs(r.stdout), "kubectl kustomize"
    return kustomize_builtin(OVERLAYS[overlay]), "built-in resolver"


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


FLAG_RE = re.compile(r'\{\s*"([a-z][a-z0-9-]*)"\s*,\s*(?:true|false)\b')


def declared_flags(command):
    """Flags `pdserve <command>` declares, or None while its source is not
    there yet: FlagSpec literals {"name", true|false, ...} in
    server/cli/<command>_command.cc and in the body of each `XFlags()`
    function it calls (defined anywhere in the source tree)."""
    src = ROOT / "server" / "cli" / f"{command}_command.cc"
    if not src.exists():
        return None
    text = src.read_text()
    flags = set(FLAG_RE.findall(text))
    for fn in set(re.findall(r"\b(\w+Flags)\(\)", text)):
        for path in ROOT.glob("*/**/*.cc"):
            if "build" in path.parts[len(ROOT.parts)]:
                continue
            body = path.read_text(errors="replace")
            m = re.search(rf"\b{fn}\(\)\s*\{{(.*?)\n\}}", body, re.S)
            if m:
                flags |= set(FLAG_RE.findall(m.group(1)))
    return flags


def check_workloads(docs, overlay):
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    deployments = {d["metadata"]["name"]: d for d in by_kind["Deployment"]}
    for name in ("pdserve-frontend", "pdserve-scheduler", "pdserve-engine"):
        if name not in deployments:
            raise Failure(f"{overlay}: Deployment {name} missing")
    for name, d in deployments.items():
        sel = d["spec"]["selector"]["matchLabels"]
        labels = d["spec"]["template"]["metadata"]["labels"]
        if any(labels.get(k) != v for k, v in sel.items()):
            raise Failure(f"{overlay}: {name} selector {sel} does not match "
                          f"its pod labels {labels}")
        spec = pod_spec(d)
        for c in spec["containers"]:
            ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                g = c.get(probe, {}).get("grpc")
                if not g:
                    raise Failure(f"{overlay}: {name}/{c['name']} has no gRPC "
                                  f"{probe}")
                if g["port"] != ports.get("grpc"):
                    raise Failure(f"{overlay}: {name} {probe} port {g['port']}"
                                  f" is not its grpc port {ports.get('grpc')}")
            args = c.get("args", [])
            command = args[0] if args else ""
            if flag_value(args, "port") != str(ports.get("grpc")):
                raise Failure(f"{overlay}: {name} --port differs from its "
                              f"grpc containerPort {ports.get('grpc')}")
            if flag_value(args, "metrics-port") != str(ports.get("metrics")):
                raise Failure(f"{overlay}: {name} --metrics-port differs from "
                              f"its metrics containerPort")
            host = flag_value(args, "metrics-host") or flag_value(args, "host")
            if host != "0.0.0.0":
                raise Failure(f"{overlay}: {name} must serve gRPC and metrics "
                              f"on 0.0.0.0 (--host / --metrics-host)")
            known = declared_flags(command)
            if known is not None:
                used = {a[2:].split("=")[0] for a in args if a.startswith("--")}
                unknown = sorted(used - known)
                if unknown:
                    raise Failure(f"{overlay}: {name} passes flags that "
                                  f"`pdserve {command}` does not declare: "
                                  f"{unknown}")
            stop = c.get("lifecycle", {}).get("preStop", {}).get("exec", {})
            cmd = stop.get("command", [])
            if len(cmd) != 2 or not cmd[0].endswith("sleep"):
                raise Failure(f"{overlay}: {name} needs a preStop sleep")
            drain = float(flag_value(args, "drain-seconds") or
                          d["spec"]["template"]["metadata"].get(
                              "annotations", {}).get(
                              "pdserve.dev/drain-seconds", "nan"))
            need = float(cmd[1]) + drain + 5
            grace = spec.get("terminationGracePeriodSeconds", 30)
            if not grace >= need:
                raise Failure(f"{overlay}: {name} terminationGracePeriodSeconds"
                              f" {grace} < preStop {cmd[1]} s + drain {drain} "
                              f"s + 5 s")
            gpus = c.get("resources", {}).get("limits", {}).get(
                "nvidia.com/gpu")
            wants_gpu = overlay == "gpu" and name == "pdserve-engine"
            if bool(gpus) != wants_gpu:
                raise Failure(f"{overlay}: {name} nvidia.com/gpu limit is "
                              f"{gpus!r}")
    return deployments, by_kind


def check_wiring(deployments, by_kind, overlay):
    def pods_matching(selector):
        return [n for n, d in deployments.items()
                if all(d["spec"]["template"]["metadata"]["labels"].get(k) == v
                       for k, v in selector.items())]

    for svc in by_kind.get("Service", []):
        matched = pods_matching(svc["spec"]["selector"])
        if len(matched) != 1:
            raise Failure(f"{overlay}: Service {svc['metadata']['name']} "
                          f"selects {matched}")
        ports = {p["name"] for c in containers(deployments[matched[0]])
                 for p in c.get("ports", [])}
        for p in svc["spec"]["ports"]:
            if p["targetPort"] not in ports:
                raise Failure(f"{overlay}: Service port {p['name']} targets "
                              f"{p['targetPort']}, not a container port")
    # Addresses given to --scheduler / --engine name real Services and ports.
    services = {s["metadata"]["name"]: {p["port"] for p in s["spec"]["ports"]}
                for s in by_kind.get("Service", [])}
    for name, d in deployments.items():
        for c in containers(d):
            for flag in ("scheduler", "engine"):
                addr = flag_value(c.get("args", []), flag)
                if addr is None:
                    continue
                host, _, port = addr.rpartition(":")
                if int(port) not in services.get(host, set()):
                    raise Failure(f"{overlay}: {name} --{flag}={addr} names no "
                                  f"Service port")
    pm = by_kind["PodMonitor"][0]["spec"]
    scraped = [n for n, d in deployments.items()
               if all(d["spec"]["template"]["metadata"]["labels"].get(k) == v
                      for k, v in pm["selector"]["matchLabels"].items())]
    if sorted(scraped) != sorted(deployments):
        raise Failure(f"{overlay}: PodMonitor scrapes {scraped}")
    for n in scraped:
        names = {p["name"] for c in containers(deployments[n])
                 for p in c.get("ports", [])}
        for ep in pm["podMetricsEndpoints"]:
            if ep["port"] not in names:
                raise Failure(f"{overlay}: {n} has no port {ep['port']}")
    hpa = by_kind["HorizontalPodAutoscaler"][0]["spec"]
    if hpa["scaleTargetRef"]["name"] not in deployments:
        raise Failure(f"{overlay}: HPA targets {hpa['scaleTargetRef']}")
    adapter = yaml.safe_load(ADAPTER.read_text())["rules"]
    served = {"Pods": {r["name"]["as"] for r in adapter["custom"]},
              "External": {r["name"]["as"] for r in adapter["external"]}}
    kinds = set()
    for m in hpa["metrics"]:
        kinds.add(m["type"])
        if m["type"] in served:
            key = m["type"].lower()
            metric = m[key]["metric"]["name"]
            if metric not in served[m["type"]]:
                raise Failure(f"{overlay}: HPA metric {metric} is not served "
                              f"by the prometheus-adapter rules")
    if "External" not in kinds:
        raise Failure(f"{overlay}: HPA is not driven by requests waiting")


def check_kustomize():
    """Both overlays pass the structural checks, rendered by kubectl when
    present and always by the built-in resolver (so the fallback that runs
    where kubectl is absent is itself exercised); both render the same
    objects."""
    out = []
    for overlay in OVERLAYS:
        renders = [(kustomize_builtin(OVERLAYS[overlay]), "built-in")]
        if tool("kubectl"):
            renders.append((render(overlay)[0], "kubectl"))
        for docs, how in renders:
            deployments, by_kind = check_workloads(docs, overlay)
            check_wiring(deployments, by_kind, overlay)
        # (kustomize appends a content hash to generated ConfigMap names.)
        kinds = [sorted((d["kind"], re.sub(r"-[a-z0-9]{10}$", "",
                                           d["metadata"]["name"]))
                        for d in docs) for docs, _ in renders]
        if any(k != kinds[0] for k in kinds):
            raise Failure(f"{overlay}: renderers disagree: {kinds}")
        out.append(f"{overlay}: {len(renders[0][0])} objects "
                   f"({', '.join(h for _, h in renders)})")
    return "; ".join(out)


def validator_python():
    cache = pathlib.Path(os.environ.get(
        "PDSERVE_CACHE", pathlib.Path.home() / ".cache" / "pdserve"))
    venv = cache / "deploy-tools-venv" / "bin" / "python"
    return venv if venv.exists() else None


def check_schema():
    py = validator_python()
    if py is None or run([str(py), "-c", "import kubernetes_validate"]
                         ).returncode != 0:
        return skip("kubernetes-validate not installed: run "
                    "deploy/tools/setup-validators.sh")
    out = []
    for overlay in OVERLAYS:
        docs, _ = render(overlay)
        with tempfile.NamedTemporaryFile("w", suffix=".yaml",
                                         delete=False) as f:
            yaml.safe_dump_all(docs, f)
        try:
            for version in ("1.29.0", "1.33.0"):
                r = run([str(py), "-m", "kubernetes_validate", "--strict",
                         "--quiet", "-k", version, f.name])
                if r.returncode != 0:
                    raise Failure(f"{overlay} @ {version}:\n{r.stdout}"
                                  f"{r.stderr}")
        finally:
            os.unlink(f.name)
        out.append(f"{overlay}: {len(docs)} objects valid (1.29, 1.33)")
    return "; ".join(out)


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


def check_selftest():
    """The structural checks catch broken manifests: each mutation of the
    rendered gpu overlay must be refused."""
    base = kustomize_builtin(OVERLAYS["gpu"])

    def deployment(docs, name):
        return next(d for d in docs if d["kind"] == "Deployment" and
                    d["metadata"]["name"] == name)

    def container(docs, name):
        return containers(deployment(docs, name))[0]

    def set_arg(docs, name, flag, value):
        c = container(docs, name)
        c["args"] = [a for a in c["args"] if not a.startswith(f"--{flag}=")]
        if value is not None:
            c["args"].append(f"--{flag}={value}")

    mutations = {
        "no readiness probe": lambda d: container(d, "pdserve-engine").pop(
            "readinessProbe"),
        "probe on the metrics port": lambda d: container(
            d, "pdserve-frontend")["livenessProbe"]["grpc"].update(port=9400),
        "selector misses pod labels": lambda d: deployment(
            d, "pdserve-scheduler")["spec"]["selector"]["matchLabels"].update(
            tier="x"),
        "grace shorter than drain": lambda d: pod_spec(deployment(
            d, "pdserve-frontend")).update(terminationGracePeriodSeconds=20),
        "no preStop": lambda d: container(d, "pdserve-engine").pop(
            "lifecycle"),
        "metrics on loopback": lambda d: set_arg(d, "pdserve-engine", "host",
                                                 "127.0.0.1"),
        "unknown flag": lambda d: set_arg(d, "pdserve-scheduler",
                                          "no-such-flag", "1"),
        "engine address without Service": lambda d: set_arg(
            d, "pdserve-scheduler", "engine", "pdserve-engine:9999"),
        "GPU engine without a GPU": lambda d: container(
            d, "pdserve-engine")["resources"]["limits"].pop("nvidia.com/gpu"),
        "HPA metric not served": lambda d: next(
            x for x in d if x["kind"] == "HorizontalPodAutoscaler")["spec"][
            "metrics"][0]["external"]["metric"].update(name="other"),
        "PodMonitor port missing": lambda d: next(
            x for x in d if x["kind"] == "PodMonitor")["spec"][
            "podMetricsEndpoints"][0].update(port="http"),
    }
    caught = []
    for what, mutate in mutations.items():
        docs = copy.deepcopy(base)
        mutate(docs)
        try:
            deployments, by_kind = check_workloads(docs, "gpu")
            check_wiring(deployments, by_kind, "gpu")
        except Failure:
            caught.append(what)
            continue
        except (KeyError, StopIteration):
            raise Failure(f"mutation {what!r} crashed the checks")
        if what == "unknown flag" and declared_flags("scheduler") is None:
            caught.append(what)  # nothing to check against yet
            continue
        raise Failure(f"mutation not caught: {what}")
    return f"{len(caught)} broken variants refused"


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
