#!/usr/bin/env python3
"""Differential fuzz: pdserve's encoder against the PyPI `tokenizers` package.

    python3 -m venv V && V/bin/pip install tokenizers
    cmake --build BUILD --target tokenizer_bench
    V/bin/python tests/tools/tokenizer_fuzz_vs_reference.py --bench BUILD/bench/tokenizer_bench \
        [--tokenizer ../shared/tokenizers/qwen3/tokenizer.json] [--seed 1] [--docs 3000]

Random documents mix ASCII, exotic whitespace, contraction letters (and
U+017F), combining marks, CJK, Hangul jamo and any code point of any plane;
each is encoded separately by both and the first mismatch is printed. A
developer tool (not a CI test): the fixed fixtures under tests/data/tokenizer
are what CI checks.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile


def random_doc(rng):
    def cp():
        r = rng.random()
        if r < 0.4:
            return chr(rng.randint(0x20, 0x7e))
        if r < 0.5:
            return rng.choice(" \t\n\r\x0b\x0c\x85\xa0\u2028\u3000\u2003\u200b")
        if r < 0.55:
            return rng.choice("'sStTrReEvVmMlLdD\u017f")
        if r < 0.65:
            return chr(rng.randint(0x300, 0x36f))
        if r < 0.75:
            return chr(rng.randint(0x4e00, 0x9fff))
        if r < 0.8:
            return chr(rng.randint(0x1100, 0x11ff))
        while True:
            c = rng.randint(0x80, 0x10ffff)
            if not 0xd800 <= c < 0xe000:
                return chr(c)
    return ''.join(cp() for _ in range(rng.randint(0, 50)))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument('--bench', required=True)
    ap.add_argument('--tokenizer', default=os.path.join(
        here, '..', '..', '..', 'shared', 'tokenizers', 'qwen3', 'tokenizer.json'))
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--docs', type=int, default=3000)
    args = ap.parse_args()
    from tokenizers import Tokenizer
    rng = random.Random(args.seed)
    docs = [random_doc(rng) for _ in range(args.docs)]
    tok = Tokenizer.from_file(args.tokenizer)
    ref = [tok.encode(d, add_special_tokens=False).ids for d in docs]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, 'docs.json')
        ids_path = os.path.join(tmp, 'ids.txt')
        with open(path, 'w') as f:
            json.dump(docs, f)
        subprocess.run([args.bench, '--tokenizer', args.tokenizer, '--corpus', path,
                        '--iters', '1', '--ids-out', ids_path],
                       check=True, capture_output=True)
        with open(ids_path) as f:
            ours = [int(x) for x in f.read().split()]
    pos = 0
    for d, r in zip(docs, ref):
        if ours[pos:pos + len(r)] != r:
            print('MISMATCH', repr(d), r, ours[pos:pos + len(r)], sep='\n')
            return 1
        pos += len(r)
    print('identical: %d documents, %d tokens' % (len(docs), len(ours)))
    return 0 if pos == len(ours) else 1


if __name__ == '__main__':
    sys.exit(main())
