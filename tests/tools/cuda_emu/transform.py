#!/usr/bin/env python3
"""Rewrites a CUDA source for the CPU emulation (see README.md).

Every `K<<<grid, block[, smem[, stream]]>>>(args)` launch becomes
`::emu::Launch(grid, block, smem, stream, K, args)` and every
`extern __shared__ T x[];` becomes a pointer into the emulator's dynamic
shared-memory buffer. The result is compiled by g++ with emu.h force-included.

Usage: transform.py INPUT.cu [OUTPUT.cc]   (stdout without OUTPUT)
"""
import pathlib
import re
import sys

LAUNCH = re.compile(r'([A-Za-z_][\w:]*(?:<[^<>;]*>)?)\s*<<<')
SHARED = re.compile(r'extern __shared__ (?:__align__\(\d+\) )?(\w[\w ]*?) (\w+)\[\];')


def rewrite_launches(src):
    out = []
    i = 0
    while True:
        m = LAUNCH.search(src, i)
        if not m:
            out.append(src[i:])
            return ''.join(out)
        out.append(src[i:m.start()])
        kernel = m.group(1)
        j = src.index('>>>', m.end())
        cfg = re.split(r',(?![^()]*\))', src[m.end():j])
        cfg += ['0'] * (4 - len(cfg))
        k = src.index('(', j)
        depth, e = 0, k
        while True:  # the matching ')' of the argument list
            if src[e] == '(':
                depth += 1
            elif src[e] == ')':
                depth -= 1
                if depth == 0:
                    break
            e += 1
        out.append('::emu::Launch(%s, %s, %s)' %
                   (', '.join(cfg), kernel, src[k + 1:e]))
        i = e + 1


def main():
    src = pathlib.Path(sys.argv[1]).read_text()
    s = rewrite_launches(src)
    s = SHARED.sub(r'\1* \2 = reinterpret_cast<\1*>(::emu::dyn_smem);', s)
    s = '#line 1 "%s"\n%s' % (sys.argv[1], s)
    if len(sys.argv) > 2:
        out = pathlib.Path(sys.argv[2])
        if not out.exists() or out.read_text() != s:
            out.write_text(s)
    else:
        sys.stdout.write(s)


if __name__ == '__main__':
    main()
