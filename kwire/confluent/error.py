"""``confluent_kafka.error``: the exceptions of the serializing clients."""
from __future__ import annotations

from typing import Any

from ._types import KafkaError, KafkaException
from .serialization import SerializationError

__all__ = ["KafkaError", "KafkaException", "ConsumeError", "ProduceError",
           "KeyDeserializationError", "ValueDeserializationError", "KeySerializationError",
           "ValueSerializationError"]


class _KafkaClientError(KafkaException):
    """``args[0]`` the KafkaError; ``exception`` the original one; ``kafka_message`` the
    message as it came from the broker (consumer side)."""

    def __init__(self, kafka_error: KafkaError, exception: BaseException | None = None,
                 kafka_message: Any = None) -> None:
        super().__init__(kafka_error)
        self.exception = exception
        self.kafka_message = kafka_message

    @property
    def code(self) -> int:
        err: KafkaError = self.args[0]
        return err.code()

    @property
    def name(self) -> str:
        err: KafkaError = self.args[0]
        return err.name()


class ConsumeError(_KafkaClientError):
    pass


class KeyDeserializationError(ConsumeError, SerializationError):
    def __init__(self, exception: BaseException | None = None, kafka_message: Any = None) -> None:
        super().__init__(KafkaError(KafkaError._KEY_DESERIALIZATION, str(exception)),
                         exception=exception, kafka_message=kafka_message)


class ValueDeserializationError(ConsumeError, SerializationError):
    def __init__(self, exception: BaseException | None = None, kafka_message: Any = None) -> None:
        super().__init__(KafkaError(KafkaError._VALUE_DESERIALIZATION, str(exception)),
                         exception=exception, kafka_message=kafka_message)


class ProduceError(_KafkaClientError):
    def __init__(self, kafka_error: KafkaError, exception: BaseException | None = None) -> None:
        super().__init__(kafka_error, exception, None)


class KeySerializationError(ProduceError, SerializationError):
    def __init__(self, exception: BaseException | None = None) -> None:
        super().__init__(KafkaError(KafkaError._KEY_SERIALIZATION, str(exception)), exception=exception)


class ValueSerializationError(ProduceError, SerializationError):
    def __init__(self, exception: BaseException | None = None) -> None:
        super().__init__(KafkaError(KafkaError._VALUE_SERIALIZATION, str(exception)), exception=exception)
