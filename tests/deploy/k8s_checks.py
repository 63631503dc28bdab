"""Kubernetes checks of deploy/: kustomize rendering (kubectl or a built-in
resolver), structural checks of the rendered objects, API schema validation
and a self-test that broken variants are refused. Used by check_deploy.py."""
import copy
import os
import pathlib
import re
import tempfile

import yaml

from common import (ADAPTER, OVERLAYS, ROOT, WORKLOADS, Failure,  # noqa: F401
                    containers, flag_value, load_yaml_docs, pod_spec, run,
                    skip, tool)
from gateway_checks import check_gateway, gateway_mutations, is_pdserve


# ----------------------------------------------------------- kustomize ---

def kustomize_builtin(directory):
    """Minimal kustomize: resources (files and directories), namespace,
    images, strategic-merge patches by kind+name (lists of named items merge
    by name; `$patch: delete` removes the object), configMapGenerator files
    (no hash suffix)."""
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
            if p.get("$patch") == "delete":
                docs = [d for d in docs if not any(d is t for t in targets)]
                continue
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


# Rows of the flag tables (config/process_flags.cc): Str("name", ...),
# Int(...), Real(...), Bool(...) or {{"name", FlagType::k..., ...}.
FLAG_RE = re.compile(r'\b(?:Str|Int|Real|Bool)\(\s*"([a-z][a-z0-9-]*)"|'
                     r'\{\s*"([a-z][a-z0-9-]*)"\s*,\s*FlagType::k')
# Functions that build rows or tables: EngineFlagTable(), MakeEngineFlags(),
# AppendMetricsFlags(...), MetricsPortFlag().
FN_RE = re.compile(r"\b(\w+Flag(?:s|Table)?)\(")


def flag_names(text):
    return {a or b for a, b in FLAG_RE.findall(text)}


def declared_flags(command):
    """Flags `pdserve <command>` declares, or None while its source is not
    there yet: the flag-table rows reached from server/cli/<command>_command.cc
    through the functions it calls (EngineFlagTable() -> MakeEngineFlags()
    -> AppendMetricsFlags(), defined anywhere in the source tree), plus the
    --config every table has."""
    src = ROOT / "server" / "cli" / f"{command}_command.cc"
    if not src.exists():
        return None
    text = src.read_text()
    flags = flag_names(text) | {"config"}
    sources = [p.read_text(errors="replace") for p in ROOT.glob("*/**/*.cc")
               if "build" not in p.parts[len(ROOT.parts)]]
    # Flag-list functions called by the command, and those they call in
    # turn (e.g. EngineFlags() appends metrics::AppendMetricsFlags(...)).
    todo, seen = set(FN_RE.findall(text)), set()
    while todo:
        fn = todo.pop()
        seen.add(fn)
        for body in sources:
            m = re.search(rf"\b{fn}\([^)]*\)\s*\{{(.*?)\n\}}", body, re.S)
            if m:
                flags |= flag_names(m.group(1))
                todo |= set(FN_RE.findall(m.group(1))) - seen
    return flags


def named_port(ports, role):
    """The container port named `role` ("grpc", "metrics") or "<x>-role"
    (port names are unique in a pod: a second process says whose)."""
    for name, number in ports.items():
        if name == role or name.endswith("-" + role):
            return number
    return None


