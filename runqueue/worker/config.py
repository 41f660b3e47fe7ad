"""How a pool runs: ``PoolConfig``, its defaults from the RUNQUEUE settings
and the runworker options."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field

from runqueue.conf import get_settings
from runqueue.worker.spec import DEFAULT_SLOTS, SlotSpec

CLAIM_BATCH = 32
#: Leases a slot group may claim beyond its idle slots while its runs are
#: short (docs/performance.md: chosen by measurement).
CLAIM_AHEAD = 16
#: Claim lanes per non-interactive slot group: two overlap one lane's
#: statement with the other's Python (docs/performance.md: by measurement).
CLAIM_LANES = 2
CLAIM_LANES_MAX = 8
#: How often a worker schedules the housekeeping pass.
HOUSEKEEPING_SECONDS = 600
#: The address ``--metrics-port`` binds when no ``--metrics-host`` is given.
METRICS_HOST = "0.0.0.0"  # noqa: S104 - a scrape target, reached from Prometheus


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True, kw_only=True)
class PoolConfig:
    """How a pool runs; every default comes from the RUNQUEUE settings."""

    slots: tuple[SlotSpec, ...] = field(
        default_factory=lambda: tuple(SlotSpec.parse(s) for s in DEFAULT_SLOTS)
    )
    lease_seconds: float = field(default_factory=lambda: get_settings().LEASE_SECONDS)
    heartbeat_seconds: float = field(default_factory=lambda: get_settings().HEARTBEAT_SECONDS)
    sweep_seconds: float = field(default_factory=lambda: get_settings().SWEEP_SECONDS)
    poll_seconds: float = field(default_factory=lambda: get_settings().POLL_SECONDS)
    grace_seconds: float = field(default_factory=lambda: get_settings().GRACE_SECONDS)
    housekeeping_seconds: float = HOUSEKEEPING_SECONDS
    #: At most this many runs per claim statement; a slot group claims for
    #: its idle slots only, so this caps the batch of a large group.
    claim_batch: int = CLAIM_BATCH
    #: At most this many leases held beyond the idle slots of a group, while
    #: its runs are short (``claim_ahead.AHEAD_BELOW_SECONDS``); 0 turns it off.
    claim_ahead: int = CLAIM_AHEAD
    #: A non-interactive ``--slots`` group runs as up to this many slot
    #: groups (lanes), each with its own claim thread and connection.
    claim_lanes: int = CLAIM_LANES
    burst: bool = False
    worker_id: str = field(default_factory=default_worker_id)
    #: Serve this worker's Prometheus metrics on this port (None: not served).
    metrics_port: int | None = None
    metrics_host: str = METRICS_HOST

    def __post_init__(self) -> None:
        if not self.slots:
            raise ValueError("a pool needs at least one slot")
        if not 1 <= self.claim_lanes <= CLAIM_LANES_MAX:
            raise ValueError(
                f"claim lanes must be between 1 and {CLAIM_LANES_MAX}, got {self.claim_lanes}"
            )
        if self.heartbeat_seconds >= self.lease_seconds:
            raise ValueError(
                f"heartbeat every {self.heartbeat_seconds}s would let a {self.lease_seconds}s "
                "lease expire between heartbeats: make --heartbeat-seconds shorter"
            )
