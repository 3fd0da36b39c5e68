import json,sys
off=int(sys.argv[1],16); d=sys.argv[2]
names={0:"first stamp (overhead)",1:"charge_vtime (registered)",2:"prio_stopping+cpu_cur",3:"region look-up",4:"job_stopping",5:"end_request (on a request)",10:"end_request (no request)",6:"overdue+still_bound",9:"charge_vtime (unregistered)"}
def arr(f):
    v=json.load(open(f))[0]["value"]; b=bytes(int(x,16) for x in v)
    return [int.from_bytes(b[off+8*i:off+8*i+8],'little') for i in range(32)]
for r in (1,2):
    a=arr(f"{d}/bss-{r}-after.json"); b=arr(f"{d}/bss-{r}-before.json")
    x=[p-q for p,q in zip(a,b)]
    print(f"round {r}:")
    for i in sorted(names):
        c=x[16+i]
        if c: print(f"  {names[i]}: n {c} insns {x[i]/c/32:.1f}")
