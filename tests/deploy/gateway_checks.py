"""Checks of the gateway overlay (deploy/kubernetes/overlays/gateway): the
InferencePool of the Gateway API Inference Extension, its endpoint picker
(EPP) and the HTTPRoute, against the cells they route to. Used by
k8s_checks.py (structure, self-test) and check_schema (API schemas)."""
import copy
import re

from common import NAMES_H, Failure, containers, flag_value

POOL_GROUP = "inference.networking.k8s.io"
EPP_METRIC_FLAGS = ("total-queued-requests-metric",
                    "total-running-requests-metric",
                    "kv-cache-usage-percentage-metric")
# The names the picker reads when its flags are not given (its defaults).
EPP_METRIC_DEFAULTS = {
    "total-queued-requests-metric": "vllm:num_requests_waiting",
    "total-running-requests-metric": "vllm:num_requests_running",
    "kv-cache-usage-percentage-metric": "vllm:kv_cache_usage_perc",
}


def _selects(selector, doc):
    labels = doc["spec"]["template"]["metadata"]["labels"]
    return all(labels.get(k) == v for k, v in selector.items())


def _one(by_kind, kind, name=None):
    docs = [d for d in by_kind.get(kind, [])
            if name is None or d["metadata"]["name"] == name]
    if len(docs) != 1:
        raise Failure(f"gateway: {len(docs)} {kind} objects"
                      f"{f' named {name}' if name else ''}, want 1")
    return docs[0]


def is_pdserve(container):
    """Whether a container runs the pdserve image (any registry and tag)."""
    image = container.get("image", "").split(":")[0]
    return image.rsplit("/", 1)[-1] == "pdserve"


def vllm_gauges():
    """The vLLM-compatible names common/metrics/metric_names.h exports."""
    return set(re.findall(r'"(vllm:[a-z_]+)"', NAMES_H.read_text()))


def check_gateway(deployments, by_kind):
    """The pool selects exactly the cells and targets their front ends' HTTP
    port; the picker watches that pool, answers on the port the pool names,
    may read pods and pools, and scrapes a cell scheduler that exports the
    gauges it scores by; the route's backend is the pool."""
    pool = _one(by_kind, "InferencePool")
    spec = pool["spec"]
    name, namespace = pool["metadata"]["name"], pool["metadata"].get(
        "namespace")
    members = [d for d in deployments.values()
               if _selects(spec["selector"]["matchLabels"], d)]
    if [d["metadata"]["name"] for d in members] != ["pdserve-cell"]:
        raise Failure(f"gateway: InferencePool {name} selects "
                      f"{[d['metadata']['name'] for d in members]}, not the "
                      f"cells")
    cell = members[0]
    for port in spec["targetPorts"]:
        serving = [c for c in containers(cell) if is_pdserve(c) and
                   flag_value(c["args"], "http-port") == str(port["number"])]
        if not serving:
            raise Failure(f"gateway: pool target port {port['number']} is no "
                          f"front end's --http-port in the cell pod")
    epp = check_picker(spec["endpointPickerRef"], deployments, by_kind)
    args = next(c for c in containers(epp) if not is_pdserve(c))["args"]
    for flag, want, required in (("pool-name", name, True),
                                 ("pool-namespace", namespace, True),
                                 ("pool-group", POOL_GROUP, False)):
        got = flag_value(args, flag)
        if (got is None and required) or (got is not None and got != want):
            raise Failure(f"gateway: picker --{flag}={got}, pool has {want}")
    check_scrape(args, spec, cell)
    routed = [ref for r in _one(by_kind, "HTTPRoute")["spec"]["rules"]
              for ref in r.get("backendRefs", [])
              if ref.get("group") == POOL_GROUP and
              ref.get("kind") == "InferencePool" and ref["name"] == name]
    if not routed:
        raise Failure(f"gateway: no HTTPRoute rule sends to InferencePool "
                      f"{name}")


