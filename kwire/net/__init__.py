"""The network layer: connections, request pipelining, version negotiation, cluster metadata.

Plain sockets and ``selectors``; no threads, no asyncio.  One driver thread owns a
:class:`NetworkClient`; only its ``wakeup()`` may be called from elsewhere.
"""
from .client import NetworkClient, now_ms  # noqa: F401
from .connection import ConnState, InFlight, backoff_ms  # noqa: F401
from .framing import FrameReader  # noqa: F401
from .metadata import BrokerInfo, ClusterSnapshot, Metadata, PartitionInfo, TopicInfo  # noqa: F401

__all__ = ["NetworkClient", "now_ms", "ConnState", "InFlight", "backoff_ms", "FrameReader", "BrokerInfo",
           "ClusterSnapshot", "Metadata", "PartitionInfo", "TopicInfo"]
