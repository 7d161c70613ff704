"""The broker error codes the consumer's state machines branch on, by name (from the one
error table), so handlers read ``if code == E.REBALANCE_IN_PROGRESS``."""
from __future__ import annotations

from ..errors import BrokerError, for_code
from ..protocol.error_codes import BY_CODE, BY_NAME


class _Codes:
    def __getattr__(self, name: str) -> int:
        try:
            return BY_NAME[name][0]
        except KeyError:
            raise AttributeError(name) from None


E = _Codes()

NONE = 0


def is_retriable(code: int) -> bool:
    entry = BY_CODE.get(code)
    return bool(entry and entry[2])


def is_invalid_metadata(code: int) -> bool:
    entry = BY_CODE.get(code)
    return bool(entry and entry[3])


def error(code: int, message: str | None = None) -> BrokerError:
    return for_code(code, message)
