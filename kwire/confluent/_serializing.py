"""SerializingProducer and DeserializingConsumer: the Producer / Consumer with (de)serializers
from the configuration (``key.serializer``, ``value.serializer``, ``key.deserializer``,
``value.deserializer``), as confluent-kafka's."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .consumer import Consumer
from .error import (
    ConsumeError,
    KeyDeserializationError,
    KeySerializationError,
    ValueDeserializationError,
    ValueSerializationError,
)
from .producer import Producer
from .serialization import MessageField, SerializationContext


class SerializingProducer(Producer):
    def __init__(self, conf: dict[str, Any]) -> None:
        conf = dict(conf)
        self._key_serializer = conf.pop("key.serializer", None)
        self._value_serializer = conf.pop("value.serializer", None)
        super().__init__(conf)

    # confluent-kafka's order (key before value), unlike Producer.produce()'s
    def produce(self, topic: str, key: Any = None, value: Any = None,  # type: ignore[override]
                partition: int = -1, on_delivery: Callable[..., object] | None = None,
                timestamp: int = 0, headers: Any = None) -> None:
        ctx = SerializationContext(topic, MessageField.KEY, headers)
        if self._key_serializer is not None:
            try:
                key = self._key_serializer(key, ctx)
            except Exception as exc:
                raise KeySerializationError(exc) from exc
        ctx.field = MessageField.VALUE
        if self._value_serializer is not None:
            try:
                value = self._value_serializer(value, ctx)
            except Exception as exc:
                raise ValueSerializationError(exc) from exc
        super().produce(topic, value, key, partition=partition, on_delivery=on_delivery,
                        timestamp=timestamp, headers=headers)


class DeserializingConsumer(Consumer):
    def __init__(self, conf: dict[str, Any]) -> None:
        conf = dict(conf)
        self._key_deserializer = conf.pop("key.deserializer", None)
        self._value_deserializer = conf.pop("value.deserializer", None)
        super().__init__(conf)

    def poll(self, timeout: float | None = -1) -> Any:
        """The next message, key and value deserialized (set on it); None after ``timeout``.
        Error messages raise ConsumeError (``kafka_message`` holds them)."""
        msg = super().poll(timeout)
        if msg is None:
            return None
        err = msg.error()
        if err is not None:
            raise ConsumeError(err, kafka_message=msg)
        ctx = SerializationContext(msg.topic(), MessageField.KEY, msg.headers())
        key = msg.key()
        if self._key_deserializer is not None:
            try:
                key = self._key_deserializer(key, ctx)
            except Exception as exc:
                raise KeyDeserializationError(exception=exc, kafka_message=msg) from exc
        value = msg.value()
        if self._value_deserializer is not None:
            ctx.field = MessageField.VALUE
            try:
                value = self._value_deserializer(value, ctx)
            except Exception as exc:
                raise ValueDeserializationError(exception=exc, kafka_message=msg) from exc
        msg.set_key(key)
        msg.set_value(value)
        return msg

    def consume(self, num_messages: int = 1, timeout: float | None = -1) -> list[Any]:
        raise NotImplementedError("DeserializingConsumer.consume() is not implemented: use poll()")
