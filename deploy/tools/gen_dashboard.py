#!/usr/bin/env python3
"""Writes deploy/monitoring/grafana/pdserve.json, the pdserve Grafana
dashboard (schema 39, Grafana 10/11): latency percentiles, throughput,
memory bandwidth, KV pool, queue and errors. Panels are declared below so
queries stay reviewable; the JSON is committed.

    python3 deploy/tools/gen_dashboard.py          # write
    python3 deploy/tools/gen_dashboard.py --check  # exit 1 if stale
"""
import json
import pathlib
import sys

TARGET = (pathlib.Path(__file__).resolve().parent.parent / "monitoring" /
          "grafana" / "pdserve.json")
DS = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'namespace=~"$namespace"'
RI = "$__rate_interval"


def quantiles(metric, extra=""):
    """p50 / p90 / p99 targets of a histogram."""
    out = []
    for q in ("0.5", "0.9", "0.99"):
        out.append((f"histogram_quantile({q}, sum by (le) "
                    f"(rate({metric}_bucket{{{SEL}{extra}}}[{RI}])))",
                    f"p{int(float(q) * 100)}"))
    return out


# (title, unit, [(expr, legend)], width, kind)
ROWS = [
    ("Latency", [
        ("Time to first token", "s",
         quantiles("pdserve_frontend_time_to_first_token_seconds"), 8, "ts"),
        ("Inter-token latency", "s",
         quantiles("pdserve_frontend_inter_token_latency_seconds"), 8, "ts"),
        ("End-to-end request time", "s",
         quantiles("pdserve_frontend_request_duration_seconds"), 8, "ts"),
        ("Queue / prefill / decode time per request (p90)", "s", [
            (f"histogram_quantile(0.9, sum by (le) (rate({m}_bucket{{{SEL}}}"
             f"[{RI}])))", legend)
            for m, legend in (
                ("pdserve_frontend_request_queue_seconds", "queue"),
                ("pdserve_frontend_request_prefill_seconds", "prefill"),
                ("pdserve_frontend_request_decode_seconds", "decode"))
        ], 12, "ts"),
        ("Engine step duration p99 by kind", "s", [
            (f"histogram_quantile(0.99, sum by (le, kind) (rate("
             f"pdserve_engine_step_duration_seconds_bucket{{{SEL}}}[{RI}])))",
             "{{kind}}")
        ], 12, "ts"),
    ]),
    ("Throughput", [
        ("Tokens per second", "short", [
            (f"sum by (kind) (rate(pdserve_engine_tokens_total{{{SEL}}}[{RI}]))",
             "engine {{kind}}"),
            (f"sum(rate(pdserve_frontend_generation_tokens_total{{{SEL}}}"
             f"[{RI}]))", "streamed to clients"),
        ], 12, "ts"),
        ("Requests per second by status", "reqps", [
            (f"sum by (code) (rate(pdserve_frontend_requests_total{{{SEL}}}"
             f"[{RI}]))", "{{code}}"),
        ], 12, "ts"),
        ("Mean batch size by step kind", "short", [
            (f"sum by (kind) (rate(pdserve_engine_batch_size_sum{{{SEL}}}[{RI}]))"
             f" / sum by (kind) (rate(pdserve_engine_batch_size_count{{{SEL}}}"
             f"[{RI}]))", "{{kind}}"),
        ], 12, "ts"),
        ("Achieved FLOP/s", "short", [
            (f"sum(rate(pdserve_engine_flop_total{{{SEL}}}[{RI}])) / "
             f"sum(rate(pdserve_engine_step_duration_seconds_sum{{{SEL}}}"
             f"[{RI}]))", "achieved"),
            (f"max(pdserve_engine_peak_flop_per_second{{{SEL}}}) > 0", "peak"),
        ], 12, "ts"),
    ]),
    ("Memory bandwidth", [
        ("Achieved memory bandwidth", "Bps", [
            (f"sum(rate(pdserve_engine_memory_bytes_total{{{SEL}}}[{RI}])) / "
             f"sum(rate(pdserve_engine_step_duration_seconds_sum{{{SEL}}}"
             f"[{RI}]))", "mean over steps"),
            (f"max(pdserve_engine_peak_memory_bandwidth_bytes_per_second"
             f"{{{SEL}}})", "peak ({{source}})"),
            (f"histogram_quantile(0.5, sum by (le) (rate("
             f"pdserve_engine_step_memory_bandwidth_bytes_per_second_bucket"
             f"{{{SEL},kind=\"decode\"}}[{RI}])))", "decode step p50"),
        ], 12, "ts"),
        ("Bandwidth utilisation (achieved / peak)", "percentunit", [
            (f"(sum(rate(pdserve_engine_memory_bytes_total{{{SEL}}}[{RI}])) / "
             f"sum(rate(pdserve_engine_step_duration_seconds_sum{{{SEL}}}"
             f"[{RI}]))) / max(pdserve_engine_peak_memory_bandwidth_bytes_per_"
             f"second{{{SEL}}})", "mean"),
            (f"max(pdserve_engine_memory_bandwidth_utilization_ratio{{{SEL}}})",
             "last step"),
        ], 6, "ts"),
        ("Bytes moved per second by kind", "Bps", [
            (f"sum by (kind) (rate(pdserve_engine_memory_bytes_total{{{SEL}}}"
             f"[{RI}]))", "{{kind}}"),
        ], 6, "ts"),
    ]),
    ("KV pool and queue", [
        ("KV pool usage", "percentunit", [
            (f"max by (pod) (pdserve_engine_kv_usage_ratio{{{SEL}}})",
             "{{pod}}"),
        ], 6, "gauge"),
        ("KV tokens", "short", [
            (f"sum(pdserve_engine_kv_used_tokens{{{SEL}}})", "used"),
            (f"sum(pdserve_engine_kv_capacity_tokens{{{SEL}}})", "capacity"),
            (f"sum(pdserve_engine_active_sequences{{{SEL}}})", "sequences"),
        ], 6, "ts"),
        ("Queue depth", "short", [
            (f"sum(pdserve_scheduler_requests_waiting{{{SEL}}})", "waiting"),
            (f"sum(pdserve_scheduler_requests_running{{{SEL}}})", "running"),
            (f"sum(pdserve_frontend_requests_in_flight{{{SEL}}})",
             "in flight (front ends)"),
        ], 6, "ts"),
        ("Prefix cache hit rate (prompt tokens)", "percentunit", [
            (f"sum(rate(pdserve_engine_prefix_cache_hits_total{{{SEL}}}[{RI}]))"
             f" / sum(rate(pdserve_engine_prefix_cache_queries_total{{{SEL}}}"
             f"[{RI}]))", "hits / queries"),
            (f"sum(pdserve_engine_kv_cached_pages{{{SEL}}}) / "
             f"sum(pdserve_engine_kv_capacity_pages{{{SEL}}})",
             "cached share of the pool"),
        ], 6, "ts"),
        ("Preemptions, admissions, cancellations", "ops", [
            (f"sum(rate(pdserve_scheduler_admissions_total{{{SEL}}}[{RI}]))",
             "admissions"),
            (f"sum(rate(pdserve_scheduler_preemptions_total{{{SEL}}}[{RI}]))",
             "preemptions"),
            (f"sum(rate(pdserve_scheduler_cancellations_total{{{SEL}}}"
             f"[{RI}]))", "cancellations"),
        ], 6, "ts"),
    ]),
    ("Errors", [
        ("Failed requests by status", "reqps", [
            (f"sum by (code) (rate(pdserve_frontend_requests_total{{{SEL},"
             f"code!=\"OK\"}}[{RI}]))", "{{code}}"),
        ], 8, "ts"),
        ("Server error ratio", "percentunit", [
            (f"sum(rate(pdserve_frontend_requests_total{{{SEL},code=~\"UNKNOWN|"
             f"INTERNAL|UNAVAILABLE|DATA_LOSS|DEADLINE_EXCEEDED|UNIMPLEMENTED\"}}"
             f"[{RI}])) / sum(rate(pdserve_frontend_requests_total{{{SEL}}}"
             f"[{RI}]))", "errors / all"),
        ], 8, "ts"),
        ("Rejections by reason", "reqps", [
            (f"sum by (reason) (rate(pdserve_scheduler_rejections_total{{{SEL}}}"
             f"[{RI}]))", "{{reason}}"),
        ], 8, "ts"),
        ("Stream write stalls and tokenizer time", "short", [
            (f"sum(rate(pdserve_frontend_stream_write_stalls_total{{{SEL}}}"
             f"[{RI}]))", "write stalls/s"),
            (f"histogram_quantile(0.99, sum by (le, op) (rate("
             f"pdserve_frontend_tokenizer_seconds_bucket{{{SEL}}}[{RI}])))",
             "tokenizer p99 {{op}} (s)"),
        ], 12, "ts"),
        ("Processes ready", "short", [
            (f"sum by (process) (pdserve_ready{{{SEL}}})", "{{process}}"),
        ], 12, "ts"),
        ("Crash recovery: losses, resumed and lost streams", "short", [
            (f"sum(increase(pdserve_scheduler_engine_losses_total{{{SEL}}}"
             f"[{RI}]))", "engine losses"),
            (f"sum(increase(pdserve_scheduler_resumed_requests_total{{{SEL}}}"
             f"[{RI}]))", "resumed (engine lost)"),
            (f"sum(increase(pdserve_frontend_resubmitted_requests_total"
             f"{{{SEL}}}[{RI}]))", "resubmitted (scheduler lost)"),
            (f"sum(increase(pdserve_scheduler_unrecovered_requests_total"
             f"{{{SEL}}}[{RI}]))", "lost"),
        ], 12, "ts"),
        ("Crash recovery time and recomputed tokens", "short", [
            (f"histogram_quantile(0.99, sum by (le) (rate("
             f"pdserve_scheduler_engine_recovery_seconds_bucket{{{SEL}}}"
             f"[{RI}])))", "recovery p99 (s)"),
            (f"sum(rate(pdserve_scheduler_recomputed_tokens_total{{{SEL}}}"
             f"[{RI}]))", "recomputed tokens/s"),
        ], 12, "ts"),
    ]),
]


