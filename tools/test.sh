#!/usr/bin/env bash
# Runs every test of the project; installs what it needs first (idempotent).
#   tools/test.sh            everything: lint, host tests, scheduler tests in
#                            the sched_ext VM on kernels 6.18 and 7
#   KERNELS="6.18" tools/test.sh     only some kernel series
#   SKIP_VM=1 tools/test.sh          host only (no scheduler tests)
#   GUEST_TESTS="load fault" tools/test.sh   only some scheduler tests
#   GUEST_SOCKETS=1 tools/test.sh    the first series on one LLC too (default:
#                            two sockets, so per-LLC queues get the suite)
#   SKIP_LINT=1 / SKIP_HOST=1 / SKIP_FRESH=1  skip fmt+clippy / host tests /
#                            the fresh-machine provisioning check
# Ends with "all: N passed, M failed"; exits non-zero on any failure.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# Words separated by single spaces (the series are told apart by "${kernels%% *}").
# shellcheck disable=SC2086
kernels=$(echo ${KERNELS:-6.18 7})
log=$(mktemp); trap 'rm -f "$log" "$log.lint"' EXIT
failed=0; passed=0
# Each step's header says when it began (seconds since the start): where CI's time went.
step() { echo; echo "=== $* === (at $(( $(date +%s) - start )) s)"; }
ok() { passed=$((passed + $1)); }
bad() { failed=$((failed + $1)); echo "FAILED: $2"; }
start=$(date +%s)

# A run that provisions an empty cache is itself the fresh-machine path
# (below): nothing of a previous run helps it.
cache=${TAILCTL_CACHE:-$root/.cache}
empty_cache=0
[ -e "$cache/venv" ] || [ -e "$cache/tools" ] || [ -e "$cache/vm/kernels" ] || empty_cache=1

step "provision (host packages, virtme-ng, virtiofsd, sched_ext kernels)"
# shellcheck disable=SC2086
bash tools/vm/provision.sh $([ "${SKIP_VM:-0}" = 1 ] && echo --host-only) $kernels || { echo "provisioning failed"; exit 1; }