def check_picker(ref, deployments, by_kind):
    """The Service the pool's endpointPickerRef names selects the picker,
    whose gRPC port is the one named; returns the picker's workload."""
    if ref.get("kind", "Service") != "Service" or ref.get("group", ""):
        raise Failure(f"gateway: endpointPickerRef {ref} is not a Service")
    svc = _one(by_kind, "Service", ref["name"])
    chosen = [d for d in deployments.values()
              if _selects(svc["spec"]["selector"], d)]
    if len(chosen) != 1:
        raise Failure(f"gateway: Service {ref['name']} selects "
                      f"{[d['metadata']['name'] for d in chosen]}")
    epp = chosen[0]
    c = next((c for c in containers(epp) if not is_pdserve(c)), None)
    if c is None:
        raise Failure(f"gateway: {epp['metadata']['name']} runs no picker")
    ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    target = next((p["targetPort"] for p in svc["spec"]["ports"]
                   if p["port"] == ref["port"]["number"]), None)
    grpc = int(flag_value(c["args"], "grpc-port") or 9002)
    if ports.get(target, target) != grpc:
        raise Failure(f"gateway: picker Service port {ref['port']['number']} "
                      f"reaches {ports.get(target, target)}, the picker "
                      f"serves on --grpc-port {grpc}")
    health = int(flag_value(c["args"], "grpc-health-port") or 9003)
    for probe in ("livenessProbe", "readinessProbe"):
        if c.get(probe, {}).get("grpc", {}).get("port") != health:
            raise Failure(f"gateway: picker {probe} is not on its gRPC "
                          f"health port {health}")
    account = epp["spec"]["template"]["spec"].get("serviceAccountName")
    check_rbac(account, by_kind)
    return epp


def check_rbac(account, by_kind):
    """The picker's ServiceAccount is bound to a Role that lets it get, list
    and watch pods and InferencePools."""
    _one(by_kind, "ServiceAccount", account)
    granted = set()
    for binding in by_kind.get("RoleBinding", []):
        if not any(s["kind"] == "ServiceAccount" and s["name"] == account
                   for s in binding.get("subjects", [])):
            continue
        role = _one(by_kind, binding["roleRef"]["kind"],
                    binding["roleRef"]["name"])
        for rule in role["rules"]:
            if {"get", "list", "watch"} <= set(rule["verbs"]):
                granted |= {(g, r) for g in rule["apiGroups"]
                            for r in rule["resources"]}
    for need in (("", "pods"), (POOL_GROUP, "inferencepools")):
        if need not in granted:
            raise Failure(f"gateway: picker account {account} may not "
                          f"get/list/watch {need[1]}")


def check_scrape(args, spec, cell):
    """The port the picker scrapes is a cell scheduler's metrics port, run
    with --vllm-metrics (it exports the queue gauges and the KV usage), and
    every metric the picker reads is one pdserve exports."""
    port = flag_value(args, "model-server-metrics-port") or str(
        spec["targetPorts"][0]["number"])
    owner = [c for c in containers(cell)
             if is_pdserve(c) and flag_value(c["args"], "metrics-port") == port]
    if not owner or owner[0]["args"][0] != "scheduler":
        raise Failure(f"gateway: the picker scrapes port {port}, not a cell "
                      f"scheduler's --metrics-port")
    if "--vllm-metrics" not in owner[0]["args"]:
        raise Failure("gateway: the cell scheduler runs without "
                      "--vllm-metrics: the picker would find no gauges")
    exported = vllm_gauges()
    for flag in EPP_METRIC_FLAGS:
        metric = flag_value(args, flag) or EPP_METRIC_DEFAULTS[flag]
        if metric not in exported:
            raise Failure(f"gateway: picker --{flag}={metric} is not a "
                          f"metric pdserve exports ({sorted(exported)})")


