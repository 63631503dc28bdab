#!/usr/bin/env python3
"""Generates server/tokenizer/unicode_data.cc from the Unicode database.

The reference tokenizers (PyPI `tokenizers` 0.23) classify characters
(Oniguruma regexes) by Unicode 16.0, which is newer than the standard
library's unicodedata of Python 3.11 (14.0); the backport package pins it.
Their NFC normaliser (the crate unicode-normalization-alignments), however,
carries older tables: marks and composites added since (U+07FD, U+0C3C,
U+0D3B, ...) have combining class 0 and no decomposition there. Model
vocabularies were built with that normaliser, so with --reference-nfc the
script asks the installed `tokenizers` how it treats every code point that
has a combining class or a canonical decomposition in Unicode 16, and keeps
NFC data only where the reference agrees:

    python3 -m venv V && V/bin/pip install unicodedata2==16.0.0 tokenizers==0.23.3
    V/bin/python tests/tools/tokenizer_gen_unicode_tables.py --reference-nfc \
        > server/tokenizer/unicode_data.cc

(Without unicodedata2 the script falls back to the standard library's
unicodedata and says so in the generated header.)

Tables (all sorted, compact):
  kFlagRuns      run-length code point classes: (start << 8 | flags) where a
                 run extends to the next entry's start. Flags: letter (\\p{L}),
                 number (\\p{N}), white space (\\s = White_Space),
                 "NFC-unsafe" (the character may change under NFC: nonzero
                 combining class, NFC_Quick_Check No or Maybe), and mark
                 (\\p{M}, for the Qwen3.5 pre-tokenizer).
  kCccRuns       (start, end, combining class) for nonzero classes.
  kDecomp        (code point, first, second) single-level canonical
                 decompositions (second = 0 for singletons), Hangul excluded;
                 bit 31 of second marks primary composites (the pair
                 composes back to the code point under NFC).
"""
import sys

try:
    import unicodedata2 as unicodedata
except ImportError:  # pragma: no cover - older tables, see the docstring
    import unicodedata

MAX = 0x110000
LETTER, NUMBER, SPACE, NFC_UNSAFE, MARK = 1, 2, 4, 8, 16

# The White_Space property (PropList.txt); stable since Unicode 6.
WHITE_SPACE = set(range(0x09, 0x0E)) | {0x20, 0x85, 0xA0, 0x1680} | set(
    range(0x2000, 0x200B)) | {0x2028, 0x2029, 0x202F, 0x205F, 0x3000}

SBASE, LBASE, VBASE, TBASE = 0xAC00, 0x1100, 0x1161, 0x11A7
SCOUNT = 11172


def is_hangul(cp):
    return SBASE <= cp < SBASE + SCOUNT


def canonical_decomp(cp):
    d = unicodedata.decomposition(chr(cp))
    if not d or d.startswith('<'):
        return None
    return [int(x, 16) for x in d.split()]


def reference_nfc_filters():
    """What the reference normaliser knows, probed through `tokenizers`.

    Returns (has_ccc, has_decomp): predicates on a code point that has a
    nonzero combining class / a canonical decomposition in Unicode 16.
    A combining class is probed by reordering: "x" + U+0345 (class 240) + c
    becomes "x" + c + U+0345 exactly when 0 < class(c) < 240. U+0345 itself
    is the only class-240 mark and dates from Unicode 1.1. A decomposition
    is probed by normalising the character to NFD.
    """
    from tokenizers import normalizers
    nfc, nfd = normalizers.NFC(), normalizers.NFD()

    def has_ccc(cp):
        if cp == 0x345:
            return True
        probe = 'x\u0345' + chr(cp)
        return nfc.normalize_str(probe) != probe

    def has_decomp(cp):
        return nfd.normalize_str(chr(cp)) != chr(cp)

    return has_ccc, has_decomp


