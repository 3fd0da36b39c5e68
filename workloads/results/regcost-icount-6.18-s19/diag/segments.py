#!/usr/bin/env python3
"""Per-step instruction counts from a stamped scratch build's .bss arrays.

    segments.py tick OFFSET DIR [OFFSET2]   the tick's parts (diag[24] at OFFSET)
                                            and, with OFFSET2, begin/end steps (diagb[32])
    segments.py stopping OFFSET DIR         the stopping's parts (diag[32] at OFFSET)

OFFSET: the array's offset in .bss (hex, from `llvm-objdump -t` of the build's
bpf.bpf.o); DIR: diag-guest.sh's output (bss-R-before/after.json for rounds 1, 2).
Under --icount 5 a guest nanosecond is 1/32 instruction.
"""
import json
import sys

STOPPING = {0: "first stamp (overhead)", 1: "charge_vtime (registered)", 2: "prio_stopping+cpu_cur",
            3: "region look-up", 4: "job_stopping", 5: "end_request (on a request)",
            10: "end_request (no request)", 6: "overdue+still_bound", 9: "charge_vtime (unregistered)"}


def deltas(d, r, off, n):
    """Round r's after - before of the n u64s at .bss offset off."""
    def words(f):
        b = bytes(int(x, 16) for x in json.load(open(f))[0]["value"])
        return [int.from_bytes(b[off + 8 * i:off + 8 * i + 8], "little") for i in range(n)]
    return [p - q for p, q in zip(words(f"{d}/bss-{r}-after.json"), words(f"{d}/bss-{r}-before.json"))]


def ins(t, c):
    return t / c / 32 if c else 0


def main():
    kind, off, d = sys.argv[1], int(sys.argv[2], 16), sys.argv[3]
    for r in (1, 2):
        if kind == "stopping":
            x = deltas(d, r, off, 32)
            print(f"round {r}:")
            for i in sorted(STOPPING):
                if x[16 + i]:
                    print(f"  {STOPPING[i]}: n {x[16 + i]} insns {ins(x[i], x[16 + i]):.1f}")
            continue
        x = deltas(d, r, off, 24)
        n = x[0]
        print(f"round {r}: ticks {n}; ktime pair {ins(x[1], n):.1f} insn; region {ins(x[2], n):.1f}; "
              f"job {ins(x[3], n):.1f}; current_request {ins(x[4], n):.1f}")
        print(f"  stay {x[5]} ({x[5] / n:.0%}): acct_of+charge {ins(x[6], x[5]):.1f}")
        for k, name in enumerate(["none->none", "none->tag", "tag->none", "tag->tag"]):
            c = x[8 + k]
            print(f"  switch {name}: {c} ({c / n:.0%}) end {ins(x[12 + k], c):.1f} begin {ins(x[16 + k], c):.1f}")
        if len(sys.argv) > 4:
            y = deltas(d, r, int(sys.argv[4], 16), 32)
            print(f"round {r} begin/end segments (insns incl. one ktime pair):")
            for i in range(16):
                if y[16 + i]:
                    print(f"  seg {i}: n {y[16 + i]} cost {ins(y[i], y[16 + i]):.1f}")


if __name__ == "__main__":
    main()
