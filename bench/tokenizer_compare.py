#!/usr/bin/env python3
"""Tokenizer encode throughput (MB/s, one thread): pdserve vs PyPI `tokenizers`.

    python3 -m venv V && V/bin/pip install tokenizers
    cmake --build BUILD --target tokenizer_bench
    V/bin/python bench/tokenizer_compare.py --bench BUILD/bench/tokenizer_bench \
        [--tokenizer ../shared/tokenizers/qwen3/tokenizer.json] [--mb 2]

Generates a deterministic mixed English / code / CJK corpus (seeded; nothing
committed) cut into documents of about --doc-kb KB, encodes each document
separately (as a server encodes requests) with both implementations on the
same vocabulary, checks the ids are identical and prints both figures and the
ratio as JSON. The encode of the whole corpus as one string is reported too.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import tempfile
import time

os.environ.setdefault('RAYON_NUM_THREADS', '1')
os.environ.setdefault('TOKENIZERS_PARALLELISM', 'false')

WORDS = ("the of and to in is was for that with as on by at from it an be this "
         "which or are have had not but were they their one all there been has "
         "when who will more no if out so said what up its about into than them "
         "can only other new some could time these two may then do first any my "
         "now such like our over man me even most made after also did many before "
         "must through back years where much your way well down should because "
         "each just those people how too little state good very make world still "
         "own see men work long get here between both life being under never day "
         "same another know while last might us great old year off come since "
         "against go came right used take three Mr. U.S. it's don't we'll I'm "
         "server latency token request stream scheduler memory bandwidth").split()
IDENTS = ("x y i j n k buf len size count value result data node ptr ctx req "
          "tokens batch pos mask cache pool step logits weights out tmp").split()
CJK = ("的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生"
       "会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文"
       "无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与"
       "高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很"
       "业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内"
       "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよ"
       "アイウエオカキクケコサシスセソタチツテト한국어데이터모델토큰")
CJK_PUNCT = "，。、！？：；「」（）"


def english(rng):
    words = [rng.choice(WORDS) for _ in range(rng.randint(6, 22))]
    words[0] = words[0].capitalize()
    if rng.random() < 0.3:
        words.insert(rng.randint(1, len(words) - 1), str(rng.randint(0, 100000)))
    return ' '.join(words) + rng.choice('..........?!;:') + rng.choice(['  ', ' ', '\n', '\n\n'])


def code(rng):
    a, b, c = (rng.choice(IDENTS) for _ in range(3))
    n = rng.randint(0, 4096)
    forms = [
        f"    for (int {a} = 0; {a} < {b}.size(); ++{a}) {{\n      {c}[{a}] += {n} * {b}[{a}];\n    }}\n",
        f"def {a}_{b}({c}, *args, **kwargs):\n    return [{c}[i] ** 2 for i in range({n})]\n\n",
        f"  if ({a} != nullptr && {b}->{c} >= 0x{n:04X}) return absl::InvalidArgumentError(\"{a}\");\n",
        f"{a}_{b} = {{'{c}': {n}, \"{a}\": [{n % 7}, {n % 13}], 'ok': True}}  # {b}\n",
        f"\t{a}.{b}({c}); // TODO({a}): {n}\n",
    ]
    return rng.choice(forms)


def cjk(rng):
    s = ''.join(rng.choice(CJK) for _ in range(rng.randint(8, 40)))
    return s + rng.choice(CJK_PUNCT) + ('\n' if rng.random() < 0.2 else '')


def corpus(min_bytes, seed=20240601):
    rng = random.Random(seed)
    parts, size = [], 0
    while size < min_bytes:
        r = rng.random()
        block = ''.join((english if r < 0.45 else code if r < 0.8 else cjk)(rng)
                        for _ in range(rng.randint(1, 6)))
        parts.append(block)
        size += len(block.encode('utf-8'))
    return ''.join(parts)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument('--bench', required=True, help='path to the tokenizer_bench binary')
    ap.add_argument('--tokenizer', default=os.path.join(
        here, '..', '..', 'shared', 'tokenizers', 'qwen3', 'tokenizer.json'))
    ap.add_argument('--mb', type=float, default=2.0)
    ap.add_argument('--iters', type=int, default=5)
    ap.add_argument('--doc-kb', type=float, default=4.0)
    args = ap.parse_args()

    text = corpus(int(args.mb * 1e6))
    data = text.encode('utf-8')
    step = max(1, int(args.doc_kb * 1000))
    docs = [text[i:i + step] for i in range(0, len(text), step)]
    with tempfile.TemporaryDirectory() as tmp:
        corpus_path = os.path.join(tmp, 'docs.json')
        ids_path = os.path.join(tmp, 'ids.txt')
        with open(corpus_path, 'w', encoding='utf-8') as f:
            json.dump(docs, f, ensure_ascii=False)
        run = subprocess.run([args.bench, '--tokenizer', args.tokenizer, '--corpus',
                              corpus_path, '--iters', str(args.iters), '--ids-out', ids_path],
                             check=True, capture_output=True, text=True)
        ours = json.loads(run.stdout.strip().splitlines()[-1])
        with open(ids_path) as f:
            our_ids = [int(x) for x in f.read().split()]

    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(args.tokenizer)
    times = []
    ref_ids = []
    for i in range(args.iters + 1):
        ids = []
        t = time.perf_counter()
        for d in docs:
            ids.extend(tok.encode(d, add_special_tokens=False).ids)
        dt = time.perf_counter() - t
        if i > 0:
            times.append(dt)
        ref_ids = ids
    t = time.perf_counter()
    tok.encode(text, add_special_tokens=False)
    whole_s = time.perf_counter() - t
    mb = len(data) / 1e6
    ref_mb_s = mb / statistics.median(times)
    result = {
        'corpus_bytes': len(data),
        'docs': len(docs),
        'tokenizer': os.path.basename(args.tokenizer),
        'pdserve_encode_mb_s': ours['encode_mb_s'],
        'tokenizers_encode_mb_s': round(ref_mb_s, 2),
        'ratio': round(ours['encode_mb_s'] / ref_mb_s, 2),
        'whole_string_ratio': round(ours['encode_whole_mb_s'] / (mb / whole_s), 2),
        'ids_identical': our_ids == ref_ids,
        'tokens': len(ref_ids),
        'pdserve': ours,
    }
    print(json.dumps(result))


if __name__ == '__main__':
    main()
