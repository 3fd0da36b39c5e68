#!/usr/bin/env python3
"""A raw client of scx_tailctl's registration protocol, for the isolation
guest tests (tools/vm/guest-tests-isolation.sh). It speaks the protocol of
tailctl_rt::kernel::protocol by hand, so it can send what a well-behaved
runtime never would. Each subcommand prints one JSON object.

  tidreuse SOCKET         bind a thread, let it exit, make a forked child's
                          thread get the same tid: is the child charged?
  binddup SOCKET          BIND t,t: does a binding outlive the refusal?
  flood SOCKET HOLD MARK  one user's denial-of-service attempt: 17
                          registrations, 1000 connections, a slow sender;
                          touches MARK once all is set up, holds HOLD seconds
  badreq SOCKET           an oversized and a non-UTF-8 REGISTER: replies?
  version SOCKET          a region with another layout version: BIND refused?
  bindabuse SOCKET        after OK: 65 workers over two BINDs, a non-UTF-8
                          BIND, a 70 KB line, a BIND sent a digit per 0.5 s
  orphan SOCKET UID       (root) a process of UID registers, binds itself,
                          forks a child that keeps the socket, and exits:
                          is its slot freed while the child holds on?
  pidreuse SOCKET PID A B (root) the daemon (PID) stopped, a process of uid A
                          connects and exits, a process of uid B takes its
                          pid, the daemon resumes, A's forked child asks to
                          register B's thread: refused?
  churn SOCKET SECS       connect, REGISTER, close, as fast as it goes
  backlog SOCKET MARK RELEASE
                          (the daemon stopped) connect without blocking until
                          the listen backlog is full, touch MARK, hold every
                          connection until RELEASE exists (at most 180 s)
  regionfd SOCKET         REGISTER region=1 with no fd, a pipe, a memfd, and
                          with 200 fds at once: ERR each?
  nsuids SOCKET OWNER BASE N HOLD MARK
                          (root) a process of uid OWNER makes a user namespace
                          whose uids 0..N-1 are BASE..BASE+N-1 (root writes the
                          maps, as newuidmap does with /etc/subuid), and N
                          processes in it, each as another uid, register once,
                          touch MARK and hold HOLD seconds: how many got a slot?
  rootns SOCKET UID N HOLD
                          (root) N processes of UID, each in a user namespace
                          root made for it (a setuid sandbox helper's), register
                          once and hold HOLD seconds: how many got a slot?
"""
import array
import json
import mmap
import os
import socket
import struct
import subprocess
import sys
import threading
import time

# struct tailctl_region (bpf/intf.h): header, 64 worker slots, 1024 request slots, 64 bytes each.
MAGIC, VERSION = 0x54524354, 1
REGION_SIZE = 64 + 64 * 64 + 64 * 1024
WORKER = lambda w: 64 + 64 * w
REQUEST = lambda r: 64 + 64 * 64 + 64 * r
REGISTER = "REGISTER 1 workers= thresholds= region=0\n"


def connect(path, timeout=20):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(path)
    return s


def recv_reply(s):
    """One reply line and the fds that came with it; None if the daemon closed."""
    buf, fds = b"", []
    while b"\n" not in buf:
        msg, anc, _, _ = s.recvmsg(4096, socket.CMSG_SPACE(4 * 4))
        for lvl, typ, data in anc:
            if lvl == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                fds += array.array("i", data[: len(data) - len(data) % 4])
        if not msg:
            return None, fds
        buf += msg
    return buf.split(b"\n")[0].decode(errors="replace"), fds


def request(s, line):
    s.sendall(line if isinstance(line, bytes) else line.encode())
    return recv_reply(s)


def register(path):
    s = connect(path)
    reply, fds = request(s, REGISTER)
    if not reply or not reply.startswith("OK service="):
        raise SystemExit(f"registration refused: {reply}")
    return s, int(reply.split("=")[1]), fds[0]


def worker_tids(tl):
    out = subprocess.run([tl, "maps", "dump", "worker_tids", "--json"], capture_output=True, text=True, check=True)
    return {e["key"]: e["value"] for e in json.loads(out.stdout)}


def invalid_hints(tl):
    out = subprocess.run([tl, "maps", "dump", "stats", "--json"], capture_output=True, text=True, check=True)
    return sum(c["value"]["invalid_hints"] for e in json.loads(out.stdout) for c in e["values"])


def burn(secs):
    t = time.thread_time()
    while time.thread_time() - t < secs:
        pass
    return time.thread_time() - t


