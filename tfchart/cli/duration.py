"""DURATION options (`--timeout 10m`, `--since 90s`): Go's duration syntax as helm and kubectl read it
(`1h30m`, `90s`, `1.5m`), or plain seconds."""

from __future__ import annotations

import re
from typing import Any

import click

UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")


def parse_duration(text: str) -> float | None:
    """Seconds, or None when `text` is not a duration."""
    text = text.strip()
    if re.fullmatch(r"\d+(?:\.\d+)?", text):
        return float(text)
    if not text or PART.sub("", text):
        return None
    return sum(float(number) * UNITS[unit] for number, unit in PART.findall(text))


class Duration(click.ParamType[float, Any]):
    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, (int, float)):
            return float(value)
        seconds = parse_duration(str(value))
        if seconds is None:
            self.fail(f"{value!r} is not a duration: use e.g. 90s, 10m, 1h30m or plain seconds", param, ctx)
        return seconds


DURATION = Duration()
