"""The baseline: runqueue's schema in one migration, in place of 0001_initial
to 0034_schedules_api.

A database with none of the 34 applied gets this one: the tables, partitions,
indexes, constraints, functions, triggers and the view, each made once, where
the chain made them again and again (``runqueue_claim_capped`` seven times).
Django records the 34 as applied with it, and records it as applied on a
database that had all 34 already (``migrate`` then has nothing to do). A
database with some but not all of them applied goes on through the old files.
They stay until a later release, which deletes them (and this ``replaces``)
once every deployment has migrated past 0034; a deployment still short of it
then upgrades through a release that has both (docs/operations.md,
"Upgrading").

Django's state (``state_operations``) is the chain's: the state its last
migration leaves, one CreateModel per model (the models' too: makemigrations
finds nothing to do). The database gets
``0001_squashed_0034_schedules_api.sql`` beside this file: the schema taken
with ``pg_dump --schema-only`` from a database migrated through the 34,
runqueue's objects only, frozen as every migration is (its head says how, and
where it departs from pg_dump's text). Two things are decided at migrate time,
as the chain decided them:

- the user model's foreign key (``ApiToken.user``): its type, the table and
  key it references and its constraint name are those of the project's
  ``AUTH_USER_MODEL``, put in for the file's markers;
- the day partitions of finished runs and events, today (UTC) and three days
  ahead, made by the loop 0009_history ran.

Nothing else depends on the day or on data: the chain inserts no rows (the
content types and permissions come from Django's post_migrate, as before).
The reverse drops everything the file made; the day partitions the worker
made since go with their parents (a day a prune detached and never dropped
stays, as it does when the chain is reversed).
tests/database/history/test_baseline.py migrates one database through the
chain and one from this migration and compares their catalogs.

A later migration that changes a database function follows
docs/decisions/project.md, "Migrations and database functions": a function
the code calls by name is installed under a new name
(``runqueue_claim_capped_v2``), its callers in runqueue/sql/ switched to it,
and no migration imports another.
"""

import uuid
from pathlib import Path

import django.db.models.deletion
import django.db.models.functions.datetime
from django.conf import settings
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.backends.utils import split_identifier
from django.db.migrations.state import StateApps

SQL = Path(__file__).with_suffix(".sql").read_text(encoding="utf-8")

# Dropped in this order: the view, the function that takes runqueue_budget's
# row type, the tables (their partitions, triggers, sequences and statistics
# with them), the other functions.
BACKWARD = """
DROP VIEW runqueue_event_log;
DROP FUNCTION runqueue_budget_window(runqueue_budget, timestamp with time zone);
DROP TABLE runqueue_api_token, runqueue_api_token_quota, runqueue_budget,
    runqueue_checkpoint, runqueue_concurrency_limit, runqueue_event_delivery,
    runqueue_event_trigger, runqueue_idempotency_key, runqueue_inbound_event,
    runqueue_paused_kind, runqueue_queue_event, runqueue_run,
    runqueue_run_event, runqueue_schedule, runqueue_schedule_tick,
    runqueue_signal, runqueue_stream_watch, runqueue_tool_invocation,
    runqueue_tree_spend, runqueue_usage, runqueue_webhook_delivery,
    runqueue_webhook_endpoint, runqueue_webhook_target, runqueue_worker;
DROP FUNCTION runqueue_between_turns(uuid),
    runqueue_budget_bucket(integer, timestamp with time zone),
    runqueue_budget_charge(bigint, bigint, bigint, bigint),
    runqueue_budget_refund(text, text, timestamp with time zone, bigint),
    runqueue_budget_settle(text, text, timestamp with time zone, bigint, bigint),
    runqueue_budget_take(text, text, bigint, boolean),
    runqueue_claim_capped(integer, integer, integer, integer[], integer[], uuid[], bigint[], uuid[], text[], integer[], text[], text[], integer[]),
    runqueue_claim_version(uuid, text, integer, text[], integer[], text[], text[], integer[]),
    runqueue_claimed_data(text, uuid, integer, integer, integer),
    runqueue_event_notify(),
    runqueue_join(uuid[], text),
    runqueue_priority_class(integer),
    runqueue_priority_class_high(integer),
    runqueue_priority_class_low(integer),
    runqueue_priority_classes(),
    runqueue_promote(text[], text[], text),
    runqueue_recount(uuid[], text),
    runqueue_run_log_kept(),
    runqueue_tree_root(uuid),
    runqueue_webhook_enqueue(uuid, text, text, text, text, text, jsonb),
    runqueue_webhook_event(),
    runqueue_webhook_run(),
    runqueue_webhook_sync();
"""


