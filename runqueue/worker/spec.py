"""Slot specs: ``interactive=2``, ``async=2``, ``interactive,async=1``, and
``async=500:loop`` (slots on the event loop: coroutines, not threads).

A spec's count is how many runs its group runs at once, whatever their
handlers. Without ``:loop`` a sync handler runs on one of the group's
threads (one per slot, at most ``THREAD_SLOTS_MAX``) and an ``async def``
one on the event loop, holding no thread; with ``:loop`` every slot is a
coroutine and a sync handler gets a thread of its own for its run."""

from __future__ import annotations

from dataclasses import dataclass

from runqueue.models import PriorityClass

DEFAULT_SLOTS = ("interactive=2", "async=2", "maintenance=1")
#: Threads per spec without ``:loop``: a larger group runs at most this
#: many sync handlers at once (each holds a thread and a connection).
THREAD_SLOTS_MAX = 256
#: Slots per spec: runs at once.
SLOTS_MAX = 10_000


@dataclass(frozen=True, slots=True, kw_only=True)
class SlotSpec:
    """``count`` slots that claim only from ``classes`` (reserved capacity)."""

    classes: tuple[PriorityClass, ...]
    count: int
    #: The slots are coroutines on the process's event loop (``:loop``):
    #: async handlers by the hundred without a thread each; a sync handler
    #: claimed by one runs in a thread of its own.
    loop: bool = False

    @property
    def label(self) -> str:
        return ",".join(c.slug for c in self.classes)

    @property
    def slots(self) -> int:
        """The group's slot threads (or coroutines, ``:loop``)."""
        return self.count if self.loop else min(self.count, THREAD_SLOTS_MAX)

    def lanes(self, most: int) -> tuple[Lane, ...]:
        """The spec's slots split into at most ``most`` claim lanes, each a
        slot group with its own thread and connection, so one lane's claim
        statement runs on the server while the other's runs are started and
        handed back in Python (docs/decisions/queue.md, "Claim lanes"). A group
        that takes the interactive class is one lane: it never claims ahead,
        and its pickup is one claim for the idle slots."""
        if PriorityClass.INTERACTIVE in self.classes:
            most = 1
        n = max(1, min(most, self.count))
        lanes, first = [], 0
        for i in range(n):
            slots = self.slots // n + (i < self.slots % n)
            lanes.append(
                Lane(
                    label=self.label if n == 1 else f"{self.label}.{i}",
                    count=self.count // n + (i < self.count % n),
                    slots=slots,
                    first=first,
                )
            )
            first += slots
        return tuple(lanes)

    @classmethod
    def parse(cls, text: str) -> SlotSpec:
        """Parse ``CLASSES=N``; raise ValueError with the reason."""
        body, colon, mode = text.partition(":")
        if colon and mode.strip().lower() != "loop":
            raise ValueError(f"unknown slot mode {mode!r} in {text!r}; the one mode is ':loop'")
        names, sep, count = body.partition("=")
        if not sep or not names.strip() or not count.strip():
            raise ValueError(f"expected CLASSES=N (e.g. interactive=2), got {text!r}")
        classes: list[PriorityClass] = []
        for name in names.split(","):
            name = name.strip().lower()
            if name not in PriorityClass.slugs():
                raise ValueError(
                    f"unknown class {name!r} in {text!r}; "
                    f"choose from {', '.join(PriorityClass.slugs())}"
                )
            chosen = PriorityClass.from_slug(name)
            if chosen in classes:
                raise ValueError(f"class {name!r} is named twice in {text!r}")
            classes.append(chosen)
        try:
            n = int(count)
        except ValueError:
            raise ValueError(f"slot count must be a whole number, got {count!r}") from None
        if not 1 <= n <= SLOTS_MAX:
            raise ValueError(f"slot count must be between 1 and {SLOTS_MAX}, got {n}")
        return cls(classes=tuple(sorted(classes)), count=n, loop=bool(colon))


@dataclass(frozen=True, slots=True, kw_only=True)
class Lane:
    """One claim lane of a spec: its group's label, runs at once, slot
    threads (or coroutines) and the number of its first slot thread."""

    label: str
    count: int
    slots: int
    first: int


def shape(specs: tuple[SlotSpec, ...]) -> dict[str, int]:
    """The pool's shape for the Worker row: {"interactive": 2, "interactive,async": 1}."""
    out: dict[str, int] = {}
    for spec in specs:
        key = spec.label + (":loop" if spec.loop else "")
        out[key] = out.get(key, 0) + spec.count
    return out
