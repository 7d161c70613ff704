"""The cluster subcommands of ``kwire``: metadata, topics, groups, offsets, consume, produce.

Each module has ``add_arguments(parser)`` and ``run(args) -> int``; :data:`COMMANDS` is what
:mod:`kwire.cli` registers.  They sit at the top of the layers (beside ``cli`` and ``debug``):
they use the public Admin, Producer and Consumer, and the network client for the few requests
those do not wrap (ListGroups, DescribeGroups, OffsetFetch).

Every command takes ``-b/--bootstrap``, ``-X key=value`` (any property of
:mod:`kwire.config`), ``--timeout``, ``--trace`` / ``--trace-format`` / ``--trace-records``
(every frame, rendered by :mod:`kwire.debug.trace`, on stderr); see :mod:`.common`.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable
from importlib import import_module

# name: (help, module)
_TABLE = {
    "metadata": ("brokers, controller, topics and partitions of a cluster", "cluster"),
    "topics": ("list, describe or create topics", "cluster"),
    "groups": ("list consumer groups, or describe one with its members decoded", "groups"),
    "offsets": ("a group's committed offsets, log ends and lag per partition", "groups"),
    "consume": ("print records of a topic (text or JSON lines)", "consume"),
    "produce": ("produce lines (or JSON objects) from stdin", "produce"),
}


def _entry(name: str, help_text: str, module: str) -> tuple[
        str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]:
    def add(p: argparse.ArgumentParser) -> None:
        mod = import_module(f"{__name__}.{module}")
        getattr(mod, f"add_{name}")(p)

    def run(args: argparse.Namespace) -> int:
        mod = import_module(f"{__name__}.{module}")
        from .common import run_command

        return run_command(getattr(mod, f"run_{name}"), args)

    return help_text, add, run


COMMANDS = {name: _entry(name, help_text, module) for name, (help_text, module) in _TABLE.items()}
