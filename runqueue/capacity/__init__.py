"""How much may run at once: concurrency caps per key and class
(``concurrency``), token and request budgets (``budgets``), paused runs and
trees (``pausing``), and the values they refresh from settings and the
database when told (``cached``). The claim reads them; each module writes
its own tables."""
