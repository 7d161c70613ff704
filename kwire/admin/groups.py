"""Admin calls on consumer groups and their committed offsets, each sent to the group's
coordinator: ListGroups, DescribeGroups / ConsumerGroupDescribe (KIP-848), DeleteGroups,
OffsetFetch, OffsetCommit, OffsetDelete, FindCoordinator."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal, cast, overload

from ..consumer.types import OffsetAndMetadata
from ..errors import BrokerError, KwireError, ProtocolError, UnsupportedVersionError
from ..protocol.api import decode_assignment, decode_subscription
from ._base import _COORDINATOR_RETRY, AdminBase, _err, _ms, _results
from .types import BrokerNode, GroupDescription, GroupListing, GroupListings, GroupMember

if TYPE_CHECKING:  # (types only: importing kwire.protocol.bodies' 507 TypedDicts takes ~0.1 s)
    from ..protocol.bodies import (
        DescribeGroupsResponse,
        DescribeGroupsResponseDescribedGroup,
        OffsetDeleteResponse,
    )

_GROUP_ID_NOT_FOUND = 69


class GroupCalls(AdminBase):
    # --- consumer groups -------------------------------------------------------------------------
    def list_consumer_groups(self, states: Iterable[str] | None = None,
                             types: Iterable[str] | None = None, timeout: float | None = 30.0
                             ) -> list[GroupListing]:
        """Every group of the cluster (ListGroups to each broker), filtered by state ("Stable",
        "Empty", ...) and type ("classic", "consumer") when given.  A broker's error raises."""
        listed = self.list_groups(states, types, timeout)
        if listed.errors:
            raise next(iter(listed.errors.values()))
        return list(listed.groups)

    def list_groups(self, states: Iterable[str] | None = None, types: Iterable[str] | None = None,
                    timeout: float | None = 30.0) -> GroupListings:
        """Like :meth:`list_consumer_groups`, but a broker that cannot answer (an error code,
        no ListGroups, a lost connection) is reported in ``errors`` beside the groups the
        others listed."""
        timeout_ms = _ms(timeout, self.config.socket_timeout_ms)
        self._net.refresh_metadata([], timeout_ms)
        body = {"states_filter": list(states or ()), "types_filter": list(types or ())}
        pending = [(b, self._net.send(b, "ListGroups", body, timeout_ms=timeout_ms))
                   for b in sorted(self._net.metadata.brokers)]
        listings: dict[str, GroupListing] = {}
        errors: dict[int, KwireError] = {}
        for b, f in pending:
            try:
                resp = self._answer(f)
            except KwireError as exc:
                errors[b] = exc
                continue
            err = _err(resp["error_code"], f"ListGroups on broker {b}")
            if err is not None:
                errors[b] = err
                continue
            for g in resp["groups"]:
                listings.setdefault(g["group_id"], GroupListing(
                    g["group_id"], g["protocol_type"], g.get("group_state") or "",
                    g.get("group_type") or "", b))
        return GroupListings(tuple(listings.values()), errors)

    def describe_consumer_groups(self, group_ids: Iterable[str], timeout: float | None = 30.0, *,
                                 raise_on_error: bool = True
                                 ) -> dict[str, GroupDescription | KwireError]:
        """State, assignor and members (with their assigned partitions) of groups, asked of
        each group's coordinator: DescribeGroups for classic groups, ConsumerGroupDescribe for
        KIP-848 groups (tried when DescribeGroups does not describe a classic group: Kafka 4
        answers it GROUP_ID_NOT_FOUND for a KIP-848 group).  A group that does not exist is
        GroupIdNotFoundError (its ``coordinator`` set); brokers before DescribeGroups v6
        describe it as "Dead" instead, and some (Tansu) as an "Empty" group with no protocol
        type -- which is also what a group that only ever committed offsets looks like."""
        group_ids = list(group_ids)

        def one(node: int, g: str, timeout_ms: int) -> Any:
            coord = self._broker_node(node)
            unsupported: UnsupportedVersionError | None = None
            d = None
            try:
                resp = cast("DescribeGroupsResponse", self._call(
                    node, "DescribeGroups", {"groups": [g], "include_authorized_operations": False},
                    timeout_ms))
                d = next((x for x in resp["groups"] if x["group_id"] == g), None)
            except UnsupportedVersionError as exc:
                unsupported = exc
            if d is None or not (d["error_code"] == 0 and (d["members"] or d["protocol_type"])):
                k = self._describe_kip848(node, g, timeout_ms)
                if isinstance(k, BrokerError):
                    k.coordinator = coord
                    return k
                if k is not None and (k["members"] or k["group_epoch"] > 0):
                    return _kip848_description(k, coord)
            if d is None:
                if unsupported is not None:
                    unsupported.group = g
                    return unsupported
                raise ProtocolError(f"DescribeGroups answered without group {g!r}")
            err = _err(d["error_code"], d.get("error_message"), group=g, coordinator=coord)
            if err is not None:
                return err
            return _classic_description(d, coord)
        return _results(self._per_group(group_ids, one, timeout), raise_on_error)

    def _describe_kip848(self, node: int, g: str, timeout_ms: int) -> dict[str, Any] | BrokerError | None:
        """The ConsumerGroupDescribe entry of ``g``; None when the coordinator has no
        ConsumerGroupDescribe or ``g`` is no KIP-848 group (GROUP_ID_NOT_FOUND)."""
        try:
            resp = self._call(node, "ConsumerGroupDescribe",
                              {"group_ids": [g], "include_authorized_operations": False}, timeout_ms)
        except UnsupportedVersionError:
            return None
        k = next((x for x in resp["groups"] if x["group_id"] == g), None)
        if k is None or k["error_code"] == _GROUP_ID_NOT_FOUND:
            return None
        err = _err(k["error_code"], k.get("error_message"), group=g)
        return err if err is not None else k

    def delete_consumer_groups(self, group_ids: Iterable[str], timeout: float | None = 30.0, *,
                               raise_on_error: bool = True) -> dict[str, BrokerError | None]:
        """Delete empty groups and their committed offsets (DeleteGroups)."""
        def one(node: int, g: str, timeout_ms: int) -> Any:
            resp = self._call(node, "DeleteGroups", {"groups_names": [g]}, timeout_ms)
            r = resp["results"][0]
            return _err(r["error_code"], None, group=g)
        return _results(self._per_group(list(group_ids), one, timeout), raise_on_error)

    @overload
    def list_consumer_group_offsets(self, group_id: str,
                                    partitions: Iterable[tuple[str, int]] | None = None,
                                    timeout: float | None = 30.0, *, require_stable: bool = False,
                                    raise_on_error: Literal[True] = True
                                    ) -> dict[tuple[str, int], OffsetAndMetadata]: ...
    @overload
    def list_consumer_group_offsets(self, group_id: str,
                                    partitions: Iterable[tuple[str, int]] | None = None,
                                    timeout: float | None = 30.0, *, require_stable: bool = False,
                                    raise_on_error: bool
                                    ) -> dict[tuple[str, int], OffsetAndMetadata | BrokerError]: ...
    def list_consumer_group_offsets(self, group_id: str,
                                    partitions: Iterable[tuple[str, int]] | None = None,
                                    timeout: float | None = 30.0, *, require_stable: bool = False,
                                    raise_on_error: bool = True) -> dict[tuple[str, int], Any]:
        """The group's committed offsets (OffsetFetch): of ``partitions``, or (None) of every
        partition it has committed.  A partition without a commit has offset -1.  A
        partition's error raises, or with ``raise_on_error=False`` is that partition's value;
        an error of the whole group raises either way."""
        by_topic: dict[str, list[int]] | None = None
        if partitions is not None:
            by_topic = {}
            for t, p in partitions:
                by_topic.setdefault(t, []).append(p)
        topics = None if by_topic is None else [{"name": t, "partition_indexes": ps}
                                                 for t, ps in by_topic.items()]
        body = {"group_id": group_id, "topics": topics, "require_stable": require_stable,
                "groups": [{"group_id": group_id, "member_id": None, "member_epoch": -1,
                            "topics": topics}]}

        def one(node: int, g: str, timeout_ms: int) -> Any:
            # v10 names topics by id only; v2 is the first to take a null topic list ("all")
            resp = self._call(node, "OffsetFetch", body, timeout_ms, max_version=9,
                              min_version=2 if topics is None else None)
            if resp.get("groups"):
                grp = next((x for x in resp["groups"] if x["group_id"] == g), resp["groups"][0])
                code, tlist = grp["error_code"], grp["topics"]
            else:
                code, tlist = resp.get("error_code", 0), resp["topics"]
            err = _err(code, None, group=g)
            if err is not None:
                return err
            out: dict[tuple[str, int], Any] = {}
            for t in tlist:
                for p in t["partitions"]:
                    key = (t["name"], p["partition_index"])
                    perr = _err(p["error_code"], f"{key[0]}[{key[1]}]", group=g, topic=key[0])
                    if perr is not None:
                        if perr.code in _COORDINATOR_RETRY:  # (OffsetFetch v0-v1 put these here)
                            return perr
                        out[key] = perr
                        continue
                    ep = p.get("committed_leader_epoch", -1)
                    out[key] = OffsetAndMetadata(
                        p["committed_offset"], ep if ep is not None and ep >= 0 else None, p["metadata"])
            return out
        res = self._per_group([group_id], one, timeout)[group_id]
        if isinstance(res, BaseException):
            raise res
        return _results(res, raise_on_error)

    def alter_consumer_group_offsets(self, group_id: str,
                                     offsets: Mapping[tuple[str, int], int | OffsetAndMetadata],
                                     timeout: float | None = 30.0, *, raise_on_error: bool = True
                                     ) -> dict[tuple[str, int], BrokerError | None]:
        """Set a group's committed offsets (OffsetCommit outside any generation: the group must
        have no active members, else UNKNOWN_MEMBER_ID)."""
        by_topic: dict[str, list[Any]] = {}
        for (t, p), o in offsets.items():
            om = o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(int(o))
            by_topic.setdefault(t, []).append({
                "partition_index": p, "committed_offset": om.offset,
                "committed_leader_epoch": om.leader_epoch if om.leader_epoch is not None else -1,
                "committed_metadata": om.metadata or "", "commit_timestamp": -1})
        body = {"group_id": group_id, "generation_id_or_member_epoch": -1, "member_id": "",
                "group_instance_id": None, "retention_time_ms": -1,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

        def one(node: int, g: str, timeout_ms: int) -> Any:
            resp = self._call(node, "OffsetCommit", body, timeout_ms, max_version=9)
            out = {}
            for t in resp["topics"]:
                for p in t["partitions"]:
                    out[(t["name"], p["partition_index"])] = _err(
                        p["error_code"], f"{t['name']}[{p['partition_index']}]", group=g)
            coord = next((e for e in out.values() if e is not None and e.code in _COORDINATOR_RETRY), None)
            return coord if coord is not None else out
        res = self._per_group([group_id], one, timeout)[group_id]
        if isinstance(res, BaseException):
            raise res
        return _results({tp: res.get(tp) for tp in offsets}, raise_on_error)

    def delete_consumer_group_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]],
                                      timeout: float | None = 30.0, *, raise_on_error: bool = True
                                      ) -> dict[tuple[str, int], BrokerError | None]:
        """Delete a group's committed offsets of ``partitions`` (OffsetDelete; refused with
        GROUP_SUBSCRIBED_TO_TOPIC while a member consumes the topic)."""
        partitions = list(partitions)
        by_topic: dict[str, list[Any]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append({"partition_index": p})
        body = {"group_id": group_id,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

        def one(node: int, g: str, timeout_ms: int) -> Any:
            resp = cast("OffsetDeleteResponse", self._call(node, "OffsetDelete", body, timeout_ms))
            err = _err(resp["error_code"], None, group=g)
            if err is not None:
                return err
            return {(t["name"], p["partition_index"]): _err(p["error_code"], f"{t['name']}[{p['partition_index']}]", group=g)
                    for t in resp["topics"] for p in t["partitions"]}
        res = self._per_group([group_id], one, timeout)[group_id]
        if isinstance(res, BaseException):
            raise res
        return _results({tp: res.get(tp) for tp in partitions}, raise_on_error)

    def find_coordinator(self, group_id: str, timeout: float | None = 30.0) -> BrokerNode:
        """The group's coordinator (FindCoordinator), asked again while the cluster has none
        ready (COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR)
        within ``timeout``; other errors raise."""
        res = self._per_group([group_id], lambda node, g, timeout_ms: node, timeout)[group_id]
        if isinstance(res, BaseException):
            raise res
        b = self._net.metadata.broker(res)
        assert b is not None  # (_find_coordinator learned it)
        return BrokerNode(b.node_id, b.host, b.port, b.rack)


def _assigned(a: Mapping[str, Any] | None) -> tuple[tuple[str, int], ...]:
    """(topic, partition) pairs of a ConsumerGroupDescribe assignment."""
    return tuple(sorted((t["topic_name"], p) for t in (a or {}).get("topic_partitions", ())
                        for p in t["partitions"]))


def _classic_description(d: DescribeGroupsResponseDescribedGroup, coord: BrokerNode
                         ) -> GroupDescription:
    """A DescribeGroups entry as a GroupDescription (consumer groups' assignments decoded)."""
    members = []
    for m in d["members"]:
        assignment: tuple[tuple[str, int], ...] = ()
        subscribed: tuple[str, ...] = ()
        if d["protocol_type"] == "consumer" and m["member_assignment"]:
            try:
                _, a = decode_assignment(m["member_assignment"])
                assignment = tuple((t["topic"], p) for t in a["assigned_partitions"]
                                   for p in t["partitions"])
            except KwireError:  # an assignment another client encoded its own way
                assignment = ()
        if d["protocol_type"] == "consumer" and m["member_metadata"]:
            try:  # the ConsumerProtocolSubscription of the protocol the group chose
                _, sub = decode_subscription(m["member_metadata"])
                subscribed = tuple(sorted(sub.get("topics") or ()))
            except KwireError:
                subscribed = ()
        members.append(GroupMember(
            m["member_id"], m.get("group_instance_id"), m["client_id"], m["client_host"], assignment,
            subscribed_topics=subscribed,
            metadata=bytes(m["member_metadata"]) if m.get("member_metadata") is not None else None,
            assignment_data=bytes(m["member_assignment"]) if m.get("member_assignment") is not None else None))
    return GroupDescription(d["group_id"], d["group_state"], d["protocol_type"], d["protocol_data"],
                            tuple(members), coord)


def _kip848_description(k: Mapping[str, Any], coord: BrokerNode) -> GroupDescription:
    """A ConsumerGroupDescribe entry as a GroupDescription (type "consumer")."""
    topic_ids: dict[str, str] = {}
    members = []
    for m in sorted(k["members"], key=lambda m: m["member_id"]):
        for a in (m.get("assignment"), m.get("target_assignment")):
            for t in (a or {}).get("topic_partitions", ()):
                topic_ids[t["topic_name"]] = str(t["topic_id"])
        members.append(GroupMember(
            m["member_id"], m.get("instance_id"), m["client_id"], m["client_host"],
            _assigned(m.get("assignment")), member_epoch=m["member_epoch"],
            target_assignment=_assigned(m.get("target_assignment")),
            subscribed_topics=tuple(sorted(m.get("subscribed_topic_names") or ())),
            subscribed_regex=m.get("subscribed_topic_regex") or None, rack_id=m.get("rack_id"),
            member_type={0: "classic", 1: "consumer"}.get(m.get("member_type", -1))))
    return GroupDescription(k["group_id"], k["group_state"], "consumer", k["assignor_name"] or "",
                            tuple(members), coord, type="consumer", group_epoch=k["group_epoch"],
                            assignment_epoch=k["assignment_epoch"],
                            topic_ids=tuple(sorted(topic_ids.items())))