def main():
    if '--reference-nfc' in sys.argv[1:]:
        has_ccc, has_decomp = reference_nfc_filters()
        nfc_source = 'combining classes and decompositions as the reference' \
                     ' tokenizers\n// normaliser knows them'
    else:
        has_ccc = has_decomp = lambda cp: True
        nfc_source = ''

    def combining(cp):
        k = unicodedata.combining(chr(cp))
        return k if k and has_ccc(cp) else 0

    decomp = {}
    compose = {}
    second_of_pair = set()
    for cp in range(MAX):
        if is_hangul(cp) or 0xD800 <= cp < 0xE000:
            continue
        d = canonical_decomp(cp)
        if d is None or not has_decomp(cp):
            continue
        assert len(d) <= 2, hex(cp)
        decomp[cp] = d
        if len(d) == 2 and unicodedata.normalize('NFC', chr(d[0]) + chr(d[1])) == chr(cp):
            compose[(d[0], d[1])] = cp
            second_of_pair.add(d[1])

    flags = [0] * MAX
    for cp in range(MAX):
        if 0xD800 <= cp < 0xE000:
            continue
        c = chr(cp)
        cat = unicodedata.category(c)
        f = 0
        if cat[0] == 'L':
            f |= LETTER
        if cat[0] == 'N':
            f |= NUMBER
        if cat[0] == 'M':
            f |= MARK
        if cp in WHITE_SPACE:
            f |= SPACE
        if (combining(cp) != 0 or cp in second_of_pair or
                (unicodedata.normalize('NFC', c) != c and has_decomp(cp)) or
                (VBASE <= cp < VBASE + 21) or (TBASE < cp < TBASE + 28)):
            f |= NFC_UNSAFE
        flags[cp] = f

    runs = []
    prev = None
    for cp in range(MAX):
        if flags[cp] != prev:
            runs.append((cp, flags[cp]))
            prev = flags[cp]

    ccc = []
    for cp in range(MAX):
        k = combining(cp) if not 0xD800 <= cp < 0xE000 else 0
        if k:
            if ccc and ccc[-1][1] == cp - 1 and ccc[-1][2] == k:
                ccc[-1][1] = cp
            else:
                ccc.append([cp, cp, k])

    out = sys.stdout
    out.write('// GENERATED by tests/tools/tokenizer_gen_unicode_tables.py from Python\n')
    out.write('// %s (Unicode %s). Do not edit by hand.\n' %
              (unicodedata.__name__, unicodedata.unidata_version))
    if nfc_source:
        out.write('// NFC: %s\n// (--reference-nfc).\n' % nfc_source)
    out.write('#include "server/tokenizer/unicode_data.h"\n\n')
    out.write('namespace pdserve::unicode_data {\n\n')
    out.write('const char kUnicodeVersion[] = "%s";\n\n' % unicodedata.unidata_version)

    def emit(name, ctype, rows, per_line):
        out.write('const %s %s[] = {\n' % (ctype, name))
        for i in range(0, len(rows), per_line):
            out.write('    ' + ', '.join(rows[i:i + per_line]) + ',\n')
        out.write('};\n')
        out.write('const int %sSize = %d;\n\n' % (name, len(rows)))

    def second(cp, d):
        if len(d) < 2:
            return 0
        return d[1] | (0x80000000 if compose.get((d[0], d[1])) == cp else 0)

    emit('kFlagRuns', 'uint32_t', ['0x%x' % (s << 8 | f) for s, f in runs], 12)
    emit('kCccRuns', 'CccRun', ['{0x%x, 0x%x, %d}' % tuple(r) for r in ccc], 5)
    emit('kDecomp', 'Decomposition',
         ['{0x%x, 0x%x, 0x%x}' % (cp, d[0], second(cp, d))
          for cp, d in sorted(decomp.items())], 4)
    out.write('}  // namespace pdserve::unicode_data\n')


if __name__ == '__main__':
    main()
