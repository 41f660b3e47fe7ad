"""Slot specs: ``interactive=2``, ``async=2``, ``interactive,async=1``."""

from __future__ import annotations

from dataclasses import dataclass

from runqueue.models import PriorityClass

DEFAULT_SLOTS = ("interactive=2", "async=2", "maintenance=1")


@dataclass(frozen=True, slots=True, kw_only=True)
class SlotSpec:
    """``count`` slots that claim only from ``classes`` (reserved capacity)."""

    classes: tuple[PriorityClass, ...]
    count: int

    @property
    def label(self) -> str:
        return ",".join(c.slug for c in self.classes)

    @classmethod
    def parse(cls, text: str) -> SlotSpec:
        """Parse ``CLASSES=N``; raise ValueError with the reason."""
        names, sep, count = text.partition("=")
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
        if not 1 <= n <= 256:
            raise ValueError(f"slot count must be between 1 and 256, got {n}")
        return cls(classes=tuple(sorted(classes)), count=n)


def shape(specs: tuple[SlotSpec, ...]) -> dict[str, int]:
    """The pool's shape for the Worker row: {"interactive": 2, "interactive,async": 1}."""
    out: dict[str, int] = {}
    for spec in specs:
        out[spec.label] = out.get(spec.label, 0) + spec.count
    return out
