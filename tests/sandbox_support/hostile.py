#!/usr/bin/env python3
# A hostile KRM function: it tries the one attack its functionConfig names
# (`attempt: NAME`) and reports what happened as the ConfigMap `outcome`
# (`result: refused ERRNO`, `done DETAIL` or `partial ...`), then exits 0:
# whether the call succeeds is its own decision, whatever was refused.
#
# Its targets are in the file `victims` next to it, which the test writes
# (and may write only after starting the runner): `runner=PID
# supervisor=PID api=HOST:PORT loopback=HOST:PORT secrets=PATH,PATH`.
import ctypes
import errno
import json
import os
import re
import resource
import socket
import sys
import tempfile
import time

text = sys.stdin.read()
attempt = re.search(r"attempt: *['\"]?([a-z-]+)", text).group(1)
here = os.path.dirname(os.path.realpath(__file__))


def victims():
    path = os.path.join(here, "victims")
    for _ in range(400):
        try:
            with open(path) as f:
                fields = dict(kv.split("=", 1) for kv in f.read().split())
            if "runner" in fields:
                return fields
        except FileNotFoundError:
            pass
        time.sleep(0.025)
    raise SystemExit("no victims file next to the function")


v = victims()
runner, supervisor = int(v["runner"]), int(v["supervisor"])
libc = ctypes.CDLL(None, use_errno=True)


def read(path):
    with open(path, "rb") as f:
        return "read %d bytes of %s" % (len(f.read()), path)


def open_mem(pid):
    # Opening is the access check; what it would read depends on addresses.
    with open("/proc/%d/mem" % pid, "rb"):
        return "opened /proc/%d/mem" % pid


def write_outside():
    # The one place it may write: its scratch directory (TMPDIR and HOME;
    # the working directory too, but for render's and eval's `exec:` steps,
    # which keep the render's), which must work whatever else is refused.
    check = os.path.join(tempfile.gettempdir(), "scratch-check-%d" % os.getpid())
    try:
        with open(check, "w") as f:
            f.write("ok")
        os.remove(check)
    except OSError as e:
        raise SystemExit("cannot write in its scratch directory: %s" % e)
    outside = os.path.join(here, "written-by-the-function")
    with open(outside, "w") as f:
        f.write("escaped")
    return "wrote " + outside


def write_tmp():
    path = "/tmp/krm-fn-hostile-written-%d" % os.getpid()
    with open(path, "w") as f:
        f.write("escaped")
    os.remove(path)
    return "wrote " + path


def connect(which):
    host, port = v[which].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5):
        return "connected to " + v[which]


def renice(pid):
    os.setpriority(os.PRIO_PROCESS, pid, os.getpriority(os.PRIO_PROCESS, pid) + 1)
    return "reniced %d" % pid


def prlimit(pid):
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft - 1, hard))
    return "lowered %d's open-file limit" % pid


def chrt(pid):
    os.sched_setscheduler(pid, os.SCHED_BATCH, os.sched_param(0))
    return "put %d under SCHED_BATCH" % pid


def signal(pid):
    os.kill(pid, 0)
    return "signalled %d" % pid


def ptrace_sibling():
    # Two children of this function: the second attaches to the first.
    sibling = os.fork()
    if sibling == 0:
        time.sleep(10)
        os._exit(0)
    tracer = os.fork()
    if tracer == 0:
        PTRACE_ATTACH = 16
        ok = libc.ptrace(PTRACE_ATTACH, sibling, None, None) == 0
        os._exit(0 if ok else (ctypes.get_errno() or 1))
    _, status = os.waitpid(tracer, 0)
    os.kill(sibling, 9)
    os.waitpid(sibling, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise OSError(code, "ptrace")
    return "attached to its sibling %d" % sibling


def new_privileges():
    PR_GET_NO_NEW_PRIVS = 39
    if libc.prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1:
        raise OSError(errno.EPERM, "no_new_privs is set: exec gains no privileges")
    return "no_new_privs is off"


ATTEMPTS = {
    "token": [lambda: read(v["secrets"].split(",")[0])],
    "registry-auth": [lambda: read(v["secrets"].split(",")[1])],
    "environ": [lambda: read("/proc/%d/environ" % runner)],
    "mem": [lambda: open_mem(runner)],
    "write": [write_outside, write_tmp],
    "signal": [lambda: signal(runner), lambda: signal(supervisor)],
    "connect-api": [lambda: connect("api")],
    "connect-loopback": [lambda: connect("loopback")],
    "renice": [lambda: renice(runner), lambda: renice(supervisor)],
    "prlimit": [lambda: prlimit(runner), lambda: prlimit(supervisor)],
    "chrt": [lambda: chrt(runner), lambda: chrt(supervisor)],
    "ptrace": [ptrace_sibling],
    "new-privileges": [new_privileges],
}

done, refused = [], []
for step in ATTEMPTS[attempt]:
    try:
        done.append(step())
    except OSError as e:
        refused.append(errno.errorcode.get(e.errno, str(e.errno)))
if not done:
    result = "refused " + ",".join(refused)
elif not refused:
    result = "done " + "; ".join(done)
else:
    result = "partial: done %s; refused %s" % ("; ".join(done), ",".join(refused))

sys.stdout.write(
    "apiVersion: config.kubernetes.io/v1\n"
    "kind: ResourceList\n"
    "items:\n"
    "- apiVersion: v1\n"
    "  kind: ConfigMap\n"
    "  metadata:\n"
    "    name: outcome\n"
    "    annotations:\n"
    "      config.kubernetes.io/path: outcome.yaml\n"
    "  data:\n"
    "    result: %s\n" % json.dumps(result)
)
