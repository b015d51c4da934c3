"""The grading slot's zygote (bubblewrap as root): two kernels' jobs share nothing, a kernel forked from the zygote
behaves as Jupyter expects of a kernel process, and the zygote outlives the thread that started it but not the
grader."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

# A kernel job answers on stdout.
ZYGOTE_FIRST_JOB = r"""
import json, os, sys, time
written = []
for folder in ("/tmp", "/var/tmp", "/dev/shm", os.getcwd(), os.environ["HOME"]):
    try:
        with open(os.path.join(folder, "left-by-job-1"), "w") as handle:
            handle.write("secret of learner 1")
        written.append(folder)
    except OSError:
        pass
import subprocess
subprocess.run(["ipcmk", "--shmem", "4096"], capture_output=True)  # a System V segment left for the next job
if os.fork() == 0:  # a process left behind for the next learner's job to talk to
    os.setsid()
    time.sleep(300)
    os._exit(0)
print(json.dumps({"uid": os.getuid(), "pid": os.getpid(), "written": written}))
"""

ZYGOTE_SECOND_JOB = r"""
import json, os, sys
found = [f for f in ("/tmp", "/var/tmp", "/dev/shm", os.getcwd(), os.environ["HOME"])
         if os.path.exists(os.path.join(f, "left-by-job-1"))]
pids = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]
others = sorted(p for p in pids if os.stat(f"/proc/{p}").st_uid != 0)  # bubblewrap's init and the zygote: root
zygote_environ = "denied"
for pid in pids:
    try:
        open(f"/proc/{pid}/environ", "rb").read()
        zygote_environ = "readable"
    except OSError:
        pass