# Format, lint and the host tests' build. With the guests running (below)
# this runs beside them at idle priority: each guest is one single-threaded
# qemu process per core, and the host work only takes the time they leave
# (the guests idle between phases of a test and while a test sleeps), so
# the guests' timings see no neighbour at their priority. The tests
# themselves run afterwards at normal priority: a host test starved at idle
# priority could miss one of its own deadlines.
lint_and_build() {
  if [ "${SKIP_LINT:-0}" = 1 ]; then echo "(lint skipped: SKIP_LINT=1)"; else
    if $idle cargo fmt --all -- --check; then ok 1; else bad 1 "cargo fmt --check"; fi
    if $idle cargo clippy --workspace --all-targets -q -- -D warnings; then ok 1; else bad 1 "cargo clippy -D warnings"; fi
    # The summary scripts the experiments run on the host: each imports cleanly and its doctests pass.
    for f in tools/vm/*.py tools/*.py; do
      if $idle python3 -m doctest "$f"; then ok 1; else bad 1 "python3 -m doctest $f"; fi
    done
  fi
  if [ "${SKIP_HOST:-0}" != 1 ]; then
    $idle cargo test --workspace --no-run -q 2>&1 | grep -vE '^ +Executable ' || true
  fi
}
host_tests() {
  if [ "${SKIP_HOST:-0}" = 1 ]; then echo "(skipped: SKIP_HOST=1)"; return; fi
  # Bounded, so a hang fails the run instead of eating CI's time.
  timeout 1800 cargo test --workspace 2>&1 | tee "$log"
  host_rc=${PIPESTATUS[0]}
  hp=$(grep -oE 'test result: .* ([0-9]+) passed' "$log" | grep -oE '[0-9]+ passed' | awk '{s+=$1} END {print s+0}')
  hf=$(grep -oE '[0-9]+ failed' "$log" | awk '{s+=$1} END {print s+0}')
  ok "$hp"
  if [ "$host_rc" != 0 ]; then bad "$((hf > 0 ? hf : 1))" "cargo test --workspace"; fi
}
idle=""
if [ "${SKIP_VM:-0}" = 1 ]; then
  step "format and lint"
  lint_and_build
  step "host tests (cargo test --workspace)"
  host_tests
fi

if [ "${SKIP_VM:-0}" != 1 ]; then
  step "build the scheduler and the binaries the guest tests run"
  # The guest tests run the workload binaries too (experiment, daemonidle).
  cargo build -q -p scx_tailctl -p tailctl-tools -p tailctl-workloads || { bad 1 "building scx_tailctl"; }
  # The guests run a copy: the host tests' build beside them (below) may
  # relink target/debug's binaries (dev-dependencies' features).
  gbin=.cache/vm/guest-bin
  rm -rf "$gbin"; mkdir -p "$gbin"
  find target/debug -maxdepth 1 -type f -executable -exec cp {} "$gbin/" \;

  # A new machine has none of .cache/: provision into an empty temporary
  # cache (kernel packages come from .cache/downloads when their pinned
  # sha256 matches, so nothing verified is downloaded twice; virtme-ng is
  # installed by hash, virtiofsd built at its pinned version), boot it, and
  # attach scx_tailctl there. This is the path `tools/demo.sh` and this
  # script take on a fresh clone. SKIP_FRESH=1 skips it. Its result goes to
  # .cache/vm/results/fresh.counts ("passed failed").
  fresh_path() {
    local fresh fk t0 res=.cache/vm/results/fresh.counts
    fresh=$(mktemp -d /tmp/tailctl-fresh.XXXXXX)
    fk=${kernels%% *}
    t0=$(date +%s)
    if TAILCTL_CACHE="$fresh/cache" TAILCTL_DOWNLOADS="$root/.cache/downloads" \
         bash tools/vm/provision.sh "$fk" \
       && TAILCTL_CACHE="$fresh/cache" timeout 600 "$gbin/tailctl" vm run -k "$fk" -c 2 \
         --tcg-threads single --rwdir "$fresh/run" -- \
         sh -c "$gbin"'/scx_tailctl --stats 1 >/dev/null 2>&1 & p=$!;
                for i in $(seq 1 300); do [ "$(cat /sys/kernel/sched_ext/state)" = enabled ] && break; sleep 0.2; done;
                s=$(cat /sys/kernel/sched_ext/state); kill -INT $p; wait $p; rc=$?;
                echo "fresh cache: $(uname -r), scx_tailctl $s, exit $rc"; [ "$s" = enabled ] && [ $rc = 0 ]'; then
      echo "1 0" >"$res"; echo "fresh path took $(( $(date +%s) - t0 )) s"
    else
      echo "0 1" >"$res"; echo "FAILED: fresh-machine provisioning and boot"
    fi
    rm -rf "$fresh"
  }
  mkdir -p .cache/vm/results; rm -f .cache/vm/results/fresh.counts
  # With the kernel series side by side (below), the fresh path runs after
  # the last series, beside the first (two sockets, the longest): its boot
  # and provisioning then take no time of their own. Otherwise it runs here.
  # A run that began with an empty cache (CI's fresh clone) has just taken
  # that path itself, and its series boot and attach the scheduler: the
  # second provisioning would repeat it (about 200 s of CI).
  fresh_later=0
  if [ "${SKIP_FRESH:-0}" != 1 ] && [ "$empty_cache" = 1 ]; then
    echo "(the fresh-machine path is this run's own: it provisioned an empty cache, $cache)"
    SKIP_FRESH=1
  fi
  if [ "${SKIP_FRESH:-0}" != 1 ]; then
    if [ "${PARALLEL_KERNELS:-1}" = 1 ] && [ "$kernels" != "${kernels%% *}" ]; then
      fresh_later=1
    else
      step "fresh machine: provision an empty cache, boot it, attach scx_tailctl"
      fresh_path
    fi
  fi
  # One kernel series: boot, run the tests, resume in a new boot if the
  # guest died. Its output goes to $out/run.log; its counts to $out/counts.
  run_kernel() {
    local k=$1 out=.cache/vm/results/$1 attempt todo all gp gf missing
    rm -rf "$out"; mkdir -p "$out"
    # Under multi-threaded qemu TCG the guest kernel oopses now and then
    # (int3 in pick_task_idle / __schedule) while sched_ext flips its static
    # keys on attach or detach: a vCPU runs a stale translation of code another
    # vCPU is patching, an emulation hazard, not a scheduler error. So the
    # guests run single-threaded TCG (TCG_THREADS=multi is faster but oopses).
    # Should a guest still die before reporting, boot again and run only the
    # tests that have no result yet (guest-tests.sh appends each result to
    # $out/progress), at most three boots; each boot's console is kept and its
    # tail printed. Every reported failure counts.
    all=${GUEST_TESTS:-$(series_tests "$k")}
    # The first series boots with two sockets (two LLCs under TCG), so the
    # whole suite runs once on per-LLC queues and once on the single queue a
    # one-LLC machine gets. GUEST_SOCKETS=1 boots every series with one.
    local sockets=1
    [ "$k" = "${kernels%% *}" ] && sockets=${GUEST_SOCKETS:-2}
    for attempt in 1 2 3; do
      todo=$(for t in $all; do grep -qE "^(PASS|FAIL) $t\$" "$out/progress" 2>/dev/null || echo "$t"; done)
      [ -n "$todo" ] || break
      [ "$attempt" = 1 ] || echo "(the guest died before reporting; boot $attempt runs: $(echo $todo))"
      # The boot's time limit is a guard against a hung guest, not a budget:
      # on a slow host a whole series takes 50-60 minutes (session 31: both
      # series reached 3000 s with 7 tests left, and the second boot and the
      # test cut short cost a few minutes more). An hour lets one boot finish.
      # shellcheck disable=SC2086
      timeout 3600 "$gbin/tailctl" vm run -k "$k" -c 4 --sockets "$sockets" --tcg-threads "${TCG_THREADS:-single}" \
        --console "$out/console-$attempt.log" --rwdir .cache/vm/results -- \
        tools/vm/guest-tests.sh "$gbin/scx_tailctl" "$out" $todo 2>&1
    done
    gp=$(grep -c '^PASS' "$out/progress" 2>/dev/null); gf=$(grep -c '^FAIL' "$out/progress" 2>/dev/null)
    missing=$(for t in $all; do grep -qE "^(PASS|FAIL) $t\$" "$out/progress" 2>/dev/null || echo "$t"; done)
    echo "${gp:-0} ${gf:-0}" >"$out/counts"
    [ "${gf:-0}" = 0 ] || echo "FAILED: scheduler tests on $k: $(grep '^FAIL' "$out/progress" | tr '\n' ' ')"
    [ -z "$missing" ] || { echo "FAILED: scheduler tests on $k never reported: $(echo $missing)"; echo 1 >"$out/missing"; }
  }
  # The tests a series runs. Two kinds run on both series: tests whose
  # subject is the kernel's side of sched_ext, which differs between 6.18
  # and 7.x (loading and verifying, the watchdog and ejection, stress, RT
  # preemption and ops.cpu_release's re-enqueue on 7.1+, the wait bounds and
  # their timers, pinned and migration-disabled tasks, hotplug, switching
  # policies under a running service, the region fuzzer), and issue 12's
  # allotment list (EQUI's halves, DEQ's desire and its change of load, an
  # exit, no starvation). Every other test runs on one series, chosen so the
  # two end together (the first, with two sockets, takes the per-LLC queues
  # test; the later series about 200 s less, as the fresh-machine path
  # follows it): its BPF paths are the ones the both-series tests take on each
  # kernel, and its subject is a policy's arithmetic, the daemon's or the
  # runtime's user-space code, or a measurement against a baseline. Running
  # every test on both cost 77 minutes of CI on session 31's host (both
  # series past 3000 s, summing 3705 and 3359 s of tests). With this split
  # session 32's CI took 68 minutes on a host as slow: 3042 s of tests in the
  # first series (30 tests), 3049 s and the fresh path's 173 s in the later (43;
  # account, nosyscall and tidreuse moved to the first since, about 90 s). The
  # guest part alone then took 2913 s of tests on 6.18 (34) and 2672 s on 7.3
  # (39); with the fresh path gone from CI (a fresh clone is that path), regdos
  # and nosyscall (81 + 32 s on 6.18) moved to the later series in session 33.
  # With one series, or GUEST_TESTS, nothing is split.
  split_first="allotliar allotcgdyn allotrenice maps regversion serializemark llcqueues allotcgnest isolation greedy
    account tidreuse"
  # shellcheck disable=SC2086
  split_first=$(echo $split_first)
  split_later="allotmug allotcgdeq allotcgasteal allotdrep regabuse daemonstop top priouser pidns experiment daemonidle
    service fuzzallot serialize slotreuse bindleak prioprompt priostarve priocgroup regdos nosyscall"
  # shellcheck disable=SC2086
  split_later=$(echo $split_later)
  listed=$(bash tools/vm/guest-tests.sh "$gbin/scx_tailctl" /tmp --list)
  for t in $split_first $split_later; do
    case " $listed " in *" $t "*) ;; *) bad 1 "the split names $t, which guest-tests.sh does not list";; esac
  done
  series_tests() {
    local skip t
    # shellcheck disable=SC2086
    set -- "$1" $kernels
    # One series (however spaced): nothing split.
    if [ $# -eq 2 ]; then echo "$listed"; return; fi
    if [ "$1" = "$2" ]; then skip=$split_later; else skip=$split_first; fi
    for t in $listed; do case " $skip " in *" $t "*) ;; *) printf '%s ' "$t";; esac; done
  }
  # The kernel series boot side by side: each guest is one single-threaded
  # TCG process, so two of them use the two cores of a CI machine and the
  # guest part takes as long as the slower series, not the sum (every guest
  # test measures ratios inside its own guest, so the neighbour VM slows both
  # sides of a pair alike). PARALLEL_KERNELS=0 runs them one after another.
  pids=()
  # When each series ended (seconds since the start): with the lint's end
  # below, where CI's time went while the series ran side by side.
  series_ended() { echo "$(( $(date +%s) - start ))" >".cache/vm/results/$1.ended"; }
  rm -f .cache/vm/results/*.ended
  for k in $kernels; do
    mkdir -p ".cache/vm/results/$k"
    if [ "${PARALLEL_KERNELS:-1}" = 1 ]; then
      echo "(kernel series $k boots in the background; its log: .cache/vm/results/$k.log)"
      if [ "$fresh_later" = 1 ] && [ "$k" = "${kernels##* }" ]; then
        echo "(then the fresh-machine path; its log: .cache/vm/results/fresh.log)"
        { run_kernel "$k" >".cache/vm/results/$k.log" 2>&1; series_ended "$k"
          fresh_path >.cache/vm/results/fresh.log 2>&1; } &
      else
        { run_kernel "$k" >".cache/vm/results/$k.log" 2>&1; series_ended "$k"; } &
      fi
      pids+=($!)
    else
      step "scheduler tests on kernel series $k"
      run_kernel "$k" 2>&1 | tee ".cache/vm/results/$k.log"
    fi
  done
  # Progress while they run: each result line as it lands (tail --pid ends
  # with its kernel's run).
  if [ ${#pids[@]} -gt 0 ]; then
    i=0
    for k in $kernels; do
      tail -n +1 -F --pid="${pids[$i]}" ".cache/vm/results/$k.log" 2>/dev/null \
        | grep -a --line-buffered -E '^(PASS|FAIL)' | sed -u "s/^/[$k] /" &
      i=$((i + 1))
    done
    # Meanwhile lint and the host tests' build, at idle priority; their
    # output is kept for after the guests' results.
    idle="nice -n 19"
    ! chrt -i 0 true 2>/dev/null || idle="chrt -i 0 $idle"
    lint_and_build >"$log.lint" 2>&1
    echo "(lint and the host tests' build ended at $(( $(date +%s) - start )) s)"
    wait
    for k in $kernels; do
      echo "(kernel series $k ended at $(cat ".cache/vm/results/$k.ended" 2>/dev/null || echo '?') s)"
    done
    step "format and lint, and the host tests' build (ran beside the guests)"
    cat "$log.lint"; rm -f "$log.lint"
  else
    step "format and lint"
    lint_and_build
  fi
  step "host tests (cargo test --workspace)"
  host_tests
  for k in $kernels; do
    step "scheduler tests on kernel series $k (log)"
    [ ${#pids[@]} -gt 0 ] && grep -avE '^qemu-system' ".cache/vm/results/$k.log"
    read -r gp gf <".cache/vm/results/$k/counts" 2>/dev/null || { gp=0; gf=0; }
    ok "$gp"
    [ "$gf" = 0 ] || bad "$gf" "scheduler tests on $k: $(grep '^FAIL' ".cache/vm/results/$k/progress" | tr '\n' ' ')"
    [ ! -e ".cache/vm/results/$k/missing" ] || bad 1 "scheduler tests on $k never reported some tests"
  done
  if [ "$fresh_later" = 1 ]; then
    step "fresh machine: provision an empty cache, boot it, attach scx_tailctl (log)"
    cat .cache/vm/results/fresh.log 2>/dev/null | tail -n 40
  fi
  if [ "${SKIP_FRESH:-0}" != 1 ]; then
    read -r gp gf <.cache/vm/results/fresh.counts 2>/dev/null || { gp=0; gf=1; }
    ok "$gp"
    [ "$gf" = 0 ] || bad "$gf" "fresh-machine provisioning and boot"
  fi
fi

# Each failed guest test's own line again (CI's view of the output keeps its
# tail; the logs above bury these lines under the kernel log they print).
if [ "${SKIP_VM:-0}" != 1 ]; then
  for k in $kernels; do
    grep -a '^FAIL [a-z0-9]*:' ".cache/vm/results/$k.log" 2>/dev/null | cut -c1-700 | sed "s/^/[$k] /"
    grep -a 'never reported:' ".cache/vm/results/$k.log" 2>/dev/null | sed "s/^/[$k] /"
  done
fi
echo
echo "took $(( $(date +%s) - start )) s"
echo "all: $passed passed, $failed failed"
[ "$failed" = 0 ]
