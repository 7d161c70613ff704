"""kwire's producer: :class:`Producer` (batching, retries, delivery reports; see
:mod:`kwire.producer.producer`), the idempotent / transactional state machine
(:mod:`kwire.producer.transactions`, no I/O), the transaction coordinator's requests
(:mod:`kwire.producer.coordinator`) and the transactional calls (:mod:`kwire.producer.txn_api`)."""
from __future__ import annotations

from .producer import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    DeliveryReport,
    Producer,
    fnv1a,
    murmur2,
    partition_for,
)
from .transactions import TxnState

__all__ = ["Producer", "DeliveryReport", "murmur2", "fnv1a", "partition_for", "TxnState",
           "TIMESTAMP_NOT_AVAILABLE", "TIMESTAMP_CREATE_TIME", "TIMESTAMP_LOG_APPEND_TIME"]
