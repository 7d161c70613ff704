"""Broker error table (kwire.protocol.error_codes) and the exceptions built from it (kwire.errors)."""
import inspect

import pytest

import kwire.errors as errors
from kwire.errors import BrokerError, KwireError, error_class, for_code
from kwire.protocol.error_codes import BY_CODE, BY_NAME, ERRORS

# Newest code as of Kafka 4.2 (SHARE_SESSION_LIMIT_REACHED).
NEWEST_CODE = 133


def _generated_classes():
    return [c for c in vars(errors).values()
            if inspect.isclass(c) and issubclass(c, BrokerError) and c is not BrokerError]


# --- the table ------------------------------------------------------------------------------

def test_entries_are_well_formed():
    for entry in ERRORS:
        assert len(entry) == 5, entry
        code, name, retriable, invalid_metadata, doc = entry
        assert type(code) is int
        assert name.isupper() and name.replace("_", "").isalnum(), name
        assert type(retriable) is bool and type(invalid_metadata) is bool
        assert isinstance(doc, str) and doc.strip() and "\n" not in doc, name


def test_codes_and_names_unique():
    codes = [e[0] for e in ERRORS]
    names = [e[1] for e in ERRORS]
    assert len(set(codes)) == len(codes)
    assert len(set(names)) == len(names)


def test_codes_contiguous_like_kafka():
    # Kafka's Errors enum has no gaps from -1 up to its newest code.
    assert [e[0] for e in ERRORS] == list(range(-1, NEWEST_CODE + 1))


def test_by_code_and_by_name_index_the_same_entries():
    assert len(BY_CODE) == len(BY_NAME) == len(ERRORS)
    for entry in ERRORS:
        assert BY_CODE[entry[0]] is entry
        assert BY_NAME[entry[1]] is entry


def test_anchor_entries():
    assert BY_CODE[-1][1] == "UNKNOWN_SERVER_ERROR"
    assert BY_CODE[0][1] == "NONE"
    assert BY_NAME["NOT_LEADER_OR_FOLLOWER"][0] == 6
    assert BY_NAME["UNKNOWN_TOPIC_ID"][0] == 100
    assert BY_NAME["INVALID_REGULAR_EXPRESSION"][0] == 128
    assert BY_NAME["SHARE_SESSION_LIMIT_REACHED"][0] == NEWEST_CODE


def test_invalid_metadata_implies_retriable():
    # InvalidMetadataException extends RetriableException in Kafka.
    for _code, name, retriable, invalid_metadata, _ in ERRORS:
        if invalid_metadata:
            assert retriable, name


@pytest.mark.parametrize("name, retriable, invalid_metadata", [
    ("CORRUPT_MESSAGE", True, False),
    ("LEADER_NOT_AVAILABLE", True, True),
    ("NOT_LEADER_OR_FOLLOWER", True, True),
    ("REQUEST_TIMED_OUT", True, False),
    ("BROKER_NOT_AVAILABLE", False, False),
    ("NETWORK_EXCEPTION", True, True),
    ("COORDINATOR_LOAD_IN_PROGRESS", True, False),
    ("NOT_ENOUGH_REPLICAS", True, False),
    ("UNKNOWN_MEMBER_ID", False, False),
    ("TOPIC_AUTHORIZATION_FAILED", False, False),
    ("NOT_CONTROLLER", True, False),
    ("CONCURRENT_TRANSACTIONS", True, False),
    ("KAFKA_STORAGE_ERROR", True, True),
    ("UNKNOWN_PRODUCER_ID", False, False),
    ("FENCED_LEADER_EPOCH", True, True),
    ("UNKNOWN_LEADER_EPOCH", True, False),
    ("PRODUCER_FENCED", False, False),
    ("UNKNOWN_TOPIC_ID", True, True),
    ("TRANSACTION_ABORTABLE", False, False),
    ("SHARE_SESSION_NOT_FOUND", True, False),
    ("REBOOTSTRAP_REQUIRED", False, False),
    ("SHARE_SESSION_LIMIT_REACHED", True, False),
])
def test_flags_match_kafka(name, retriable, invalid_metadata):
    _, _, r, im, _ = BY_NAME[name]
    assert (r, im) == (retriable, invalid_metadata)


