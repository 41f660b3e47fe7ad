"""Submitting runs: ``submit``, ``submit_in_transaction`` and
``submit_many`` (``submission.submit``), an answer to a waiting run kept by
its idempotency key (``answer``), what a submit did and the keys that
remember it (``keys``), where a submit to a busy session goes (``routing``),
a submit's fields declared once (``fields``), what a submission may hold
(``rules``), the one insert of new runs (``inserts``) and a spawn's child
(``spawning``). Import from the modules; this file exports nothing."""
