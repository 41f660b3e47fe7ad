"""Limits that code reads before the models are ready.

Handlers register, and settings are read, while apps are still loading, so
these lengths live here and the models declare their columns with them.
"""

#: The longest kind: every ``kind`` column (runs, schedules, paused kinds).
KIND_MAX_LENGTH = 255
#: The longest tenant: every ``tenant`` column (runs, schedules, tokens).
TENANT_MAX_LENGTH = 255
#: The longest reason or actor an operation records (cancel, requeue).
REASON_MAX_LENGTH = 1000
#: The longest budget key (``Budget.key``, ``Run.budget_key``).
BUDGET_KEY_MAX_LENGTH = 255
#: The most tokens one call may reserve (``Run.budget_tokens``: an integer).
BUDGET_TOKENS_MAX = 2**31 - 1
#: The most attempts a run may have (``Run.max_attempts``: an integer).
MAX_ATTEMPTS_MAX = 2**31 - 1
#: The longest wait or delay runqueue adds to the database's clock (a
#: timeout, a backoff, a ``*_SECONDS`` setting): 100 years. PostgreSQL's
#: interval stops near 292,000 years and its timestamps at 294276 AD, but
#: Python reads times only up to 9999-12-31, so a longer wait would make
#: its run unreadable; a limit in seconds keeps every deadline within that.
MAX_WAIT_SECONDS = 100 * 365.25 * 86400
#: The shortest run deadline (``start_within``, ``max_duration``): a
#: timestamp's resolution in PostgreSQL, under which one is stored as zero.
MIN_DEADLINE_SECONDS = 1e-6
#: The longest model name a usage record holds (``Usage.model``, a key of
#: ``RUNQUEUE["PRICES"]``).
USAGE_MODEL_MAX_LENGTH = 255
#: Money (a usage's cost, a tree's total and spend cap): numeric(24, 12), in
#: whatever currency the prices are in; 12 places keep a per-token price.
COST_DIGITS = 24
COST_PLACES = 12
#: The most tokens one usage record may count in a direction (a bigint
#: column; a sum of many still fits).
USAGE_TOKENS_MAX = 2**40
