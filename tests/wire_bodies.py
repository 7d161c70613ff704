"""Request bodies the tests send by hand through a NetworkClient."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any


def fetch_body(topic: str, topic_id: Any, *, max_wait_ms: int = 200,
               partition_max_bytes: int = 1 << 20) -> Callable[[int], dict[str, Any]]:
    """A Fetch of partition 0 of ``topic`` from offset 0 (a body for every version: the
    client's encoder takes the fields each version has)."""
    def body(version: int) -> dict[str, Any]:
        return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": 4 << 20,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": topic, "topic_id": topic_id, "partitions": [{
                    "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                    "last_fetched_epoch": -1, "log_start_offset": -1,
                    "partition_max_bytes": partition_max_bytes}]}],
                "forgotten_topics_data": [], "rack_id": ""}
    return body
