"""What the generator makes, and the few facts the specs do not say: the hand-kept input of protocolgen.

Everything else comes from Kafka's JSON specs (protocolgen/specs/). A Kafka bump is: take the new specs
(``scripts/generate-protocol --specs kafka-clients-X.jar``), raise the caps below, run the tests.
"""

from __future__ import annotations

from typing import Final

#: The APIs protocol/ decodes, encodes or rewrites, and the versions it supports (the caps). A cap may
#: reach below the spec's oldest version (Kafka 4.0 removed Produce v0-v2; 3.9 brokers still speak them):
#: the specs keep the fields of removed versions ("0+"), except where FIELDS_OF_REMOVED_VERSIONS says.
DECODED_APIS: Final[dict[str, tuple[int, int]]] = {
    "Produce": (0, 13),
    "Metadata": (0, 13),
    "FindCoordinator": (0, 6),
    "ApiVersions": (0, 4),
    "DescribeConfigs": (0, 4),
    "DescribeCluster": (0, 2),
    "CreateTopics": (0, 7),
    "DeleteTopics": (0, 6),
    "AlterConfigs": (0, 2),
    "IncrementalAlterConfigs": (0, 1),
    "SaslHandshake": (0, 1),
    "SaslAuthenticate": (0, 2),
    "DescribeQuorum": (0, 2),
    "ShareFetch": (1, 2),
    "ShareAcknowledge": (1, 2),
}

#: The APIs whose version facts the fast walkers read (protocol/kafka_versions.py), beyond DECODED_APIS:
#: Fetch's walk reads only its top-level tagged node_endpoints (protocol/fetch.py).
WALKED_ONLY_APIS: Final[dict[str, tuple[int, int]]] = {
    "Fetch": (12, 18),
}

#: The messages whose grammar is generated down to skip functions and fixed-prefix tables (protocol/kafka_walkers.py,
#: protocolgen/walkers.py): the ones the fast walkers read.
WALKED_MESSAGES: Final = ("ProduceResponse", "FetchResponse", "MetadataResponse", "ShareFetchResponse",
                          "ShareAcknowledgeResponse")

#: Top-level fields of walked messages whose start the walkers need (``<message>_<field>_at``): the share answers'
#: node_endpoints, which a proxy rewrites (protocol/share.py).
WALKED_FIELDS: Final[dict[str, tuple[str, ...]]] = {
    "ShareFetchResponse": ("NodeEndpoints",),
    "ShareAcknowledgeResponse": ("NodeEndpoints",),
}