def tidreuse(path, tl):
    s, svc, fd = register(path)
    m = mmap.mmap(fd, (REGION_SIZE + 4095) // 4096 * 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    u32 = lambda off, v: struct.pack_into("<I", m, off, v)
    u64 = lambda off, v: struct.pack_into("<Q", m, off, v)
    get64 = lambda off: struct.unpack_from("<Q", m, off)[0]
    # A running request in slot 0 (generation 5), worker 0 working on it, no thresholds:
    # whatever runs as worker 0 is charged to it.
    u32(8, 1), u32(12, 1024), u32(16, 1), u32(60, 1)
    u64(REQUEST(0) + 8, 5 << 32)
    u32(REQUEST(0) + 32, 2)
    u64(WORKER(0), 5 << 32)
    u32(WORKER(0) + 20, 0)
    u32(4, VERSION), u32(0, MAGIC)

    # The worker: bound, burns a little (the positive control), exits.
    ready, leave, t_info = threading.Event(), threading.Event(), {}

    def worker():
        t_info["tid"] = threading.get_native_id()
        ready.set()
        leave.wait()
        t_info["cpu"] = burn(0.4)

    t = threading.Thread(target=worker)
    t.start()
    ready.wait()
    tid = t_info["tid"]
    reply, _ = request(s, f"BIND {tid}\n")
    if not reply or not reply.startswith("OK"):
        raise SystemExit(f"BIND {tid} refused: {reply}")
    u32(WORKER(0) + 16, tid)
    k0 = get64(WORKER(0) + 32)
    leave.set()
    t.join()
    time.sleep(0.5)
    k1 = get64(WORKER(0) + 32)
    bound_after_exit = tid in worker_tids(tl)

    # A forked child (another process) makes threads until one gets that tid:
    # ns_last_pid makes the next tid tid-1+1 at once, if nobody takes it first.
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(r)
        got = {}

        def victim():
            got["tid"] = threading.get_native_id()
            if got["tid"] == tid:
                got["cpu"] = burn(1.5)

        for _ in range(500):
            try:
                with open("/proc/sys/kernel/ns_last_pid", "w") as f:
                    f.write(str(tid - 1))
            except OSError:
                pass
            v = threading.Thread(target=victim)
            v.start()
            v.join()
            if got["tid"] == tid:
                break
        os.write(w, json.dumps(got).encode())
        os._exit(0)
    os.close(w)
    got = json.loads(os.read(r, 4096) or b"{}")
    os.waitpid(child, 0)
    time.sleep(0.5)
    k2 = get64(WORKER(0) + 32)
    print(json.dumps({
        "service": svc, "tid": tid,
        "worker_cpu_ms": t_info["cpu"] * 1e3, "worker_charged_ms": (k1 - k0) / 1e6,
        "bound_after_exit": bound_after_exit,
        "reused": got.get("tid") == tid, "child_cpu_ms": got.get("cpu", 0) * 1e3,
        "child_charged_ms": (k2 - k1) / 1e6,
    }))


def binddup(path, tl):
    s, svc, _ = register(path)
    me = threading.get_native_id()
    reply, _ = request(s, f"BIND {me},{me}\n")
    during = worker_tids(tl).get(me)
    s.close()
    time.sleep(0.5)
    after = worker_tids(tl).get(me)
    # The same tid bound properly, for comparison: present while connected, gone after.
    s, svc2, _ = register(path)
    ok, _ = request(s, f"BIND {me}\n")
    bound = worker_tids(tl).get(me)
    s.close()
    time.sleep(0.5)
    print(json.dumps({
        "service": svc, "dup_reply": reply, "bound_during": during, "bound_after_close": after,
        "single_reply": ok, "single_bound": bound, "single_after_close": worker_tids(tl).get(me),
    }))


def version(path, tl):
    """A region claiming another layout version: its workers must not be bound."""
    s, svc, fd = register(path)
    m = mmap.mmap(fd, (REGION_SIZE + 4095) // 4096 * 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    struct.pack_into("<II", m, 0, MAGIC, VERSION + 1)
    me = threading.get_native_id()
    bad, _ = request(s, f"BIND {me}\n")
    bound_bad = worker_tids(tl).get(me)
    struct.pack_into("<II", m, 0, MAGIC, VERSION)
    good, _ = request(s, f"BIND {me}\n")
    bound_good = worker_tids(tl).get(me)
    # Registered and bound, the service rewrites its header's version: the
    # kernel must read the region as nothing from then on (counted as
    # invalid hints each time it looks), not as the layout it knows.
    def hints_while_running():
        h0 = invalid_hints(tl)
        for _ in range(20):
            burn(0.005)
            time.sleep(0.002)
        return invalid_hints(tl) - h0
    hints_good = hints_while_running()
    struct.pack_into("<II", m, 0, MAGIC, VERSION + 1)
    hints_bad = hints_while_running()
    s.close()
    print(json.dumps({"service": svc, "bad_version_reply": bad, "bound_bad": bound_bad,
                      "good_version_reply": good, "bound_good": bound_good,
                      "hints_good": hints_good, "hints_rewritten": hints_bad}))


def flood(path, hold, mark):
    res = {"registered": 0, "refused": [], "conns_open": 0, "conns_refused": 0}
    keep = []
    # 17 registrations by one user.
    for _ in range(17):
        try:
            s = connect(path, timeout=10)
            reply, fds = request(s, REGISTER)
        except OSError as e:
            res["refused"].append(str(e))
            continue
        for fd in fds:
            os.close(fd)
        if reply and reply.startswith("OK"):
            res["registered"] += 1
            keep.append(s)
        else:
            res["refused"].append(reply)
            s.close()

    # A slow sender: a valid REGISTER, one byte at a time.
    slow = {}

    def slowloris():
        try:
            s = connect(path, timeout=2)
            for b in REGISTER.encode():
                s.send(bytes([b]))
                time.sleep(0.5)
            s.settimeout(10)
            slow["reply"] = recv_reply(s)[0]
        except OSError as e:
            slow["reply"] = f"closed: {e}"
        slow["done"] = time.monotonic()

    st = threading.Thread(target=slowloris)
    st.start()
    # 1000 connections, each sending a byte now and then so no read timeout ends it.
    conns = []
    for _ in range(1000):
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(5)
            s.connect(path)
            s.setblocking(False)
            conns.append(s)
        except OSError:
            res["conns_refused"] += 1
    open(mark, "w").close()
    end = time.monotonic() + hold
    while time.monotonic() < end:
        alive = []
        for s in conns:
            try:
                s.send(b"R")
                alive.append(s)
            except OSError:
                res["conns_refused"] += 1
                s.close()
        conns = alive
        time.sleep(1)
    res["conns_open"] = len(conns)
    st.join()
    res["slow_reply"] = slow.get("reply")
    print(json.dumps(res))


def badreq(path):
    out = {}
    for name, line in (("oversized", b"REGISTER 1 workers=" + b"1," * 40000 + b"1\n"),
                       ("non_utf8", b"REGISTER 1 workers=\xff\xfe thresholds= region=0\n")):
        try:
            s = connect(path, timeout=10)
            s.sendall(line)
            out[name] = recv_reply(s)[0]
        except OSError as e:
            out[name] = f"error: {e}"
    print(json.dumps(out))


def bindabuse(path, tl):
    out = {}
    s, svc, _ = register(path)
    me = threading.get_native_id()
    out["bind_self"] = request(s, f"BIND {me}\n")[0]
    # 1 bound + 64 more > 64 workers (checked before the tids are).
    out["bind_65"] = request(s, "BIND " + ",".join(str(1000000 + i) for i in range(64)) + "\n")[0]
    out["bind_non_utf8"] = request(s, b"BIND \xff\xfe\n")[0]
    # Still served after those: a second thread of ours binds.
    ready, leave, other = threading.Event(), threading.Event(), {}

    def second():
        other["tid"] = threading.get_native_id()
        ready.set()
        leave.wait()

    t = threading.Thread(target=second)
    t.start()
    ready.wait()
    out["bind_after"] = request(s, f"BIND {other['tid']}\n")[0]
    leave.set()
    t.join()
    t0 = time.monotonic()
    try:
        s.sendall(b"BIND " + b"1" * 70000)
        out["long_line"] = recv_reply(s)[0]
    except OSError as e:
        out["long_line"] = f"closed: {e}"
    s.close()
    # A BIND that never ends: a digit per 0.5 s, for up to 8 s.
    s, svc2, _ = register(path)
    s.settimeout(0.5)
    t0, reply = time.monotonic(), None
    try:
        s.sendall(b"BIND 1")
        while time.monotonic() - t0 < 8 and reply is None:
            s.sendall(b"1")
            try:
                reply = recv_reply(s)[0] or "closed"
            except socket.timeout:
                pass
    except OSError as e:
        reply = f"closed: {e}"
    out["slow_bind"] = reply
    out["slow_bind_s"] = round(time.monotonic() - t0, 1)
    s.close()
    # 100 refused BINDs in one write: how many replies before the daemon hangs up.
    s, svc3, _ = register(path)
    s.sendall(b"BIND 1\n" * 100)
    s.settimeout(10)
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    out["refused_lines_replies"] = data.count(b"\n")
    s.close()
    # Whether a binding of `tid` is left is read by the harness (the maps are root's).
    out["tid"] = me
    print(json.dumps(out))


def drop_to(uid):
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def orphan_child(path, uid, w, r):
    os.close(r)
    drop_to(uid)
    s, svc, _ = register(path)
    me = threading.get_native_id()
    reply, _ = request(s, f"BIND {me}\n")
    if os.fork() == 0:
        # The child keeps the socket (and so the connection) for 20 s,
        # and nothing else: not the harness's stdout, which would hold
        # the test's $(...) open as long.
        os.close(w)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        time.sleep(20)
        os._exit(0)
    os.write(w, json.dumps({"service": svc, "tid": me, "bind": reply}).encode())


def orphan(path, tl, uid):
    r, w = os.pipe()
    a = os.fork()
    if a == 0:
        # A child never returns into the harness's code, whatever happens.
        try:
            orphan_child(path, uid, w, r)
        finally:
            os._exit(0)
    os.close(w)
    got = json.loads(os.read(r, 4096) or b"{}")
    os.waitpid(a, 0)
    t0, freed = time.monotonic(), None
    while time.monotonic() - t0 < 10:
        if got.get("tid") not in worker_tids(tl):
            freed = round(time.monotonic() - t0, 2)
            break
        time.sleep(0.1)
    # Its uid's quota (4 services) back in full: 4 registrations at once.
    r2, w2 = os.pipe()
    b = os.fork()
    if b == 0:
        os.close(r2)
        drop_to(uid)
        keep, replies = [], []
        for _ in range(4):
            try:
                c = connect(path, timeout=10)
                reply, fds = request(c, REGISTER)
                for fd in fds:
                    os.close(fd)
                keep.append(c)
                replies.append(reply)
            except OSError as e:
                replies.append(f"error: {e}")
        os.write(w2, json.dumps(replies).encode())
        os._exit(0)
    os.close(w2)
    replies = json.loads(os.read(r2, 65536) or b"[]")
    os.waitpid(b, 0)
    got.update({"freed_after_s": freed, "quota_after": replies})
    print(json.dumps(got))


def pidreuse_connector(path, uid_a, go_r, go_w, rep_r, rep_w):
    """pidreuse's process of uid A: connects, forks the child that will
    speak on the socket, and exits (its caller's os._exit)."""
    drop_to(uid_a)
    c = connect(path, timeout=30)
    if os.fork() != 0:
        return
    try:
        # The connecting process's child: it has the socket, not the pid. It
        # waits for the pid at most 40 s, holding no write end of go.
        os.close(go_w)
        os.close(rep_r)
        import select
        if not select.select([go_r], [], [], 40)[0]:
            return
        line = os.read(go_r, 64).decode().strip()
        try:
            reply = request(c, f"REGISTER 1 workers={line} thresholds= region=0\n")[0]
            bind = request(c, f"BIND {line}\n")[0] if reply and reply.startswith("OK") else None
        except OSError as e:
            reply, bind = f"closed: {e}", None
        os.write(rep_w, json.dumps({"register": reply, "bind": bind}).encode())
        time.sleep(1)
    finally:
        os._exit(0)


def pidreuse(path, tl, daemon, uid_a, uid_b):
    import signal
    go_r, go_w = os.pipe()
    rep_r, rep_w = os.pipe()
    res = {}
    os.kill(daemon, signal.SIGSTOP)
    try:
        a = os.fork()
        if a == 0:
            # A child never returns into the harness's code, whatever happens.
            try:
                pidreuse_connector(path, uid_a, go_r, go_w, rep_r, rep_w)
            finally:
                os._exit(0)
        os.waitpid(a, 0)
        # uid B's process on the connecting process's pid.
        b = None
        for _ in range(300):
            with open("/proc/sys/kernel/ns_last_pid", "w") as f:
                f.write(str(a - 1))
            b = os.fork()
            if b == 0:
                try:
                    for fd in (go_r, go_w, rep_r, rep_w):
                        os.close(fd)
                    drop_to(uid_b)
                    time.sleep(30)
                finally:
                    os._exit(0)
            if b == a:
                break
            os.kill(b, 9)
            os.waitpid(b, 0)
            b = None
        res["pid"] = a
        res["reused"] = b == a
    finally:
        os.kill(daemon, signal.SIGCONT)
    os.close(go_r)
    os.close(rep_w)
    os.write(go_w, f"{a}\n".encode())
    res.update(json.loads(os.read(rep_r, 65536) or b"{}"))
    time.sleep(0.3)
    res["bound"] = a in worker_tids(tl)
    if b:
        os.kill(b, 9)
        os.waitpid(b, 0)
    print(json.dumps(res))


def regionfd(path):
    out = {}
    line = b"REGISTER 1 workers= thresholds= region=1\n"
    r, w = os.pipe()
    mfd = os.memfd_create("tailctl-fake-region")
    os.ftruncate(mfd, REGION_SIZE)
    many = [os.dup(r) for _ in range(200)]
    for name, fds in (("no_fd", []), ("pipe", [r]), ("memfd", [mfd]), ("fds_200", many)):
        try:
            s = connect(path, timeout=10)
            socket.send_fds(s, [line], fds)
            out[name] = recv_reply(s)[0]
            s.close()
        except OSError as e:
            out[name] = f"error: {e}"
    for fd in many + [r, w, mfd]:
        os.close(fd)
    print(json.dumps(out))


def churn(path, secs):
    # Its span on CLOCK_MONOTONIC (one clock for every process of the guest), so
    # that the meter's bound is checked over the time the four really ran: they
    # start seconds apart when the guest is slow to start Python.
    n, refused, too_fast = 0, 0, 0
    start = time.monotonic()
    end = start + secs
    while time.monotonic() < end:
        try:
            c = connect(path, timeout=10)
            reply, fds = request(c, REGISTER)
            for fd in fds:
                os.close(fd)
            c.close()
            if reply and reply.startswith("OK"):
                n += 1
            else:
                refused += 1
                too_fast += "too fast" in (reply or "")
        except OSError:
            refused += 1
    print(json.dumps({"registered": n, "refused": refused, "too_fast": too_fast,
                      "start": start, "end": time.monotonic()}))


def ns_member(path, uid, res_w, rel_r):
    """In a user namespace whose maps are written: become UID there, register once, report
    {"uid", "pid", "reply"} on RES_W, hold the connection until REL_R closes."""
    reply = None
    try:
        os.setgid(uid)
        os.setuid(uid)
        s = connect(path, timeout=10)
        reply = request(s, REGISTER)[0]
    except BaseException as e:  # anything: the parent must hear from every member
        reply = f"error: {e!r}"
    os.write(res_w, (json.dumps({"uid": uid, "pid": os.getpid(), "reply": reply}) + "\n").encode())
    os.read(rel_r, 1)
    os._exit(0)


def kernel_uid(pid):
    """PID's real uid as the initial user namespace sees it (/proc/PID/status)."""
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except OSError:
        return None


def collect(res_r, n, secs=60):
    import select
    got, buf, end = [], b"", time.monotonic() + secs
    while len(got) < n:
        left = end - time.monotonic()
        if left <= 0 or not select.select([res_r], [], [], left)[0]:
            break
        chunk = os.read(res_r, 4096)
        if not chunk:
            break
        buf += chunk
        *lines, buf = buf.split(b"\n")
        got += [json.loads(l) for l in lines if l.strip()]
    # Seen from here, while the members still run: their kernel uids.
    for g in got:
        g["kuid"] = kernel_uid(g["pid"])
    return got


def unshare_user():
    import ctypes
    CLONE_NEWUSER = 0x10000000
    return ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWUSER) == 0


def nsuids(path, owner, base, n, hold, mark):
    up_r, up_w = os.pipe()        # child -> parent: the namespace exists
    maps_r, maps_w = os.pipe()    # parent -> child: the maps are written
    res_r, res_w = os.pipe()      # members -> parent: one JSON line each
    rel_r, rel_w = os.pipe()      # parent -> members: EOF = let go
    child = os.fork()
    if child == 0:
        try:
            for fd in (up_r, maps_w, res_r, rel_w):
                os.close(fd)
            drop_to(owner)
            if not unshare_user():
                os.write(up_w, b"E")
                os._exit(1)
            os.write(up_w, b"u")
            os.read(maps_r, 1)
            members = []
            for i in range(n):
                pid = os.fork()
                if pid == 0:
                    ns_member(path, i, res_w, rel_r)
                members.append(pid)
            for pid in members:
                os.waitpid(pid, 0)
        finally:
            os._exit(0)
    for fd in (up_w, maps_r, res_w, rel_r):
        os.close(fd)
    out = {"owner": owner, "members": n}
    if os.read(up_r, 1) != b"u":
        out["error"] = "unshare(CLONE_NEWUSER) failed"
    else:
        for f in ("uid_map", "gid_map"):
            with open(f"/proc/{child}/{f}", "w") as m:
                m.write(f"0 {base} {n}\n")
        os.write(maps_w, b"m")
        got = collect(res_r, n)
        out["replies"] = got
        out["registered"] = sum(1 for g in got if (g["reply"] or "").startswith("OK"))
        open(mark, "w").close()
        time.sleep(hold)
    os.close(rel_w)
    os.waitpid(child, 0)
    print(json.dumps(out))


def rootns(path, uid, n, hold):
    """(root) N processes, each in a user namespace of its own that root creates (as a
    setuid sandbox helper does for its caller), mapping only UID to itself; each becomes
    UID there and registers once, holding HOLD seconds."""
    res_r, res_w = os.pipe()
    rel_r, rel_w = os.pipe()
    kids = []
    for _ in range(n):
        up_r, up_w = os.pipe()
        maps_r, maps_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                for fd in (up_r, maps_w, res_r, rel_w):
                    os.close(fd)
                if not unshare_user():
                    os.write(up_w, b"E")
                    os._exit(1)
                os.write(up_w, b"u")
                os.read(maps_r, 1)
                ns_member(path, uid, res_w, rel_r)
            finally:
                os._exit(0)
        os.close(up_w)
        os.close(maps_r)
        if os.read(up_r, 1) == b"u":
            for f in ("uid_map", "gid_map"):
                with open(f"/proc/{pid}/{f}", "w") as m:
                    m.write(f"{uid} {uid} 1\n")
            os.write(maps_w, b"m")
        else:
            print("rootns: unshare(CLONE_NEWUSER) failed", file=sys.stderr)
        os.close(up_r)
        os.close(maps_w)
        kids.append(pid)
    os.close(res_w)
    os.close(rel_r)
    got = collect(res_r, n)
    out = {"uid": uid, "members": n, "replies": got,
           "registered": sum(1 for g in got if (g["reply"] or "").startswith("OK"))}
    time.sleep(hold)
    os.close(rel_w)
    for pid in kids:
        os.waitpid(pid, 0)
    print(json.dumps(out))


def backlog(path, mark, release):
    res = {"queued": 0, "full": False, "error": None}
    conns = []
    while len(conns) < 100000:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(path)
        except BlockingIOError:
            # EAGAIN: a Unix stream connect never goes "in progress"; the backlog is full.
            res["full"] = True
            s.close()
            break
        except OSError as e:
            res["error"] = str(e)
            s.close()
            break
        conns.append(s)
    res["queued"] = len(conns)
    open(mark, "w").close()
    end = time.monotonic() + 180
    while not os.path.exists(release) and time.monotonic() < end:
        time.sleep(0.1)
    for s in conns:
        s.close()
    print(json.dumps(res))


if __name__ == "__main__":
    cmd, path = sys.argv[1], sys.argv[2]
    tl = os.environ.get("TAILCTL", "tailctl")
    if cmd == "tidreuse":
        tidreuse(path, tl)
    elif cmd == "binddup":
        binddup(path, tl)
    elif cmd == "version":
        version(path, tl)
    elif cmd == "flood":
        flood(path, float(sys.argv[3]), sys.argv[4])
    elif cmd == "badreq":
        badreq(path)
    elif cmd == "bindabuse":
        bindabuse(path, tl)
    elif cmd == "orphan":
        orphan(path, tl, int(sys.argv[3]))
    elif cmd == "pidreuse":
        pidreuse(path, tl, int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    elif cmd == "regionfd":
        regionfd(path)
    elif cmd == "backlog":
        backlog(path, sys.argv[3], sys.argv[4])
    elif cmd == "churn":
        churn(path, float(sys.argv[3]))
    elif cmd == "nsuids":
        nsuids(path, int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]), sys.argv[7])
    elif cmd == "rootns":
        rootns(path, int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
    else:
        raise SystemExit(__doc__)
