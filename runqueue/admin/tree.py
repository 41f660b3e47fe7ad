"""A run's place in its tree, its session and its wait, as the run page
shows them: the parent and the children as links both ways, the session's
active run and pending turns in order, what a waiting run waits for, since
and until when, and what holds a queued one back (``runqueue.reads.waiting.why``)."""

from __future__ import annotations

import json
import uuid

from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from runqueue.admin.sessions import session_url
from runqueue.history import usage
from runqueue.models import ACTIVE_STATUSES, WAIT_STATUSES, Run, RunStatus, WaitReason
from runqueue.reads import waiting

#: The run page lists at most this many children.
CHILDREN_LIMIT = 100
#: The run page lists at most this many runs of the run's session's line.
LINE_LIMIT = 100
#: A cancel's confirmation walks at most this many runs below the selected.
DESCENDANTS_LIMIT = 1000


def active_descendants(
    run_ids: list[uuid.UUID], limit: int = DESCENDANTS_LIMIT
) -> tuple[list[Run], bool]:
    """The runs a cascading cancel of ``run_ids`` would cancel besides them:
    every non-terminal run below them, level by level as the cancel walks
    (through finished children too: theirs may still run), oldest first per
    level. At most ``limit`` runs are read; True when more are below."""
    seen = {str(i) for i in run_ids}
    found: list[Run] = []
    level = list(run_ids)
    read = 0
    while level and read < limit:
        children = list(
            Run.objects.filter(parent_id__in=level)
            .order_by("created_at", "id")
            .only("id", "kind", "status", "parent_id", "session_id", "tenant", "lease_owner")[
                : limit - read + 1
            ]
        )
        more = len(children) > limit - read
        children = children[: limit - read]
        read += len(children)
        level = []
        for child in children:
            if str(child.id) in seen:
                continue
            seen.add(str(child.id))
            level.append(child.id)
            if child.status in ACTIVE_STATUSES:
                found.append(child)
        if more:
            return found, True
    return found, bool(level) and read >= limit


def run_link(run_id: object, text: str) -> SafeString:
    url = reverse("admin:runqueue_run_change", args=[run_id])
    return format_html('<a href="{}">{}</a>', url, text)


def parent_html(run: Run) -> SafeString:
    if run.parent_id is None:
        return format_html("<span>{}</span>", "None: submitted, not spawned.")
    parent = Run.objects.filter(id=run.parent_id).only("id", "kind", "status").first()
    if parent is None:
        return format_html("<span>{} ({})</span>", run.parent_id, "no longer kept")
    return format_html(
        "{} <span>{} · {}</span>", run_link(parent.id, str(parent.id)), parent.kind, parent.status
    )


def children_html(run: Run) -> SafeString:
    children = list(
        Run.objects.filter(parent_id=run.id)
        .order_by("created_at", "id")
        .only("id", "kind", "status", "finished_at")[: CHILDREN_LIMIT + 1]
    )
    if not children:
        return format_html("<span>{}</span>", "No children.")
    rows = format_html_join(
        "",
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        (
            (run_link(c.id, str(c.id)[:8]), c.kind, c.status, c.finished_at or "")
            for c in children[:CHILDREN_LIMIT]
        ),
    )
    more = (
        format_html("<p>{}</p>", f"The first {CHILDREN_LIMIT} are shown.")
        if len(children) > CHILDREN_LIMIT
        else ""
    )
    return format_html(
        "<p>{} open</p><table><tr><th>child</th><th>kind</th><th>status</th>"
        "<th>finished</th></tr>{}</table>{}",
        run.children_open,
        rows,
        more,
    )


def session_html(run: Run) -> SafeString:
    """The session's line now: its active run, then its pending turns in the
    order they will be queued (on_busy "enqueue")."""
    if run.session_id is None:
        return format_html("<span>{}</span>", "None: the run is in no session.")
    line = list(
        Run.objects.session_line(run.tenant, run.session_id).only(
            "id", "kind", "status", "place", "created_at"
        )[: LINE_LIMIT + 1]
    )
    # The admin's session page (runqueue.admin.sessions): every turn, in order.
    url = session_url(run.tenant, run.session_id)
    every = format_html(
        '<p><a class="rq-session-page" href="{}">{}</a></p>', url, "Every turn of the session"
    )
    if not line:
        return format_html("{}<span>{}</span>", every, "No active run and no pending turn now.")
    rows = format_html_join(
        "",
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        (
            (
                run_link(r.id, str(r.id)[:8]) if r.id != run.id else f"{str(r.id)[:8]} (this run)",
                r.kind,
                r.status,
                r.place if r.status == RunStatus.PENDING else "active",
                r.created_at,
            )
            for r in line[:LINE_LIMIT]
        ),
    )
    pending = sum(1 for r in line if r.status == RunStatus.PENDING)
    return format_html(
        "{}<p>{} pending turn(s) behind the active run, first queued first.</p><table><tr>"
        "<th>run</th><th>kind</th><th>status</th><th>place</th><th>submitted</th></tr>{}"
        "</table>",
        every,
        f"{pending}+" if len(line) > LINE_LIMIT else pending,
        rows,
    )