#: The walks the hot path runs, generated as Python (protocol/kafka_walkers.py) and, the Produce ones, as C
#: (protocol/_wire_walkers.h) from the same specs (protocolgen/captures.py). Per message: the top-level field the walk
#: starts at and the one it stops before (None: the body's start, its end); the fields whose values it captures, per
#: struct by its path of array fields ("" the message itself; "mapKey" the field the spec marks as naming the
#: element: a topic's name, or its topic id from the version that has one; a field a version lacks is handed its
#: default; a tagged field is read from the tagged fields; an array of structs captured is skipped by an elements walk
#: of its own, its count and its elements' span handed over, their starts recorded on request); the structs whose
#: hook it calls at the end of each element, with their own and their enclosing structs' captures; the captured int
#: field a hook waits for to be non-zero (others are called for every element); the arrays whose elements it counts
#: for the message's hook; the top-level fields whose start a walk from the body's start finds
#: (``<message>_<field>_at``); ``spans``: per struct, (first field, last field) pairs whose bytes' start and end the
#: hook gets; ``steps``: the top-level array a caller walks a few elements at a time (the walk is cut before its
#: elements and after them); ``rows``: captured arrays read on demand (``read_<message>_<field>_v<N>``), with the
#: NamedTuple their rows are; ``hooked_by``: the module implementing the hooks; ``c``: emitted in C too.
CAPTURED_WALKS: Final[dict[str, dict[str, object]]] = {
    "ProduceRequest": {
        "start": "Acks", "stop": None,
        "captures": {"": ("Acks", "TimeoutMs"), "TopicData": ("mapKey",),
                     "TopicData.PartitionData": ("Index", "Records")},
        "hooks": ("", "TopicData", "TopicData.PartitionData"),
        "when": {},
        "counts": (),
        "at": ("Acks",),
        "hooked_by": "protocol/produce.py",
    },
    "ProduceResponse": {
        "start": None, "stop": "ThrottleTimeMs",
        "captures": {"": (), "Responses": ("mapKey",), "Responses.PartitionResponses": ("Index", "ErrorCode")},
        "hooks": ("", "Responses.PartitionResponses"),
        "when": {"Responses.PartitionResponses": "ErrorCode"},
        "counts": ("Responses.PartitionResponses",),
        "at": (),
        "hooked_by": "protocol/produce.py",
    },
    # The scan of protocol/metadata_scan.py: brokers, cluster fields, each topic's head (tag 637 from its tagged
    # fields), its partitions skipped (their starts recorded for the splice when asked) or read on demand as rows.
    "MetadataResponse": {
        "start": None, "stop": None,
        "captures": {"": ("ThrottleTimeMs", "ClusterId", "ControllerId", "ClusterAuthorizedOperations", "ErrorCode"),
                     "Brokers": ("NodeId", "Host", "Port", "Rack"),
                     "Topics": ("ErrorCode", "Name", "TopicId", "IsInternal", "Partitions", "TopicAuthorizedOperations",
                                "MinInsyncReplicas"),
                     "Topics.Partitions": ("PartitionIndex", "ErrorCode", "LeaderId", "LeaderEpoch", "ReplicaNodes",
                                           "IsrNodes", "OfflineReplicas")},
        "spans": {"": (("ControllerId", "ControllerId"),), "Brokers": (("Host", "Port"),)},
        "hooks": ("", "Brokers", "Topics"),
        "when": {},
        "counts": (),
        "at": (),
        "steps": "Topics",
        "rows": {"Topics.Partitions": "ScannedPartition"},
        "hooked_by": "protocol/metadata_scan.py",
        "c": False,
    },
}

#: Kafka's struct names that collide across specs (or read badly alone), per message: the Python name.
STRUCT_NAMES: Final[dict[tuple[str, str], str]] = {
    ("DescribeQuorumRequest", "TopicData"): "DescribeQuorumRequestTopic",
    ("DescribeQuorumRequest", "PartitionData"): "DescribeQuorumRequestPartition",
    ("DescribeQuorumResponse", "TopicData"): "DescribeQuorumTopicData",
    ("DescribeQuorumResponse", "PartitionData"): "DescribeQuorumPartitionData",
    ("DescribeQuorumResponse", "ReplicaState"): "DescribeQuorumReplicaState",
    ("DescribeQuorumResponse", "Node"): "DescribeQuorumNode",
    ("DescribeQuorumResponse", "Listener"): "DescribeQuorumListener",
    ("AlterConfigsRequest", "AlterConfigsResource"): "AlterConfigsResource",
    ("AlterConfigsRequest", "AlterableConfig"): "AlterableConfig",
    ("IncrementalAlterConfigsRequest", "AlterConfigsResource"): "IncrementalAlterConfigsResource",
    ("IncrementalAlterConfigsRequest", "AlterableConfig"): "IncrementalAlterableConfig",
    ("AlterConfigsResponse", "AlterConfigsResourceResponse"): "AlterConfigsResourceResponse",
    ("IncrementalAlterConfigsResponse", "AlterConfigsResourceResponse"): "IncrementalAlterConfigsResourceResponse",
    ("ShareFetchRequest", "FetchTopic"): "ShareFetchTopic",
    ("ShareFetchRequest", "FetchPartition"): "ShareFetchPartition",
    ("ShareFetchRequest", "AcknowledgementBatch"): "ShareFetchAcknowledgementBatch",
    ("ShareFetchRequest", "ForgottenTopic"): "ShareFetchForgottenTopic",
    ("ShareFetchResponse", "ShareFetchableTopicResponse"): "ShareFetchTopicResponse",
    ("ShareFetchResponse", "PartitionData"): "ShareFetchPartitionData",
    ("ShareFetchResponse", "AcquiredRecords"): "ShareAcquiredRecords",
    ("ShareAcknowledgeRequest", "AcknowledgeTopic"): "ShareAcknowledgeTopic",
    ("ShareAcknowledgeRequest", "AcknowledgePartition"): "ShareAcknowledgePartition",
    ("ShareAcknowledgeRequest", "AcknowledgementBatch"): "ShareAcknowledgeAcknowledgementBatch",
    ("ShareAcknowledgeResponse", "PartitionData"): "ShareAcknowledgePartitionData",
}

