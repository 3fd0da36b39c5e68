# Operator-facing guest tests, sourced by guest-tests.sh (which provides
# start_sched/stop_sched/pass/fail, $bin, $out, $PY, $ktest).
#   maps: Debian's bpftool reads our pins with field names, and
#         `tailctl maps dump --json` agrees with `bpftool -j map dump`
#         value for value (stats, services, worker_tids, cpu_runs, registered,
#         req_acct), with a registered service serving requests.
#   top:  `tailctl top` in a tmux pseudo-terminal shows the running service
#         and its requests, reacts to its keys, and exits cleanly on q.
# Counters keep moving while we read, so a moving map is compared as a
# sandwich (bpftool before <= tailctl <= bpftool after, field by field);
# maps nobody writes at that moment are compared for equality.

tailctl_bin=$(dirname "$bin")/tailctl
pins=/sys/fs/bpf/tailctl

# Start a registered service in the background for $1 seconds; sets svc_pid.
start_service() {
  "$ktest" -w 2 serve --secs "$1" --require-kernel >"$out/serve.json" 2>"$out/serve.err" &
  svc_pid=$!
  for _ in $(seq 1 100); do
    "$tailctl_bin" maps dump services --json 2>/dev/null | grep -q "\"pid\": $svc_pid" && return 0
    kill -0 "$svc_pid" 2>/dev/null || return 1
    sleep 0.2
  done
  return 1
}

# compare_json MODE BPFTOOL_JSON TAILCTL_JSON [BPFTOOL_AFTER_JSON]: prints a
# one-line verdict; MODE is exact or sandwich.
compare_json() {
  "$PY" - "$@" <<'PY'
import json, sys
mode, bfile, tfile = sys.argv[1:4]
def formatted(path):
    # bpftool prints {"key": [hex], "value": [hex], "formatted": {...}} per
    # entry for maps with BTF; we emit the formatted part.
    return [e.get("formatted", e) for e in json.load(open(path))]
def keyed(entries):
    return {json.dumps(e["key"], sort_keys=True): e for e in entries}
b, t = keyed(formatted(bfile)), keyed(json.load(open(tfile)))
a = keyed(formatted(sys.argv[4])) if mode == "sandwich" else None
if set(b) != set(t):
    print(f"FAIL keys differ: bpftool {len(b)}, tailctl {len(t)}: {sorted(set(b) ^ set(t))[:5]}")
    sys.exit(1)
n = 0
def walk(x, y, z, path):
    global n
    if isinstance(x, dict):
        if set(x) != set(y):
            raise SystemExit(f"FAIL fields differ at {path}: {sorted(x)} vs {sorted(y)}")
        for k in x:
            walk(x[k], y[k], z[k] if z is not None else None, f"{path}.{k}")
    elif isinstance(x, list):
        if len(x) != len(y):
            raise SystemExit(f"FAIL lengths differ at {path}: {len(x)} vs {len(y)}")
        for i, (p, q) in enumerate(zip(x, y)):
            walk(p, q, z[i] if z is not None else None, f"{path}[{i}]")
    else:
        n += 1
        if mode == "exact" and x != y:
            raise SystemExit(f"FAIL {path}: bpftool {x} != tailctl {y}")
        if mode == "sandwich" and not (x <= y <= z):
            raise SystemExit(f"FAIL {path}: not bpftool-before {x} <= tailctl {y} <= bpftool-after {z}")
for k in b:
    walk(b[k], t[k], a[k] if a is not None else None, f"[{k}]")
print(f"OK {len(b)} entries, {n} values")
PY
}

