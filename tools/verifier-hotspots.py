#!/usr/bin/env python3
"""Where a BPF program's verifier walk spent its instructions.

Reads a level-2 verifier log written by `scx_tailctl --verifier-log DIR`
(DIR/tailctl_dispatch.log) and attributes every processed instruction to the
source line it came from and to the C function around that line, so a walk
near the verifier's million-instruction limit can be traced to the code
that multiplies its states.

    tools/verifier-hotspots.py DIR/tailctl_dispatch.log [--source bpf/main.bpf.c] [--top 25] [--json]

The log names a source line (`; code @ main.bpf.c:123`) only where it
changes, so each instruction index takes the last line named before it;
global subprograms are walked on their own ("Validating f() func#N") and
reported as separate sections. The count is of printed instructions, close to
(9% under, in a 7.3 log) the verifier's own `processed` figure printed beside
it, which is the one to compare against the limit.

>>> log = '''func#0 @0
... subprog#1: analyzing (depth 0)...
... 2: (b7) r0 = 2
... 0: R1=ctx() R10=fp0
... ; int x = 1; @ main.bpf.c:3
... 0: (b7) r0 = 0
... 1: (95) exit
... from 0 to 1: R0=0
... 1: (95) exit
... Validating helper() func#1...
... ; return 2; @ main.bpf.c:9
... 2: (b7) r0 = 2
... processed 4 insns (limit 1000000) max_states_per_insn 1'''.splitlines()
>>> w = walk(log)
>>> w["total"], w["reported"]
(4, 4)
>>> sorted(w["by_section"].items())
[('helper', 1), ('main', 3)]
>>> sorted(w["by_line"].items())
[(('helper', ('main.bpf.c', 9)), 1), (('main', ('main.bpf.c', 3)), 3)]
>>> functions_of(["static int f(void)", "{", "\\treturn 0;", "}", "__noinline int g(int a)", "{"])
[(1, 'f'), (5, 'g')]
"""
import argparse
import collections
import json
import re
import sys

INSN = re.compile(r"^(\d+): \(")
LINE = re.compile(r"^; .* @ ([\w.]+):(\d+)$")
VALIDATING = re.compile(r"^Validating (\w+)\(\) func#\d+")
PROCESSED = re.compile(r"^processed (\d+) insns")
ANALYSING = re.compile(r"^subprog#\d+: analyzing")
STATE = re.compile(r"^\d+: R\d+=")
FUNC = re.compile(r"^(?:static\s+)?(?:__always_inline\s+|__noinline\s+|inline\s+)*[\w ]+?\**\s*\b(\w+)\s*\(")
BPF_PROG = re.compile(r"^\w+\s+BPF_STRUCT_OPS(?:_SLEEPABLE)?\((\w+)")


def walk(lines):
    """Counts processed instructions per section and per (section, source line)."""
    section = "main"
    line_of = {}
    last_line = None
    by_section = collections.Counter()
    by_line = collections.Counter()
    reported = None
    # 7.x prints a liveness pass over each subprogram ("subprog#N:
    # analyzing") before the walk, which starts with a state line
    # ("0: R1=ctx() R10=fp0"): its instructions are not the walk's.
    analysing = False
    for raw in lines:
        raw = raw.rstrip("\n")
        if ANALYSING.match(raw):
            analysing = True
            continue
        if analysing and STATE.match(raw):
            analysing = False
        m = VALIDATING.match(raw)
        if m:
            section, last_line, analysing = m.group(1), None, False
            continue
        m = LINE.match(raw)
        if m:
            last_line = (m.group(1), int(m.group(2)))
            continue
        m = INSN.match(raw)
        if m:
            if analysing:
                continue
            idx = int(m.group(1))
            if last_line is not None:
                line_of.setdefault(idx, last_line)
                last_line = None
            elif idx not in line_of and idx - 1 in line_of:
                # Not named: the same line as the instruction before it.
                line_of[idx] = line_of[idx - 1]
            src = line_of.get(idx)
            by_section[section] += 1
            by_line[(section, src)] += 1
            continue
        m = PROCESSED.match(raw)
        if m:
            reported = int(m.group(1))
    return {
        "total": sum(by_section.values()),
        "reported": reported,
        "by_section": by_section,
        "by_line": by_line,
    }


def functions_of(source_lines):
    """(first line, name) of each function definition at column 0, in order."""
    out = []
    for i, text in enumerate(source_lines, 1):
        if text[:1] in ("", " ", "\t", "#", "/", "*", "{", "}"):
            continue
        m = BPF_PROG.match(text) or (FUNC.match(text) if "(" in text and not text.rstrip().endswith(";") else None)
        if m:
            out.append((i, m.group(1)))
    return out


def enclosing(funcs, line):
    """The function whose definition starts last before `line`."""
    name = "?"
    for start, f in funcs:
        if start > line:
            break
        name = f
    return name


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log")
    ap.add_argument("--source", default="bpf/main.bpf.c")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    with open(a.log, errors="replace") as f:
        w = walk(f)
    try:
        with open(a.source) as f:
            src = f.read().splitlines()
    except OSError:
        src = []
    funcs = functions_of(src)
    source_name = a.source.rsplit("/", 1)[-1]

    def where(loc):
        # Lines of other files (helpers inlined from the scx headers) are named by file.
        if not loc:
            return "?"
        f, line = loc
        return enclosing(funcs, line) if f == source_name else f

    by_func = collections.Counter()
    for (section, loc), n in w["by_line"].items():
        by_func[(section, where(loc))] += n
    if a.json:
        json.dump({
            "total": w["total"], "reported": w["reported"],
            "by_section": dict(w["by_section"].most_common()),
            "by_function": [{"section": s, "function": f, "insns": n} for (s, f), n in by_func.most_common(a.top)],
            "by_line": [{"section": s, "file": l[0] if l else None, "line": l[1] if l else None, "insns": n}
                        for (s, l), n in w["by_line"].most_common(a.top)],
        }, sys.stdout, indent=1)
        print()
        return
    print(f"processed {w['total']} instructions in the log (the verifier reported {w['reported']})")
    print("\nby walk (the program, then each global subprogram):")
    for s, n in w["by_section"].most_common():
        print(f"  {n:>9}  {s}")
    print(f"\nby function (inlined code counts in the function it comes from, under the walk that ran it), top {a.top}:")
    for (s, f), n in by_func.most_common(a.top):
        print(f"  {n:>9}  {s}: {f}")
    print(f"\nby source line, top {a.top}:")
    for (s, loc), n in w["by_line"].most_common(a.top):
        f, line = loc if loc else ("?", 0)
        text = src[line - 1].strip() if f == source_name and 0 < line <= len(src) else ""
        print(f"  {n:>9}  {s}: {f}:{line}  {text[:70]}")


if __name__ == "__main__":
    main()
