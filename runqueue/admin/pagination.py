"""A paginator that never counts a whole table.

``COUNT(*)`` over a million runs is a full scan on every changelist page.
Counting at most ``CAP + 1`` rows stops early; past the cap the changelist
says "more than N" and staff narrow the filters instead of paging on.
"""

from __future__ import annotations

from functools import cached_property

from django.core.paginator import Paginator
from django.db.models import QuerySet

from runqueue import db

#: Counted rows at most; 100 pages of 100 runs.
COUNT_CAP = 10_000


def capped_count(queryset: QuerySet) -> int:
    """How many rows, counting at most ``COUNT_CAP + 1`` (``db.capped_count``)."""
    return db.capped_count(queryset, COUNT_CAP)


class CappedCountPaginator(Paginator):
    """Counts at most ``COUNT_CAP + 1`` rows: a LIMIT inside the count."""

    cap = COUNT_CAP

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if not isinstance(queryset, QuerySet):
            return len(queryset)
        return capped_count(queryset)

    @property
    def capped(self) -> bool:
        """True when there are more rows than were counted."""
        return self.count > COUNT_CAP