test_maps() {
  command -v bpftool >/dev/null || { fail maps "bpftool is not installed"; return; }
  start_sched || { fail maps "scheduler did not load"; return; }
  local t0=$SECONDS
  start_service 300 || { fail maps "ktest serve did not register: $(tail -c 300 "$out/serve.err")"; stop_sched; return; }
  local bt="bpftool" checked=""
  # (1) Debian's bpftool on our pins: it must print our field names (BTF).
  $bt map show pinned $pins/services >"$out/bt-show.txt" 2>&1
  grep -q "name services" "$out/bt-show.txt" && grep -q "btf_id" "$out/bt-show.txt" \
    || { fail maps "bpftool map show: $(head -c 300 "$out/bt-show.txt" | tr '\n"' ' ')"; stop_sched; return; }
  local spec
  for spec in "stats:enqueues serializations max_throttle_wait_ns" \
              "services:pid uid allot nr_thresholds threshold_ns" \
              "worker_tids:service worker" \
              "cpu_runs:tag acct_idx"; do
    local m=${spec%%:*} f
    $bt map dump pinned "$pins/$m" >"$out/bt-$m.txt" 2>&1
    for f in ${spec#*:}; do
      grep -q "\"$f\"" "$out/bt-$m.txt" || { fail maps "bpftool dump $m has no field $f: $(head -c 200 "$out/bt-$m.txt" | tr '\n"' ' ')"; stop_sched; return; }
    done
    checked+="$m "
  done
  $bt map lookup pinned $pins/req_acct key 0 0 0 0 >"$out/bt-req_acct.txt" 2>&1
  grep -q '"max_running_settled"' "$out/bt-req_acct.txt" || { fail maps "bpftool req_acct lookup: $(head -c 200 "$out/bt-req_acct.txt" | tr '\n"' ' ')"; stop_sched; return; }

  log "maps: $((SECONDS - t0)) s"
  # Our decoded views must show the service, its requests and workers.
  "$tailctl_bin" maps list >"$out/maps-list.txt" 2>&1 || { fail maps "tailctl maps list: $(tail -c 300 "$out/maps-list.txt")"; stop_sched; return; }
  "$tailctl_bin" maps dump regions >"$out/maps-regions.txt" 2>&1 || { fail maps "tailctl maps dump regions: $(tail -c 300 "$out/maps-regions.txt")"; stop_sched; return; }
  grep -q "tailctl-ktest" "$out/maps-regions.txt" && grep -q "WORKERS" "$out/maps-regions.txt" \
    || { fail maps "dump regions lacks the service ($((SECONDS - t0)) s in, service alive: $(kill -0 "$svc_pid" 2>&1 && echo yes)): $(head -c 300 "$out/maps-regions.txt" | tr '\n"' ' ') serve: $(tail -c 200 "$out/serve.err")"; stop_sched; return; }
  "$tailctl_bin" maps dump services >"$out/maps-services.txt" 2>&1

  # scx_tailctl --monitor reports the request-level counters and the watchdog margin.
  "$bin" --monitor 1 --json >"$out/monitor.json" 2>&1
  for f in serializations throttled rotations max_throttle_wait_ns watchdog_margin_ms; do
    grep -q "\"$f\"" "$out/monitor.json" || { fail maps "--monitor --json lacks $f: $(head -c 300 "$out/monitor.json" | tr '\n"' ' ')"; stop_sched; return; }
  done
  checked+="monitor "

  # A non-root caller is told it needs root (the scheduler is running).
  local nerr; nerr=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$tailctl_bin" maps dump services 2>&1)
  grep -q "needs CAP_BPF\|run it as root" <<<"$nerr" || { fail maps "non-root error unclear: $nerr"; stop_sched; return; }
  checked+="non-root-error "

  log "maps: $((SECONDS - t0)) s"
  # (2) JSON agreement. services/worker_tids/registered do not change while the
  # service stays registered: equal. stats keep counting: sandwiched (counters
  # and maxima only grow). cpu_runs changes every context switch and is
  # neither, so it is only checked for field names above.
  local m r
  for m in services worker_tids registered; do
    $bt -j map dump pinned "$pins/$m" >"$out/bt-$m.json" 2>"$out/bt.err"
    "$tailctl_bin" maps dump "$m" --json >"$out/tc-$m.json" 2>"$out/tc.err" || { fail maps "tailctl dump $m --json: $(tail -c 200 "$out/tc.err")"; stop_sched; return; }
    r=$(compare_json exact "$out/bt-$m.json" "$out/tc-$m.json") || { fail maps "$m: $r"; stop_sched; return; }
    checked+="$m=json($r) "
  done
  $bt -j map dump pinned $pins/stats >"$out/bt-stats.json"
  "$tailctl_bin" maps dump stats --json >"$out/tc-stats.json"
  $bt -j map dump pinned $pins/stats >"$out/bt-stats-after.json"
  r=$(compare_json sandwich "$out/bt-stats.json" "$out/tc-stats.json" "$out/bt-stats-after.json") || { fail maps "stats: $r"; stop_sched; return; }
  checked+="stats=json-sandwich($r) "
  # By id too (bpftool-style): the same map opened as `maps dump <id>`.
  local sid; sid=$("$PY" -c 'import json,sys; print(json.load(sys.stdin)["id"])' < <("$tailctl_bin" maps show services --json))
  "$tailctl_bin" maps dump "$sid" --json >"$out/tc-services-id.json"
  r=$(compare_json exact "$out/bt-services.json" "$out/tc-services-id.json") || { fail maps "services by id $sid: $r"; stop_sched; return; }

  log "maps: $((SECONDS - t0)) s"
  # req_acct (16384 entries) once the service is gone: nothing writes it then.
  # A full bpftool JSON dump of it takes minutes under TCG, so bpftool looks
  # up the charged entries (at most 24) plus the first and last key, and
  # tailctl's full dump must agree with it on each.
  kill -0 "$svc_pid" || { fail maps "ktest serve died: $(tail -c 300 "$out/serve.err")"; stop_sched; return; }
  kill "$svc_pid"; wait "$svc_pid" 2>/dev/null
  "$tailctl_bin" maps dump req_acct --json >"$out/tc-req_acct-all.json"
  local keys k nz
  keys=$("$PY" -c 'import json,sys; e=json.load(open(sys.argv[1])); c=[x["key"] for x in e if x["value"]["work_ns"]]; print(len(c), *sorted(set(c[:24] + [0, len(e) - 1])))' "$out/tc-req_acct-all.json")
  nz=${keys%% *}; keys=${keys#* }
  { echo "["; local first=1
    for k in $keys; do
      [ $first = 1 ] || echo ","; first=0
      $bt -j map lookup pinned $pins/req_acct key $((k & 255)) $(((k >> 8) & 255)) $(((k >> 16) & 255)) 0
    done; echo "]"; } >"$out/bt-req_acct.json"
  "$PY" -c 'import json,sys; keep=set(map(int,sys.argv[2:])); json.dump([x for x in json.load(open(sys.argv[1])) if x["key"] in keep], sys.stdout)' \
    "$out/tc-req_acct-all.json" $keys >"$out/tc-req_acct.json"
  r=$(compare_json exact "$out/bt-req_acct.json" "$out/tc-req_acct.json") || { fail maps "req_acct: $r"; stop_sched; return; }
  checked+="req_acct=json($r)"
  [ "${nz:-0}" -gt 0 ] || { fail maps "req_acct has no charged request after serving"; stop_sched; return; }
  log "maps: $((SECONDS - t0)) s"
  # A huge request the kernel serializes must show as SERIALIZED, capped at one running thread.
  timeout 180 "$ktest" -w 4 serialize --huge-ms 5000 >"$out/serialize.json" 2>"$out/serialize.err" &
  local ser_pid=$! seen=""
  for _ in $(seq 1 60); do
    "$tailctl_bin" maps dump regions >"$out/maps-serialized.txt" 2>&1
    grep -q "SERIALIZED" "$out/maps-serialized.txt" && { seen=1; break; }
    kill -0 "$ser_pid" 2>/dev/null || break
    sleep 0.3
  done
  # Seen is all this test needs: stop the huge request rather than wait for
  # its 5 s of CPU to finish under TCG (that took most of this test's time).
  kill "$ser_pid" 2>/dev/null; wait "$ser_pid" 2>/dev/null
  [ -n "$seen" ] || { fail maps "no SERIALIZED request seen in dump regions: $(grep -A4 REQUESTS "$out/maps-serialized.txt" | tr '\n"' '| ')"; stop_sched; return; }
  checked+=" SERIALIZED-seen"
  stop_sched || { fail maps "scheduler exit non-zero"; return; }
  # Without the scheduler the tools must say so.
  local err; err=$("$tailctl_bin" maps list 2>&1)
  grep -q "scx_tailctl is not running" <<<"$err" || { fail maps "no clear error without the scheduler: $err"; return; }
  pass maps "$((SECONDS - t0)) s; bpftool $(bpftool version | head -1 | awk '{print $2}') named fields; $checked; $nz charged requests" "\"charged_requests\": $nz"
}

test_top() {
  command -v tmux >/dev/null || { fail top "tmux is not installed"; return; }
  start_sched || { fail top "scheduler did not load"; return; }
  start_service 40 || { fail top "ktest serve did not register: $(tail -c 300 "$out/serve.err")"; stop_sched; return; }
  export TMUX_TMPDIR="$out"
  tmux kill-server 2>/dev/null
  tmux new-session -d -s top -x 150 -y 45 \
    "TERM=xterm-256color '$tailctl_bin' top -d 0.5 2>'$out/top.err'; echo \$? >'$out/top.rc'" \
    || { fail top "tmux new-session failed"; stop_sched; return; }
  local ok="" i
  sleep 2  # past the first frame: check a screen drawn from a refreshed reading
  # The service is always registered; a request row (queued/running) shows
  # whenever a batch is in flight, which is most of the time: retry a few screens.
  for i in $(seq 1 30); do
    sleep 0.5
    tmux capture-pane -p -t top >"$out/top-screen.txt" 2>/dev/null
    if grep -q "tailctl-ktest" "$out/top-screen.txt" && grep -q " $svc_pid " "$out/top-screen.txt" \
       && grep -Eq '^ *0 +[0-9]+ +[0-9]+ +(running|queued) ' "$out/top-screen.txt"; then ok=1; break; fi
  done
  [ -n "$ok" ] || { fail top "screen lacks the service or its requests: $(head -c 600 "$out/top-screen.txt" | tr '\n"' '| ')"; tmux kill-server; stop_sched; return; }
  # A second service with a huge request: top shows it SERIALIZED.
  timeout 180 "$ktest" -w 2 serialize --huge-ms 5000 >"$out/top-serialize.json" 2>"$out/top-serialize.err" &
  local ser_pid=$! seen=""
  for i in $(seq 1 40); do
    sleep 0.5
    tmux capture-pane -p -t top >"$out/top-serialized.txt" 2>/dev/null
    grep -q "SERIALIZED" "$out/top-serialized.txt" && { seen=1; break; }
    kill -0 "$ser_pid" 2>/dev/null || break
  done
  # Seen is all this test needs: stop the huge request rather than wait for
  # its 5 s of CPU to finish under TCG (that took most of this test's time).
  kill "$ser_pid" 2>/dev/null; wait "$ser_pid" 2>/dev/null
  [ -n "$seen" ] || { fail top "no SERIALIZED request on screen: $(grep -A6 'requests (' "$out/top-serialized.txt" | tr '\n"' '| ')"; tmux kill-server; stop_sched; return; }
  # Keys: sort cycles, the filter hides a non-matching service, q quits cleanly.
  # Each key is checked on the screens of the next few seconds: under a loaded
  # host a redraw can take longer than one refresh period.
  tmux send-keys -t top s
  for i in $(seq 1 20); do sleep 0.5; tmux capture-pane -p -t top >"$out/top-sort.txt"; grep -q "sort: work" "$out/top-sort.txt" && break; done
  grep -q "sort: work" "$out/top-sort.txt" || { fail top "s did not change the sort: $(grep requests "$out/top-sort.txt")"; tmux kill-server; stop_sched; return; }
  tmux send-keys -t top / n o m a t c h Enter
  for i in $(seq 1 20); do
    sleep 0.5; tmux capture-pane -p -t top >"$out/top-filter.txt"
    grep -q "requests (0)" "$out/top-filter.txt" && ! grep -q "tailctl-ktest" "$out/top-filter.txt" && break
  done
  grep -q "requests (0)" "$out/top-filter.txt" && ! grep -q "tailctl-ktest" "$out/top-filter.txt" \
    || { fail top "filter did not hide the service: $(head -c 400 "$out/top-filter.txt" | tr '\n"' '| ')"; tmux kill-server; stop_sched; return; }
  tmux send-keys -t top q
  for i in $(seq 1 20); do tmux has-session -t top 2>/dev/null || break; sleep 0.25; done
  if tmux has-session -t top 2>/dev/null; then fail top "q did not exit"; tmux kill-server; stop_sched; return; fi
  local rc; rc=$(cat "$out/top.rc" 2>/dev/null)
  [ "$rc" = 0 ] || { fail top "top exit status '$rc': $(tail -c 300 "$out/top.err")"; stop_sched; return; }
  local nreq; nreq=$(grep -Ec '^ *0 +[0-9]+ +[0-9]+ +(running|queued) ' "$out/top-screen.txt")
  kill "$svc_pid" 2>/dev/null; wait "$svc_pid" 2>/dev/null
  stop_sched || { fail top "scheduler exit non-zero"; return; }
  pass top "tmux screen shows service pid $svc_pid (tailctl-ktest) and $nreq requests, then a SERIALIZED one; sort, filter keys; q exits 0" "\"requests_on_screen\": $nreq"
}
