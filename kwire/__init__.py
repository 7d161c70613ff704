"""kwire: a Kafka wire-protocol client for Python."""
__version__ = "0.1.0"
