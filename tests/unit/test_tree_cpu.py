"""loadtest.tree_cpu: the role of each process of a broker, read from its command line."""

from __future__ import annotations

import subprocess
import sys
import time

from loadtest.tree_cpu import TreeSampler, role

# Says it runs, sleeps, then becomes a process whose command line names a pool worker, as a
# forked worker does once it has exec'd.
_EXECS_LATER = (
    "import os, sys, time; print('up', flush=True); time.sleep(1); "
    "os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(5)', "
    "'--worker-id', '3'])"
)


def test_roles_from_command_lines() -> None:
    def started(*args: str) -> subprocess.Popen[bytes]:
        """A process with `args` on its command line, once it runs (has exec'd)."""
        code = "import time; print('up', flush=True); time.sleep(5)"
        process = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE)
        assert process.stdout is not None and process.stdout.readline() == b"up\n"
        return process

    processes = {
        "store": started("-m", "store.store_process"),
        "worker 1": started("--worker-id", "1"),
        "supervisor": started("--workers", "2"),
        "broker": started("--workers", "1"),
    }
    try:
        assert {name: role(process.pid) for name, process in processes.items()} == {
            name: name for name in processes
        }
    finally:
        for process in processes.values():
            process.kill()
            process.wait()
            if process.stdout is not None:
                process.stdout.close()
    assert role(processes["store"].pid) == "gone"


def test_a_process_seen_before_its_exec_gets_the_role_it_execs_into() -> None:
    process = subprocess.Popen([sys.executable, "-c", _EXECS_LATER], stdout=subprocess.PIPE)
    try:
        # Popen returns once the exec has begun, and the kernel fills in the command line a
        # moment later (read empty meanwhile): sample once the child says it runs.
        assert process.stdout is not None and process.stdout.readline() == b"up\n"
        sampler = TreeSampler(process.pid)
        sampler.sample()
        assert sampler.report()[0]["role"] == "broker"  # its parent's kind of command line
        deadline = time.monotonic() + 5
        while sampler.report()[0]["role"] != "worker 3" and time.monotonic() < deadline:
            time.sleep(0.1)
            sampler.sample()
        assert sampler.report()[0]["role"] == "worker 3"
    finally:
        process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


def test_a_process_that_exited_keeps_the_role_it_had() -> None:
    """An exited child not yet reaped (a pool's worker at shutdown) is still in the tree with
    its CPU time, and an empty command line: it keeps the role it was seen with."""
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; "
            "child = subprocess.Popen([sys.executable, '-c', "
            "'import time; print(\"up\", flush=True); time.sleep(1)', '--worker-id', '0']); "
            "time.sleep(5)",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert parent.stdout is not None and parent.stdout.readline() == b"up\n"
        sampler = TreeSampler(parent.pid)
        sampler.sample()
        (child,) = [row for row in sampler.report() if row["pid"] != parent.pid]
        assert child["role"] == "worker 0"
        child_pid = child["pid"]
        assert isinstance(child_pid, int)
        deadline = time.monotonic() + 5
        while not _is_zombie(child_pid):  # the child exits; its parent does not reap it
            assert time.monotonic() < deadline
            time.sleep(0.05)
        sampler.sample()
        assert [row["role"] for row in sampler.report() if row["pid"] == child_pid] == ["worker 0"]
    finally:
        parent.kill()
        parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()


def _is_zombie(pid: int) -> bool:
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
