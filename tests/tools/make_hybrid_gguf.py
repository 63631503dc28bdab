#!/usr/bin/env python3
"""Converts the tiny hybrid HF fixtures to GGUF with llama.cpp's own converter.

The GGUF files are what tests/engine/hybrid_gguf_test.cc loads: their logits
must match the transformers goldens of the HF fixtures (made by
make_hybrid_fixtures.py) and the HF-loaded model's.

The converter is the REAL one: convert_hf_to_gguf.py (+ its conversion/
package and the vendored gguf-py) from the llama-cpp-python source
distribution on PyPI, downloaded into a temp dir with
  pip download --no-deps --no-binary :all: llama-cpp-python==VERSION
and run with --outtype f32 --no-mtp (the tiny models have no MTP block; the
converter asserts one exists otherwise; --mmproj runs take no MTP flag). Nothing of llama.cpp is committed.

One deviation from a plain command-line run, for the vocabulary only: the
fixtures carry no tokenizer (their 80 token ids are arbitrary), and the
converter's Qwen vocab path needs a Hugging Face tokenizer whose pre-tokenizer
hash it knows. So the converter's TextModel.set_vocab is replaced by its own
_set_vocab_none (tokenizer.ggml.model = "none") plus gguf.SpecialVocab, which
copies bos/eos ids from config.json. Metadata keys and tensors are written by
the unmodified converter code.

Fixtures written (tests/data/hybrid/; small, committed):
  tiny_qwen35.gguf            from tiny_qwen35/       (arch qwen35)
  tiny_qwen3_next.gguf        from tiny_qwen3_next/   (arch qwen3next)
  tiny_qwen3_next_fused.gguf  from tiny_qwen3_next/ with --fuse-qkv
                              --fuse-gate-up-exps (full-attention attn_qkv,
                              ffn_gate_up_exps)
  ../vision/tiny_qwen35_vl.mmproj.gguf
                              from ../vision/tiny_qwen35_vl/ with --mmproj:
                              the vision tower as llama.cpp's mtmd loads it
                              (projector qwen3vl_merger); the vision tests
                              compare its encoder outputs with the goldens

Checked with llama-cpp-python 0.3.36 (its gguf-py is 0.19.0, as the gguf
package on PyPI); both architectures are supported by that converter.

Environment: the reference venv (torch, numpy, safetensors, sentencepiece):
  . tests/tools/pyref_env.sh
  /opt/pyref/venv/bin/python tests/tools/make_hybrid_gguf.py [--version V]
      [--sdist FILE.tar.gz] [--keep DIR] [--only OUT.gguf ...]
"""

import argparse
import glob
import os
import subprocess
import sys
import tarfile
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data", "hybrid")
DEFAULT_VERSION = "0.3.36"

# Runs inside a fresh interpreter: argv[1] = llama.cpp dir, the rest are the
# converter's own arguments.
DRIVER = r"""
import sys
llama = sys.argv[1]
sys.path.insert(0, llama)
sys.argv = ["convert_hf_to_gguf.py"] + sys.argv[2:]
import convert_hf_to_gguf as conv
import gguf
from conversion.base import TextModel

def set_vocab_none(self):
    self._set_vocab_none()
    gguf.SpecialVocab(self.dir_model, load_merges=False,
                      n_vocab=self.hparams["vocab_size"]).add_to_gguf(
                          self.gguf_writer)

TextModel.set_vocab = set_vocab_none
conv.main()
"""

JOBS = [
    ("tiny_qwen35", "tiny_qwen35.gguf", []),
    ("tiny_qwen3_next", "tiny_qwen3_next.gguf", []),
    ("tiny_qwen3_next", "tiny_qwen3_next_fused.gguf",
     ["--fuse-qkv", "--fuse-gate-up-exps"]),
    ("../vision/tiny_qwen35_vl", "../vision/tiny_qwen35_vl.mmproj.gguf",
     ["--mmproj"]),
]


def fetch_sdist(version, dest):
    spec = "llama-cpp-python" + (f"=={version}" if version != "latest" else "")
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                    "--no-binary", ":all:", "-q", "-d", dest, spec],
                   check=True)
    found = glob.glob(os.path.join(dest, "llama_cpp_python-*.tar.gz"))
    if not found:
        raise SystemExit(f"no llama_cpp_python sdist downloaded into {dest}")
    return found[0]


def extract_llama_cpp(sdist, dest):
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers()
                   if "/vendor/llama.cpp/" in m.name and
                   ("/convert_hf_to_gguf.py" in m.name or
                    "/conversion/" in m.name or "/gguf-py/" in m.name)]
        tar.extractall(dest, members=members, filter="data")
    found = glob.glob(os.path.join(dest, "*", "vendor", "llama.cpp"))
    if not found:
        raise SystemExit(f"{sdist} has no vendor/llama.cpp")
    return found[0]


def gguf_py_version(llama):
    with open(os.path.join(llama, "gguf-py", "pyproject.toml")) as f:
        for line in f:
            if line.startswith("version"):
                return line.split("=", 1)[1].strip().strip('"')
    return "?"


def check_supported(llama):
    with open(os.path.join(llama, "gguf-py", "gguf", "constants.py")) as f:
        constants = f.read()
    for arch in ("qwen35", "qwen3next"):
        if f'"{arch}"' not in constants:
            raise SystemExit(f"this converter does not know arch {arch}")


def convert(llama, src, out, extra):
    name = os.path.basename(src)
    mtp = [] if "--mmproj" in extra else ["--no-mtp"]
    args = [sys.executable, "-c", DRIVER, llama, os.path.join(DATA, src),
            "--outtype", "f32", *mtp, "--model-name", name,
            "--outfile", os.path.normpath(os.path.join(DATA, out))] + extra
    subprocess.run(args, check=True, cwd=llama)
    print(f"{out}: {os.path.getsize(os.path.join(DATA, out))} bytes")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--version", default=DEFAULT_VERSION,
                    help="llama-cpp-python version, or 'latest'")
    ap.add_argument("--sdist", help="an already downloaded sdist")
    ap.add_argument("--keep", help="extract here instead of a temp dir")
    ap.add_argument("--only", nargs="*", default=[],
                    help="write only these outputs (file names)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or tmp
        sdist = args.sdist or fetch_sdist(args.version, work)
        llama = extract_llama_cpp(sdist, work)
        check_supported(llama)
        print(f"converter: {os.path.basename(sdist)}, "
              f"gguf-py {gguf_py_version(llama)}")
        for src, out, extra in JOBS:
            if args.only and os.path.basename(out) not in args.only:
                continue
            convert(llama, src, out, extra)


if __name__ == "__main__":
    main()
