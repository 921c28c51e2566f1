"""Kubernetes quantities (500m, 1.5Gi, 2e3, 1k GPUs), read by the kubernetes client's own parser."""

from __future__ import annotations

from decimal import Decimal

from tfchart.errors import TfchartError


def parse(value: object) -> Decimal:
    from kubernetes.utils.quantity import parse_quantity

    try:
        parsed: Decimal = parse_quantity(value)  # type: ignore[no-untyped-call]
    except (ValueError, TypeError, ArithmeticError) as error:
        raise TfchartError(f"invalid quantity {value!r}: {error}", "use Kubernetes quantities: 500m, 2, 1Gi") from None
    return parsed


def parse_or_none(value: object) -> Decimal | None:
    """The quantity, or None when `value` is not one."""
    try:
        return parse(value) if not isinstance(value, bool) else None
    except TfchartError:
        return None


def shown(value: Decimal) -> str:
    """A readable quantity: 1.5, 2Gi, 500m, 10."""
    if value != value.to_integral_value():
        return f"{int(value * 1000)}m" if value < 1 else format(value.normalize(), "f")
    for suffix, size in (("Ti", 1024**4), ("Gi", 1024**3), ("Mi", 1024**2)):
        if value >= size and value % size == 0:
            return f"{int(value / size)}{suffix}"
    return str(int(value))