#: Fields Kafka dropped from a spec together with the versions they lived in, which the caps still
#: decode: (message, struct) -> [(insert after this field, the field as it stood in the older spec)].
FIELDS_OF_REMOVED_VERSIONS: Final[dict[tuple[str, str], list[tuple[str, dict[str, object]]]]] = {
    # Kafka 4.0 removed DescribeConfigs v0 and with it IsDefault (Kafka 3.9.2's spec).
    ("DescribeConfigsResponse", "DescribeConfigsResourceResult"): [
        ("ReadOnly", {"name": "IsDefault", "type": "bool", "versions": "0",
                      "about": "True if the configuration is not set."}),
    ],
}

#: The project's own fields, not Kafka's: (message, struct) -> fields appended to the struct.
PROJECT_FIELDS: Final[dict[tuple[str, str], list[dict[str, object]]]] = {
    # min.insync.replicas per topic (KIP-637, never shipped upstream) as a tagged field: clients that
    # do not know tag 637 skip it (docs/protocol.md).
    ("MetadataResponse", "MetadataResponseTopic"): [
        {"name": "MinInsyncReplicas", "type": "int16", "versions": "9+", "taggedVersions": "9+", "tag": 637,
         "default": "-1", "about": "This project's extension: the topic's min.insync.replicas, -1 = absent."},
    ],
}

#: Defaults the codec keeps where Kafka's spec has none (the value a message built without the field gets,
#: and what a version without the field decodes to): (message, struct, field) -> default. Besides these, a
#: string nullable in every version it exists in defaults to None (generate.py: _default), not "".
DEFAULTS: Final[dict[tuple[str, str, str], str]] = {
    ("ProduceRequest", "ProduceRequest", "Acks"): "-1",
    ("ProduceResponse", "PartitionProduceResponse", "BaseOffset"): "-1",
    ("CreateTopicsRequest", "CreatableTopic", "NumPartitions"): "-1",
    ("CreateTopicsRequest", "CreatableTopic", "ReplicationFactor"): "-1",
    ("DescribeConfigsRequest", "DescribeConfigsResource", "ConfigurationKeys"): "null",
    ("DescribeQuorumResponse", "PartitionData", "LeaderId"): "-1",
    # one LeaderIdAndEpoch class for Produce and the share answers: Produce's defaults
    ("ShareFetchResponse", "LeaderIdAndEpoch", "LeaderId"): "-1",
    ("ShareFetchResponse", "LeaderIdAndEpoch", "LeaderEpoch"): "-1",
    ("ShareAcknowledgeResponse", "LeaderIdAndEpoch", "LeaderId"): "-1",
    ("ShareAcknowledgeResponse", "LeaderIdAndEpoch", "LeaderEpoch"): "-1",
}

#: Keys whose specs Kafka 4.0 removed (validVersions "none"): their last flexible version (Kafka 3.9's
#: specs), so a proxy can still peek the headers of a 3.x cluster's inter-broker requests.
REMOVED_API_FIRST_FLEXIBLE: Final[dict[int, int]] = {4: 4, 5: 2, 6: 6, 7: 3}

#: Names an API key had in an older Kafka, kept as aliases of the specs' name (ApiKey(74).name is the specs').
API_KEY_ALIASES: Final[dict[str, int]] = {
    "LIST_CLIENT_METRICS_RESOURCES": 74,  # ListClientMetricsResources until Kafka 4.1 (KIP-1142)
}

#: The spec files the generator reads besides the decoded APIs' requests and responses.
HEADER_SPECS: Final = ("RequestHeader", "ResponseHeader")