def check_workloads(docs, overlay):
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    deployments = {d["metadata"]["name"]: d for d in docs
                   if d["kind"] in ("Deployment", "StatefulSet")}
    for kind, name in WORKLOADS[overlay]:
        if name not in deployments or deployments[name]["kind"] != kind:
            raise Failure(f"{overlay}: {kind} {name} missing")
    extra = sorted(set(deployments) - {n for _, n in WORKLOADS[overlay]})
    if extra:
        raise Failure(f"{overlay}: unexpected workloads {extra}")
    for name, d in deployments.items():
        sel = d["spec"]["selector"]["matchLabels"]
        labels = d["spec"]["template"]["metadata"]["labels"]
        if any(labels.get(k) != v for k, v in sel.items()):
            raise Failure(f"{overlay}: {name} selector {sel} does not match "
                          f"its pod labels {labels}")
        spec = pod_spec(d)
        # (Other projects' containers, the gateway's picker: check_gateway.)
        for c in filter(is_pdserve, spec["containers"]):
            ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                g = c.get(probe, {}).get("grpc")
                if not g:
                    raise Failure(f"{overlay}: {name}/{c['name']} has no gRPC "
                                  f"{probe}")
                if g["port"] != named_port(ports, "grpc"):
                    raise Failure(f"{overlay}: {name} {probe} port {g['port']}"
                                  f" is not its grpc port "
                                  f"{named_port(ports, 'grpc')}")
            args = c.get("args", [])
            command = args[0] if args else ""
            if flag_value(args, "port") != str(named_port(ports, "grpc")):
                raise Failure(f"{overlay}: {name} --port differs from its "
                              f"grpc containerPort {named_port(ports, 'grpc')}")
            if flag_value(args, "metrics-port") != str(
                    named_port(ports, "metrics")):
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


def addresses(args):
    """(flag, address) for each address given to --scheduler (a comma list)
    and --engine."""
    out = []
    for flag in ("scheduler", "engine"):
        value = flag_value(args, flag)
        for addr in (value or "").split(","):
            if addr.strip():
                out.append((flag, addr.strip()))
    return out


def check_roles(deployments, headless, overlay):
    """Prefill/decode wiring: a prefill scheduler advertises its engine (the
    decode cells fetch hand-offs there, so not from loopback), and every
    headless Service of cells is one the front ends route over."""
    routed = {addr.removeprefix("dns:///").rpartition(":")[0]
              for d in deployments.values() for c in containers(d)
              if c["name"] == "frontend"
              for flag, addr in addresses(c.get("args", []))
              if flag == "scheduler"}
    for name, d in deployments.items():
        for c in containers(d):
            if c["name"] != "scheduler":
                continue
            args = c.get("args", [])
            role = flag_value(args, "role") or "both"
            if role not in ("both", "prefill", "decode"):
                raise Failure(f"{overlay}: {name} --role={role}")
            advertise = flag_value(args, "engine-advertise") or ""
            if role == "prefill" and (not advertise or
                                      advertise.startswith("127.")):
                raise Failure(f"{overlay}: prefill cell {name} needs an "
                              f"--engine-advertise the decode cells reach "
                              f"(got {advertise!r})")
            service = d["spec"].get("serviceName")
            if service in headless and service not in routed:
                raise Failure(f"{overlay}: no front end routes over "
                              f"{service} ({name}, role {role})")


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
    # dns:///NAME:PORT must name a headless Service (its DNS answer lists
    # the pods); 127.0.0.1:PORT a port of another container in the pod.
    headless = {s["metadata"]["name"] for s in by_kind.get("Service", [])
                if s["spec"].get("clusterIP") == "None"}
    for name, d in deployments.items():
        pod_ports = {p["containerPort"] for c in containers(d)
                     for p in c.get("ports", [])}
        for c in containers(d):
            for flag, addr in addresses(c.get("args", [])):
                dns = addr.startswith("dns:///")
                host, _, port = addr.removeprefix("dns:///").rpartition(":")
                if host == "127.0.0.1":
                    if int(port) not in pod_ports:
                        raise Failure(f"{overlay}: {name} --{flag}={addr}: no "
                                      f"container of the pod listens there")
                    continue
                if dns and host not in headless:
                    raise Failure(f"{overlay}: {name} --{flag}={addr}: "
                                  f"{host} is not a headless Service")
                if int(port) not in services.get(host, set()):
                    raise Failure(f"{overlay}: {name} --{flag}={addr} names no "
                                  f"Service port")
    check_roles(deployments, headless, overlay)
    pm = by_kind["PodMonitor"][0]["spec"]
    scraped = [n for n, d in deployments.items()
               if all(d["spec"]["template"]["metadata"]["labels"].get(k) == v
                      for k, v in pm["selector"]["matchLabels"].items())]
    ours = [n for n, d in deployments.items()
            if any(map(is_pdserve, containers(d)))]
    if sorted(scraped) != sorted(ours):
        raise Failure(f"{overlay}: PodMonitor scrapes {scraped}")
    # Every metrics port of every scraped pod is one of the endpoints.
    endpoints = {ep["port"] for ep in pm["podMetricsEndpoints"]}
    for n in scraped:
        names = {p["name"] for c in containers(deployments[n])
                 for p in c.get("ports", []) if p["name"].endswith("metrics")}
        if not names or not names <= endpoints:
            raise Failure(f"{overlay}: {n} metrics ports {sorted(names)} are "
                          f"not all scraped ({sorted(endpoints)})")
    adapter = yaml.safe_load(ADAPTER.read_text())["rules"]
    served = {"Pods": {r["name"]["as"] for r in adapter["custom"]},
              "External": {r["name"]["as"] for r in adapter["external"]}}
    for hpa_doc in by_kind["HorizontalPodAutoscaler"]:
        hpa = hpa_doc["spec"]
        ref = hpa["scaleTargetRef"]
        target = deployments.get(ref["name"])
        if target is None or target["kind"] != ref["kind"]:
            raise Failure(f"{overlay}: HPA targets {ref}")
        kinds = set()
        for m in hpa["metrics"]:
            kinds.add(m["type"])
            if m["type"] in served:
                key = m["type"].lower()
                metric = m[key]["metric"]["name"]
                if metric not in served[m["type"]]:
                    raise Failure(f"{overlay}: HPA metric {metric} is not "
                                  f"served by the prometheus-adapter rules")
        if ref["name"] == "pdserve-frontend" and "External" not in kinds:
            raise Failure(f"{overlay}: HPA is not driven by requests waiting")
    # Every workload that runs (or may scale to) more than one replica has
    # a disruption budget.
    budgets = by_kind.get("PodDisruptionBudget", [])
    scaled = {h["spec"]["scaleTargetRef"]["name"]
              for h in by_kind.get("HorizontalPodAutoscaler", [])
              if h["spec"].get("maxReplicas", 1) > 1}
    for n, d in deployments.items():
        labels = d["spec"]["template"]["metadata"]["labels"]
        many = d["spec"].get("replicas", 1) > 1 or n in scaled
        if many and not any(
                all(labels.get(k) == v for k, v in
                    b["spec"]["selector"]["matchLabels"].items())
                for b in budgets):
            raise Failure(f"{overlay}: {n} has no PodDisruptionBudget")
    if "InferencePool" in by_kind:
        check_gateway(deployments, by_kind)


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
    out.append(check_gateway_schemas(py))
    return "; ".join(out)


