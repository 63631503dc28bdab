#!/usr/bin/env python3
"""The import graph of pdserve, read from the #include lines of the product
sources: no folder includes a folder above it, and the pure scheduling
policy library reaches no file IO, environment or JSON.

Layers, top first (a file may include its own layer and those below):
  server/cli   the `pdserve` binary
  server       front end, HTTP, tokenizer, chat templates
  scheduler    the policy and its gRPC shell
  engine       model, KV, backends, EngineCore, the engine service
  kernels      CPU kernels (and the CUDA plugin)
  proto        generated API code and the gRPC helpers
  common       shared process plumbing: metrics, signals, status macros
  config       the configuration door
The one exception: the CUDA plugin (kernels/cuda/) implements the engine's
backend interface, so it may include engine/ headers.

Usage: check_layering.py SOURCE_DIR   (exit 0 = clean; 1 = violations listed)
"""
import pathlib
import re
import sys

RANKS = [("server/cli", 7), ("server", 6), ("scheduler", 5), ("engine", 4),
         ("kernels", 3), ("proto", 2), ("pdserve/v1", 2), ("grpc/health", 2),
         ("common", 1), ("config", 0)]
PRODUCT = ["server", "scheduler", "engine", "kernels", "proto", "common",
           "config"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# The policy library's sources, with the KV ledger it links
# (pdserve_kv_ledger), and what they may not touch.
POLICY_SOURCES = ["scheduler/policy.h", "scheduler/policy.cc",
                  "engine/kv/kv_ledger.h", "engine/kv/kv_ledger.cc",
                  "engine/kv/page_allocator.h", "engine/kv/page_allocator.cc",
                  "engine/kv/prefix_cache.h", "engine/kv/prefix_cache.cc",
                  "engine/kv/sequence_id.h"]
PURE_INCLUDES = {"scheduler/policy.h", "engine/kv/kv_ledger.h",
                 "engine/kv/page_allocator.h", "engine/kv/prefix_cache.h",
                 "engine/kv/sequence_id.h"}
POLICY_FORBIDDEN = re.compile(
    r'<fstream>|<cstdio>|<stdio\.h>|<filesystem>|nlohmann/|\bgetenv\b|'
    r'\bfopen\b|\bifstream\b|\bofstream\b|\bstd::chrono\b|<chrono>|<thread>|'
    r'<mutex>')


def rank(path):
    for prefix, r in RANKS:
        if path == prefix or path.startswith(prefix + "/"):
            return prefix, r
    return None, None


def violations(root):
    out = []
    for folder in PRODUCT:
        for f in sorted((root / folder).rglob("*")):
            if f.suffix not in (".h", ".cc", ".cu", ".cuh"):
                continue
            rel = f.relative_to(root).as_posix()
            src_layer, src_rank = rank(rel)
            for inc in INCLUDE.findall(f.read_text(errors="replace")):
                dst_layer, dst_rank = rank(inc)
                if dst_rank is None or dst_rank <= src_rank:
                    continue
                if rel.startswith("kernels/cuda/") and inc.startswith(
                        "engine/"):
                    continue  # the plugin implements engine/backend
                out.append(f"{rel} ({src_layer}) includes {inc} "
                           f"({dst_layer}, a layer above)")
    # The policy library: its sources and its CMake target.
    for rel in POLICY_SOURCES:
        text = (root / rel).read_text()
        for m in POLICY_FORBIDDEN.finditer(text):
            out.append(f"{rel}: the pure policy uses {m.group(0)}")
        for inc in INCLUDE.findall(text):
            if not (inc.startswith("absl/") or inc in PURE_INCLUDES):
                out.append(f"{rel}: the pure policy includes {inc}")
    cmake = (root / "scheduler" / "policy.cmake").read_text()
    block = re.search(r"target_link_libraries\(pdserve_scheduler_policy(.*?)\)",
                      cmake, re.S)
    if block is None:
        out.append("scheduler/policy.cmake: no pdserve_scheduler_policy links")
    elif re.search(r"nlohmann|pdserve_config|pdserve_proto|grpc|prometheus|"
                   r"pdserve_kv\b", block.group(1)):
        out.append("scheduler/policy.cmake: pdserve_scheduler_policy links "
                   f"more than pure code:{block.group(1)}")
    return out


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    bad = violations(root)
    for v in bad:
        print(v)
    if bad:
        print(f"{len(bad)} layering violation(s)")
        return 1
    print("layering: clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
