"""Which frames of a capture to show: ``kwire decode``'s filters.

Every filter given must accept an item.  Filters about what a request says (``--client-id``,
``--group``, ``--topic``) accept a response when its request (paired by correlation id on its
connection) is accepted, so a conversation is shown whole; ``--api``, ``--version``, ``--corr``
and ``--broker`` read the item itself (a response knows its request's api and version).
``--errors`` takes the frames whose body carries a non-zero ``error_code`` anywhere (a frame
that did not decode is judged on the fields decoded before the failure).

Items that are not frames (notes, gaps, TLS, undecodable bytes) pass the filters that they can
answer (``--broker``) and fail those they cannot (an undecodable piece has no client id).

Patterns for names (``--client-id``, ``--group``, ``--topic``, ``--api``) are exact, or shell
globs when they contain ``*``, ``?`` or ``[``.
"""
from __future__ import annotations

import fnmatch
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .names import api_key_of, errors_in

__all__ = ["Filters", "parse_int_set", "topic_names_from", "topics_in", "groups_in"]

_FIND_COORDINATOR = 10
_GROUP_KEY_TYPE = 0
_TOPIC_LISTS = {"topics", "topic_data", "responses", "creatable_topics", "topic_partitions",
                "topic_errors", "assigned_partitions", "owned_partitions", "forgotten_topics_data",
                "partition_errors", "results"}


def _matcher(patterns: Iterable[str]) -> Callable[[Any], bool]:
    exact, globs = set(), []
    for p in patterns:
        (globs.append(p) if any(c in p for c in "*?[") else exact.add(p))

    def match(value: Any) -> bool:
        if not isinstance(value, str):
            return False
        return value in exact or any(fnmatch.fnmatchcase(value, g) for g in globs)

    return match


def parse_int_set(text: str, what: str) -> list[tuple[int, int]]:
    """"12", "9,12" or "4-12" (ranges inclusive) as a list of (lo, hi) ranges."""
    out = []
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        try:
            out.append((int(lo), int(hi) if hi else int(lo)))
        except ValueError:
            raise ValueError(f"{what} {text!r}: give numbers, comma-separated, or ranges like 4-12") from None
    return out


def _in_ranges(v: Any, ranges: Iterable[tuple[int, int]]) -> bool:
    return isinstance(v, int) and any(lo <= v <= hi for lo, hi in ranges)


def topic_names_from(items: Iterable[Any]) -> dict[uuid.UUID, str]:
    """topic id -> name from the capture's Metadata (and CreateTopics) responses, so frames that
    name topics by id (Fetch >= 13 and newer) can be filtered and labelled by name."""
    names: dict[uuid.UUID, str] = {}
    for i in items:
        if i.kind != "response" or i.api_key not in (3, 19) or not isinstance(i.body, dict):
            continue
        for t in i.body.get("topics") or ():
            tid, name = t.get("topic_id"), t.get("name")
            if isinstance(tid, uuid.UUID) and tid.int and isinstance(name, str):
                names[tid] = name
    return names


def topics_in(body: Any, topic_names: dict[uuid.UUID, str] | None = None, *, api_key: int | None = None) -> set[str]:
    """The topic names a body mentions: ``topic``/``topic_name`` strings anywhere, ``name`` in
    the elements of a topic list, topic ids through ``topic_names``, and a topic config
    resource's name."""
    found: set[str] = set()

    def walk(v: Any, parent: str | None) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                if k in ("topic", "topic_name") and isinstance(x, str):
                    found.add(x)
                elif k == "name" and parent in _TOPIC_LISTS and isinstance(x, str):
                    found.add(x)
                elif k == "topic_id" and topic_names and isinstance(x, uuid.UUID) and x in topic_names:
                    found.add(topic_names[x])
                elif k == "resource_name" and v.get("resource_type") == 2 and isinstance(x, str):
                    found.add(x)
                elif isinstance(x, (dict, list)):
                    walk(x, k)
        elif isinstance(v, list):
            for x in v:
                walk(x, parent)

    walk(body, None)
    return found