def gateway_mutations(find, cell):
    """Broken variants of the gateway overlay the checks must refuse."""
    def epp(docs):
        return containers(find(docs, "Deployment", "pdserve-epp"))[0]

    def set_arg(c, flag, value):
        c["args"] = [a for a in c["args"] if not a.startswith(f"--{flag}=")]
        if value is not None:
            c["args"].append(f"--{flag}={value}")

    def pool(docs):
        return find(docs, "InferencePool", "pdserve")["spec"]

    def drop_rule(docs, resource):
        role = find(docs, "Role", "pdserve-epp")
        role["rules"] = [r for r in role["rules"]
                         if resource not in r["resources"]]

    return {
        "pool selects the front ends": lambda d: pool(d)["selector"][
            "matchLabels"].update({"app.kubernetes.io/component": "frontend"}),
        "pool targets no HTTP port": lambda d: pool(d)["targetPorts"][
            0].update(number=8001),
        "picker watches another pool": lambda d: set_arg(
            epp(d), "pool-name", "other"),
        "picker scrapes the engine": lambda d: set_arg(
            epp(d), "model-server-metrics-port", "9402"),
        "scheduler without vLLM gauges": lambda d: cell(d, "scheduler").update(
            args=[a for a in cell(d, "scheduler")["args"]
                  if a != "--vllm-metrics"]),
        "picker reads an unexported gauge": lambda d: set_arg(
            epp(d), "kv-cache-usage-percentage-metric",
            "vllm:gpu_cache_usage_perc"),
        "picker reference on its metrics port": lambda d: pool(d)[
            "endpointPickerRef"]["port"].update(number=9090),
        "picker may not read pods": lambda d: drop_rule(d, "pods"),
        "route to another pool": lambda d: find(d, "HTTPRoute", "pdserve")[
            "spec"]["rules"][0]["backendRefs"][0].update(name="other"),
        "no front end in the cell": lambda d: pod_containers_drop(
            find(d, "StatefulSet", "pdserve-cell"), "frontend"),
    }


def pod_containers_drop(doc, name):
    spec = doc["spec"]["template"]["spec"]
    spec["containers"] = [c for c in spec["containers"] if c["name"] != name]


# ------------------------------------------------------------- schemas ---
# The v1 API as the extension's reference documents it (the CRD itself is
# not available offline): required fields, types, bounds and enums, and no
# other properties (as kubernetes-validate --strict treats core objects).

_NAME = {"type": "string", "minLength": 1, "maxLength": 253,
         "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}
_PORT = {"type": "object", "additionalProperties": False,
         "required": ["number"],
         "properties": {"number": {"type": "integer", "minimum": 1,
                                   "maximum": 65535}}}
_METADATA = {"type": "object", "required": ["name"],
             "properties": {"name": _NAME, "namespace": _NAME,
                            "labels": {"type": "object",
                                       "additionalProperties":
                                       {"type": "string"}},
                            "annotations": {"type": "object"}}}

INFERENCE_POOL_V1 = {
    "type": "object", "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": f"{POOL_GROUP}/v1"},
        "kind": {"const": "InferencePool"},
        "metadata": _METADATA,
        "spec": {
            "type": "object", "additionalProperties": False,
            "required": ["selector", "targetPorts", "endpointPickerRef"],
            "properties": {
                "selector": {
                    "type": "object", "additionalProperties": False,
                    "required": ["matchLabels"],
                    "properties": {"matchLabels": {
                        "type": "object", "minProperties": 1,
                        "maxProperties": 64,
                        "additionalProperties": {"type": "string",
                                                 "maxLength": 63}}}},
                "targetPorts": {"type": "array", "minItems": 1,
                                "maxItems": 8, "uniqueItems": True,
                                "items": _PORT},
                "appProtocol": {"enum": ["http", "kubernetes.io/h2c"]},
                "endpointPickerRef": {
                    "type": "object", "additionalProperties": False,
                    "required": ["name"],
                    "properties": {
                        "group": {"type": "string", "maxLength": 253},
                        "kind": {"type": "string", "minLength": 1,
                                 "maxLength": 63},
                        "name": _NAME,
                        "port": _PORT,
                        "failureMode": {"enum": ["FailOpen", "FailClose"]}},
                    # A Service reference (the default kind) needs its port.
                    "if": {"not": {"properties": {"kind": {
                        "not": {"const": "Service"}}}, "required": ["kind"]}},
                    "then": {"required": ["name", "port"]}}}}}}

