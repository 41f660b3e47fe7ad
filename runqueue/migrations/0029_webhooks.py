"""Outbound webhooks (docs/decisions.md, "Webhooks"): endpoints, a run's
own URL, deliveries; the functions and triggers that write an event's
deliveries, and the maintenance run that sends each, in the event's
transaction: before a run's row moves to succeeded, failed, cancelled or
waiting_for_user, and after a tool.uncertain event row. With no active
endpoint a transition pays one read of the (small) endpoints table.

FUNCTIONS is functions.sql's text of the three functions as it was when
written (a migration is history; see 0006_function_source).
"""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models

FUNCTIONS = r"""
-- An event's webhook deliveries, in the transaction of the event
-- (docs/decisions.md, "Webhooks"): one per URL that receives it (an
-- active endpoint whose filters match the run, and the run's own URL,
-- runqueue_webhook_target), each with the maintenance run that sends it
-- (kind runqueue.webhook, its endpoint's max_attempts; the workers' poll
-- finds it). p_message is the webhook-id: one per event, so a delivery is
-- written once per URL whatever fires twice (ON CONFLICT).
CREATE OR REPLACE FUNCTION runqueue_webhook_enqueue(
    p_run uuid, p_tenant text, p_principal text, p_kind text, p_type text,
    p_message text, p_data jsonb)
RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    target record;
    delivery bigint;
    attempt uuid;
    body jsonb := jsonb_build_object(
        'type', p_type,
        'timestamp', to_char(statement_timestamp() AT TIME ZONE 'UTC',
                             'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'data', p_data);
BEGIN
    FOR target IN
        SELECT e.id AS endpoint_id, e.url, e.max_attempts
          FROM runqueue_webhook_endpoint e
         WHERE e.active AND e.subscribed
           AND (e.tenant = '' OR e.tenant = p_tenant)
           AND (jsonb_array_length(e.kinds) = 0 OR e.kinds ? p_kind)
           AND (jsonb_array_length(e.event_types) = 0 OR e.event_types ? p_type)
           AND (e.token_id IS NULL
                OR (e.principal = p_principal
                    AND EXISTS (SELECT 1 FROM runqueue_api_token t
                                 WHERE t.id = e.token_id AND t.revoked_at IS NULL
                                   AND t.tenant = p_tenant)))
        UNION
        SELECT e.id, w.url, e.max_attempts
          FROM runqueue_webhook_target w
          JOIN runqueue_webhook_endpoint e ON e.id = w.endpoint_id
         WHERE w.run_id = p_run AND e.active
           AND (jsonb_array_length(e.event_types) = 0 OR e.event_types ? p_type)
    LOOP
        attempt := gen_random_uuid();
        INSERT INTO runqueue_webhook_delivery (endpoint_id, url, run_id, event_type,
                                               message_id, body, attempt_run_id)
        VALUES (target.endpoint_id, target.url, p_run, p_type, p_message, body, attempt)
        ON CONFLICT (endpoint_id, url, message_id) DO NOTHING
        RETURNING id INTO delivery;
        IF delivery IS NOT NULL THEN
            INSERT INTO runqueue_run (id, tenant, principal, kind, payload, status, priority,
                                      attempts, max_attempts, lease_epoch, lease_owner,
                                      traceparent, concurrency_key, created_event_id)
            VALUES (attempt, 'runqueue', '', 'runqueue.webhook',
                    jsonb_build_object('delivery', delivery), 'queued', 20, 0,
                    target.max_attempts, 0, '', '', 'runqueue',
                    nextval('runqueue_run_event_id_seq'));
        END IF;
        delivery := NULL;
    END LOOP;
END
$fn$;

-- Before a run's row moves to a status a webhook reports (its trigger's
-- WHEN: succeeded, failed, cancelled, waiting_for_user; never a delivery's
-- own run): the deliveries of that event, in the transition's transaction.
-- With no active endpoint it returns after one read of a small table. The
-- body holds the run as the transition leaves it: a result up to 64 KiB
-- (else result_omitted), a failure without its traceback.
CREATE OR REPLACE FUNCTION runqueue_webhook_run() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    event text := CASE NEW.status WHEN 'waiting_for_user' THEN 'run.waiting_for_user'
                                  ELSE 'run.' || NEW.status END;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM runqueue_webhook_endpoint WHERE active) THEN
        RETURN NEW;
    END IF;
    PERFORM runqueue_webhook_enqueue(
        NEW.id, NEW.tenant, NEW.principal, NEW.kind, event,
        'msg_' || replace(NEW.id::text, '-', '') || '_' || NEW.status || '_' || NEW.lease_epoch,
        jsonb_build_object(
            'run', NEW.id, 'kind', NEW.kind, 'tenant', NEW.tenant,
            'session_id', NEW.session_id, 'status', NEW.status, 'attempts', NEW.attempts,
            'lease_epoch', NEW.lease_epoch, 'finished_at', NEW.finished_at)
        || CASE WHEN NEW.status <> 'succeeded' THEN '{}'::jsonb
                WHEN octet_length(NEW.result::text) > 65536
                THEN jsonb_build_object('result_omitted', true)
                ELSE jsonb_build_object('result', NEW.result) END
        || CASE WHEN NEW.failure IS NULL OR NEW.status NOT IN ('failed', 'cancelled')
                THEN '{}'::jsonb
                ELSE jsonb_build_object('failure', NEW.failure - 'traceback') END);
    RETURN NEW;
END
$fn$;

-- After a tool.uncertain event row (its trigger's WHEN): the deliveries of
-- that event, in its transaction; the webhook-id names the event's id.
CREATE OR REPLACE FUNCTION runqueue_webhook_event() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    r record;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM runqueue_webhook_endpoint WHERE active) THEN
        RETURN NULL;
    END IF;
    SELECT id, tenant, principal, kind, session_id, status INTO r
      FROM runqueue_run WHERE id = NEW.run_id;
    IF FOUND AND r.kind <> 'runqueue.webhook' THEN
        PERFORM runqueue_webhook_enqueue(
            r.id, r.tenant, r.principal, r.kind, NEW.type,
            'msg_' || replace(r.id::text, '-', '') || '_uncertain_' || NEW.id,
            jsonb_build_object(
                'run', r.id, 'kind', r.kind, 'tenant', r.tenant, 'session_id', r.session_id,
                'status', r.status, 'lease_epoch', NEW.lease_epoch, 'event', NEW.id,
                'seq', NEW.data->'seq'));
    END IF;
    RETURN NULL;
END
$fn$;

"""