def groups_in(body: Any, api_key: int | None) -> set[str]:
    """The consumer groups a body names: ``group_id`` anywhere, DescribeGroups' and
    DeleteGroups' lists, FindCoordinator's key(s) when the key type is a group."""
    found: set[str] = set()
    if not isinstance(body, dict):
        return found
    if api_key == _FIND_COORDINATOR:
        if body.get("key_type", 0) == _GROUP_KEY_TYPE:
            if isinstance(body.get("key"), str):
                found.add(body["key"])
            found.update(k for k in body.get("coordinator_keys") or () if isinstance(k, str))
            found.update(c["key"] for c in body.get("coordinators") or ()
                         if isinstance(c, dict) and isinstance(c.get("key"), str))
        return found

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                if k == "group_id" and isinstance(x, str):
                    found.add(x)
                elif k in ("groups", "groups_names") and isinstance(x, list):
                    found.update(g for g in x if isinstance(g, str))
                    walk(x)
                elif isinstance(x, (dict, list)):
                    walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(body)
    return found


def _body_of(item: Any) -> Any:
    if item.body is not None:
        return item.body
    partial = getattr(item, "partial", None)
    return partial.body if partial is not None else None


@dataclass
class Filters:
    apis: list[str] = field(default_factory=list)  # names or keys
    versions: list[tuple[int, int]] | None = None  # (lo, hi) ranges
    corrs: list[tuple[int, int]] | None = None
    client_ids: list[str] = field(default_factory=list)
    brokers: list[str] = field(default_factory=list)  # "host:port" or "port"
    groups: list[str] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    errors: bool = False
    topic_names: dict[uuid.UUID, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._api_keys: set[int] = set()
        names = []
        for a in self.apis:
            for part in a.split(","):
                part = part.strip()
                if not part:
                    continue
                if part.lstrip("-").isdigit():
                    self._api_keys.add(int(part))
                elif any(c in part for c in "*?["):
                    names.append(part.lower())
                else:
                    key = api_key_of(part)
                    if key is not None:
                        self._api_keys.add(key)
                    else:
                        raise ValueError(f"--api {part!r}: no such API (names as in Kafka's protocol "
                                         f"guide, e.g. Fetch, OffsetCommit, or api keys)") from None
        self._api_globs = _matcher(names)
        self._client = _matcher(self.client_ids)
        self._group = _matcher(self.groups)
        self._topic = _matcher(self.topics)

    @property
    def active(self) -> bool:
        return bool(self.apis or self.versions or self.corrs or self.client_ids or self.brokers
                    or self.groups or self.topics or self.errors)

    def _broker_ok(self, item: Any) -> bool:
        b = item.broker
        if b is None:
            return False
        return any(b == want or b.rsplit(":", 1)[-1] == want.lstrip(":") for want in self.brokers)

    def _about_request(self, item: Any, test: Callable[[Any], bool]) -> bool:
        """``test`` on the item, or on the request it answers."""
        if test(item):
            return True
        req = getattr(item, "request", None)
        return req is not None and test(req)

    def accepts(self, item: Any) -> bool:
        if self.brokers and not self._broker_ok(item):
            return False
        if self.apis:
            name = (item.api or "").lower()
            if item.api_key not in self._api_keys and not (name and self._api_globs(name)):
                return False
        if self.versions is not None and not _in_ranges(item.version, self.versions):
            return False
        if self.corrs is not None and not _in_ranges(item.correlation_id, self.corrs):
            return False
        if self.client_ids and not self._about_request(item, lambda i: self._client(i.client_id)):
            return False
        if self.groups and not self._about_request(
                item, lambda i: any(self._group(g) for g in groups_in(_body_of(i), i.api_key))):
            return False
        if self.topics and not self._about_request(
                item, lambda i: any(self._topic(t) for t in topics_in(_body_of(i), self.topic_names))):
            return False
        if self.errors and not errors_in(_body_of(item)):
            return False
        return True