def check_gateway_schemas(py):
    """The gateway overlay's InferencePool and HTTPRoute against the v1
    schemas in gateway_checks (kubernetes-validate has no schema for them),
    with the validator's jsonschema."""
    docs, _ = render("gateway")
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump_all(docs, f)
    script = (
        "import sys, yaml, jsonschema\n"
        f"sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})\n"
        "from gateway_checks import schema_errors\n"
        "docs = list(yaml.safe_load_all(open(sys.argv[1])))\n"
        "errors = schema_errors(docs, jsonschema.Draft202012Validator)\n"
        "print('\\n'.join(errors))\n"
        "sys.exit(1 if errors else 0)\n")
    try:
        r = run([str(py), "-c", script, f.name])
    finally:
        os.unlink(f.name)
    if r.returncode != 0:
        raise Failure(f"gateway schemas:\n{r.stdout}{r.stderr}")
    kinds = sorted({d["kind"] for d in docs
                    if d["kind"] in ("InferencePool", "HTTPRoute")})
    return f"gateway: {', '.join(kinds)} valid (v1 reference schemas)"



def refused(base, mutate, overlay, what):
    """Whether the structural checks refuse `base` changed by `mutate`; a
    check that crashes on it fails the self-test."""
    docs = copy.deepcopy(base)
    mutate(docs)
    try:
        deployments, by_kind = check_workloads(docs, overlay)
        check_wiring(deployments, by_kind, overlay)
    except Failure:
        return True
    except (KeyError, StopIteration):
        raise Failure(f"{overlay} mutation {what!r} crashed the checks")
    return False


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
        if refused(base, mutate, "gpu", what):
            caught.append(what)
            continue
        if what == "unknown flag" and declared_flags("scheduler") is None:
            caught.append(what)  # nothing to check against yet
            continue
        raise Failure(f"mutation not caught: {what}")
    return f"{len(caught) + check_cells_mutations()} broken variants refused"


