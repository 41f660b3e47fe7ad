"""The run page shows the run's session line: its active run, then its
pending turns in the order they will be queued, and where a pending run
waits (docs/decisions.md, "Busy sessions: on_busy")."""

from __future__ import annotations

import pytest

import runqueue
from tests.database.admin.test_admin import login

pytestmark = pytest.mark.django_db


def test_the_run_page_shows_the_session_line_in_order() -> None:
    active = runqueue.submit(kind="test.echo", session_id="conv", payload={"n": 0}).run
    second = runqueue.submit(kind="test.echo", session_id="conv", on_busy="enqueue").run
    third = runqueue.submit(kind="test.echo", session_id="conv", on_busy="enqueue").run
    client = login("viewer", "view_run")
    page = client.get(f"/admin/runqueue/run/{third.id}/change/").content.decode()
    assert "2 pending turn(s) behind the active run" in page
    links = [f"/admin/runqueue/run/{r.id}/change/" for r in (active, second)]
    assert all(link in page for link in links)
    assert page.index(links[0]) < page.index(links[1]) < page.index(f"{str(third.id)[:8]} (this")
    assert "Pending in its session" in page
    assert "the 1 pending turn(s) ahead of it have run" in page
    page = client.get(f"/admin/runqueue/run/{active.id}/change/").content.decode()
    assert f"/admin/runqueue/run/{third.id}/change/" in page


def test_a_run_in_no_session_says_so() -> None:
    run = runqueue.submit(kind="test.echo").run
    client = login("viewer", "view_run")
    page = client.get(f"/admin/runqueue/run/{run.id}/change/").content.decode()
    assert "None: the run is in no session." in page