shm = [line.split() for line in open("/proc/sysvipc/shm").read().splitlines()[1:]]
print(json.dumps({"found": found, "others": others, "zygote_environ": zygote_environ, "uid": os.getuid(), "shm": shm}))
"""


def _assert_second_job_found_nothing(run_job, uid: int, what: str) -> None:
    """``run_job(source)`` -> its answer, for the two jobs above in a row: the same uid (``uid``, not root), and
    nothing of the first job (files, processes, the zygote's environment) seen by the second."""
    first, second = run_job(ZYGOTE_FIRST_JOB), run_job(ZYGOTE_SECOND_JOB)
    assert first["uid"] == second["uid"] == uid != 0
    assert len(first["written"]) >= 4, first["written"]
    assert second["found"] == [], f"the second {what} saw files of the first: {second['found']}"
    assert second["others"] == [], f"processes of the first {what} were still running: {second['others']}"
    assert second["zygote_environ"] == "denied"
    assert second["shm"] == [], f"System V shared memory of the first {what} was left: {second['shm']}"


@pytest.fixture(scope="module")
def zygote_slot():
    """One grading slot under bubblewrap as root, its zygotes stopped and its uids released afterwards."""
    import tempfile

    from autograde.grpo_grader.course import load_settings
    from autograde.grpo_grader.sandbox_choice import choose_sandbox
    from autograde.grpo_grader.slots import Slot

    if os.geteuid() != 0:
        pytest.skip("the zygotes exist as root only (not root: a fresh bubblewrap per kernel)")
    settings = load_settings()
    base = Path(tempfile.mkdtemp(prefix="grpo-zygote-test-"))
    sandbox = choose_sandbox(settings, base, slots=1)
    slot = Slot(base, "slot0", settings, sandbox, uid=sandbox.uids[0])
    try:
        yield slot
    finally:
        slot.stop_zygote()
        slot.kill_kernels()
        for handle in sandbox.leases:
            handle.close()
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow
def test_kernel_zygote_jobs_share_nothing(zygote_slot):
    """Two kernels forked from one slot's kernel zygote (as two learners' notebooks are) share no file, process, IPC
    object or environment: the second finds nothing the first left in /tmp, /var/tmp, /dev/shm, its working folder or
    HOME, no process of the first, and cannot read the zygote's environment."""
    slot = zygote_slot
    assert slot.kernel_zygote_enabled

    def run_job(source):
        done = slot.run_sandboxed_code(source, [])
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    _assert_second_job_found_nothing(run_job, slot.uid, "kernel")
    assert slot.kernel_zygote is not None and slot.kernel_zygote.poll() is None, "one zygote served both kernels"


@pytest.mark.slow
def test_kernel_zygote_behaves_like_a_kernel_process(zygote_slot):
    """Through jupyter_client and the slot's kernel spec (as nbgrader starts kernels): the forked
    kernel runs as the slot's uid with the grading environment, an interrupt reaches the running cell, a kernel
    that exits is seen dead, the next kernel starts from the same zygote, a shutdown leaves no process behind, and
    a dead zygote is replaced."""
    import time

    from jupyter_client import KernelManager
    from jupyter_client.kernelspec import KernelSpecManager

    from autograde.grpo_grader.uids import _uids_running

    slot = zygote_slot
    slot.ensure_kernel_zygote()
    zygote = slot.kernel_zygote.pid
    specs = KernelSpecManager(kernel_dirs=[str(slot.jupyter / "kernels")])

    def start():
        manager = KernelManager(
            kernel_spec_manager=specs, kernel_name="python3", transport="ipc", ip=str(slot.ipc / "kernel")
        )
        manager.start_kernel(env={**slot.env(), "NBGRADER_EXECUTION": "autograde"})
        client = manager.client()
        client.start_channels()
        client.wait_for_ready(timeout=60)
        return manager, client

    def run(client, code, timeout=30):
        out = []
        reply = client.execute_interactive(code, timeout=timeout, output_hook=lambda m: out.append(m))
        text = "".join(m["content"].get("text", "") for m in out if m["msg_type"] == "stream")
        return reply["content"], text

    manager, client = start()
    try:
        content, text = run(
            client,
            "import os, sys, torch\n"
            "print(os.getuid(), os.environ.get('NBGRADER_EXECUTION'), os.environ['HOME'] == os.getcwd(),"
            " 'GRPO_GRADING_SEED' in os.environ, sys.path[0] != '')",
        )
        assert content["status"] == "ok", content
        assert text.split() == [str(slot.uid), "autograde", "True", "False", "True"], text
        client.execute("import time; time.sleep(60)")
        time.sleep(1.0)
        asked = time.monotonic()
        manager.interrupt_kernel()
        reply = client.get_shell_msg(timeout=20)
        assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt", reply
        assert time.monotonic() - asked < 10
        client.execute("import os; os._exit(3)")
        deadline = time.monotonic() + 20
        while manager.is_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not manager.is_alive(), "a kernel that exited must be seen dead"
        assert manager.provisioner.process.returncode == 3
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
        manager.cleanup_resources()
    slot.kill_kernels()
    assert slot.kernel_zygote.pid == zygote and slot.kernel_zygote.poll() is None, "the zygote serves the next kernel"
    manager, client = start()
    try:
        content, text = run(client, "print(6 * 7)")
        assert content["status"] == "ok" and text.strip() == "42"
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)  # nbgrader's way (Execute.shutdown_kernel = 'immediate'): SIGKILL
        manager.cleanup_resources()
    deadline = time.monotonic() + 10
    while slot.uid in _uids_running() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert slot.uid not in _uids_running(), "a killed kernel launcher must take its kernel with it"
    slot.kernel_zygote.kill()
    slot.kernel_zygote.wait()
    slot.ensure_kernel_zygote(warm=False)  # the replacement without its imports (~3 CPU-seconds): it is not warmth
    assert slot.kernel_zygote.pid != zygote and slot.kernel_zygote.poll() is None
    done = slot.run_sandboxed_code("import os; print(os.getuid())", [])
    assert done.stdout.split() == [str(slot.uid)], done.stderr[-2000:]


@pytest.mark.slow
def test_a_zygote_outlives_the_thread_that_started_it_but_not_the_grader(zygote_slot):
    """A slot's zygote is started from the thread that grades the slot's first notebook: it serves the next notebook
    after that thread has ended (bubblewrap's --die-with-parent follows the thread and would have killed it), and
    exits once the grader's end of its pipe closes, as when the grader's process dies."""
    import subprocess
    import threading
    import time

    slot = zygote_slot
    slot.stop_zygote()

    def one_job() -> None:
        done = slot.run_sandboxed_code("print('done')", [], warm=False)
        assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr[-2000:]

    thread = threading.Thread(target=one_job)
    thread.start()
    thread.join()
    zygote = slot.kernel_zygote
    time.sleep(1.0)
    assert zygote is not None and zygote.poll() is None, "the zygote died with the thread that started it"
    one_job()
    assert slot.kernel_zygote is zygote, "the next job was served by the same zygote"
    slot._close_alive("kernel")
    try:
        zygote.wait(timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail("the zygote outlived the grader's end of its pipe")
    finally:
        slot.stop_zygote()