def check_cells_mutations():
    """Mutations of the rendered cells overlay that must be refused; returns
    how many were."""
    base = kustomize_builtin(OVERLAYS["cells"])

    def find(docs, kind, name):
        return next(d for d in docs if d["kind"] == kind and
                    d["metadata"]["name"] == name)

    def cell(docs, container):
        return next(c for c in containers(find(docs, "StatefulSet",
                                               "pdserve-cell"))
                    if c["name"] == container)

    def set_arg(c, flag, value):
        c["args"] = [a for a in c["args"] if not a.startswith(f"--{flag}=")]
        c["args"].append(f"--{flag}={value}")

    def frontend(docs):
        return containers(find(docs, "Deployment", "pdserve-frontend"))[0]

    mutations = {
        "dns name not headless": lambda d: find(
            d, "Service", "pdserve-cells")["spec"].pop("clusterIP"),
        "dns port not served": lambda d: set_arg(
            frontend(d), "scheduler", "dns:///pdserve-cells:9999"),
        "engine not in the pod": lambda d: set_arg(
            cell(d, "scheduler"), "engine", "127.0.0.1:9999"),
        "engine metrics not scraped": lambda d: find(
            d, "PodMonitor", "pdserve")["spec"]["podMetricsEndpoints"].pop(),
        "cell HPA on an unserved metric": lambda d: find(
            d, "HorizontalPodAutoscaler", "pdserve-cell")["spec"]["metrics"][
            0]["pods"]["metric"].update(name="other"),
        "cells without a disruption budget": lambda d: d.remove(
            find(d, "PodDisruptionBudget", "pdserve-cell")),
        "engine probe on the scheduler's port": lambda d: cell(
            d, "engine")["readinessProbe"]["grpc"].update(port=50052),
    }
    for what, mutate in mutations.items():
        if not refused(base, mutate, "cells", what):
            raise Failure(f"cells mutation not caught: {what}")
    gateway = kustomize_builtin(OVERLAYS["gateway"])
    broken = gateway_mutations(find, cell)
    for what, mutate in broken.items():
        if not refused(gateway, mutate, "gateway", what):
            raise Failure(f"gateway mutation not caught: {what}")
    return (len(mutations) + len(broken) +
            check_pd_mutations(find, set_arg, frontend))


def check_pd_mutations(find, set_arg, frontend):
    """Mutations of the rendered pd overlay that must be refused."""
    base = kustomize_builtin(OVERLAYS["pd"])

    def prefill_scheduler(docs):
        return next(c for c in containers(find(
            docs, "StatefulSet", "pdserve-prefill-cell"))
            if c["name"] == "scheduler")

    mutations = {
        "prefill engine not advertised": lambda d: prefill_scheduler(
            d).update(args=[a for a in prefill_scheduler(d)["args"]
                            if not a.startswith("--engine-advertise=")]),
        "prefill engine advertised on loopback": lambda d: set_arg(
            prefill_scheduler(d), "engine-advertise", "127.0.0.1:50053"),
        "prefill cells not routed": lambda d: set_arg(
            frontend(d), "scheduler", "dns:///pdserve-cells:50052"),
        "second source on no Service port": lambda d: set_arg(
            frontend(d), "scheduler",
            "dns:///pdserve-prefill-cells:9,dns:///pdserve-cells:50052"),
        "unknown role": lambda d: set_arg(
            prefill_scheduler(d), "role", "prefil"),
        "prefill cells without a disruption budget": lambda d: d.remove(
            find(d, "PodDisruptionBudget", "pdserve-prefill-cell")),
    }
    for what, mutate in mutations.items():
        if not refused(base, mutate, "pd", what):
            raise Failure(f"pd mutation not caught: {what}")
    return len(mutations)


