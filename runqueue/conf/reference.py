"""docs/settings.md, written from the settings table."""

from __future__ import annotations

from collections.abc import Mapping

from runqueue.conf.setting import Setting
from runqueue.conf.table import SETTINGS

INTRODUCTION = """\
# Settings

<!-- Written by `python -m runqueue.conf --reference > docs/settings.md` from
runqueue/conf/table.py; tests/unit/test_settings_table.py fails when it is out of date. -->

runqueue reads one dict from the Django settings, every key optional:

```python
RUNQUEUE = {"LEASE_SECONDS": 60, "API_KINDS": ["support.reply"]}
```

A key not listed here, or a value its type does not allow, is system check error
`runqueue.E002` (and `ImproperlyConfigured` where the settings are read); the checks named
beside a key look at it further. Settings are read when first needed, never at import time,
and read again when `settings.RUNQUEUE` changes (`override_settings` in tests).
"""


def default_text(setting: Setting) -> str:
    """The default as a project would write it."""
    if setting.shown is not None:
        return setting.shown
    default = setting.default
    if isinstance(default, tuple):
        return repr(list(default))
    if isinstance(default, Mapping):
        return repr(dict(default))
    if isinstance(default, str):
        return f'"{default}"'
    return repr(default)


def _row(setting: Setting) -> str:
    checks = ", ".join(f"`{check}`" for check in setting.checks)
    cells = (
        f"`{setting.name}`",
        setting.kind.type,
        f"`{default_text(setting)}`",
        setting.doc,
        checks,
    )
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def reference() -> str:
    """The settings reference, as Markdown: a table per section."""
    sections: dict[str, list[Setting]] = {}
    for setting in SETTINGS:
        sections.setdefault(setting.section, []).append(setting)
    lines = [INTRODUCTION]
    for section, settings in sections.items():
        lines += [
            f"## {section}",
            "",
            "| key | type | default | meaning | checks |",
            "| --- | --- | --- | --- | --- |",
            *map(_row, settings),
            "",
        ]
    return "\n".join(lines)
