"""What has run: the runs table's day partitions made ahead and dropped
whole (``partitions``), the maintenance runs that prune (``housekeeping``),
a run replayed against today's code (``replay``) or forked from a step
(``forking``), the tokens and cost runs recorded (``usage``), and the
background actions over every run a filter matches (``bulk``)."""