TRIGGERS = """
CREATE TRIGGER runqueue_run_webhook
BEFORE UPDATE ON runqueue_run
FOR EACH ROW
WHEN (OLD.status IS DISTINCT FROM NEW.status
      AND NEW.status IN ('succeeded', 'failed', 'cancelled', 'waiting_for_user')
      AND NEW.kind <> 'runqueue.webhook')
EXECUTE FUNCTION runqueue_webhook_run();
CREATE TRIGGER runqueue_event_webhook
AFTER INSERT ON runqueue_run_event
FOR EACH ROW
WHEN (NEW.type = 'tool.uncertain')
EXECUTE FUNCTION runqueue_webhook_event();
"""

BACKWARD = """
DROP TRIGGER runqueue_event_webhook ON runqueue_run_event;
DROP TRIGGER runqueue_run_webhook ON runqueue_run;
DROP FUNCTION runqueue_webhook_event();
DROP FUNCTION runqueue_webhook_run();
DROP FUNCTION runqueue_webhook_enqueue(uuid, text, text, text, text, text, jsonb);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runqueue", "0028_session_turns"),
    ]

    operations = [
        migrations.CreateModel(
            name="WebhookEndpoint",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
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
                    models.CharField(blank=True, default="", editable=False, max_length=255),
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
                    models.CharField(blank=True, default="", editable=False, max_length=255),
                ),
                (
                    "previous_secret_until",
                    models.DateTimeField(blank=True, editable=False, null=True),
                ),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
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
            },
        ),
        migrations.CreateModel(
            name="WebhookDelivery",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("url", models.CharField(max_length=2048)),
                ("event_type", models.CharField(max_length=64)),
                ("message_id", models.CharField(max_length=255)),
                ("body", models.JSONField()),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
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
            },
        ),
        migrations.AddConstraint(
            model_name="webhookendpoint",
            constraint=models.CheckConstraint(
                condition=models.Q(("url", ""), _negated=True),
                name="runqueue_webhook_url_not_empty",
            ),
        ),
        migrations.AddConstraint(
            model_name="webhookendpoint",
            constraint=models.CheckConstraint(
                condition=models.Q(("max_attempts__gte", 1), ("max_attempts__lte", 100)),
                name="runqueue_webhook_max_attempts_valid",
            ),
        ),
        migrations.AddIndex(
            model_name="webhookdelivery",
            index=models.Index(fields=["run"], name="runqueue_webhook_run_idx"),
        ),
        migrations.AddIndex(
            model_name="webhookdelivery",
            index=models.Index(fields=["attempt_run"], name="runqueue_webhook_attempt_idx"),
        ),
        migrations.AddConstraint(
            model_name="webhookdelivery",
            constraint=models.UniqueConstraint(
                fields=("endpoint", "url", "message_id"), name="runqueue_webhook_delivery_once"
            ),
        ),
        migrations.RunSQL(FUNCTIONS + TRIGGERS, BACKWARD),
    ]
