"""The Kafka protocol: message schemas, frames, error codes.  Imports nothing above it.

    from kwire import protocol
    frame = protocol.encode_request("Metadata", 12, {"topics": None}, correlation_id=1)
    resp = protocol.decode_response("Metadata", 12, payload)
"""
from .api import (  # noqa: F401
    APIS, Api, RequestFrame, ResponseFrame, decode_assignment, decode_request,
    decode_request_body, decode_response, decode_response_body, decode_subscription,
    encode_assignment, encode_request, encode_request_body, encode_response,
    encode_response_body, encode_subscription, peek_correlation_id, peek_request_header,
    request_plan, response_plan, strip_size_prefix, to_jsonable,
)
from .api import api as get_api  # noqa: E402,F401  (the module keeps the name `api`)
