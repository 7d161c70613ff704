"""kwire's consumer: state machines that do no I/O (subscription, coordinator, fetcher,
positions) and the Consumer that drives them from one background thread."""
from typing import TYPE_CHECKING

from .types import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    OFFSET_STORED,
    GroupMetadata,
    OffsetAndMetadata,
    TopicPartition,
)

if TYPE_CHECKING:  # (at run time, __getattr__ imports it when first asked for)
    from .consumer import Consumer

__all__ = ["Consumer", "TopicPartition", "OffsetAndMetadata", "GroupMetadata", "OFFSET_BEGINNING", "OFFSET_END",
           "OFFSET_INVALID", "OFFSET_STORED"]


def __getattr__(name: str) -> type:
    # The Consumer pulls in the network layer; the state machines alone do not need it.
    if name == "Consumer":
        from .consumer import Consumer
        return Consumer
    raise AttributeError(f"module 'kwire.consumer' has no attribute {name!r}")
