"""Parsers of the management commands' options (argparse ``type=``): a bad
value is argparse's error, naming the option, before the command runs."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def whole_number(low: int, high: int) -> Callable[[str], int]:
    """An option's parser: a whole number from ``low`` to ``high``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low:,} and {high:,}, got {value}")
        return value

    return parse


def seconds_within(accept: Callable[[float], bool], rule: str) -> Callable[[str], float]:
    """An option's parser: a number of seconds that ``accept`` takes
    (``rule`` says which: "0 or more")."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a number of seconds, got {text!r}"
            ) from None
        if not accept(value):
            raise argparse.ArgumentTypeError(f"must be {rule}, got {text}")
        return value

    return parse
