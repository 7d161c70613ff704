"""The Kafka protocol: message schemas, frames, error codes.  Imports nothing above it.

    from kwire import protocol
    frame = protocol.encode_request("Metadata", 12, {"topics": None}, correlation_id=1)
    resp = protocol.decode_response("Metadata", 12, payload)

Bodies are plain dicts; ``kwire.protocol.bodies`` types them for type checkers (generated:
a TypedDict per message), e.g. ``bodies.response("Metadata", resp.body)["topics"]``.

Names are loaded on first use, so the error table (``kwire.protocol.error_codes``, which
``kwire decode`` and the commands read) can be imported without the codec.
"""
from __future__ import annotations

_FROM_API = {
    "APIS", "Api", "RequestFrame", "ResponseFrame", "decode_assignment", "decode_request",
    "decode_request_body", "decode_response", "decode_response_body", "decode_subscription",
    "encode_assignment", "encode_request", "encode_request_body", "encode_response",
    "encode_response_body", "encode_subscription", "peek_correlation_id", "peek_request_header",
    "request_plan", "response_plan", "strip_size_prefix", "to_jsonable",
}


def __getattr__(name: str) -> object:
    if name == "bodies":  # (``from . import bodies`` would come back here)
        import importlib

        return importlib.import_module(".bodies", __name__)
    if name in _FROM_API or name == "get_api":
        from . import api as _api_module

        return getattr(_api_module, "api" if name == "get_api" else name)
    raise AttributeError(f"module 'kwire.protocol' has no attribute {name!r}")


__all__ = sorted(_FROM_API | {"bodies", "get_api"})
