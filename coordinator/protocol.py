"""Wire protocol between the coordinator and everything that talks to it (docs/contracts.md).

One msgpack map per ZeroMQ message, with ``type`` and ``v``. Every message is validated on
receipt against the schemas below, so a bad peer gets an error naming the problem instead of
crashing the event loop or corrupting scheduler state.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

import msgpack

from coordinator import bounds
from coordinator.gang import GangRequest
from tiresias_launch import contract
from tiresias_launch.contract import REPORT_AMOUNTS, Field

VERSION = contract.PROTOCOL_VERSION
#: Largest message the protocol accepts; decode() refuses anything bigger with an error reply.
MAX_MESSAGE_BYTES = 1 << 20
#: What a job id or job key may be: it names files and directories on the agents.
_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
#: Longest idempotency ``key`` of a submit.
MAX_KEY = 128
#: Socket-level cap (zmq.MAXMSGSIZE): ZeroMQ drops the connection of a peer sending more.
SOCKET_MAX_BYTES = 4 * MAX_MESSAGE_BYTES


class ProtocolError(ValueError):
    """A message that is not valid; the text says what is wrong with it. ``code`` is a
    machine-readable hint for the peer (``register``: register this connection first;
    ``node_taken``: another agent holds this node, try again in ``retry_after`` seconds;
    ``identity``: the sender's key or uid may not speak for the node it names)."""

    def __init__(
        self, text: str, code: str | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(text)
        self.code = code
        self.retry_after = retry_after

    def reply_fields(self) -> dict[str, Any]:
        """The machine-readable part of the error reply."""
        fields: dict[str, Any] = {"code": self.code} if self.code else {}
        if self.retry_after is not None:
            fields["retry_after"] = self.retry_after
        return fields


NUM = (int, float)
OPT_STR: Field = ((str, None), False)
REQ_STR: Field = ((str,), True)
REQ_INT: Field = ((int,), True)

_JOB_REF = {"job_id": REQ_STR}
#: Paging and filters of the job listings (``status`` without a job, ``queue``).
LISTING: dict[str, Field] = {
    "all": ((bool, None), False),
    "since": ((*NUM, None), False),
    "user": OPT_STR,
    "after": OPT_STR,
    "limit": ((int, None), False),
}

# Every message type, who sends it, and its fields besides ``type``/``v``/``id``.
SCHEMAS: dict[str, dict[str, Field]] = {
    # client → coordinator (requests; reply ok/error)
    "submit": {
        "argv": ((list,), True),
        "workers": REQ_INT,  # the most (an elastic gang's range: min_workers to workers)
        "min_workers": ((int, None), False),
        "ps": ((int,), False),
        "horovod": ((bool,), False),
        "gpus": ((int, None), False),
        "cwd": OPT_STR,
        "env": ((dict, None), False),
        "name": OPT_STR,
        "duration": ((*NUM, None), False),
        "skew": ((*NUM, None), False),
        "key": OPT_STR,
    },
    "status": {"job_id": OPT_STR, **LISTING},
    "queue": {**LISTING, "heads": ((int, None), False)},
    "nodes": {},
    "cancel": _JOB_REF,
    "logs": {**_JOB_REF, "offsets": ((dict, None), False), "limit": ((int, None), False)},
    "advance": {"seconds": ((*NUM,), True)},
    # agent → coordinator
    "register": {
        "node": REQ_STR,
        "instance": OPT_STR,  # a token of the agent process: the same across its reconnects
        "host": OPT_STR,
        "gpus": ((list,), True),
        "running": ((list,), True),
    },
    "heartbeat": {"node": REQ_STR},
    "exited": {
        "node": REQ_STR,
        "job_id": REQ_STR,
        "restart": REQ_INT,
        "outcome": REQ_STR,
        "processes": ((list,), True),
    },
    "log_data": {"node": REQ_STR, "req": REQ_INT, "files": ((dict,), True)},
    # job runtime → coordinator (fire and forget)
    "report": {
        **contract.REPORT,
        # a node agent's measurement of the job's processes there (ibverbs-tap)
        "node": OPT_STR,
        "ps_bytes": ((dict, None), False),  # PS address → bytes exchanged with it
    },
    # coordinator → agent (commands)
    "launch": {
        "epoch": ((int,), False),  # of the node's connection the launch was sent to
        "job_id": REQ_STR,
        "job_key": OPT_STR,
        "restart": REQ_INT,
        "processes": ((list,), True),
        "grace": ((*NUM,), True),
        "owner": REQ_STR,  # the user the processes run as
    },
    "preempt": {
        "job_id": REQ_STR,
        "restart": REQ_INT,
        "signal": REQ_STR,
        "grace": ((*NUM,), True),
    },
    "kill": {
        "job_id": REQ_STR,
        "restart": ((int, None), False),
        "grace": ((*NUM, None), False),
    },
    "fetch_logs": {
        "job_id": REQ_STR,
        "job_key": OPT_STR,
        "req": REQ_INT,
        "offsets": ((dict,), True),
        "limit": REQ_INT,
    },
    # replies
    "ok": {},
    "error": {"error": REQ_STR},
}

#: Messages that expect a reply and so must carry an ``id``.
REQUESTS = frozenset(
    {
        "submit",
        "status",
        "queue",
        "nodes",
        "cancel",
        "logs",
        "advance",
        "register",
        "heartbeat",
        "exited",
    }
)


class PartOutcome(StrEnum):
    """How one node's processes of a run ended: the one vocabulary of agents (``exited``),
    executors and the coordinator's run lifecycle."""

    COMPLETED = "completed"  # the chief finished (or every process exited 0)
    CHECKPOINTED = "checkpointed"  # preempted, and the chief exited EXIT_CHECKPOINTED
    PREEMPTED = "preempted"  # stopped by a preemption signal without a checkpoint
    FAILED = "failed"  # a process exited with any other code
    KILLED = "killed"  # stopped by the coordinator (kill), or by a peer part's end
    LOST = "lost"  # the coordinator's own verdict: the node is gone, or no longer has it


class Stopping(StrEnum):
    """Why a run (or one node's part of it) is being stopped, once it is: the run book's,
    the agents' and the Slurm executor's one vocabulary."""

    PREEMPT = "preempt"  # the preemption signal: checkpoint and exit, SIGKILL after the grace
    KILL = "kill"  # stopped now: a cancel, or the coordinator's kill
    STOP = "stop"  # the rest of a run that one part settled (a peer failed, the chief ended)


#: Exit status reported for a process that could not be started (as a shell does), by every
#: executor.
EXIT_NOT_STARTED = 127

#: What an agent may report for its part of a job (``lost`` is never the node's to say).
PART_OUTCOMES = tuple(o.value for o in PartOutcome if o is not PartOutcome.LOST)

# Shapes of list items and nested maps (field → (types, required)).
GPU_ITEM: dict[str, Field] = {"index": REQ_INT, "uuid": OPT_STR, "memory": ((int, None), False)}
RUNNING_ITEM: dict[str, Field] = {"job_id": REQ_STR, "restart": REQ_INT}
PROCESS_SPEC: dict[str, Field] = {
    "role": REQ_STR,
    "task_index": REQ_INT,
    "argv": ((list,), True),
    "env": ((dict,), True),
    "gpus": ((list,), True),
    "cwd": OPT_STR,
}
PROCESS_EXIT: dict[str, Field] = {
    "role": REQ_STR,
    "task_index": REQ_INT,
    "code": ((int, None), True),
    "log_tail": OPT_STR,
}


def _typename(types: tuple[type | None, ...]) -> str:
    return " or ".join("nil" if t is None else t.__name__ for t in types)


def _exact_types(types: tuple[type | None, ...]) -> frozenset[type]:
    """The concrete types msgpack decodes to that ``types`` accepts (bool is not an int)."""
    return frozenset(type(None) if t is None else t for t in types)


_COMPILED: dict[int, tuple[tuple[str, frozenset[type], bool, str], ...]] = {}


def _compiled(schema: Mapping[str, Field]) -> tuple[tuple[str, frozenset[type], bool, str], ...]:
    """(field, exact types, required, type names) per field; cached: validation is hot."""
    key = id(schema)
    if key not in _COMPILED:
        _COMPILED[key] = tuple(
            (name, _exact_types(types), required, _typename(types))
            for name, (types, required) in schema.items()
        )
    return _COMPILED[key]


def check_fields(where: str, data: Any, schema: Mapping[str, Field]) -> None:
    """Raise ProtocolError naming the first field of ``data`` that does not fit ``schema``."""
    if type(data) is not dict:
        raise ProtocolError(f"{where}: expected a map, got {type(data).__name__}")
    for name, exact, required, names in _compiled(schema):
        if name not in data:
            if required:
                raise ProtocolError(f"{where}: missing field '{name}'")
            continue
        if type(data[name]) not in exact:
            raise ProtocolError(
                f"{where}: field '{name}' must be {names}, got {type(data[name]).__name__}"
            )


def _check_str_list(where: str, value: list[Any]) -> None:
    if not all(isinstance(a, str) for a in value):
        raise ProtocolError(f"{where} must be a list of strings")
    if any("\0" in a for a in value):
        raise ProtocolError(f"{where} must not contain NUL characters")


def _check_str_map(where: str, value: dict[Any, Any], vtype: type = str) -> None:
    if not all(isinstance(k, str) and type(v) is vtype for k, v in value.items()):
        raise ProtocolError(f"{where} must map strings to {vtype.__name__}")


def _check_environment(where: str, env: dict[Any, Any]) -> None:
    """What ``execve`` accepts: names without ``=`` or NUL, values without NUL."""
    _check_str_map(where, env)
    for key, value in env.items():
        if not key or "=" in key or "\0" in key:
            raise ProtocolError(f"{where}: {key!r} is not a valid variable name (no '=' or NUL)")
        if "\0" in value:
            raise ProtocolError(f"{where}: the value of {key!r} contains a NUL character")


def _check_path(where: str, value: str | None) -> None:
    if value is not None and "\0" in value:
        raise ProtocolError(f"{where} must not contain NUL characters")


def _check_offsets(where: str, offsets: dict[Any, Any], what: str = "byte offsets") -> None:
    """A map of names to byte counts (log offsets, traffic)."""
    _check_str_map(where, offsets, int)
    if any(v < 0 for v in offsets.values()):
        raise ProtocolError(f"{where}: {what} must be >= 0")


def _check_amounts(t: str, msg: dict[str, Any], names: tuple[str, ...]) -> None:
    """Counts and durations: >= 0 (nil allowed where the schema allows it); finite and
    bounded by ``bounds.check_message``, which runs first."""
    for name in names:
        value = msg.get(name)
        if value is not None and not value >= 0:
            raise ProtocolError(f"{t}: '{name}' must be a finite number >= 0, got {value!r}")


def _check_items(where: str, items: list[Any], schema: Mapping[str, Field]) -> None:
    for i, item in enumerate(items):
        check_fields(f"{where}[{i}]", item, schema)


def _check_nested(t: str, msg: dict[str, Any]) -> None:
    """Validation below the top level, for the fields whose content the receiver relies on."""
    if t == "submit":
        _check_str_list("submit: 'argv'", msg["argv"])
        if msg.get("env"):
            _check_environment("submit: 'env'", msg["env"])
        _check_path("submit: 'cwd'", msg.get("cwd"))
        try:  # the job's shape: one validated request type, checked in one place
            GangRequest.from_submit(msg)
        except ValueError as e:
            raise ProtocolError(f"submit: {e}") from None
        duration = msg.get("duration")
        if duration is not None and not 0 < duration < math.inf:
            raise ProtocolError(f"submit: 'duration' must be a positive number, got {duration}")
        skew = msg.get("skew")
        if skew is not None and not 0.0 <= skew <= 1.0:
            raise ProtocolError(f"submit: 'skew' must be in [0, 1], got {skew}")
        key = msg.get("key")
        if key is not None and not 0 < len(key) <= MAX_KEY:
            raise ProtocolError(f"submit: 'key' must be 1 to {MAX_KEY} characters")
    elif t == "register":
        _check_items("register: 'gpus'", msg["gpus"], GPU_ITEM)
        _check_items("register: 'running'", msg["running"], RUNNING_ITEM)
    elif t == "exited":
        if msg["outcome"] not in PART_OUTCOMES:
            raise ProtocolError(
                f"exited: 'outcome' must be one of {', '.join(PART_OUTCOMES)}, "
                f"got {msg['outcome']!r}"
            )
        _check_items("exited: 'processes'", msg["processes"], PROCESS_EXIT)
    elif t == "launch":
        _check_items("launch: 'processes'", msg["processes"], PROCESS_SPEC)
        for i, p in enumerate(msg["processes"]):
            _check_str_list(f"launch: 'processes'[{i}].argv", p["argv"])
            _check_environment(f"launch: 'processes'[{i}].env", p["env"])
            _check_path(f"launch: 'processes'[{i}].cwd", p.get("cwd"))
            if not all(isinstance(g, int) for g in p["gpus"]):
                raise ProtocolError(f"launch: 'processes'[{i}].gpus must be integers")
        _check_amounts(t, msg, ("restart", "grace"))
    elif t in ("logs", "fetch_logs"):
        if msg.get("offsets"):
            _check_offsets(f"{t}: 'offsets'", msg["offsets"])
        _check_amounts(t, msg, ("limit",))
    elif t in ("status", "queue"):
        _check_amounts(t, msg, ("since", "limit", "heads"))
    elif t in ("preempt", "kill"):
        _check_amounts(t, msg, ("restart", "grace"))
    elif t == "advance":
        _check_amounts(t, msg, ("seconds",))
    elif t == "report":
        _check_amounts(t, msg, REPORT_AMOUNTS)
        skew = msg.get("skew")
        if skew is not None and not 0.0 <= skew <= 1.0:
            raise ProtocolError(f"report: 'skew' must be in [0, 1], got {skew}")
        if msg.get("ps_bytes"):
            _check_offsets("report: 'ps_bytes'", msg["ps_bytes"], "byte counts")
        tb = msg.get("tensor_bytes")
        if tb is not None and not all(isinstance(b, int) and b >= 0 for b in tb):
            raise ProtocolError("report: 'tensor_bytes' must be non-negative integers")


def validate(msg: Any) -> dict[str, Any]:
    """Check a decoded message against its schema; return it, or raise ProtocolError."""
    if not isinstance(msg, dict):
        raise ProtocolError(f"message must be a map, got {type(msg).__name__}")
    t = msg.get("type")
    if not isinstance(t, str):
        raise ProtocolError("message has no string 'type'")
    if t not in SCHEMAS:
        raise ProtocolError(f"unknown message type {t!r}")
    v = msg.get("v")
    if type(v) is not int or v != VERSION:  # 1.0 == True == 1 in Python: not on the wire
        raise ProtocolError(f"{t}: protocol version {v!r} not supported (expected {VERSION})")
    if t in REQUESTS and not (isinstance(msg.get("id"), int) and not isinstance(msg["id"], bool)):
        raise ProtocolError(f"{t}: requests need an integer 'id'")
    check_fields(t, msg, SCHEMAS[t])
    for name in ("job_id", "job_key"):  # agents make paths of them
        value = msg.get(name)  # a field some types do not declare, so of any type here
        if value is not None and not (isinstance(value, str) and _SAFE_NAME.fullmatch(value)):
            raise ProtocolError(
                f"{t}: '{name}' must be 1 to 128 letters, digits, '.', '_' or '-' "
                f"(not starting with '.' or '-'), got {repr(value)[:40]}"
            )
    try:
        bounds.check_message(t, msg)
    except bounds.BoundsError as e:
        raise ProtocolError(str(e)) from None
    _check_nested(t, msg)
    return msg


def decode(frame: bytes) -> dict[str, Any]:
    """Bytes off the wire → a validated message. Raises ProtocolError on anything wrong."""
    if len(frame) > MAX_MESSAGE_BYTES:
        raise ProtocolError(
            f"message of {len(frame)} bytes exceeds the limit of {MAX_MESSAGE_BYTES} bytes"
        )
    try:
        msg = msgpack.unpackb(frame, raw=False, strict_map_key=False)
    except Exception as e:  # msgpack raises a zoo of types for malformed input
        raise ProtocolError(f"not a msgpack message: {type(e).__name__}: {e}") from None
    return validate(msg)


def encode(msg_type: str, **fields: Any) -> bytes:
    """A message of ``msg_type`` with the protocol version stamped in."""
    frame: bytes = msgpack.packb({"type": msg_type, "v": VERSION, **fields}, use_bin_type=True)
    return frame


def ok(req_id: int | None, **fields: Any) -> bytes:
    return encode("ok", id=req_id, **fields)


def error(req_id: int | None, text: str, **fields: Any) -> bytes:
    return encode("error", id=req_id, error=text, **fields)


def request_id(frame: bytes) -> int | None:
    """Best-effort ``id`` of a message that failed validation, so the error reply can echo it."""
    try:
        msg = msgpack.unpackb(frame, raw=False, strict_map_key=False)
    except Exception:
        return None
    rid = msg.get("id") if isinstance(msg, dict) else None
    return rid if isinstance(rid, int) and not isinstance(rid, bool) else None
