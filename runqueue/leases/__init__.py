"""Claim, heartbeat, fenced writes, finish, give up, sweep and cancel.

With ``runqueue.submission`` (its inserts in ``runqueue.submission.inserts``) and the
retention's drop of finished days (``runqueue.history.partitions``), the only
writers of runs. Every worker transaction starts with an UPDATE of the run
row that asserts ``id``, ``lease_epoch``, the claim's random
``lease_token`` and ``status = 'running'``; it writes other rows only if
that returned a row. Zero rows means fenced: the transaction rolls back,
``run.fenced`` is appended in a transaction of its own, and the worker
writes nothing else. Every transition made by anyone but the owner
bumps ``lease_epoch`` and clears ``lease_token``.

This module is the package's public surface: runqueue's other modules use
these names; the modules inside the package import each other directly.
"""

from runqueue.leases.approvals import (
    ON_TIMEOUT,
    approval_signal,
    decide_tool,
    record_tool_awaiting,
    reject_timed_out,
    rejection_message,
)
from runqueue.leases.base import (
    ALL_CLASSES,
    Lease,
    backoff,
    hooks,
    notify,
    notify_cancel,
    notify_payload,
)
from runqueue.leases.claim import (
    WARM_KIND,
    ClaimSpec,
    claim,
    claim_one,
    claim_spec,
    finish_and_claim,
    warm_connection,
)
from runqueue.leases.deadlines import expire_active_turn, expire_unstarted
from runqueue.leases.failures import Failure, failure_record, permanent_failure
from runqueue.leases.forks import failure_cut, fork, fork_from_failure, recorded_steps
from runqueue.leases.reservations import reserve, settle
from runqueue.leases.transitions import (
    cancel,
    cancel_in_transaction,
    cancel_tree,
    requeue,
    resolve_uncertain,
    sweep,
)
from runqueue.leases.turns import STEERS_TOOL, has_steers, take_steers
from runqueue.leases.waits import (
    checked_input,
    deliver_event,
    deliver_input,
    deliver_locked,
    deliver_waiting,
    event_match_problem,
    next_deadline,
    resume_due,
    signal,
    signal_name_problem,
    suspend,
)
from runqueue.leases.writes import (
    PAYLOAD_DIGEST,
    SPAWN_TOOL,
    append_event,
    checkpoint,
    give_up,
    heartbeat,
    heartbeat_many,
    label,
    payload_digest,
    publish_text,
    record_effect,
    record_step,
    record_tool_outcome,
    record_tool_started,
    release,
    spawn,
    wait_for_budget,
    wait_for_user,
    write,
)

__all__ = [
    "ALL_CLASSES",
    "ON_TIMEOUT",
    "PAYLOAD_DIGEST",
    "SPAWN_TOOL",
    "STEERS_TOOL",
    "ClaimSpec",
    "Failure",
    "Lease",
    "append_event",
    "approval_signal",
    "decide_tool",
    "record_tool_awaiting",
    "reject_timed_out",
    "rejection_message",
    "backoff",
    "cancel",
    "cancel_tree",
    "cancel_in_transaction",
    "checkpoint",
    "claim",
    "claim_one",
    "warm_connection",
    "WARM_KIND",
    "claim_spec",
    "checked_input",
    "deliver_event",
    "deliver_input",
    "deliver_locked",
    "deliver_waiting",
    "expire_active_turn",
    "expire_unstarted",
    "finish_and_claim",
    "fork",
    "fork_from_failure",
    "failure_cut",
    "failure_record",
    "give_up",
    "has_steers",
    "heartbeat",
    "heartbeat_many",
    "label",
    "hooks",
    "notify",
    "notify_cancel",
    "notify_payload",
    "payload_digest",
    "permanent_failure",
    "publish_text",
    "recorded_steps",
    "record_effect",
    "record_step",
    "record_tool_outcome",
    "record_tool_started",
    "release",
    "requeue",
    "reserve",
    "resolve_uncertain",
    "settle",
    "next_deadline",
    "resume_due",
    "signal",
    "event_match_problem",
    "signal_name_problem",
    "spawn",
    "suspend",
    "take_steers",
    "sweep",
    "wait_for_budget",
    "wait_for_user",
    "write",
]