_BACKEND_REF = {
    "type": "object", "additionalProperties": False, "required": ["name"],
    "properties": {"group": {"type": "string"}, "kind": {"type": "string"},
                   "name": _NAME, "namespace": _NAME,
                   "port": {"type": "integer", "minimum": 1,
                            "maximum": 65535},
                   "weight": {"type": "integer", "minimum": 0,
                              "maximum": 1000000}}}
_DURATION = {"type": "string",
             "pattern": r"^([0-9]{1,5}(h|m|s|ms)){1,4}$"}

# gateway.networking.k8s.io/v1 HTTPRoute: the fields this overlay uses.
HTTP_ROUTE_V1 = {
    "type": "object", "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "gateway.networking.k8s.io/v1"},
        "kind": {"const": "HTTPRoute"},
        "metadata": _METADATA,
        "spec": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "parentRefs": {"type": "array", "maxItems": 32,
                               "items": _BACKEND_REF},
                "hostnames": {"type": "array", "items": {"type": "string"}},
                "rules": {"type": "array", "maxItems": 16, "items": {
                    "type": "object", "additionalProperties": False,
                    "properties": {
                        "matches": {"type": "array", "maxItems": 64,
                                    "items": {
                            "type": "object", "additionalProperties": False,
                            "properties": {"path": {
                                "type": "object",
                                "additionalProperties": False,
                                "properties": {
                                    "type": {"enum": [
                                        "Exact", "PathPrefix",
                                        "RegularExpression"]},
                                    "value": {"type": "string",
                                              "maxLength": 1024}}}}}},
                        "backendRefs": {"type": "array", "maxItems": 16,
                                        "items": _BACKEND_REF},
                        "timeouts": {
                            "type": "object", "additionalProperties": False,
                            "properties": {"request": _DURATION,
                                           "backendRequest": _DURATION}}}}}}}}}

SCHEMAS = {("inference.networking.k8s.io/v1", "InferencePool"):
           INFERENCE_POOL_V1,
           ("gateway.networking.k8s.io/v1", "HTTPRoute"): HTTP_ROUTE_V1}


def schema_errors(docs, validator_class):
    """Messages for every gateway object that breaks its schema; the
    validator class is jsonschema's (imported by the caller's interpreter).
    Also checks that the schemas refuse known-bad variants."""
    out = []
    for doc in docs:
        schema = SCHEMAS.get((doc.get("apiVersion"), doc.get("kind")))
        if schema is None:
            continue
        for e in validator_class(schema).iter_errors(doc):
            out.append(f"{doc['kind']} {doc['metadata']['name']}: "
                       f"{'/'.join(map(str, e.absolute_path))}: {e.message}")
    pools = [d for d in docs if d.get("kind") == "InferencePool"]
    if pools:
        for what, mutate in {
            "nine target ports": lambda s: s.update(targetPorts=[
                {"number": 8000 + i} for i in range(9)]),
            "port 0": lambda s: s["targetPorts"][0].update(number=0),
            "Service ref without port": lambda s: s[
                "endpointPickerRef"].pop("port"),
            "unknown field": lambda s: s.update(targetPortNumber=8000),
            "bad failure mode": lambda s: s["endpointPickerRef"].update(
                failureMode="Open"),
        }.items():
            bad = copy.deepcopy(pools[0])
            mutate(bad["spec"])
            if validator_class(INFERENCE_POOL_V1).is_valid(bad):
                out.append(f"the InferencePool schema accepts: {what}")
    return out
