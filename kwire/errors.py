"""Every error kwire raises.

Two families under one root, :class:`KwireError`:

* client-side failures: malformed bytes (:class:`ProtocolError`, :class:`TruncatedError`,
  :class:`CorruptRecordError`), configuration, timeouts, connections;
* broker error codes: :class:`BrokerError` subclasses, one per code, written at the end of
  this file by ``tools/gen_broker_errors.py`` from the one error table in
  :mod:`kwire.protocol.error_codes` (a test checks they agree), each knowing whether it is
  retriable and whether it calls for a metadata refresh.  Unknown codes still map to
  :class:`BrokerError` with their number.  The classes are code, not built at import, so a type
  checker sees them and this module imports nothing from kwire.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class KwireError(Exception):
    """Root of every exception kwire raises on purpose.

    Calls on many items (Admin's) say which item an error belongs to: ``topic``, ``group`` and,
    for group calls, the group's ``coordinator`` (a :class:`kwire.admin.BrokerNode`), set where
    known."""

    topic: str | None = None
    group: str | None = None
    coordinator: Any = None


# --- malformed input ------------------------------------------------------------------

class ProtocolError(KwireError):
    """Bytes that do not form a valid Kafka frame, message or record."""

    def __init__(self, message: str, *, position: int | None = None):
        super().__init__(message)
        self.position = position


class TruncatedError(ProtocolError):
    """The buffer ended before the message or record did."""


class TrailingBytesError(ProtocolError):
    """A message decoded completely but bytes were left over."""


class CorruptRecordError(ProtocolError):
    """A record batch or legacy message failed its CRC or structure checks."""


class UnsupportedVersionError(KwireError):
    """An (api, version) pair outside what kwire or the broker supports."""


class UnsupportedCompressionError(CorruptRecordError):
    """A batch names a compression codec kwire does not know."""


class DecompressionLimitError(CorruptRecordError):
    """A compressed batch expands past ``fetch.max.decompressed.bytes`` (a decompression bomb,
    or a legitimate batch bigger than the cap allows).  Decompression stopped at the cap.
    ``limit`` is the cap in bytes; ``topic``, ``partition`` and ``offset`` (the batch's base
    offset, or a legacy wrapper's offset) name the batch when known (else None)."""

    def __init__(self, message: str, *, position: int | None = None, limit: int | None = None,
                 topic: str | None = None, partition: int | None = None,
                 offset: int | None = None):
        super().__init__(message, position=position)
        self.limit = limit
        self.topic = topic
        self.partition = partition
        self.offset = offset


# --- client-side ------------------------------------------------------------------------

class ConfigError(KwireError, ValueError):
    """An unknown configuration key or an invalid value; the message names it."""


class KafkaTimeoutError(KwireError, TimeoutError):
    """An operation did not complete within its timeout."""


class KafkaConnectionError(KwireError, ConnectionError):
    """A broker connection could not be made or was lost."""


class NoOffsetForPartitionError(KwireError):
    """No committed offset and auto.offset.reset=error."""


class DataLossError(KwireError):
    """Records a read needs are gone from Kafka: below the log start (retention, DeleteRecords),
    past the log end (truncation), or in a topic that was deleted and recreated (its topic id
    changed).  Raised by the Spark source when failOnDataLoss is true."""


class ExecutorSetupError(KwireError):
    """Spark's executors cannot run kwire (not importable there, another version, or their
    Python does not start); the message says what each executor reported and how to ship
    kwire with the job."""


class LogTruncationError(KwireError):
    """The leader's log was truncated below the consumer's position (KIP-320)."""


class CommitFailedError(KwireError):
    """A commit could not be completed (e.g. the group rebalanced)."""


class NotAssignedError(CommitFailedError):
    """A group member's commit named partitions it does not own (any more): revoked, lost or
    never assigned.  Another member may be consuming them; committing would overwrite its
    progress.  ``partitions`` lists them."""

    def __init__(self, message: str, partitions: Iterable[object] = ()):
        super().__init__(message)
        self.partitions = list(partitions)


class RebalanceInProgressError(CommitFailedError):
    """A group member's commit met a rebalance it cannot commit through: the member has joined
    the next generation but not yet received its assignment (the broker refuses commits then).
    Retriable: commit again after the next poll()/consume() (on_assign has run by then).
    Commits of owned partitions while the group merely prepares a cooperative rebalance go
    through without this."""

    retriable = True


class ConsumerClosedError(KwireError, RuntimeError):
    """A call on a consumer after close() (confluent-kafka raises RuntimeError there too)."""


class ConcurrentUseError(KwireError, RuntimeError):
    """poll()/consume() of one Consumer called from a second thread while the first is still in
    it.  A consumer's application side has one owner at a time (see Consumer); the second call
    raises at once instead of taking records half way through the first's."""


class PurgedError(KwireError):
    """The delivery report of a record Producer.purge() dropped: still queued (``in_flight``
    False: never sent) or sent without an answer yet (``in_flight`` True: the broker may still
    have written it)."""

    def __init__(self, message: str, *, in_flight: bool = False):
        super().__init__(message)
        self.in_flight = in_flight


class ProducerFatalError(KwireError):
    """The idempotent / transactional producer cannot go on: it was fenced by a newer producer
    with the same transactional.id (``cause`` PRODUCER_FENCED or INVALID_PRODUCER_EPOCH), or it
    is not authorized (TRANSACTIONAL_ID / CLUSTER_AUTHORIZATION_FAILED).  Every later call raises it again; close the producer and make a new
    one (librdkafka's fatal errors, confluent-kafka's ``KafkaError.fatal()``)."""

    def __init__(self, cause: BaseException, message: str | None = None):
        super().__init__(message or f"fatal producer error: {cause}")
        self.cause = cause


class TransactionAbortRequiredError(KwireError):
    """The current transaction failed (a record could not be delivered, the broker answered
    TRANSACTION_ABORTABLE, a sequence went out of order, ...): call abort_transaction(), then
    begin a new one (confluent-kafka's ``KafkaError.txn_requires_abort()``)."""

    def __init__(self, cause: BaseException, message: str | None = None):
        super().__init__(message or f"transaction must be aborted: {cause}")
        self.cause = cause


class TransactionStateError(KwireError, RuntimeError):
    """A transactional call out of order: produce() outside a transaction, begin_transaction()
    twice, commit without init_transactions(), ... (librdkafka's ``_STATE``)."""


class NotTransactionalError(TransactionStateError):
    """A transactional call on a producer without transactional.id (librdkafka's
    ``_NOT_CONFIGURED``)."""


class MaxPollIntervalExceededError(KwireError):
    """The application did not call poll()/consume() within max.poll.interval.ms: the member
    left the group and its partitions were lost (on_lost ran first).  Raised once from the next
    poll()/consume() (librdkafka reports ``_MAX_POLL_EXCEEDED`` the same way); calling again
    rejoins the group."""


class AuthenticationError(KwireError):
    """The broker (or the client, checking the broker) refused the connection's credentials:
    SASL failed (wrong password, unknown user, mechanism not enabled, the server's SCRAM
    signature did not verify).  Not retriable: the same credentials would fail again, so
    requests waiting for the connection fail at once instead of retrying until they time out."""


class SslAuthenticationError(AuthenticationError):
    """The TLS handshake failed: the broker's certificate did not verify against
    ssl.ca.location, its name did not match the host we connected to, the broker refused our
    client certificate, or the peer does not speak TLS.  Not retriable, like AuthenticationError."""


# --- broker error codes -------------------------------------------------------------------

class BrokerError(KwireError):
    """A non-zero error code from a broker."""

    code: int = -1
    name: str = "UNKNOWN_SERVER_ERROR"
    retriable: bool = False
    invalid_metadata: bool = False

    def __init__(self, message: str | None = None, *, code: int | None = None):
        if code is not None:
            self.code = code
        self.broker_message = message
        text = f"[{self.code}] {self.name}"
        if message:
            text += f": {message}"
        super().__init__(text)


def for_code(code: int, message: str | None = None) -> BrokerError:
    """The exception instance for a broker error code (unknown codes stay distinguishable)."""
    cls = _BY_CODE.get(code)
    if cls is None:
        err = BrokerError(message, code=code)
        err.name = f"UNKNOWN_ERROR_CODE_{code}"
        err.args = (f"[{code}] {err.name}" + (f": {message}" if message else ""),)
        return err
    return cls(message)


def error_class(code: int) -> type[BrokerError]:
    return _BY_CODE.get(code, BrokerError)


# --- generated by tools/gen_broker_errors.py from kwire/protocol/error_codes.py: do not edit ---


class UnknownServerErrorError(BrokerError):
    """Broker hit an unexpected internal failure while handling the request."""

    code = -1
    name = "UNKNOWN_SERVER_ERROR"


class OffsetOutOfRangeError(BrokerError):
    """Requested offset lies outside the log's retained offset range."""

    code = 1
    name = "OFFSET_OUT_OF_RANGE"


class CorruptMessageError(BrokerError):
    """Message or batch is corrupt: bad CRC, bad size, or null key on a compacted topic."""

    code = 2
    name = "CORRUPT_MESSAGE"
    retriable = True


class UnknownTopicOrPartitionError(BrokerError):
    """Topic or partition is unknown to this broker."""

    code = 3
    name = "UNKNOWN_TOPIC_OR_PARTITION"
    retriable = True
    invalid_metadata = True


class InvalidFetchSizeError(BrokerError):
    """Fetch size in the request is not acceptable."""

    code = 4
    name = "INVALID_FETCH_SIZE"


class LeaderNotAvailableError(BrokerError):
    """Partition has no leader right now, usually mid-election."""

    code = 5
    name = "LEADER_NOT_AVAILABLE"
    retriable = True
    invalid_metadata = True


class NotLeaderOrFollowerError(BrokerError):
    """Broker is not the leader (or not a replica) for this partition."""

    code = 6
    name = "NOT_LEADER_OR_FOLLOWER"
    retriable = True
    invalid_metadata = True


class RequestTimedOutError(BrokerError):
    """Broker gave up waiting for the request to complete."""

    code = 7
    name = "REQUEST_TIMED_OUT"
    retriable = True


class BrokerNotAvailableError(BrokerError):
    """Target broker cannot be reached or is not up."""

    code = 8
    name = "BROKER_NOT_AVAILABLE"


class ReplicaNotAvailableError(BrokerError):
    """A replica the request expected is not available."""

    code = 9
    name = "REPLICA_NOT_AVAILABLE"
    retriable = True
    invalid_metadata = True


class MessageTooLargeError(BrokerError):
    """Message exceeds the maximum size the broker will take."""

    code = 10
    name = "MESSAGE_TOO_LARGE"


class StaleControllerEpochError(BrokerError):
    """Controller epoch in the request is older than the broker's."""

    code = 11
    name = "STALE_CONTROLLER_EPOCH"


class OffsetMetadataTooLargeError(BrokerError):
    """Offset commit metadata string is longer than allowed."""

    code = 12
    name = "OFFSET_METADATA_TOO_LARGE"


class NetworkExceptionError(BrokerError):
    """Connection dropped on the broker side before a reply was sent."""

    code = 13
    name = "NETWORK_EXCEPTION"
    retriable = True
    invalid_metadata = True


class CoordinatorLoadInProgressError(BrokerError):
    """Coordinator is still loading its state; try again later."""

    code = 14
    name = "COORDINATOR_LOAD_IN_PROGRESS"
    retriable = True


class CoordinatorNotAvailableError(BrokerError):
    """Coordinator for this group or transaction is unavailable."""

    code = 15
    name = "COORDINATOR_NOT_AVAILABLE"
    retriable = True


class NotCoordinatorError(BrokerError):
    """This broker is not the coordinator for the group or transaction."""

    code = 16
    name = "NOT_COORDINATOR"
    retriable = True


class InvalidTopicExceptionError(BrokerError):
    """Topic name is illegal or the topic is internal and cannot be written."""

    code = 17
    name = "INVALID_TOPIC_EXCEPTION"


class RecordListTooLargeError(BrokerError):
    """Produce request's batch is bigger than the configured segment size."""

    code = 18
    name = "RECORD_LIST_TOO_LARGE"


class NotEnoughReplicasError(BrokerError):
    """In-sync replica count is below min.insync.replicas; write refused."""

    code = 19
    name = "NOT_ENOUGH_REPLICAS"
    retriable = True


class NotEnoughReplicasAfterAppendError(BrokerError):
    """Write landed on the leader but too few in-sync replicas remain."""

    code = 20
    name = "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
    retriable = True


class InvalidRequiredAcksError(BrokerError):
    """The acks value in the produce request is not allowed."""

    code = 21
    name = "INVALID_REQUIRED_ACKS"


class IllegalGenerationError(BrokerError):
    """Group generation id is stale or wrong."""

    code = 22
    name = "ILLEGAL_GENERATION"


class InconsistentGroupProtocolError(BrokerError):
    """Member's protocol type or protocols do not match the group's."""

    code = 23
    name = "INCONSISTENT_GROUP_PROTOCOL"


class InvalidGroupIdError(BrokerError):
    """Group id is empty or otherwise not acceptable."""

    code = 24
    name = "INVALID_GROUP_ID"


class UnknownMemberIdError(BrokerError):
    """Member id is not recognised by the coordinator."""

    code = 25
    name = "UNKNOWN_MEMBER_ID"


class InvalidSessionTimeoutError(BrokerError):
    """Session timeout is outside the broker's allowed bounds."""

    code = 26
    name = "INVALID_SESSION_TIMEOUT"


class BrokerRebalanceInProgressError(BrokerError, RebalanceInProgressError):
    """Group is rebalancing; the member must rejoin."""

    code = 27
    name = "REBALANCE_IN_PROGRESS"
    retriable = False
    invalid_metadata = False


class InvalidCommitOffsetSizeError(BrokerError):
    """Offset commit was refused because its size is too large."""

    code = 28
    name = "INVALID_COMMIT_OFFSET_SIZE"


class TopicAuthorizationFailedError(BrokerError):
    """Not authorized to access the topic."""

    code = 29
    name = "TOPIC_AUTHORIZATION_FAILED"


class GroupAuthorizationFailedError(BrokerError):
    """Not authorized to access the group."""

    code = 30
    name = "GROUP_AUTHORIZATION_FAILED"


class ClusterAuthorizationFailedError(BrokerError):
    """Not authorized for this cluster-level operation."""

    code = 31
    name = "CLUSTER_AUTHORIZATION_FAILED"


class InvalidTimestampError(BrokerError):
    """A record timestamp is outside the acceptable window."""

    code = 32
    name = "INVALID_TIMESTAMP"


class UnsupportedSaslMechanismError(BrokerError):
    """SASL mechanism asked for is not enabled on this broker."""

    code = 33
    name = "UNSUPPORTED_SASL_MECHANISM"


class IllegalSaslStateError(BrokerError):
    """SASL request arrived in the wrong state of the handshake."""

    code = 34
    name = "ILLEGAL_SASL_STATE"


class BrokerUnsupportedVersionError(BrokerError, UnsupportedVersionError):
    """Broker does not support this API version."""

    code = 35
    name = "UNSUPPORTED_VERSION"
    retriable = False
    invalid_metadata = False


class TopicAlreadyExistsError(BrokerError):
    """Cannot create: the topic name is already taken."""

    code = 36
    name = "TOPIC_ALREADY_EXISTS"


class InvalidPartitionsError(BrokerError):
    """Requested partition count is not valid."""

    code = 37
    name = "INVALID_PARTITIONS"


class InvalidReplicationFactorError(BrokerError):
    """Requested replication factor is not valid."""

    code = 38
    name = "INVALID_REPLICATION_FACTOR"


class InvalidReplicaAssignmentError(BrokerError):
    """Replica-to-broker assignment given is unusable."""

    code = 39
    name = "INVALID_REPLICA_ASSIGNMENT"


class InvalidConfigError(BrokerError):
    """One or more config entries were rejected."""

    code = 40
    name = "INVALID_CONFIG"


class NotControllerError(BrokerError):
    """This broker is not the active controller."""

    code = 41
    name = "NOT_CONTROLLER"
    retriable = True


class InvalidRequestError(BrokerError):
    """Request is malformed or inconsistent; see the broker log for details."""

    code = 42
    name = "INVALID_REQUEST"


class UnsupportedForMessageFormatError(BrokerError):
    """Stored message format version cannot serve this request."""

    code = 43
    name = "UNSUPPORTED_FOR_MESSAGE_FORMAT"


class PolicyViolationError(BrokerError):
    """Request was rejected by a configured broker policy."""

    code = 44
    name = "POLICY_VIOLATION"


class OutOfOrderSequenceNumberError(BrokerError):
    """Producer sequence number is out of order for this partition."""

    code = 45
    name = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class DuplicateSequenceNumberError(BrokerError):
    """Producer sequence number duplicates one already written."""

    code = 46
    name = "DUPLICATE_SEQUENCE_NUMBER"


class InvalidProducerEpochError(BrokerError):
    """Producer epoch is stale; an abortable error for the current transaction."""

    code = 47
    name = "INVALID_PRODUCER_EPOCH"


class InvalidTxnStateError(BrokerError):
    """Operation is not allowed in the transaction's current state."""

    code = 48
    name = "INVALID_TXN_STATE"


class InvalidProducerIdMappingError(BrokerError):
    """Transactional id is not mapped to the producer id used."""

    code = 49
    name = "INVALID_PRODUCER_ID_MAPPING"


class InvalidTransactionTimeoutError(BrokerError):
    """Transaction timeout exceeds the broker's maximum."""

    code = 50
    name = "INVALID_TRANSACTION_TIMEOUT"


class ConcurrentTransactionsError(BrokerError):
    """Another transaction for this producer is still being completed."""

    code = 51
    name = "CONCURRENT_TRANSACTIONS"
    retriable = True


class TransactionCoordinatorFencedError(BrokerError):
    """Transaction coordinator epoch is stale; a newer coordinator exists."""

    code = 52
    name = "TRANSACTION_COORDINATOR_FENCED"


class TransactionalIdAuthorizationFailedError(BrokerError):
    """Not authorized for this transactional id."""

    code = 53
    name = "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"


class SecurityDisabledError(BrokerError):
    """Security features are turned off on the broker."""

    code = 54
    name = "SECURITY_DISABLED"


class OperationNotAttemptedError(BrokerError):
    """Broker skipped this operation because another in the batch failed."""

    code = 55
    name = "OPERATION_NOT_ATTEMPTED"


class KafkaStorageErrorError(BrokerError):
    """A storage error on the broker, e.g. a failed or offline log directory."""

    code = 56
    name = "KAFKA_STORAGE_ERROR"
    retriable = True
    invalid_metadata = True


class LogDirNotFoundError(BrokerError):
    """The named log directory does not exist on the broker."""

    code = 57
    name = "LOG_DIR_NOT_FOUND"


class SaslAuthenticationFailedError(BrokerError):
    """SASL login was rejected by the broker."""

    code = 58
    name = "SASL_AUTHENTICATION_FAILED"


class UnknownProducerIdError(BrokerError):
    """Broker has no metadata for this producer id."""

    code = 59
    name = "UNKNOWN_PRODUCER_ID"


class ReassignmentInProgressError(BrokerError):
    """Cannot proceed while partitions are being reassigned."""

    code = 60
    name = "REASSIGNMENT_IN_PROGRESS"


class DelegationTokenAuthDisabledError(BrokerError):
    """Delegation tokens are disabled on the broker."""

    code = 61
    name = "DELEGATION_TOKEN_AUTH_DISABLED"


class DelegationTokenNotFoundError(BrokerError):
    """No delegation token matches the request."""

    code = 62
    name = "DELEGATION_TOKEN_NOT_FOUND"


class DelegationTokenOwnerMismatchError(BrokerError):
    """Requesting principal does not own the delegation token."""

    code = 63
    name = "DELEGATION_TOKEN_OWNER_MISMATCH"


class DelegationTokenRequestNotAllowedError(BrokerError):
    """Delegation token operations are not allowed over this kind of connection."""

    code = 64
    name = "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED"


class DelegationTokenAuthorizationFailedError(BrokerError):
    """Not authorized for this delegation token operation."""

    code = 65
    name = "DELEGATION_TOKEN_AUTHORIZATION_FAILED"


class DelegationTokenExpiredError(BrokerError):
    """Delegation token is past its expiry time."""

    code = 66
    name = "DELEGATION_TOKEN_EXPIRED"


class InvalidPrincipalTypeError(BrokerError):
    """Unsupported kind of principal."""

    code = 67
    name = "INVALID_PRINCIPAL_TYPE"


class NonEmptyGroupError(BrokerError):
    """Group still has members, so it cannot be deleted."""

    code = 68
    name = "NON_EMPTY_GROUP"


class GroupIdNotFoundError(BrokerError):
    """No such group id exists."""

    code = 69
    name = "GROUP_ID_NOT_FOUND"


class FetchSessionIdNotFoundError(BrokerError):
    """Fetch session id is unknown to the broker."""

    code = 70
    name = "FETCH_SESSION_ID_NOT_FOUND"
    retriable = True


class InvalidFetchSessionEpochError(BrokerError):
    """Fetch session epoch does not match the broker's."""

    code = 71
    name = "INVALID_FETCH_SESSION_EPOCH"
    retriable = True


class ListenerNotFoundError(BrokerError):
    """Leader has no endpoint for the listener the request came in on."""

    code = 72
    name = "LISTENER_NOT_FOUND"
    retriable = True
    invalid_metadata = True


class TopicDeletionDisabledError(BrokerError):
    """Topic deletion is turned off on this cluster."""

    code = 73
    name = "TOPIC_DELETION_DISABLED"


class FencedLeaderEpochError(BrokerError):
    """Request carries a leader epoch behind the broker's current one."""

    code = 74
    name = "FENCED_LEADER_EPOCH"
    retriable = True
    invalid_metadata = True


class UnknownLeaderEpochError(BrokerError):
    """Request carries a leader epoch ahead of what the broker has seen."""

    code = 75
    name = "UNKNOWN_LEADER_EPOCH"
    retriable = True


class UnsupportedCompressionTypeError(BrokerError):
    """Requester does not support the compression codec used."""

    code = 76
    name = "UNSUPPORTED_COMPRESSION_TYPE"


class StaleBrokerEpochError(BrokerError):
    """Broker epoch is older than the controller's record of it."""

    code = 77
    name = "STALE_BROKER_EPOCH"


class OffsetNotAvailableError(BrokerError):
    """Leader cannot yet serve this offset; high watermark still catching up."""

    code = 78
    name = "OFFSET_NOT_AVAILABLE"
    retriable = True


class MemberIdRequiredError(BrokerError):
    """Group join needs a member id first; rejoin with the one given."""

    code = 79
    name = "MEMBER_ID_REQUIRED"


class PreferredLeaderNotAvailableError(BrokerError):
    """Election failed: the preferred replica cannot take leadership now."""

    code = 80
    name = "PREFERRED_LEADER_NOT_AVAILABLE"
    retriable = True
    invalid_metadata = True


class GroupMaxSizeReachedError(BrokerError):
    """Group already has its maximum number of members."""

    code = 81
    name = "GROUP_MAX_SIZE_REACHED"


class FencedInstanceIdError(BrokerError):
    """Static member was fenced by another member using the same instance id."""

    code = 82
    name = "FENCED_INSTANCE_ID"


class EligibleLeadersNotAvailableError(BrokerError):
    """No replica eligible to become leader is available."""

    code = 83
    name = "ELIGIBLE_LEADERS_NOT_AVAILABLE"
    retriable = True
    invalid_metadata = True


class ElectionNotNeededError(BrokerError):
    """Partition already has the wanted leader; no election was run."""

    code = 84
    name = "ELECTION_NOT_NEEDED"
    retriable = True
    invalid_metadata = True


class NoReassignmentInProgressError(BrokerError):
    """Nothing to cancel: no partition is being reassigned."""

    code = 85
    name = "NO_REASSIGNMENT_IN_PROGRESS"


class GroupSubscribedToTopicError(BrokerError):
    """Offsets cannot be deleted while the group is subscribed to the topic."""

    code = 86
    name = "GROUP_SUBSCRIBED_TO_TOPIC"


class InvalidRecordError(BrokerError):
    """Broker rejected a record as invalid."""

    code = 87
    name = "INVALID_RECORD"


class UnstableOffsetCommitError(BrokerError):
    """Pending transactional offsets exist for this partition; retry later."""

    code = 88
    name = "UNSTABLE_OFFSET_COMMIT"
    retriable = True


class ThrottlingQuotaExceededError(BrokerError):
    """A throttling quota was exceeded for the request."""

    code = 89
    name = "THROTTLING_QUOTA_EXCEEDED"
    retriable = True


class ProducerFencedError(BrokerError):
    """Producer was fenced by a newer one with the same transactional id."""

    code = 90
    name = "PRODUCER_FENCED"


class ResourceNotFoundError(BrokerError):
    """A referenced resource does not exist."""

    code = 91
    name = "RESOURCE_NOT_FOUND"


class DuplicateResourceError(BrokerError):
    """A resource was given more than once in the request."""

    code = 92
    name = "DUPLICATE_RESOURCE"


class UnacceptableCredentialError(BrokerError):
    """Credential does not meet the broker's requirements."""

    code = 93
    name = "UNACCEPTABLE_CREDENTIAL"


class InconsistentVoterSetError(BrokerError):
    """Voter set in the request does not match the quorum's."""

    code = 94
    name = "INCONSISTENT_VOTER_SET"


class InvalidUpdateVersionError(BrokerError):
    """Feature update version is not valid."""

    code = 95
    name = "INVALID_UPDATE_VERSION"


class FeatureUpdateFailedError(BrokerError):
    """Feature update could not be applied."""

    code = 96
    name = "FEATURE_UPDATE_FAILED"


class PrincipalDeserializationFailureError(BrokerError):
    """Broker could not deserialize the forwarded request's principal."""

    code = 97
    name = "PRINCIPAL_DESERIALIZATION_FAILURE"


class SnapshotNotFoundError(BrokerError):
    """Snapshot asked for does not exist."""

    code = 98
    name = "SNAPSHOT_NOT_FOUND"


class PositionOutOfRangeError(BrokerError):
    """Snapshot position is negative or past the snapshot's end."""

    code = 99
    name = "POSITION_OUT_OF_RANGE"


class UnknownTopicIdError(BrokerError):
    """Topic id is unknown to this broker."""

    code = 100
    name = "UNKNOWN_TOPIC_ID"
    retriable = True
    invalid_metadata = True


class DuplicateBrokerRegistrationError(BrokerError):
    """A broker with this id has already registered."""

    code = 101
    name = "DUPLICATE_BROKER_REGISTRATION"


class BrokerIdNotRegisteredError(BrokerError):
    """Broker id has no registration with the controller."""

    code = 102
    name = "BROKER_ID_NOT_REGISTERED"


class InconsistentTopicIdError(BrokerError):
    """Topic id in the request does not match the topic's id in the log."""

    code = 103
    name = "INCONSISTENT_TOPIC_ID"
    retriable = True
    invalid_metadata = True


class InconsistentClusterIdError(BrokerError):
    """Cluster id in the request does not match this cluster's."""

    code = 104
    name = "INCONSISTENT_CLUSTER_ID"


class TransactionalIdNotFoundError(BrokerError):
    """No transaction state exists for this transactional id."""

    code = 105
    name = "TRANSACTIONAL_ID_NOT_FOUND"


class FetchSessionTopicIdErrorError(BrokerError):
    """Fetch session mixed requests with and without topic ids."""

    code = 106
    name = "FETCH_SESSION_TOPIC_ID_ERROR"
    retriable = True


class IneligibleReplicaError(BrokerError):
    """New leader or ISR member is not an eligible replica."""

    code = 107
    name = "INELIGIBLE_REPLICA"


class NewLeaderElectedError(BrokerError):
    """Request was refused because a new leader has just been chosen."""

    code = 108
    name = "NEW_LEADER_ELECTED"


class OffsetMovedToTieredStorageError(BrokerError):
    """Offset is no longer in local storage; read it from the remote tier."""

    code = 109
    name = "OFFSET_MOVED_TO_TIERED_STORAGE"


class FencedMemberEpochError(BrokerError):
    """Member epoch is fenced; rejoin with epoch zero."""

    code = 110
    name = "FENCED_MEMBER_EPOCH"


class UnreleasedInstanceIdError(BrokerError):
    """Static instance id has not yet been released by its old member."""

    code = 111
    name = "UNRELEASED_INSTANCE_ID"


class UnsupportedAssignorError(BrokerError):
    """The requested assignor is not supported."""

    code = 112
    name = "UNSUPPORTED_ASSIGNOR"


class StaleMemberEpochError(BrokerError):
    """Member epoch is stale; get a current epoch via a heartbeat."""

    code = 113
    name = "STALE_MEMBER_EPOCH"


class MismatchedEndpointTypeError(BrokerError):
    """Request was sent to the wrong kind of endpoint."""

    code = 114
    name = "MISMATCHED_ENDPOINT_TYPE"


class UnsupportedEndpointTypeError(BrokerError):
    """Kind of endpoint named in the request is unsupported."""

    code = 115
    name = "UNSUPPORTED_ENDPOINT_TYPE"


class UnknownControllerIdError(BrokerError):
    """Controller id given does not match any known controller."""

    code = 116
    name = "UNKNOWN_CONTROLLER_ID"


class UnknownSubscriptionIdError(BrokerError):
    """Client telemetry subscription id is unknown or outdated."""

    code = 117
    name = "UNKNOWN_SUBSCRIPTION_ID"


class TelemetryTooLargeError(BrokerError):
    """Pushed client telemetry payload is over the size limit."""

    code = 118
    name = "TELEMETRY_TOO_LARGE"


class InvalidRegistrationError(BrokerError):
    """Broker registration failed the controller's checks."""

    code = 119
    name = "INVALID_REGISTRATION"


class TransactionAbortableError(BrokerError):
    """Server error that the client should handle by aborting the transaction."""

    code = 120
    name = "TRANSACTION_ABORTABLE"


class InvalidRecordStateError(BrokerError):
    """Share-group record is not in a state that permits this action."""

    code = 121
    name = "INVALID_RECORD_STATE"


class ShareSessionNotFoundError(BrokerError):
    """No share session exists for this request."""

    code = 122
    name = "SHARE_SESSION_NOT_FOUND"
    retriable = True


class InvalidShareSessionEpochError(BrokerError):
    """Share session epoch does not match."""

    code = 123
    name = "INVALID_SHARE_SESSION_EPOCH"
    retriable = True


class FencedStateEpochError(BrokerError):
    """Share-state epoch is stale; a newer one has fenced it."""

    code = 124
    name = "FENCED_STATE_EPOCH"


class InvalidVoterKeyError(BrokerError):
    """Voter key is missing or does not match the expected voter."""

    code = 125
    name = "INVALID_VOTER_KEY"


class DuplicateVoterError(BrokerError):
    """This voter is already in the voter set."""

    code = 126
    name = "DUPLICATE_VOTER"


class VoterNotFoundError(BrokerError):
    """This voter is not in the voter set."""

    code = 127
    name = "VOTER_NOT_FOUND"


class InvalidRegularExpressionError(BrokerError):
    """Regex in the subscription failed to compile."""

    code = 128
    name = "INVALID_REGULAR_EXPRESSION"


class RebootstrapRequiredError(BrokerError):
    """Client metadata is out of date; reconnect via the bootstrap servers."""

    code = 129
    name = "REBOOTSTRAP_REQUIRED"


class StreamsInvalidTopologyError(BrokerError):
    """Streams topology supplied is not valid."""

    code = 130
    name = "STREAMS_INVALID_TOPOLOGY"


class StreamsInvalidTopologyEpochError(BrokerError):
    """Streams topology epoch supplied is not valid."""

    code = 131
    name = "STREAMS_INVALID_TOPOLOGY_EPOCH"


class StreamsTopologyFencedError(BrokerError):
    """Streams topology epoch is stale and has been fenced."""

    code = 132
    name = "STREAMS_TOPOLOGY_FENCED"


class ShareSessionLimitReachedError(BrokerError):
    """Broker has no room for another share session."""

    code = 133
    name = "SHARE_SESSION_LIMIT_REACHED"
    retriable = True


_BY_CODE: dict[int, type[BrokerError]] = {cls.code: cls for cls in (
    UnknownServerErrorError, OffsetOutOfRangeError, CorruptMessageError,
    UnknownTopicOrPartitionError, InvalidFetchSizeError, LeaderNotAvailableError,
    NotLeaderOrFollowerError, RequestTimedOutError, BrokerNotAvailableError,
    ReplicaNotAvailableError, MessageTooLargeError, StaleControllerEpochError,
    OffsetMetadataTooLargeError, NetworkExceptionError, CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError, NotCoordinatorError, InvalidTopicExceptionError,
    RecordListTooLargeError, NotEnoughReplicasError, NotEnoughReplicasAfterAppendError,
    InvalidRequiredAcksError, IllegalGenerationError, InconsistentGroupProtocolError,
    InvalidGroupIdError, UnknownMemberIdError, InvalidSessionTimeoutError,
    BrokerRebalanceInProgressError, InvalidCommitOffsetSizeError, TopicAuthorizationFailedError,
    GroupAuthorizationFailedError, ClusterAuthorizationFailedError, InvalidTimestampError,
    UnsupportedSaslMechanismError, IllegalSaslStateError, BrokerUnsupportedVersionError,
    TopicAlreadyExistsError, InvalidPartitionsError, InvalidReplicationFactorError,
    InvalidReplicaAssignmentError, InvalidConfigError, NotControllerError,
    InvalidRequestError, UnsupportedForMessageFormatError, PolicyViolationError,
    OutOfOrderSequenceNumberError, DuplicateSequenceNumberError, InvalidProducerEpochError,
    InvalidTxnStateError, InvalidProducerIdMappingError, InvalidTransactionTimeoutError,
    ConcurrentTransactionsError, TransactionCoordinatorFencedError, TransactionalIdAuthorizationFailedError,
    SecurityDisabledError, OperationNotAttemptedError, KafkaStorageErrorError,
    LogDirNotFoundError, SaslAuthenticationFailedError, UnknownProducerIdError,
    ReassignmentInProgressError, DelegationTokenAuthDisabledError, DelegationTokenNotFoundError,
    DelegationTokenOwnerMismatchError, DelegationTokenRequestNotAllowedError, DelegationTokenAuthorizationFailedError,
    DelegationTokenExpiredError, InvalidPrincipalTypeError, NonEmptyGroupError,
    GroupIdNotFoundError, FetchSessionIdNotFoundError, InvalidFetchSessionEpochError,
    ListenerNotFoundError, TopicDeletionDisabledError, FencedLeaderEpochError,
    UnknownLeaderEpochError, UnsupportedCompressionTypeError, StaleBrokerEpochError,
    OffsetNotAvailableError, MemberIdRequiredError, PreferredLeaderNotAvailableError,
    GroupMaxSizeReachedError, FencedInstanceIdError, EligibleLeadersNotAvailableError,
    ElectionNotNeededError, NoReassignmentInProgressError, GroupSubscribedToTopicError,
    InvalidRecordError, UnstableOffsetCommitError, ThrottlingQuotaExceededError,
    ProducerFencedError, ResourceNotFoundError, DuplicateResourceError,
    UnacceptableCredentialError, InconsistentVoterSetError, InvalidUpdateVersionError,
    FeatureUpdateFailedError, PrincipalDeserializationFailureError, SnapshotNotFoundError,
    PositionOutOfRangeError, UnknownTopicIdError, DuplicateBrokerRegistrationError,
    BrokerIdNotRegisteredError, InconsistentTopicIdError, InconsistentClusterIdError,
    TransactionalIdNotFoundError, FetchSessionTopicIdErrorError, IneligibleReplicaError,
    NewLeaderElectedError, OffsetMovedToTieredStorageError, FencedMemberEpochError,
    UnreleasedInstanceIdError, UnsupportedAssignorError, StaleMemberEpochError,
    MismatchedEndpointTypeError, UnsupportedEndpointTypeError, UnknownControllerIdError,
    UnknownSubscriptionIdError, TelemetryTooLargeError, InvalidRegistrationError,
    TransactionAbortableError, InvalidRecordStateError, ShareSessionNotFoundError,
    InvalidShareSessionEpochError, FencedStateEpochError, InvalidVoterKeyError,
    DuplicateVoterError, VoterNotFoundError, InvalidRegularExpressionError,
    RebootstrapRequiredError, StreamsInvalidTopologyError, StreamsInvalidTopologyEpochError,
    StreamsTopologyFencedError, ShareSessionLimitReachedError,
)}
# --- end of generated code ---
