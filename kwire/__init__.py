"""kwire: a Kafka wire-protocol client for Python."""
# The one place the version is written: pyproject.toml reads it (dynamic), `kwire --version`
# prints it, tests/test_packaging.py checks the built wheel's metadata against it.
__version__ = "0.1.0"

# Public classes, imported on first use (``kwire.Producer``) so that ``import kwire`` stays
# cheap and the codec is chosen only when needed.
_LAZY = {
    "Producer": "kwire.producer",
    "Admin": "kwire.admin",
    "NetworkClient": "kwire.net",
    "parse_config": "kwire.config",
    "Consumer": "kwire.consumer",
    "TopicPartition": "kwire.consumer",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kwire' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
