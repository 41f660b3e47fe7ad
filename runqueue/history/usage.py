"""What each run cost: model calls' tokens and money, per run and summed
up its tree, its session and its tenant (docs/decisions/run-trees.md, "Usage and
cost").

A handler records each model call with ``ctx.record_usage(model=,
input_tokens=, output_tokens=, cost=None)``. Without a cost, it is priced
from ``RUNQUEUE["PRICES"]`` (per million tokens); a model without a price
records its tokens and an unknown cost (NULL). The record is written
without the lease's fence: a fenced worker's call was paid for too. Each
is keyed by (run, lease epoch, call number under that lease), so the same
call written twice counts once, while a later attempt's calls (a retry
that calls the model again) count as what they are: more calls.

A tree's totals live in its root's ``TreeSpend`` row, updated in the
recording statement; a tree submitted with a ``spend_cap`` ends once its
cost reaches it: every live run of the tree is cancelled with reason
``spend_cap`` (and keeps a failure record saying so), and the recording
call raises ``SpendCapReached`` in the handler.
"""

from __future__ import annotations

import decimal
import itertools
import logging
import threading
import uuid
from dataclasses import dataclass
from decimal import Decimal

from django.db import connection
from django.db.models import Count, Q, QuerySet, Sum

from runqueue.conf import Price, get_settings
from runqueue.errors import SPEND_CAP, SpendCapReached
from runqueue.leases.failures import failure_record
from runqueue.limits import USAGE_MODEL_MAX_LENGTH, USAGE_TOKENS_MAX
from runqueue.models import Run, TreeSpend, Usage
from runqueue.sql import execute
from runqueue.validation import COST_QUANTUM, money, text_problem

logger = logging.getLogger("runqueue.history.usage")

#: Prices are per this many tokens.
PER_TOKENS = 1_000_000


@dataclass(frozen=True, slots=True)
class Recorded:
    """What one ``record_usage`` wrote: whether it counted (False: this call
    was counted before), its cost, and its tree's totals after it."""

    counted: bool
    cost: Decimal | None
    root_id: uuid.UUID
    tree_cost: Decimal
    spend_cap: Decimal | None

    @property
    def capped(self) -> bool:
        return self.spend_cap is not None and self.tree_cost >= self.spend_cap


