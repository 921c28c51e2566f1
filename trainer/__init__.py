"""Distributed TensorFlow trainer for the tf-distributed Helm chart.

Run as ``python -m trainer``; see ``docs/trainer.md`` for flags, roles, storage layout,
the status file and the export signature.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