def _user_markers(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> dict[str, str]:
    """The SQL file's markers for the project's user model: what CreateModel
    gave ``ApiToken.user`` in 0001_initial."""
    user = apps.get_model(settings.AUTH_USER_MODEL)
    key = user._meta.pk
    assert key is not None
    table = split_identifier(user._meta.db_table)[1]
    # The name CreateModel gave the key: the schema editor's, as its
    # ForeignKeyName composes it (a private method the stubs leave out).
    name = schema_editor._create_index_name(  # type: ignore[attr-defined]
        "runqueue_api_token", ["user_id"], suffix=f"_fk_{table}_{key.column}"
    )
    return {
        "user_id_type": key.rel_db_type(schema_editor.connection),
        "user_table": schema_editor.quote_name(user._meta.db_table),
        "user_pk": schema_editor.quote_name(key.column),
        "user_fk": schema_editor.quote_name(name),
    }


def forward(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    text = SQL
    for marker, value in _user_markers(apps, schema_editor).items():
        text = text.replace("{{" + marker + "}}", value)
    schema_editor.execute(text, params=None)


def backward(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    schema_editor.execute(BACKWARD, params=None)


class Migration(migrations.Migration):
    replaces = [
        ("runqueue", "0001_initial"),
        ("runqueue", "0002_scheduled_work"),
        ("runqueue", "0003_observability"),
        ("runqueue", "0004_concurrency"),
        ("runqueue", "0005_priority_class_functions"),
        ("runqueue", "0006_function_source"),
        ("runqueue", "0007_schedule_overlap"),
        ("runqueue", "0008_worker_cancelled_slots"),
        ("runqueue", "0009_history"),
        ("runqueue", "0010_lease_token"),
        ("runqueue", "0011_budgets"),
        ("runqueue", "0012_subagents"),
        ("runqueue", "0013_budget_refunds"),
        ("runqueue", "0014_fanin"),
        ("runqueue", "0015_deadlines"),
        ("runqueue", "0016_lean_indexes"),
        ("runqueue", "0017_fork_usage"),
        ("runqueue", "0018_busy_sessions"),
        ("runqueue", "0019_versions"),
        ("runqueue", "0020_resume_once"),
        ("runqueue", "0021_tree_root_without_jit"),
        ("runqueue", "0022_principal_index_partial"),
        ("runqueue", "0023_event_key_by_run"),
        ("runqueue", "0024_claim_and_success_on_the_row"),
        ("runqueue", "0025_claim_plan_without_statistics"),
        ("runqueue", "0026_live_fillfactor"),
        ("runqueue", "0027_tool_approvals"),
        ("runqueue", "0028_session_turns"),
        ("runqueue", "0029_webhooks"),
        ("runqueue", "0030_inbound_events"),
        ("runqueue", "0031_session_reads"),
        ("runqueue", "0032_webhook_trigger_on_demand"),
        ("runqueue", "0033_pause_run"),
        ("runqueue", "0034_schedules_api"),
    ]

    initial = True

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(forward, backward)],
            state_operations=[
                migrations.CreateModel(
                    name="Worker",
                    fields=[
                        (
                            "id",
                            models.CharField(max_length=255, primary_key=True, serialize=False),
                        ),
                        ("hostname", models.CharField(max_length=255)),
                        ("pid", models.IntegerField()),
                        ("slots", models.JSONField(blank=True, default=dict)),
                        (
                            "started_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        (
                            "last_seen_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        ("stopped_at", models.DateTimeField(blank=True, null=True)),
                        ("cancelled_slots", models.JSONField(blank=True, default=list)),
                        ("kinds", models.JSONField(blank=True, db_default={}, default=dict)),
                    ],
                    options={
                        "db_table": "runqueue_worker",
                        "ordering": ["-last_seen_at"],
                        "indexes": [],
                        "constraints": [],
                    },
                ),
                migrations.CreateModel(
                    name="ApiToken",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("name", models.CharField(blank=True, default="", max_length=255)),
                        ("tenant", models.CharField(default="default", max_length=255)),
                        ("prefix", models.CharField(max_length=16, unique=True)),
                        ("key_hash", models.CharField(max_length=64)),
                        (
                            "created_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        ("last_used_at", models.DateTimeField(blank=True, null=True)),
                        ("revoked_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "user",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="runqueue_api_tokens",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "max_priority_class",
                            models.SmallIntegerField(
                                choices=[(0, "Interactive"), (10, "Async"), (20, "Maintenance")],
                                default=10,
                                help_text="The most urgent class this token may submit to.",
                                verbose_name="highest priority class",
                            ),
                        ),
                        (
                            "submit_quota",
                            models.PositiveIntegerField(
                                blank=True,
                                default=60,
                                help_text="Submits allowed per window; empty for no quota.",
                                null=True,
                            ),
                        ),
                        (
                            "submit_window_seconds",
                            models.PositiveIntegerField(
                                default=60, help_text="The quota's window, in seconds."
                            ),
                        ),
                    ],
                    options={
                        "verbose_name": "API token",
                        "db_table": "runqueue_api_token",
                        "indexes": [],
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(("max_priority_class__in", [0, 10, 20])),
                                name="runqueue_api_token_class_valid",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("submit_window_seconds__gte", 1)),
                                name="runqueue_api_token_window_gte_1",
                            ),
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="Run",
                    fields=[
                        (
                            "id",
                            models.UUIDField(
                                default=uuid.uuid4,
                                editable=False,
                                primary_key=True,
                                serialize=False,
                            ),
                        ),
                        ("tenant", models.CharField(default="default", max_length=255)),
                        ("principal", models.CharField(blank=True, default="", max_length=255)),
                        ("session_id", models.CharField(blank=True, max_length=255, null=True)),
                        ("kind", models.CharField(max_length=255)),
                        ("payload", models.JSONField(blank=True, default=dict)),
                        (
                            "status",
                            models.CharField(
                                choices=[
                                    ("queued", "Queued"),
                                    ("running", "Running"),
                                    ("waiting_for_user", "Waiting for user"),
                                    ("waiting", "Waiting"),
                                    ("pending", "Pending (behind its session's active run)"),
                                    ("succeeded", "Succeeded"),
                                    ("failed", "Failed (dead-lettered)"),
                                    ("cancelled", "Cancelled"),
                                ],
                                default="queued",
                                max_length=20,
                            ),
                        ),
                        ("priority", models.SmallIntegerField(default=0)),
                        ("attempts", models.IntegerField(default=0)),
                        ("max_attempts", models.IntegerField(default=3)),
                        ("scheduled_for", models.DateTimeField(blank=True, null=True)),
                        ("lease_epoch", models.BigIntegerField(default=0)),
                        ("lease_owner", models.CharField(blank=True, default="", max_length=255)),
                        ("lease_expires_at", models.DateTimeField(blank=True, null=True)),
                        ("heartbeat_at", models.DateTimeField(blank=True, null=True)),
                        ("input", models.JSONField(blank=True, null=True)),
                        ("failure", models.JSONField(blank=True, null=True)),
                        ("result", models.JSONField(blank=True, null=True)),
                        (
                            "created_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        ("started_at", models.DateTimeField(blank=True, null=True)),
                        ("finished_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "traceparent",
                            models.CharField(blank=True, db_default="", default="", max_length=55),
                        ),
                        ("concurrency_key", models.CharField(max_length=255)),
                        ("lease_token", models.UUIDField(blank=True, editable=False, null=True)),
                        ("budget_key", models.CharField(blank=True, max_length=255, null=True)),
                        ("budget_reserved", models.BigIntegerField(db_default=0, default=0)),
                        ("budget_tokens", models.IntegerField(blank=True, null=True)),
                        ("budget_used", models.BigIntegerField(db_default=0, default=0)),
                        (
                            "children_open",
                            models.IntegerField(db_default=0, default=0, editable=False),
                        ),
                        (
                            "parent",
                            models.ForeignKey(
                                blank=True,
                                db_constraint=False,
                                db_index=False,
                                editable=False,
                                null=True,
                                on_delete=django.db.models.deletion.DO_NOTHING,
                                related_name="children",
                                to="runqueue.run",
                            ),
                        ),
                        ("timed_out", models.BooleanField(db_default=False, default=False)),
                        (
                            "wait_name",
                            models.CharField(
                                blank=True, db_default="", default="", max_length=255
                            ),
                        ),
                        (
                            "wait_reason",
                            models.CharField(
                                blank=True,
                                choices=[
                                    ("children", "Its children"),
                                    ("signal", "A signal"),
                                    ("timer", "A time"),
                                    ("user", "The user"),
                                    ("event", "An inbound event"),
                                ],
                                db_default="",
                                default="",
                                max_length=16,
                            ),
                        ),
                        ("wait_until", models.DateTimeField(blank=True, null=True)),
                        ("waiting_since", models.DateTimeField(blank=True, null=True)),
                        ("start_by", models.DateTimeField(blank=True, editable=False, null=True)),
                        ("max_duration", models.FloatField(blank=True, editable=False, null=True)),
                        (
                            "forked_from",
                            models.ForeignKey(
                                blank=True,
                                db_constraint=False,
                                db_index=False,
                                editable=False,
                                null=True,
                                on_delete=django.db.models.deletion.DO_NOTHING,
                                related_name="forks",
                                to="runqueue.run",
                            ),
                        ),
                        (
                            "interrupted",
                            models.ForeignKey(
                                blank=True,
                                db_constraint=False,
                                db_index=False,
                                editable=False,
                                null=True,
                                on_delete=django.db.models.deletion.DO_NOTHING,
                                related_name="interrupted_by",
                                to="runqueue.run",
                            ),
                        ),
                        ("place", models.BigIntegerField(blank=True, editable=False, null=True)),
                        (
                            "handler_version",
                            models.IntegerField(blank=True, editable=False, null=True),
                        ),
                        (
                            "claim_event_id",
                            models.BigIntegerField(blank=True, editable=False, null=True),
                        ),
                        (
                            "claimed_at",
                            models.DateTimeField(blank=True, editable=False, null=True),
                        ),
                        (
                            "claim_wait_ms",
                            models.IntegerField(blank=True, editable=False, null=True),
                        ),
                        (
                            "success_event_id",
                            models.BigIntegerField(blank=True, editable=False, null=True),
                        ),
                        (
                            "created_event_id",
                            models.BigIntegerField(blank=True, editable=False, null=True),
                        ),
                        ("turn", models.JSONField(blank=True, null=True)),
                        ("wait_match", models.JSONField(blank=True, editable=False, null=True)),
                        ("paused_at", models.DateTimeField(blank=True, editable=False, null=True)),
                    ],
                    options={
                        "db_table": "runqueue_run",
                        "ordering": ["-created_at"],
                        "permissions": [
                            ("requeue_run", "Can requeue a dead-lettered run"),
                            ("cancel_run", "Can cancel a run"),
                            ("resolve_uncertain", "Can resolve an uncertain tool invocation"),
                            ("fork_run", "Can fork a finished run from one of its steps"),
                            (
                                "decide_tool",
                                "Can approve, reject, edit or answer a tool call awaiting approval",
                            ),
                        ],
                        "indexes": [
                            models.Index(
                                condition=models.Q(("status", "queued")),
                                fields=["priority", "created_at"],
                                name="runqueue_run_claim_idx",
                            ),
                            models.Index(
                                condition=models.Q(
                                    ("status__in", ["running", "waiting_for_user"])
                                ),
                                fields=["status", "id"],
                                name="runqueue_run_leased_idx",
                            ),
                            models.Index(
                                fields=["tenant", "session_id"], name="runqueue_run_session_idx"
                            ),
                            models.Index(
                                fields=["created_at", "id"], name="runqueue_run_created_idx"
                            ),
                            models.Index(
                                condition=models.Q(("status", "failed")),
                                fields=["finished_at"],
                                name="runqueue_run_failed_idx",
                            ),
                            models.Index(
                                condition=models.Q(
                                    ("concurrency_key__isnull", False),
                                    ("status__in", ["queued", "running"]),
                                ),
                                fields=["concurrency_key", "status", "priority", "created_at"],
                                name="runqueue_run_key_idx",
                            ),
                            models.Index(
                                fields=["kind", "created_at"], name="runqueue_run_kind_idx"
                            ),
                            models.Index(
                                fields=["priority", "created_at"], name="runqueue_run_priority_idx"
                            ),
                            models.Index(
                                condition=models.Q(
                                    ("budget_key__isnull", False), ("status", "queued")
                                ),
                                fields=["budget_key", "tenant"],
                                name="runqueue_run_budget_idx",
                            ),
                            models.Index(
                                condition=models.Q(("parent__isnull", False)),
                                fields=["parent"],
                                name="runqueue_run_parent_idx",
                            ),
                            models.Index(
                                condition=models.Q(
                                    ("status__in", ("waiting", "waiting_for_user")),
                                    ("wait_until__isnull", False),
                                ),
                                fields=["wait_until"],
                                name="runqueue_run_deadline_idx",
                            ),
                            models.Index(
                                condition=models.Q(
                                    ("status__in", ("waiting", "waiting_for_user"))
                                ),
                                fields=["wait_reason", "id"],
                                name="runqueue_run_waiting_idx",
                            ),
                            models.Index(
                                condition=models.Q(("session_id__isnull", False)),
                                fields=["session_id"],
                                name="runqueue_run_session_id_idx",
                            ),
                            models.Index(fields=["finished_at"], name="runqueue_run_finished_idx"),
                            models.Index(
                                condition=models.Q(("forked_from__isnull", False)),
                                fields=["forked_from"],
                                name="runqueue_run_forked_from_idx",
                            ),
                            models.Index(
                                condition=models.Q(
                                    ("start_by__isnull", False),
                                    ("status__in", ("queued", "pending")),
                                ),
                                fields=["start_by"],
                                name="runqueue_run_start_by_idx",
                            ),
                            models.Index(
                                condition=models.Q(("principal", ""), _negated=True),
                                fields=["principal"],
                                name="runqueue_run_principal_idx",
                            ),
                            models.Index(
                                condition=models.Q(
                                    ("status", "waiting"), ("wait_reason", "event")
                                ),
                                fields=["tenant", "wait_name"],
                                name="runqueue_run_event_wait_idx",
                            ),
                            models.Index(
                                condition=models.Q(("session_id__isnull", False)),
                                fields=["tenant", "session_id", "created_at", "id"],
                                name="runqueue_run_session_turns_idx",
                            ),
                        ],
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(("priority__gte", 0)),
                                name="runqueue_run_priority_gte_0",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("attempts__gte", 0),
                                    ("attempts__lte", models.F("max_attempts")),
                                ),
                                name="runqueue_run_attempts_in_range",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("max_attempts__gte", 1)),
                                name="runqueue_run_max_attempts_gte_1",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("lease_epoch__gte", 0)),
                                name="runqueue_run_epoch_gte_0",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    models.Q(("status", "running"), _negated=True),
                                    ("lease_expires_at__isnull", False),
                                    _connector="OR",
                                ),
                                name="runqueue_run_running_has_lease",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("kind", ""), _negated=True),
                                name="runqueue_run_kind_not_empty",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("budget_key__isnull", True),
                                    models.Q(
                                        ("budget_tokens__gte", 0), ("budget_tokens__isnull", False)
                                    ),
                                    _connector="OR",
                                ),
                                name="runqueue_run_budget_declared",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("children_open__gte", 0)),
                                name="runqueue_run_children_open_gte_0",
                            ),
                            models.UniqueConstraint(
                                condition=models.Q(
                                    ("session_id__isnull", False),
                                    (
                                        "status__in",
                                        ("queued", "running", "waiting_for_user", "waiting"),
                                    ),
                                ),
                                fields=("tenant", "session_id"),
                                name="runqueue_run_one_active_per_session",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    (
                                        "status__in",
                                        [
                                            "queued",
                                            "running",
                                            "waiting_for_user",
                                            "waiting",
                                            "pending",
                                            "succeeded",
                                            "failed",
                                            "cancelled",
                                        ],
                                    )
                                ),
                                name="runqueue_run_status_valid",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    (
                                        "status__in",
                                        (
                                            "queued",
                                            "running",
                                            "waiting_for_user",
                                            "waiting",
                                            "pending",
                                        ),
                                    ),
                                    ("finished_at__isnull", False),
                                    _connector="OR",
                                ),
                                name="runqueue_run_terminal_has_finished_at",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    models.Q(("status", "pending"), _negated=True),
                                    models.Q(
                                        ("place__isnull", False), ("session_id__isnull", False)
                                    ),
                                    _connector="OR",
                                ),
                                name="runqueue_run_pending_in_line",
                            ),
                            models.UniqueConstraint(
                                condition=models.Q(("status", "pending")),
                                fields=("tenant", "session_id", "place"),
                                name="runqueue_run_pending_place",
                            ),
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="DeadLetteredRun",
                    fields=[],
                    options={
                        "verbose_name": "dead-lettered run",
                        "verbose_name_plural": "dead-lettered runs",
                        "proxy": True,
                        "indexes": [],
                        "constraints": [],
                    },
                    bases=("runqueue.run",),
                ),
                migrations.CreateModel(
                    name="UncertainRun",
                    fields=[],
                    options={
                        "verbose_name": "uncertain run",
                        "verbose_name_plural": "uncertain runs",
                        "proxy": True,
                        "indexes": [],
                        "constraints": [],
                    },
                    bases=("runqueue.run",),
                ),
                migrations.CreateModel(
                    name="IdempotencyKey",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("tenant", models.CharField(max_length=255)),
                        ("principal", models.CharField(blank=True, default="", max_length=255)),
                        ("key", models.CharField(max_length=255)),
                        ("request_hash", models.CharField(max_length=64)),
                        (
                            "outcome",
                            models.CharField(
                                choices=[
                                    ("created", "Run created"),
                                    ("input_delivered", "Input delivered"),
                                    (
                                        "enqueued",
                                        "Run created, pending behind the session's active run",
                                    ),
                                    ("merged", "Payload merged into a turn not started yet"),
                                    (
                                        "interrupted",
                                        "Run created, the session's active run interrupted",
                                    ),
                                    (
                                        "rolled_back",
                                        "Run created, the session's active run rolled back",
                                    ),
                                    (
                                        "steered",
                                        "Pending turn the running turn may read as a steer",
                                    ),
                                ],
                                max_length=20,
                            ),
                        ),
                        (
                            "created_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        ("expires_at", models.DateTimeField()),
                        (
                            "run",
                            models.ForeignKey(
                                db_constraint=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="idempotency_keys",
                                to="runqueue.run",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "runqueue_idempotency_key",
                        "indexes": [
                            models.Index(
                                fields=["expires_at"], name="runqueue_idemkey_expires_idx"
                            )
                        ],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("tenant", "principal", "key"),
                                name="runqueue_idempotency_key_unique",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("key", ""), _negated=True),
                                name="runqueue_idempotency_key_not_empty",
                            ),
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="Checkpoint",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("seq", models.IntegerField()),
                        ("state", models.JSONField()),
                        ("tool_seq", models.IntegerField(default=0)),
                        ("lease_epoch", models.BigIntegerField()),
                        (
                            "created_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        (
                            "run",
                            models.ForeignKey(
                                db_constraint=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="checkpoints",
                                to="runqueue.run",
                            ),
                        ),
                        ("turn_end", models.BooleanField(db_default=False, default=False)),
                    ],
                    options={
                        "db_table": "runqueue_checkpoint",
                        "ordering": ["run", "seq"],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("run", "seq"), name="runqueue_checkpoint_run_seq_unique"
                            )
                        ],
                        "indexes": [],
                    },
                ),
                migrations.CreateModel(
                    name="RunEvent",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("type", models.CharField(max_length=64)),
                        ("lease_epoch", models.BigIntegerField()),
                        ("data", models.JSONField(blank=True, default=dict)),
                        (
                            "created_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        (
                            "run",
                            models.ForeignKey(
                                db_constraint=False,
                                db_index=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="events",
                                to="runqueue.run",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "runqueue_run_event",
                        "ordering": ["id"],
                        "indexes": [
                            models.Index(fields=["created_at"], name="runqueue_event_created_idx")
                        ],
                        "constraints": [],
                    },
                ),
                migrations.CreateModel(
                    name="ToolInvocation",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("seq", models.IntegerField()),
                        ("tool", models.CharField(max_length=255)),
                        (
                            "idempotency",
                            models.CharField(
                                choices=[
                                    ("idempotent", "Idempotent"),
                                    ("non_idempotent", "Non-idempotent"),
                                ],
                                max_length=20,
                            ),
                        ),
                        (
                            "status",
                            models.CharField(
                                choices=[
                                    ("started", "Started"),
                                    ("completed", "Completed"),
                                    ("failed", "Failed"),
                                    ("uncertain", "Uncertain"),
                                    ("awaiting_approval", "Awaiting approval"),
                                    ("approved", "Approved"),
                                    ("rejected", "Rejected"),
                                ],
                                default="started",
                                max_length=20,
                            ),
                        ),
                        ("arguments", models.JSONField(blank=True, default=dict)),
                        ("result", models.JSONField(blank=True, null=True)),
                        ("error", models.JSONField(blank=True, null=True)),
                        ("lease_epoch", models.BigIntegerField()),
                        ("resolution", models.JSONField(blank=True, null=True)),
                        (
                            "created_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        ("finished_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "run",
                            models.ForeignKey(
                                db_constraint=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="tool_invocations",
                                to="runqueue.run",
                            ),
                        ),
                        ("lease_token", models.UUIDField(blank=True, null=True)),
                        ("approval", models.JSONField(blank=True, null=True)),
                    ],
                    options={
                        "db_table": "runqueue_tool_invocation",
                        "ordering": ["run", "seq"],
                        "indexes": [
                            models.Index(
                                condition=models.Q(
                                    ("resolution__isnull", True), ("status", "uncertain")
                                ),
                                fields=["run"],
                                name="runqueue_tool_unresolved_idx",
                            ),
                            models.Index(
                                condition=models.Q(("status", "awaiting_approval")),
                                fields=["created_at"],
                                name="runqueue_tool_awaiting_idx",
                            ),
                        ],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("run", "seq"), name="runqueue_tool_run_seq_unique"
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("seq__gte", 0)), name="runqueue_tool_seq_gte_0"
                            ),
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="PausedKind",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("kind", models.CharField(max_length=255)),
                        (
                            "priority_class",
                            models.SmallIntegerField(
                                blank=True,
                                choices=[(0, "Interactive"), (10, "Async"), (20, "Maintenance")],
                                help_text="Empty: every class.",
                                null=True,
                            ),
                        ),
                        ("paused_by", models.CharField(max_length=255)),
                        ("reason", models.CharField(max_length=500)),
                        (
                            "paused_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                    ],
                    options={
                        "verbose_name": "paused kind",
                        "db_table": "runqueue_paused_kind",
                        "ordering": ["kind", "priority_class"],
                        "permissions": [("pause_kind", "Can pause and resume a kind")],
                        "constraints": [
                            models.UniqueConstraint(
                                condition=models.Q(("priority_class__isnull", True)),
                                fields=("kind",),
                                name="runqueue_paused_kind_all_classes",
                            ),
                            models.UniqueConstraint(
                                condition=models.Q(("priority_class__isnull", False)),
                                fields=("kind", "priority_class"),
                                name="runqueue_paused_kind_one_class",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("priority_class__isnull", True),
                                    ("priority_class__in", [0, 10, 20]),
                                    _connector="OR",
                                ),
                                name="runqueue_paused_kind_class_valid",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("kind", ""), _negated=True),
                                name="runqueue_paused_kind_not_empty",
                            ),
                        ],
                        "indexes": [],
                    },
                ),
                migrations.CreateModel(
                    name="QueueEvent",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("type", models.CharField(max_length=64)),
                        ("subject", models.CharField(max_length=255)),
                        ("data", models.JSONField(blank=True, default=dict)),
                        (
                            "created_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                    ],
                    options={
                        "db_table": "runqueue_queue_event",
                        "ordering": ["-id"],
                        "indexes": [
                            models.Index(
                                fields=["subject", "id"], name="runqueue_queue_event_subj_idx"
                            )
                        ],
                        "constraints": [],
                    },
                ),
                migrations.CreateModel(
                    name="Schedule",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("name", models.CharField(max_length=100, unique=True)),
                        (
                            "source",
                            models.CharField(
                                choices=[
                                    ("settings", "RUNQUEUE['SCHEDULES']"),
                                    ("admin", "Admin"),
                                    ("api", "HTTP API"),
                                    ("handler", "Handler (ctx.schedule)"),
                                ],
                                default="admin",
                                editable=False,
                                max_length=10,
                            ),
                        ),
                        (
                            "cron",
                            models.CharField(
                                blank=True,
                                help_text="Five fields: minute hour day month weekday (empty for a one-shot).",
                                max_length=255,
                            ),
                        ),
                        ("timezone", models.CharField(default="UTC", max_length=64)),
                        ("kind", models.CharField(max_length=255)),
                        ("payload", models.JSONField(blank=True, default=dict)),
                        ("priority", models.SmallIntegerField(default=20)),
                        ("tenant", models.CharField(default="default", max_length=255)),
                        ("max_attempts", models.IntegerField(blank=True, null=True)),
                        (
                            "catch_up",
                            models.CharField(
                                choices=[
                                    ("latest", "Latest missed tick only"),
                                    ("all", "Every missed tick (capped)"),
                                    ("none", "No missed tick"),
                                ],
                                default="latest",
                                max_length=10,
                            ),
                        ),
                        (
                            "catch_up_limit",
                            models.IntegerField(
                                default=10,
                                help_text="With catch-up 'all': at most this many missed ticks fire.",
                            ),
                        ),
                        ("handled_until", models.DateTimeField(editable=False)),
                        (
                            "next_fire_at",
                            models.DateTimeField(blank=True, editable=False, null=True),
                        ),
                        ("paused_at", models.DateTimeField(blank=True, editable=False, null=True)),
                        (
                            "paused_by",
                            models.CharField(
                                blank=True, default="", editable=False, max_length=255
                            ),
                        ),
                        (
                            "pause_reason",
                            models.CharField(
                                blank=True, default="", editable=False, max_length=500
                            ),
                        ),
                        (
                            "retired_at",
                            models.DateTimeField(blank=True, editable=False, null=True),
                        ),
                        (
                            "created_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        ("updated_at", models.DateTimeField(auto_now=True)),
                        (
                            "overlap",
                            models.CharField(
                                choices=[
                                    ("skip", "Skip the tick while the last run is active"),
                                    ("allow", "Fire anyway: runs may overlap"),
                                    ("cancel_previous", "Fire, and cancel the runs still active"),
                                ],
                                db_default="skip",
                                default="skip",
                                help_text="When a tick comes while a run of an earlier tick is still queued, running or waiting: skip the tick, fire anyway, or fire and cancel the earlier run.",
                                max_length=16,
                            ),
                        ),
                        (
                            "created_by",
                            models.CharField(
                                blank=True, default="", editable=False, max_length=255
                            ),
                        ),
                        (
                            "on_busy",
                            models.CharField(blank=True, editable=False, max_length=16, null=True),
                        ),
                        ("run_at", models.DateTimeField(blank=True, editable=False, null=True)),
                        (
                            "runs_may_schedule",
                            models.BooleanField(db_default=False, default=False, editable=False),
                        ),
                        (
                            "session_id",
                            models.CharField(
                                blank=True, editable=False, max_length=255, null=True
                            ),
                        ),
                        (
                            "token",
                            models.ForeignKey(
                                blank=True,
                                editable=False,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="schedules",
                                to="runqueue.apitoken",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "runqueue_schedule",
                        "ordering": ["name"],
                        "permissions": [
                            ("operate_schedule", "Can pause, resume or run a schedule now")
                        ],
                        "indexes": [
                            models.Index(
                                condition=models.Q(
                                    ("paused_at__isnull", True), ("retired_at__isnull", True)
                                ),
                                fields=["next_fire_at"],
                                name="runqueue_schedule_due_idx",
                            )
                        ],
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(("name", ""), _negated=True),
                                name="runqueue_schedule_name_not_empty",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("catch_up__in", ["latest", "all", "none"])),
                                name="runqueue_schedule_catch_up_valid",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("catch_up_limit__gte", 1), ("catch_up_limit__lte", 1000)
                                ),
                                name="runqueue_schedule_catch_up_limit_range",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("priority__gte", 0)),
                                name="runqueue_schedule_priority_gte_0",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("overlap__in", ["skip", "allow", "cancel_previous"])
                                ),
                                name="runqueue_schedule_overlap_valid",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    models.Q(
                                        ("run_at__isnull", True),
                                        models.Q(("cron", ""), _negated=True),
                                    ),
                                    models.Q(("run_at__isnull", False), ("cron", "")),
                                    _connector="OR",
                                ),
                                name="runqueue_schedule_cron_or_run_at",
                            ),
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="ScheduleTick",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("tick_at", models.DateTimeField()),
                        (
                            "outcome",
                            models.CharField(
                                choices=[
                                    ("fired", "Fired"),
                                    ("skipped", "Skipped"),
                                    ("overlapped", "Skipped: the last run was still active"),
                                    ("run_now", "Run now"),
                                    ("busy", "Skipped: the session was busy"),
                                ],
                                max_length=10,
                            ),
                        ),
                        ("skipped_before", models.DateTimeField(blank=True, null=True)),
                        (
                            "created_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        (
                            "run",
                            models.ForeignKey(
                                blank=True,
                                db_constraint=False,
                                null=True,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="schedule_ticks",
                                to="runqueue.run",
                            ),
                        ),
                        (
                            "schedule",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="ticks",
                                to="runqueue.schedule",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "runqueue_schedule_tick",
                        "ordering": ["-tick_at"],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("schedule", "tick_at"), name="runqueue_schedule_tick_once"
                            )
                        ],
                        "indexes": [],
                    },
                ),
                migrations.CreateModel(
                    name="StreamWatch",
                    fields=[
                        (
                            "pk",
                            models.CompositePrimaryKey(
                                "run_id",
                                "watcher",
                                blank=True,
                                editable=False,
                                primary_key=True,
                                serialize=False,
                            ),
                        ),
                        ("run_id", models.UUIDField()),
                        ("watcher", models.CharField(max_length=255)),
                        ("expires_at", models.DateTimeField()),
                    ],
                    options={
                        "db_table": "runqueue_stream_watch",
                        "indexes": [],
                        "constraints": [],
                    },
                ),
                migrations.CreateModel(
                    name="ApiTokenQuota",
                    fields=[
                        (
                            "token",
                            models.OneToOneField(
                                on_delete=django.db.models.deletion.CASCADE,
                                primary_key=True,
                                related_name="quota_state",
                                serialize=False,
                                to="runqueue.apitoken",
                            ),
                        ),
                        ("tat", models.DateTimeField()),
                        ("admitted", models.BooleanField(default=True)),
                    ],
                    options={
                        "db_table": "runqueue_api_token_quota",
                        "indexes": [],
                        "constraints": [],
                    },
                ),
                migrations.CreateModel(
                    name="ConcurrencyLimit",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        (
                            "key",
                            models.CharField(
                                help_text="A run's concurrency key (by default its tenant).",
                                max_length=255,
                            ),
                        ),
                        (
                            "priority_class",
                            models.SmallIntegerField(
                                choices=[(0, "Interactive"), (10, "Async"), (20, "Maintenance")]
                            ),
                        ),
                        (
                            "max_running",
                            models.PositiveIntegerField(
                                help_text="Runs of this key that may run (or wait for an expired lease) at once in this class; 0 pauses the key."
                            ),
                        ),
                        (
                            "note",
                            models.CharField(
                                blank=True, default="", help_text="Why this limit.", max_length=255
                            ),
                        ),
                        ("updated_at", models.DateTimeField(auto_now=True)),
                    ],
                    options={
                        "db_table": "runqueue_concurrency_limit",
                        "ordering": ["key", "priority_class"],
                        "indexes": [],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("key", "priority_class"),
                                name="runqueue_concurrency_limit_unique",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("priority_class__in", [0, 10, 20])),
                                name="runqueue_concurrency_limit_class_valid",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("key", ""), _negated=True),
                                name="runqueue_concurrency_limit_key_not_empty",
                            ),
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="Budget",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        (
                            "key",
                            models.CharField(
                                help_text="What runs declare, e.g. openai:gpt-5 or tenant-7:openai.",
                                max_length=255,
                                unique=True,
                            ),
                        ),
                        (
                            "requests",
                            models.PositiveIntegerField(
                                blank=True,
                                help_text="Calls allowed per window (empty: no limit).",
                                null=True,
                            ),
                        ),
                        (
                            "tokens",
                            models.PositiveBigIntegerField(
                                blank=True,
                                help_text="Tokens allowed per window (empty: no limit).",
                                null=True,
                            ),
                        ),
                        (
                            "per_seconds",
                            models.PositiveIntegerField(
                                default=60, help_text="The window, in seconds."
                            ),
                        ),
                        (
                            "shares",
                            models.JSONField(
                                blank=True,
                                default=dict,
                                help_text='Per-tenant shares when tenants contend, e.g. {"acme": 2}; a tenant not listed has 1.',
                            ),
                        ),
                        (
                            "paused_until",
                            models.DateTimeField(
                                blank=True,
                                editable=False,
                                help_text="No call is reserved before this.",
                                null=True,
                            ),
                        ),
                        (
                            "note",
                            models.CharField(
                                blank=True,
                                default="",
                                help_text="Why this budget.",
                                max_length=255,
                            ),
                        ),
                        ("updated_at", models.DateTimeField(auto_now=True)),
                    ],
                    options={
                        "db_table": "runqueue_budget",
                        "ordering": ["key"],
                        "permissions": [("pause_budget", "Can pause and resume a budget")],
                        "indexes": [],
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(("key", ""), _negated=True),
                                name="runqueue_budget_key_not_empty",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("per_seconds__gte", 1)),
                                name="runqueue_budget_per_seconds_gte_1",
                            ),
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="Signal",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("name", models.CharField(max_length=255)),
                        ("data", models.JSONField(blank=True, null=True)),
                        (
                            "created_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        (
                            "run",
                            models.ForeignKey(
                                db_constraint=False,
                                db_index=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="signals",
                                to="runqueue.run",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "runqueue_signal",
                        "ordering": ["id"],
                        "indexes": [
                            models.Index(
                                fields=["run", "name", "id"], name="runqueue_signal_run_idx"
                            )
                        ],
                        "constraints": [],
                    },
                ),
                migrations.CreateModel(
                    name="TreeSpend",
                    fields=[
                        (
                            "run",
                            models.OneToOneField(
                                db_constraint=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                primary_key=True,
                                related_name="tree_spend",
                                serialize=False,
                                to="runqueue.run",
                            ),
                        ),
                        (
                            "spend_cap",
                            models.DecimalField(
                                blank=True, decimal_places=12, max_digits=24, null=True
                            ),
                        ),
                        ("cost", models.DecimalField(decimal_places=12, default=0, max_digits=24)),
                        ("input_tokens", models.BigIntegerField(default=0)),
                        ("output_tokens", models.BigIntegerField(default=0)),
                        ("calls", models.BigIntegerField(default=0)),
                        ("unpriced_calls", models.BigIntegerField(default=0)),
                        ("capped_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "updated_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                    ],
                    options={
                        "db_table": "runqueue_tree_spend",
                        "indexes": [],
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("spend_cap__isnull", True),
                                    ("spend_cap__gt", 0),
                                    _connector="OR",
                                ),
                                name="runqueue_tree_spend_cap_gt_0",
                            )
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="Usage",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("root_id", models.UUIDField()),
                        ("tenant", models.CharField(max_length=255)),
                        ("session_id", models.CharField(blank=True, max_length=255, null=True)),
                        ("kind", models.CharField(max_length=255)),
                        ("lease_epoch", models.BigIntegerField()),
                        ("call", models.IntegerField()),
                        ("attempt", models.IntegerField()),
                        ("model", models.CharField(max_length=255)),
                        ("input_tokens", models.BigIntegerField()),
                        ("output_tokens", models.BigIntegerField()),
                        ("cost", models.DecimalField(decimal_places=12, max_digits=24, null=True)),
                        ("fenced", models.BooleanField(default=False)),
                        (
                            "created_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        (
                            "run",
                            models.ForeignKey(
                                db_constraint=False,
                                db_index=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="usage",
                                to="runqueue.run",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "runqueue_usage",
                        "ordering": ["id"],
                        "indexes": [
                            models.Index(fields=["root_id"], name="runqueue_usage_root_idx"),
                            models.Index(
                                fields=["tenant", "session_id"], name="runqueue_usage_session_idx"
                            ),
                            models.Index(
                                fields=["tenant", "created_at"], name="runqueue_usage_tenant_idx"
                            ),
                        ],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("run", "lease_epoch", "call"), name="runqueue_usage_once"
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("call__gte", 0),
                                    ("input_tokens__gte", 0),
                                    ("output_tokens__gte", 0),
                                ),
                                name="runqueue_usage_counts_gte_0",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("cost__isnull", True), ("cost__gte", 0), _connector="OR"
                                ),
                                name="runqueue_usage_cost_gte_0",
                            ),
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="EventLog",
                    fields=[
                        ("id", models.BigAutoField(primary_key=True, serialize=False)),
                        ("type", models.CharField(max_length=64)),
                        ("lease_epoch", models.BigIntegerField()),
                        ("data", models.JSONField(blank=True, default=dict)),
                        ("created_at", models.DateTimeField()),
                        (
                            "run",
                            models.ForeignKey(
                                db_constraint=False,
                                on_delete=django.db.models.deletion.DO_NOTHING,
                                related_name="log",
                                to="runqueue.run",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "runqueue_event_log",
                        "ordering": ["id"],
                        "managed": False,
                        "indexes": [],
                        "constraints": [],
                    },
                ),
                migrations.CreateModel(
                    name="WebhookEndpoint",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("name", models.CharField(blank=True, default="", max_length=255)),
                        (
                            "url",
                            models.CharField(
                                help_text="Where subscribed events are posted; a submit's webhook URL must start with it.",
                                max_length=2048,
                            ),
                        ),
                        (
                            "tenant",
                            models.CharField(
                                blank=True,
                                default="",
                                help_text="The tenant whose runs it receives; empty for every tenant.",
                                max_length=255,
                            ),
                        ),
                        (
                            "subscribed",
                            models.BooleanField(
                                default=True,
                                help_text="Receive the events of every run the filters match; off: only of runs submitted with a webhook URL under this one.",
                            ),
                        ),
                        (
                            "kinds",
                            models.JSONField(
                                blank=True,
                                default=list,
                                help_text="Kinds whose runs it receives; empty for every kind.",
                            ),
                        ),
                        (
                            "event_types",
                            models.JSONField(
                                blank=True,
                                default=list,
                                help_text="The events it receives; empty for all of them.",
                            ),
                        ),
                        (
                            "principal",
                            models.CharField(
                                blank=True, default="", editable=False, max_length=255
                            ),
                        ),
                        (
                            "max_attempts",
                            models.PositiveSmallIntegerField(
                                default=12, help_text="Tries of each delivery before it is dead."
                            ),
                        ),
                        ("active", models.BooleanField(default=True)),
                        ("secret", models.CharField(editable=False, max_length=255)),
                        (
                            "previous_secret",
                            models.CharField(
                                blank=True, default="", editable=False, max_length=255
                            ),
                        ),
                        (
                            "previous_secret_until",
                            models.DateTimeField(blank=True, editable=False, null=True),
                        ),
                        (
                            "created_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        (
                            "token",
                            models.ForeignKey(
                                blank=True,
                                help_text="Only runs submitted by this token's user in its tenant (none once revoked).",
                                null=True,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="webhook_endpoints",
                                to="runqueue.apitoken",
                            ),
                        ),
                    ],
                    options={
                        "verbose_name": "webhook endpoint",
                        "db_table": "runqueue_webhook_endpoint",
                        "indexes": [],
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(("url", ""), _negated=True),
                                name="runqueue_webhook_url_not_empty",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("max_attempts__gte", 1), ("max_attempts__lte", 100)
                                ),
                                name="runqueue_webhook_max_attempts_valid",
                            ),
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="WebhookDelivery",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("url", models.CharField(max_length=2048)),
                        ("event_type", models.CharField(max_length=64)),
                        ("message_id", models.CharField(max_length=255)),
                        ("body", models.JSONField()),
                        (
                            "created_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        ("attempts", models.IntegerField(db_default=0, default=0)),
                        ("last_status", models.IntegerField(blank=True, null=True)),
                        ("last_error", models.TextField(blank=True, db_default="", default="")),
                        ("last_attempt_at", models.DateTimeField(blank=True, null=True)),
                        ("delivered_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "attempt_run",
                            models.ForeignKey(
                                db_constraint=False,
                                on_delete=django.db.models.deletion.DO_NOTHING,
                                related_name="+",
                                to="runqueue.run",
                            ),
                        ),
                        (
                            "run",
                            models.ForeignKey(
                                db_constraint=False,
                                on_delete=django.db.models.deletion.DO_NOTHING,
                                related_name="+",
                                to="runqueue.run",
                            ),
                        ),
                        (
                            "endpoint",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="deliveries",
                                to="runqueue.webhookendpoint",
                            ),
                        ),
                    ],
                    options={
                        "verbose_name_plural": "webhook deliveries",
                        "db_table": "runqueue_webhook_delivery",
                        "ordering": ["-id"],
                        "permissions": [("resend_delivery", "Can resend a webhook delivery")],
                        "indexes": [
                            models.Index(fields=["run"], name="runqueue_webhook_run_idx"),
                            models.Index(
                                fields=["attempt_run"], name="runqueue_webhook_attempt_idx"
                            ),
                        ],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("endpoint", "url", "message_id"),
                                name="runqueue_webhook_delivery_once",
                            )
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="WebhookTarget",
                    fields=[
                        (
                            "run",
                            models.OneToOneField(
                                db_constraint=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                primary_key=True,
                                related_name="webhook_target",
                                serialize=False,
                                to="runqueue.run",
                            ),
                        ),
                        ("url", models.CharField(max_length=2048)),
                        (
                            "endpoint",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="runqueue.webhookendpoint",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "runqueue_webhook_target",
                        "indexes": [],
                        "constraints": [],
                    },
                ),
                migrations.CreateModel(
                    name="InboundEvent",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("tenant", models.CharField(max_length=255)),
                        ("name", models.CharField(max_length=255)),
                        ("key", models.CharField(max_length=255)),
                        ("data", models.JSONField(default=dict)),
                        (
                            "received_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        ("principal", models.CharField(blank=True, default="", max_length=255)),
                        ("started", models.JSONField(blank=True, default=list)),
                    ],
                    options={
                        "verbose_name": "inbound event",
                        "db_table": "runqueue_inbound_event",
                        "ordering": ["-id"],
                        "indexes": [
                            models.Index(
                                fields=["tenant", "name", "received_at"],
                                name="runqueue_inbound_name_idx",
                            ),
                            models.Index(fields=["received_at"], name="runqueue_inbound_age_idx"),
                        ],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("tenant", "name", "key"), name="runqueue_inbound_event_key"
                            )
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="EventDelivery",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        (
                            "delivered_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        (
                            "run",
                            models.ForeignKey(
                                db_constraint=False,
                                db_index=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="event_deliveries",
                                to="runqueue.run",
                            ),
                        ),
                        (
                            "event",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="deliveries",
                                to="runqueue.inboundevent",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "runqueue_event_delivery",
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("run", "event"), name="runqueue_event_delivery_once"
                            )
                        ],
                        "indexes": [],
                    },
                ),
                migrations.CreateModel(
                    name="EventTrigger",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("name", models.CharField(help_text="The event's name.", max_length=255)),
                        (
                            "match",
                            models.JSONField(
                                blank=True,
                                default=dict,
                                help_text='A JSON object the event\'s data must contain, e.g. {"plan": "pro"}; {} matches every event of the name.',
                            ),
                        ),
                        (
                            "kind",
                            models.CharField(
                                help_text="The kind of run it starts.", max_length=255
                            ),
                        ),
                        (
                            "priority",
                            models.PositiveSmallIntegerField(
                                default=10, help_text="The started run's priority."
                            ),
                        ),
                        (
                            "tenant",
                            models.CharField(
                                blank=True,
                                default="",
                                help_text="Only this tenant's events; empty for every tenant's.",
                                max_length=255,
                            ),
                        ),
                        ("enabled", models.BooleanField(default=True)),
                        ("note", models.CharField(blank=True, default="", max_length=255)),
                        (
                            "created_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                    ],
                    options={
                        "db_table": "runqueue_event_trigger",
                        "ordering": ["name", "id"],
                        "indexes": [
                            models.Index(fields=["name"], name="runqueue_trigger_name_idx")
                        ],
                        "constraints": [],
                    },
                ),
            ],
        ),
    ]