def panel(pid, title, unit, targets, width, kind, x, y):
    refs = "ABCDEFGH"
    p = {
        "id": pid,
        "type": "timeseries" if kind == "ts" else "gauge",
        "title": title,
        "datasource": DS,
        "gridPos": {"h": 8, "w": width, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
        "targets": [{"datasource": DS, "refId": refs[i], "expr": expr,
                     "legendFormat": legend}
                    for i, (expr, legend) in enumerate(targets)],
    }
    if kind == "gauge":
        p["fieldConfig"]["defaults"].update({"min": 0, "max": 1})
        p["options"] = {"reduceOptions": {"calcs": ["lastNotNull"]}}
    return p


def dashboard():
    panels, pid, y = [], 1, 0
    for row_title, row_panels in ROWS:
        panels.append({"id": pid, "type": "row", "title": row_title,
                       "collapsed": False, "panels": [],
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}})
        pid, y, x = pid + 1, y + 1, 0
        for title, unit, targets, width, kind in row_panels:
            if x + width > 24:
                x, y = 0, y + 8
            panels.append(panel(pid, title, unit, targets, width, kind, x, y))
            pid, x = pid + 1, x + width
        y += 8
    return {
        "title": "pdserve",
        "uid": "pdserve-overview",
        "description": "pdserve LLM serving: latency, throughput, memory "
                       "bandwidth, KV pool, queue and errors.",
        "tags": ["pdserve", "llm"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "timezone": "browser",
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus",
             "label": "Data source", "current": {}},
            {"name": "namespace", "type": "query", "datasource": DS,
             "label": "Namespace", "includeAll": True, "multi": True,
             "allValue": ".*", "refresh": 2,
             "query": {"query": "label_values(pdserve_build_info, namespace)",
                       "refId": "namespace"},
             "definition": "label_values(pdserve_build_info, namespace)",
             "current": {"text": "All", "value": "$__all"}},
        ]},
        "annotations": {"list": []},
        "panels": panels,
    }


def main():
    text = json.dumps(dashboard(), indent=2, sort_keys=False) + "\n"
    if "--check" in sys.argv[1:]:
        have = TARGET.read_text() if TARGET.exists() else ""
        if have != text:
            print(f"{TARGET} is stale: run {sys.argv[0]}", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
