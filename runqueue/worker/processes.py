"""``runworker --processes N``: one command whose slots run in N worker
processes. One process's slots share one interpreter: its claim lanes wait
on their statements and on the GIL in turn, and two processes of four
slots drain faster than one of eight (docs/performance.md, "One process,
eight slots"). The supervisor runs no slot: it splits each ``--slots``
spec over the children, starts them with the same options, forwards
SIGTERM and SIGINT, and exits with them. A child that exits unasked stops
the others and the supervisor exits 1, so a deployment's restart policy
restarts the whole worker, as it would a single process."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from types import FrameType

from django.conf import settings

from runqueue.worker.spec import SlotSpec

logger = logging.getLogger("runqueue.worker")

#: Set in a child's environment: the supervisor speaks for the whole worker
#: (a warning about its slots is given once).
CHILD_ENV = "RUNQUEUE_WORKER_CHILD"
#: The most processes one runworker starts.
PROCESSES_MAX = 32
#: Linux's prctl option that signals a child when its parent dies.
_PR_SET_PDEATHSIG = 1


def split(specs: Sequence[SlotSpec], processes: int) -> list[list[str]]:
    """Each child's ``--slots`` values: every spec's count shared out as
    evenly as possible (the first children take the remainder); a spec of
    fewer slots than processes goes to the first children only. A child
    left with no slot is not started."""
    shares: list[list[str]] = [[] for _ in range(processes)]
    for spec in specs:
        for i in range(processes):
            count = spec.count // processes + (i < spec.count % processes)
            if count:
                shares[i].append(f"{spec.label}={count}" + (":loop" if spec.loop else ""))
    return [share for share in shares if share]


def child_args(options: dict[str, object], slots: list[str], index: int) -> list[str]:
    """The child's runworker options: the supervisor's parsed ones, with its
    own share of slots, its id (``<id>-<index>`` when one was given) and its
    metrics port (``<port> + index``)."""
    out = [f"--verbosity={options['verbosity']}"]
    for name in ("lease_seconds", "sweep_seconds", "poll_seconds", "grace_seconds"):
        out.append(f"--{name.replace('_', '-')}={options[name]!r}")
    if options["heartbeat_seconds"] is not None:
        out.append(f"--heartbeat-seconds={options['heartbeat_seconds']!r}")
    out += [f"--claim-ahead={options['claim_ahead']}", f"--claim-lanes={options['claim_lanes']}"]
    if options["burst"]:
        out.append("--burst")
    if options["metrics_port"] is not None:
        out += [
            f"--metrics-port={int(str(options['metrics_port'])) + index}",
            f"--metrics-host={options['metrics_host']}",
        ]
    if options["worker_id"] is not None:
        out.append(f"--worker-id={options['worker_id']}-{index}")
    for value in slots:
        out.append(f"--slots={value}")
    return out


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the supervisor dies (Linux),
    so a supervisor killed with SIGKILL leaves no worker behind."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


class Supervisor:
    """The children and the signals: ``run()`` returns the exit code."""

    def __init__(self, children: list[list[str]]) -> None:
        self.children = children
        self.procs: list[subprocess.Popen[bytes]] = []
        self.stopping = False

    def _start(self, args: list[str]) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        env["DJANGO_SETTINGS_MODULE"] = settings.SETTINGS_MODULE
        env[CHILD_ENV] = "1"
        # The parent's import path, so ``python -m django`` finds the
        # project however the parent was started (manage.py adds its folder).
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        return subprocess.Popen(  # noqa: S603 - our own interpreter and parsed options
            [sys.executable, "-m", "django", "runworker", *args],
            env=env,
            stdin=subprocess.DEVNULL,
            # Signals reach the children from the supervisor only: a
            # terminal's Ctrl-C would otherwise count twice (a second
            # signal exits at once).
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,  # noqa: PLW1509
        )

    def _forward(self, signum: int, _frame: FrameType | None) -> None:
        if not self.stopping:
            logger.info("Signal %s: stopping %d worker processes", signum, len(self.procs))
        self.stopping = True
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._forward)
        signal.signal(signal.SIGINT, self._forward)
        self.procs = [self._start(args) for args in self.children]
        logger.info(
            "Started %d worker processes: %s",
            len(self.procs),
            ", ".join(str(p.pid) for p in self.procs),
        )
        code = 0
        running = {proc.pid: proc for proc in self.procs}
        while running:
            pid, status = os.wait()  # a signal runs _forward, then waits again
            proc = running.pop(pid, None)
            if proc is None:
                continue
            returned = os.waitstatus_to_exitcode(status)
            proc.returncode = returned
            if returned == 0:
                continue  # asked to stop, or a --burst that drained its share
            if not self.stopping:
                logger.error(
                    "Worker process %d exited with %d: stopping the others", pid, returned
                )
                self._forward(signal.SIGTERM, None)
            code = code or (returned if returned > 0 else 1)
        return code
