import json,sys
off=int(sys.argv[1],16); d=sys.argv[2]
def arr(f):
    v=json.load(open(f))[0]["value"]; b=bytes(int(x,16) for x in v)
    return [int.from_bytes(b[off+8*i:off+8*i+8],'little') for i in range(24)]
for r in (1,2):
    a=arr(f"{d}/bss-{r}-after.json"); b=arr(f"{d}/bss-{r}-before.json")
    x=[p-q for p,q in zip(a,b)]
    n=x[0]; ins=lambda t,c: t/c/32 if c else 0
    print(f"round {r}: ticks {n}; ktime pair {ins(x[1],n):.1f} insn; region {ins(x[2],n):.1f}; job {ins(x[3],n):.1f}; current_request {ins(x[4],n):.1f}")
    print(f"  stay {x[5]} ({x[5]/n:.0%}): acct_of+charge {ins(x[6],x[5]):.1f}")
    for k,name in enumerate(["none->none","none->tag","tag->none","tag->tag"]):
        c=x[8+k]
        print(f"  switch {name}: {c} ({c/n:.0%}) end {ins(x[12+k],c):.1f} begin {ins(x[16+k],c):.1f}")
if len(sys.argv) > 3:
    off2=int(sys.argv[3],16)
    def arr2(f):
        v=json.load(open(f))[0]["value"]; b=bytes(int(x,16) for x in v)
        return [int.from_bytes(b[off2+8*i:off2+8*i+8],'little') for i in range(32)]
    for r in (1,2):
        a=arr2(f"{d}/bss-{r}-after.json"); b=arr2(f"{d}/bss-{r}-before.json")
        x=[p-q for p,q in zip(a,b)]
        print(f"round {r} begin/end segments (insns incl. one ktime pair):")
        for i in range(16):
            c=x[16+i]
            if c: print(f"  seg {i}: n {c} cost {x[i]/c/32:.1f}")