def wait_html(run: Run) -> SafeString:
    if run.status == RunStatus.PENDING:
        ahead = Run.objects.filter(
            tenant=run.tenant,
            session_id=run.session_id,
            status=RunStatus.PENDING,
            place__lt=run.place,
        ).count()
        return format_html(
            "<span>Pending in its session: queued when the session's active run ends and "
            "the {} pending turn(s) ahead of it have run.</span>",
            ahead,
        )
    if run.status == RunStatus.QUEUED:
        return format_html_join(
            "", '<p class="rq-why">{}</p>', ((line,) for line in waiting.why(run))
        )
    if run.status == RunStatus.RUNNING:
        return format_html("<span>Running, on {}.</span>", run.lease_owner or "a worker")
    if run.status not in WAIT_STATUSES:
        return format_html("<span>Not waiting: it is {}.</span>", run.status)
    what = WaitReason(run.wait_reason).label if run.wait_reason else "the user"
    if run.wait_reason == WaitReason.SIGNAL:
        what = f"signal {run.wait_name!r}"
    if run.wait_reason == WaitReason.EVENT:
        what = f"event {run.wait_name!r} containing {json.dumps(run.wait_match)}"
    if run.wait_reason == WaitReason.CHILDREN:
        what = f"its children ({run.children_open} open)"
    return format_html(
        "<span>Waits for {} since {}, {}.</span>",
        what,
        run.waiting_since or "?",
        f"until {run.wait_until}" if run.wait_until else "with no deadline",
    )


#: The run page lists at most this many forks of a run.
FORKS_LIMIT = 100


def lineage_html(run: Run) -> SafeString:
    """Where the run was forked from, and the runs forked from it."""
    parts = []
    if run.forked_from_id is not None:
        parts.append(
            format_html("Forked from {}.", run_link(run.forked_from_id, str(run.forked_from_id)))
        )
    forks = list(
        Run.objects.filter(forked_from_id=run.id)
        .order_by("-created_at")
        .only("id", "status", "created_at")[: FORKS_LIMIT + 1]
    )
    if forks:
        shown = format_html_join(
            ", ",
            "{} ({})",
            ((run_link(f.id, str(f.id)[:8]), f.get_status_display()) for f in forks[:FORKS_LIMIT]),
        )
        more = f" and more than {FORKS_LIMIT} in all" if len(forks) > FORKS_LIMIT else ""
        parts.append(format_html("Forks: {}{}.", shown, more))
    if not parts:
        return format_html("<span>{}</span>", "Not forked.")
    return format_html_join(" ", "<span class='rq-lineage'>{}</span>", ((p,) for p in parts))


def usage_html(run: Run) -> SafeString:
    """What the run's model calls cost, and its tree's totals with its cap."""
    own = usage.run_totals(run.id)
    tree = usage.tree_of(run.id)

    def line(totals: usage.Totals) -> str:
        unknown = f" ({totals.unpriced_calls} without a cost)" if totals.unpriced_calls else ""
        return (
            f"{totals.calls} call(s), {totals.input_tokens:,} tokens in, "
            f"{totals.output_tokens:,} out, cost {usage.text(totals.cost)}{unknown}"
        )

    cap = f"; spend cap {usage.text(tree.spend_cap)}" if tree.spend_cap is not None else "; no cap"
    root = (
        ""
        if tree.root_id == run.id
        else format_html(" (root {})", run_link(tree.root_id, str(tree.root_id)[:8]))
    )
    return format_html(
        "<div class='rq-usage'>This run: {}.</div>"
        "<div class='rq-tree-usage'>Its tree{}: {}{}.</div>",
        line(own),
        root,
        line(tree.totals),
        cap,
    )