# --- the exceptions -----------------------------------------------------------------------

def test_unknown_topic_or_partition():
    err = for_code(3)
    assert isinstance(err, errors.UnknownTopicOrPartitionError)
    assert isinstance(err, BrokerError) and isinstance(err, KwireError)
    assert err.code == 3 and err.name == "UNKNOWN_TOPIC_OR_PARTITION"
    assert err.retriable is True
    assert err.invalid_metadata is True


def test_offset_out_of_range_not_retriable():
    err = for_code(1)
    assert isinstance(err, errors.OffsetOutOfRangeError)
    assert err.code == 1
    assert err.retriable is False
    assert err.invalid_metadata is False


def test_not_coordinator_retriable():
    err = for_code(16)
    assert isinstance(err, errors.NotCoordinatorError)
    assert err.retriable is True
    assert err.invalid_metadata is False


def test_rebalance_in_progress_not_retriable():
    # RebalanceInProgressException extends ApiException, not RetriableException.
    err = for_code(27)
    assert isinstance(err, errors.RebalanceInProgressError)
    assert err.retriable is False


def test_broker_message_is_kept():
    err = for_code(3, "no such topic: foo")
    assert err.broker_message == "no such topic: foo"
    assert "UNKNOWN_TOPIC_OR_PARTITION" in str(err) and "foo" in str(err)
    assert str(for_code(16)) == "[16] NOT_COORDINATOR"


def test_unknown_code():
    err = for_code(9999, "mystery")
    assert type(err) is BrokerError
    assert err.code == 9999
    assert "UNKNOWN" in err.name and "9999" in err.name
    assert "9999" in str(err) and "mystery" in str(err)
    assert err.retriable is False
    # the class default must not have been mutated by the instance
    assert BrokerError.code == -1 and BrokerError.name == "UNKNOWN_SERVER_ERROR"
    assert error_class(9999) is BrokerError


def test_code_zero_has_no_exception():
    assert error_class(0) is BrokerError
    assert not hasattr(errors, "NoneError")


def test_every_nonzero_code_has_its_own_class():
    for code, name, retriable, invalid_metadata, doc in ERRORS:
        if code == 0:
            continue
        cls = error_class(code)
        assert cls is not BrokerError, name
        assert (cls.code, cls.name, cls.retriable, cls.invalid_metadata) == (
            code, name, retriable, invalid_metadata)
        assert cls.__doc__ == doc
        err = for_code(code)
        assert type(err) is cls and err.code == code


def test_every_class_is_a_kwire_error():
    classes = _generated_classes()
    assert len(classes) >= len(ERRORS) - 1
    for cls in classes:
        assert issubclass(cls, KwireError), cls
    for obj in vars(errors).values():
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            assert issubclass(obj, KwireError), obj


def test_client_side_unsupported_version_not_shadowed():
    # The client-side class keeps its name; the broker's code 35 subclasses it.
    assert not issubclass(errors.UnsupportedVersionError, BrokerError)
    err = errors.for_code(35)
    assert isinstance(err, errors.UnsupportedVersionError) and isinstance(err, BrokerError)


# --- the generated classes are the table's ----------------------------------------------------

def test_generated_classes_match_the_table():
    """kwire/errors.py's broker classes are code written by tools/gen_broker_errors.py from
    ERRORS: regenerating gives the same file, and every non-zero code has its class."""
    import subprocess
    import sys
    from pathlib import Path

    tool = Path(__file__).resolve().parent.parent / "tools" / "gen_broker_errors.py"
    run = subprocess.run([sys.executable, str(tool), "--check"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    for code, name, retriable, invalid_metadata, doc in ERRORS:
        if code == 0:
            continue
        cls = error_class(code)
        assert (cls.code, cls.name, cls.retriable, cls.invalid_metadata, cls.__doc__) == \
            (code, name, retriable, invalid_metadata, doc)


def test_errors_imports_nothing_from_kwire():
    """kwire.errors sits below every layer: importing it loads no other kwire module."""
    import subprocess
    import sys

    code = "import sys, kwire.errors; print(sorted(m for m in sys.modules if m.startswith('kwire')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['kwire', 'kwire.errors']"