@dataclass(frozen=True, slots=True)
class Totals:
    """Summed usage: tokens each way, the cost of the calls with one, how
    many calls, and how many of them had no cost (not in ``cost``)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost: Decimal = Decimal(0)
    calls: int = 0
    unpriced_calls: int = 0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def text(amount: Decimal) -> str:
    """An amount as a plain decimal string without trailing zeros: "1.5", "100"."""
    return format(amount.normalize(), "f")


def _tokens(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"record_usage: {what} must be an integer >= 0, got {value!r}")
    if value > USAGE_TOKENS_MAX:
        raise ValueError(f"record_usage: {what} must be at most {USAGE_TOKENS_MAX}, got {value}")
    return value


def checked(
    model: object, input_tokens: object, output_tokens: object, cost: object
) -> tuple[str, int, int, Decimal | None]:
    """The call as stored, its cost priced if not given; ValueError for bad
    input (nothing written)."""
    if not isinstance(model, str) or not model or len(model) > USAGE_MODEL_MAX_LENGTH:
        raise ValueError(
            f"record_usage: model must be a 1-{USAGE_MODEL_MAX_LENGTH} character string, "
            f"got {model!r}"
        )
    if (problem := text_problem(model)) is not None:
        raise ValueError(f"record_usage: model {problem}")
    tokens_in = _tokens(input_tokens, "input_tokens")
    tokens_out = _tokens(output_tokens, "output_tokens")
    if cost is None:
        amount = price(model, tokens_in, tokens_out)
    else:
        amount = money(cost, "record_usage: cost")
    return model, tokens_in, tokens_out, amount


def price(model: str, input_tokens: int, output_tokens: int) -> Decimal | None:
    """What the call cost at ``RUNQUEUE["PRICES"][model]`` (per million
    tokens), or None for a model without a price."""
    found: Price | None = get_settings().PRICES.get(model)
    if found is None:
        return None
    cost = (found.input * input_tokens + found.output * output_tokens) / PER_TOKENS
    return cost.quantize(COST_QUANTUM, rounding=decimal.ROUND_HALF_UP)


class Recorder:
    """A lease's usage calls: numbered, with the run's tree looked up once."""

    def __init__(self) -> None:
        self._numbers = itertools.count()
        self._root: tuple[uuid.UUID, str | None] | None = None
        self._lock = threading.Lock()

    def number(self) -> int:
        with self._lock:
            return next(self._numbers)

    def root(self, run_id: uuid.UUID) -> tuple[uuid.UUID, str | None]:
        if self._root is None:
            self._root = tree_root(run_id)
        return self._root


def tree_root(run_id: uuid.UUID) -> tuple[uuid.UUID, str | None]:
    """The root of ``run_id``'s tree and the root's session."""
    with connection.cursor() as cursor:
        row = execute(cursor, "usage_root", {"run_id": run_id}).fetchone()
    return (row[0], row[1]) if row is not None else (run_id, None)


def record(
    run: Run,
    *,
    epoch: int,
    token: uuid.UUID | None,
    attempt: int,
    call: int,
    root: tuple[uuid.UUID, str | None],
    model: str,
    input_tokens: int,
    output_tokens: int,
    cost: Decimal | None,
) -> Recorded:
    """Write one checked call (``checked``) in one statement, unfenced."""
    params = {
        "run_id": run.id,
        "root_id": root[0],
        "tenant": run.tenant,
        "session_id": root[1],
        "kind": run.kind,
        "epoch": epoch,
        "token": token,
        "call": call,
        "attempt": attempt,
        "model": model,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cost": cost,
    }
    with connection.cursor() as cursor:
        row = execute(cursor, "record_usage", params).fetchone()
    if row is None:  # counted before, in a tree with no totals row: none since
        return Recorded(False, cost, root[0], Decimal(0), None)
    counted, tree_cost, cap = row
    return Recorded(counted, cost, root[0], tree_cost, cap)


def end_capped_tree(recorded: Recorded) -> SpendCapReached:
    """Cancel every live run of a tree whose cost reached its cap (reason
    spend_cap; each keeps a failure record saying so); the error the
    recording handler raises. Any record that finds the tree over its cap
    does it: the first ends the tree, the others find nothing live."""
    from runqueue import leases

    error = SpendCapReached(recorded.root_id, recorded.tree_cost, recorded.spend_cap)
    failure = failure_record(error, classification=SPEND_CAP, attempt=0)
    ended = leases.cancel_tree(
        recorded.root_id, reason=SPEND_CAP, actor="runqueue", failure=failure
    )
    if ended:
        logger.info(
            "Spend cap reached root=%s cost=%s cap=%s cancelled=%d",
            recorded.root_id,
            recorded.tree_cost,
            recorded.spend_cap,
            len(ended),
        )
    return error


# --- sums -------------------------------------------------------------------------


def _totals(rows: QuerySet[Usage]) -> Totals:
    sums = rows.aggregate(
        i=Sum("input_tokens"),
        o=Sum("output_tokens"),
        c=Sum("cost"),
        n=Count("id"),
        u=Count("id", filter=Q(cost__isnull=True)),
    )
    return Totals(
        input_tokens=sums["i"] or 0,
        output_tokens=sums["o"] or 0,
        cost=sums["c"] or Decimal(0),
        calls=sums["n"],
        unpriced_calls=sums["u"],
    )


def run_totals(run_id: uuid.UUID | str) -> Totals:
    """What one run recorded, over all its attempts."""
    return _totals(Usage.objects.filter(run_id=run_id))


def tree_totals(run_id: uuid.UUID | str) -> Totals:
    """What the tree ``run_id`` is in recorded (the root's and every
    descendant's), from its root's totals row."""
    return tree_of(run_id).totals


@dataclass(frozen=True, slots=True)
class Tree:
    """A run's tree as usage sees it: its root, totals and spend cap."""

    root_id: uuid.UUID
    totals: Totals
    spend_cap: Decimal | None


def tree_of(run_id: uuid.UUID | str) -> Tree:
    """``run_id``'s tree: its root, what it recorded, its cap."""
    root, _session = tree_root(uuid.UUID(str(run_id)))
    row = TreeSpend.objects.filter(run_id=root).first()
    if row is None:
        return Tree(root, Totals(), None)
    totals = Totals(
        input_tokens=row.input_tokens,
        output_tokens=row.output_tokens,
        cost=row.cost,
        calls=row.calls,
        unpriced_calls=row.unpriced_calls,
    )
    return Tree(root, totals, row.spend_cap)


def session_totals(tenant: str, session_id: str) -> Totals:
    """What the session's runs recorded, their trees included."""
    return _totals(Usage.objects.filter(tenant=tenant, session_id=session_id))


def tenant_totals(tenant: str, *, since: object = None, until: object = None) -> Totals:
    """What the tenant's runs recorded, optionally between two times
    (recorded at or after ``since``, before ``until``)."""
    rows = Usage.objects.filter(tenant=tenant)
    if since is not None:
        rows = rows.filter(created_at__gte=since)
    if until is not None:
        rows = rows.filter(created_at__lt=until)
    return _totals(rows)


def spend_cap_of(run_id: uuid.UUID | str) -> Decimal | None:
    """The spend cap of ``run_id``'s tree (None: none)."""
    return tree_of(run_id).spend_cap
