"""Reads from a replica on a real primary and streaming standby, run as a
process of its own (``python -m tests.topologies.replica_reads <folder>
<primary port> <standby port>``) with Django's ``default`` on the primary
and ``replica`` on the standby (RUNQUEUE["READ_DATABASE"]). Prints one
JSON object; ``tests/topologies/test_replica_reads.py`` asserts on it.

Which server served a read is proven by what it saw: the standby's replay
is paused (``pg_wal_replay_pause()``), so the writes after it are on the
primary only. Then: a run cancelled through the API (run A, replicated
before the pause), a worker's run (W) claimed and finished, runs submitted
(B through the API, D and E in code), D cancelled by a console action.
Each read says which of those it saw.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

#: RUNQUEUE["READ_LAG_WARNING_SECONDS"] here: past it, reads say so.
WARNING = 0.5
LIST = "/admin/runqueue/run/"
DASHBOARD = "/admin/runqueue/run/dashboard/"
NOTICE = "Read from a replica"


def main(folder: str, primary_port: int, standby_port: int) -> dict[str, Any]:
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client, override_settings
    from django.test.utils import setup_test_environment

    import runqueue
    from runqueue import leases, reads, testing
    from runqueue.models import Run
    from tests.api_helpers import make_caller
    from tests.helpers import wait_until
    from tools.topology.clusters import Pair

    setup_test_environment()  # responses carry their template context
    pair = Pair(Path(folder), (primary_port, standby_port))
    call_command("migrate", verbosity=0)
    boss = get_user_model().objects.create_superuser("boss", "boss@example.com", "pw-boss")
    caller = make_caller("client", "acme")
    staff, api = Client(), Client()
    staff.force_login(boss)
    seen: dict[str, Any] = {}

    def get(client: Client, url: str, **headers: str) -> Any:
        return client.get(url, headers={"Host": "localhost", **headers}, secure=True)

    def api_get(url: str) -> Any:
        return get(api, url, **caller.headers())

    def api_post(url: str, body: dict | None = None, key: str | None = None) -> Any:
        return api.post(
            url,
            data=json.dumps(body or {}),
            content_type="application/json",
            headers={"Host": "localhost", **caller.headers(key)},
            secure=True,
        )

    def queued_in_metrics() -> float:
        text = get(api, "/metrics").content.decode()
        return sum(
            float(v) for v in re.findall(r'runqueue_runs\{[^}]*status="queued"\} (\S+)', text)
        )

    def lag_past(threshold: float) -> bool:
        replay = reads.measure("replica", fresh=True)
        return replay is not None and (replay.lag is None or replay.lag > threshold)

    def received_all() -> bool:
        (end,) = pair.sql(pair.primary, "SELECT pg_current_wal_insert_lsn()")[0]
        (got,) = pair.sql(pair.standby, "SELECT pg_last_wal_receive_lsn() >= %s::pg_lsn", [end])[0]
        return got

    base = settings.RUNQUEUE | {"READ_DATABASE": "replica", "READ_LAG_WARNING_SECONDS": WARNING}
    lagging = override_settings(RUNQUEUE=base | {"READ_MAX_LAG_SECONDS": None})
    lagging.enable()

    a = runqueue.submit(kind="k", tenant="acme", session_id="s-1").run
    pair.wait_replayed()
    wait_until(lambda: not lag_past(0), what="the standby caught up")
    page = get(staff, LIST)
    seen["caught_up"] = {
        "list_has_a": str(a.id)[:8] in page.content.decode(),
        "notice": NOTICE in page.content.decode(),
        "header": reads.LAG_HEADER in api_get(f"/api/runs/{a.id}/events/"),
    }

    pair.sql(pair.standby, "SELECT pg_wal_replay_pause()")
    # -- on the primary only from here ----------------------------------
    cancelled = api_post(f"/api/runs/{a.id}/cancel/")
    w = runqueue.submit(kind="test.echo", tenant="acme", payload={"n": 1}).run
    lease = leases.claim_one("worker-R", lease_seconds=60)
    worked = lease is not None and lease.run_id == w.id and testing.execute(lease)
    submitted = api_post("/api/runs/", {"kind": "k"}, key="replica-b")
    b = submitted.json()["id"]
    location = api_get(submitted["Location"])
    d = runqueue.submit(kind="k", tenant="acme").run
    e = runqueue.submit(kind="k", tenant="acme").run
    seen["primary"] = {
        "cancel_status": cancelled.status_code,
        "worker_outcome": worked,
        "w_status": Run.objects.get(id=w.id).status,
        "submit_status": submitted.status_code,
        "location_status": location.status_code,
        "location_run": location.json().get("status"),
        "new_run_events": [
            ev["type"] for ev in api_get(f"/api/runs/{b}/events/").json()["events"]
        ],
    }
    wait_until(received_all, what="the standby received the primary's WAL")
    wait_until(lambda: lag_past(WARNING), what="the replica's lag past the warning")

    a_run = api_get(f"/api/runs/{a.id}/")
    a_events = api_get(f"/api/runs/{a.id}/events/")
    a_steps = api_get(f"/api/runs/{a.id}/steps/")
    a_session = api_get("/api/sessions/s-1/")
    listing = get(staff, LIST).content.decode()
    dashboard = get(staff, DASHBOARD)
    metrics = get(api, "/metrics")
    seen["replica"] = {
        "a_status_on_primary": a_run.json()["status"],
        "a_run_header": reads.LAG_HEADER in a_run,
        "a_event_types": [ev["type"] for ev in a_events.json()["events"]],
        "events_header": a_events.get(reads.LAG_HEADER),
        "steps_header": a_steps.get(reads.LAG_HEADER),
        "session_active": (a_session.json()["active"] or {}).get("id"),
        "session_header": a_session.get(reads.LAG_HEADER),
        "list_has": {n: str(r)[:8] in listing for n, r in (("a", a.id), ("b", b), ("d", d.id))},
        "list_notice": NOTICE in listing,
        "dashboard_notice": NOTICE in dashboard.content.decode(),
        "dashboard_finished_hour": dashboard.context["finished_hour"],
        "metrics_queued": queued_in_metrics(),
        "metrics_header": metrics.get(reads.LAG_HEADER),
        "metrics_lag_gauge": "runqueue_read_lag_seconds " in metrics.content.decode(),
    }

    # A run the replica has not seen: its page and a console action read
    # and write the primary, and the list after the action too.
    change = get(staff, f"{LIST}{d.id}/change/")
    acted = staff.post(
        LIST,
        {
            "action": "cancel_runs",
            "_selected_action": [str(d.id)],
            "confirm": "yes",
            "reason": "r",
        },
        headers={"Host": "localhost"},
        secure=True,
        follow=True,
    )
    after = acted.content.decode()
    seen["action"] = {
        "change_page": change.status_code,
        "d_status": Run.objects.get(id=d.id).status,
        "list_after_has_d": str(d.id)[:8] in after,
        "list_after_notice": NOTICE in after,
        "still_lagging": lag_past(WARNING),
    }

    pair.sql(pair.standby, "SELECT pg_wal_replay_resume()")
    pair.wait_replayed()
    wait_until(lambda: not lag_past(0), what="the standby caught up again")
    reads.forget()
    listing = get(staff, LIST).content.decode()
    events = api_get(f"/api/runs/{a.id}/events/")
    seen["resumed"] = {
        "list_has": {n: str(r)[:8] in listing for n, r in (("b", b), ("e", e.id), ("w", w.id))},
        "list_notice": NOTICE in listing,
        "a_event_types": [ev["type"] for ev in events.json()["events"]],
        "events_header": events.get(reads.LAG_HEADER),
        "dashboard_finished_hour": get(staff, DASHBOARD).context["finished_hour"],
        "metrics_queued": queued_in_metrics(),
    }
    lagging.disable()

    # Past READ_MAX_LAG_SECONDS, and with the standby down: the primary.
    with override_settings(RUNQUEUE=base | {"READ_MAX_LAG_SECONDS": WARNING}):
        pair.sql(pair.standby, "SELECT pg_wal_replay_pause()")
        f = runqueue.submit(kind="k", tenant="acme").run
        wait_until(received_all, what="the standby received the primary's WAL")
        wait_until(lambda: lag_past(WARNING), what="the replica's lag past the limit")
        reads.forget()
        listing = get(staff, LIST).content.decode()
        seen["too_far_behind"] = {
            "list_has_f": str(f.id)[:8] in listing,
            "list_notice": NOTICE in listing,
            "metrics_lag_gauge": "runqueue_read_lag_seconds "
            in get(api, "/metrics").content.decode(),
        }
        pair.standby.stop("immediate")
        reads.forget()
        g = runqueue.submit(kind="k", tenant="acme").run
        listing = get(staff, LIST)
        events = api_get(f"/api/runs/{g.id}/events/")
        seen["standby_down"] = {
            "list_status": listing.status_code,
            "list_has_g": str(g.id)[:8] in listing.content.decode(),
            "events_status": events.status_code,
            "events_header": events.get(reads.LAG_HEADER),
            "metrics_status": get(api, "/metrics").status_code,
        }
    return seen


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])), default=str))
