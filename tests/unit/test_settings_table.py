"""The settings table is the one declaration of every RUNQUEUE key: the
settings object, the parser, the checks and docs/settings.md follow it."""

from __future__ import annotations

import ast
import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from runqueue import checks
from runqueue.conf import Settings, parse
from runqueue.conf.reference import default_text, reference
from runqueue.conf.setting import Setting
from runqueue.conf.table import BY_NAME, SETTINGS

ROOT = Path(__file__).resolve().parents[2]


def test_docs_settings_md_is_written_from_the_table() -> None:
    """docs/settings.md is up to date: rewrite it with
    ``python -m runqueue.conf --reference > docs/settings.md``."""
    assert (ROOT / "docs" / "settings.md").read_text() == reference()


def test_the_command_prints_the_reference() -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "runqueue.conf", "--reference"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    assert printed == reference()


def test_the_settings_object_has_one_field_per_row_in_its_order() -> None:
    assert [f.name for f in dataclasses.fields(Settings)] == [s.name for s in SETTINGS]


def test_left_out_every_key_holds_its_default() -> None:
    conf = parse({})
    assert {s.name: getattr(conf, s.name) for s in SETTINGS} == {
        s.name: s.default for s in SETTINGS
    }


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_the_default_shown_is_a_value_the_key_accepts(setting: Setting) -> None:
    """What the reference shows as the default, written by a project,
    parses to what the key holds when left out (or the same caps: none)."""
    conf = parse({setting.name: ast.literal_eval(default_text(setting))})
    parsed = getattr(conf, setting.name)
    if setting.name == "CONCURRENCY":
        assert not conf.caps_configured
    else:
        assert parsed == setting.default


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_a_value_of_another_type_is_refused_naming_the_key(setting: Setting) -> None:
    wrong = object()
    with pytest.raises(ImproperlyConfigured, match=re.escape(f"RUNQUEUE[{setting.name!r}]")):
        parse({setting.name: wrong})


def test_every_row_is_documented_in_one_line() -> None:
    for setting in SETTINGS:
        assert setting.doc and "\n" not in setting.doc, setting.name
        assert setting.kind.type, setting.name


def _check_ids() -> set[str]:
    source = Path(checks.__file__).read_text()
    return set(re.findall(r'id="(runqueue\.[EW]\d+)"', source))


def test_the_checks_a_row_names_exist() -> None:
    named = {check for s in SETTINGS for check in s.checks}
    assert named <= _check_ids()


def test_every_settings_check_is_named_by_the_rows_it_looks_at() -> None:
    """Besides PostgreSQL (E001) and a malformed dict (E002), every check
    is about settings, and the reference lists it beside them."""
    named = {check for s in SETTINGS for check in s.checks}
    assert _check_ids() - {"runqueue.E001", "runqueue.E002"} == named


def test_every_key_the_checks_name_is_in_the_table() -> None:
    source = Path(checks.__file__).read_text()
    assert set(re.findall(r"RUNQUEUE\['([A-Z_]+)'\]", source)) <= set(BY_NAME)
