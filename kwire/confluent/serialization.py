"""``confluent_kafka.serialization``: the serializer interfaces and the basic serializers
(string, integer, double) that SerializingProducer / DeserializingConsumer take.  The schema
registry serializers (Avro, Protobuf, JSON Schema) are not provided."""
from __future__ import annotations

import struct
from enum import Enum
from typing import Any

from ._types import KafkaException

__all__ = ["MessageField", "SerializationContext", "SerializationError", "Serializer",
           "Deserializer", "StringSerializer", "StringDeserializer", "IntegerSerializer",
           "IntegerDeserializer", "DoubleSerializer", "DoubleDeserializer"]


class MessageField(str, Enum):
    """Which part of a message a (de)serializer works on."""
    NONE = "none"
    KEY = "key"
    VALUE = "value"

    def __str__(self) -> str:
        return str(self.value)


class SerializationContext:
    """What a (de)serializer knows of the message: topic, field, headers."""

    def __init__(self, topic: str, field: MessageField, headers: Any = None) -> None:
        self.topic = topic
        self.field = field
        self.headers = headers


class SerializationError(KafkaException):
    """A (de)serializer failed."""


class Serializer:
    """``serializer(obj, ctx) -> bytes | None``."""

    def __call__(self, obj: Any, ctx: SerializationContext | None = None) -> bytes | None:
        raise NotImplementedError

    def set_cluster_id_resolver(self, resolver: object) -> None:
        pass

    def close(self) -> None:
        pass


class Deserializer:
    """``deserializer(bytes | None, ctx) -> obj``."""

    def __call__(self, value: bytes | None, ctx: SerializationContext | None = None) -> Any:
        raise NotImplementedError

    def set_cluster_id_resolver(self, resolver: object) -> None:
        pass

    def close(self) -> None:
        pass


class _Packed(Serializer):
    _fmt: struct.Struct

    def __call__(self, obj: Any, ctx: SerializationContext | None = None) -> bytes | None:
        if obj is None:
            return None
        try:
            return self._fmt.pack(obj)
        except struct.error as exc:
            raise SerializationError(str(exc)) from None


class _Unpacked(Deserializer):
    _fmt: struct.Struct

    def __call__(self, value: bytes | None, ctx: SerializationContext | None = None) -> Any:
        if value is None:
            return None
        try:
            return self._fmt.unpack(value)[0]
        except struct.error as exc:
            raise SerializationError(str(exc)) from None


class IntegerSerializer(_Packed):
    """int32, big-endian (Kafka's IntegerSerializer)."""
    _fmt = struct.Struct(">i")


class IntegerDeserializer(_Unpacked):
    _fmt = struct.Struct(">i")


class DoubleSerializer(_Packed):
    """IEEE 754 binary64, big-endian (Kafka's DoubleSerializer)."""
    _fmt = struct.Struct(">d")


class DoubleDeserializer(_Unpacked):
    _fmt = struct.Struct(">d")


class StringSerializer(Serializer):
    def __init__(self, codec: str = "utf_8") -> None:
        self.codec = codec

    def __call__(self, obj: Any, ctx: SerializationContext | None = None) -> bytes | None:
        if obj is None:
            return None
        try:
            encoded: bytes = obj.encode(self.codec)
            return encoded
        except Exception as exc:
            raise SerializationError(str(exc)) from None


class StringDeserializer(Deserializer):
    def __init__(self, codec: str = "utf_8") -> None:
        self.codec = codec

    def __call__(self, value: bytes | None, ctx: SerializationContext | None = None) -> Any:
        if value is None:
            return None
        try:
            return value.decode(self.codec)
        except Exception as exc:
            raise SerializationError(str(exc)) from None
