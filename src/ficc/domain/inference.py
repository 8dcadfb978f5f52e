"""Managed inference: the service spec, the service state machine and replica attempts.

Pure rules, no I/O: the web layer, the CLI and remote peers all reach a service through
``parse_service_spec`` and the two transition tables, so a rule is written once and a refused
spec or operation names the field or the state that refused it.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Final, TypeVar
from urllib.parse import unquote, urlsplit

from ficc.base.errors import Conflict, InvalidInput, PermissionDenied, UnacknowledgedOutcome
from ficc.base.ids import parse_id

# --- the spec -------------------------------------------------------------------------------


class RuntimeName(StrEnum):
    """The engines FICC can run a service on."""

    LLAMA_CPP = "llama.cpp"
    OPENAI = "openai"
    VLLM = "vllm"


MAX_REPLICAS: Final = 16
"""More replicas than this on one node is a typo, not a plan."""

MAX_MODEL_NAME_CHARS: Final = 256
SPEC_FIELDS: Final = frozenset(
    {"name", "model", "runtime", "node", "replicas", "options", "restart"}
)
_REQUIRED_FIELDS: Final = ("name", "model", "runtime")
_SERVICE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_UPSTREAM_MODEL_NAME = re.compile(r"^[\x21-\x7e][\x20-\x7e]*$")


class RestartPolicy(StrEnum):
    """What FICC does when a replica's engine ends without being asked (systemd's words).

    ``on-failure``: started again after an unclean end (an exit code other than 0, a signal, a
    lost node); ``always``: after any end; ``never``: the service is ``failed`` at once.
    """

    ON_FAILURE = "on-failure"
    ALWAYS = "always"
    NEVER = "never"

    def restarts(self, clean_exit: bool) -> bool:
        """Whether an engine that ended by itself (cleanly or not) is started again."""
        if self is RestartPolicy.NEVER:
            return False
        return self is RestartPolicy.ALWAYS or not clean_exit


DEFAULT_RESTART: Final = RestartPolicy.ON_FAILURE


@dataclass(frozen=True)
class ServiceSpec:
    """A checked service spec; made only by :func:`parse_service_spec`.

    ``model`` is a local model ID for ``llama.cpp`` and ``vllm``; for ``openai`` it is the model
    name the upstream server knows. ``node`` is a node ID, or ``None`` for the local node.
    """

    name: str
    model: str
    runtime: RuntimeName
    node: str | None
    replicas: int
    options: Mapping[str, Any] = field(default_factory=dict)
    restart: RestartPolicy = DEFAULT_RESTART

    def to_json(self) -> dict[str, Any]:
        """The spec as the API shows it, options and restart with their defaults filled in."""
        return {
            "name": self.name,
            "model": self.model,
            "runtime": self.runtime.value,
            "node": self.node,
            "replicas": self.replicas,
            "options": dict(self.options),
            "restart": self.restart.value,
        }


def uses_local_model(runtime: RuntimeName) -> bool:
    """Whether ``spec.model`` is a local model ID whose files the runtime loads."""
    return runtime is not RuntimeName.OPENAI


@dataclass(frozen=True)
class _Option:
    """One option of a runtime: its check and its default (``None``: absent unless given)."""

    check: Callable[[str, object], Any]
    default: Any = None
    required: bool = False


def _integer(low: int, high: int) -> Callable[[str, object], int]:
    def check(name: str, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise InvalidInput(
                f"{name} must be an integer from {low} to {high}",
                field=name,
                details={"minimum": low, "maximum": high},
            )
        return value

    return check


def _number(low: float, high: float) -> Callable[[str, object], float]:
    def check(name: str, value: object) -> float:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or not low <= value <= high
        ):
            raise InvalidInput(
                f"{name} must be a number from {low} to {high}",
                field=name,
                details={"minimum": low, "maximum": high},
            )
        return float(value)

    return check


def _boolean(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidInput(f"{name} must be true or false", field=name)
    return value


def _one_of(*choices: str) -> Callable[[str, object], str]:
    def check(name: str, value: object) -> str:
        if value not in choices:
            raise InvalidInput(
                f"{name} must be one of {', '.join(choices)}",
                field=name,
                details={"allowed": list(choices)},
            )
        assert isinstance(value, str)
        return value

    return check


MAX_BASE_URL_CHARS: Final = 2048
_DNS_NAME = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)(?:\.(?!-)[a-z0-9-]{1,63}(?<!-))*$")
_NUMERIC_LABEL = re.compile(r"^(?:0x[0-9a-f]*|[0-9]+)$")
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


def _ipv4_number(host: str) -> int | None:
    """The address of a host written in any form ``inet_aton`` takes, or None.

    ``2130706433``, ``0x7f.1``, ``0177.0.0.1`` and ``127.1`` all reach 127.0.0.1 when a resolver
    is given them; they are made ordinary dotted quads before any rule compares them.
    """
    parts = host.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    values = []
    for part in parts:
        if part.startswith("0x"):
            digits, base, allowed = part[2:] or "0", 16, "0123456789abcdef"
        elif len(part) > 1 and part.startswith("0"):
            digits, base, allowed = part[1:], 8, "01234567"
        else:
            digits, base, allowed = part, 10, "0123456789"
        if not digits or any(ch not in allowed for ch in digits):
            return None
        values.append(int(digits, base))
    *head, last = values
    if any(value > 255 for value in head) or last >= 256 ** (4 - len(head)):
        return None
    number = last
    for index, value in enumerate(head):
        number += value << (8 * (3 - index))
    return number


def canonical_host(host: str) -> str | None:
    """One spelling per address: IP literals in their standard form, names lower case.

    None for a host that is neither a DNS name nor an IP address (a numeric form out of range,
    a zone index, stray characters).
    """
    host = host.lower()
    if "%" in host:
        return None
    if ":" in host:
        try:
            address = ipaddress.IPv6Address(host)
        except ValueError:
            return None
        mapped = address.ipv4_mapped
        return str(mapped) if mapped is not None else f"[{address.compressed}]"
    host = host.removesuffix(".")
    if _NUMERIC_LABEL.fullmatch(host.rsplit(".", 1)[-1]):
        number = _ipv4_number(host)
        return None if number is None else str(ipaddress.IPv4Address(number))
    return host if _DNS_NAME.fullmatch(host) else None


def parse_base_url(name: str, value: object) -> str:
    """An http(s) URL of an OpenAI-compatible server, stored without a trailing ``/v1``.

    Users paste the URL an OpenAI client takes (``http://host:8000/v1``) as often as the server's
    root; both mean the same server. Credentials, queries and fragments are refused because they
    would be shown wherever the spec is. The host is stored in its canonical form (see
    :func:`canonical_host`), so the URL an upstream rule matches is the URL that is connected to,
    and the path may hold no dot segments that would climb out of an allowed prefix.
    """
    rule = (
        f"{name} must be an http or https URL with a host and no user, query, fragment "
        "or dot segments"
    )
    if not isinstance(value, str) or not 0 < len(value) <= MAX_BASE_URL_CHARS:
        raise InvalidInput(rule, field=name)
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        raise InvalidInput(rule, field=name) from exc
    if (
        parts.scheme not in {"http", "https"}
        or not parts.hostname
        or parts.username is not None
        or parts.password is not None
        or "@" in parts.netloc
        or "\\" in value
        or parts.query
        or parts.fragment
        or any(ch.isspace() or not ch.isprintable() or not ch.isascii() for ch in value)
    ):
        raise InvalidInput(rule, field=name)
    host = canonical_host(parts.hostname)
    segments = parts.path.split("/")
    if host is None or any(unquote(s) in {".", ".."} or "/" in unquote(s) for s in segments):
        raise InvalidInput(rule, field=name)
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    netloc = host if port is None else f"{host}:{port}"
    return f"{parts.scheme}://{netloc}{path}"


@dataclass(frozen=True)
class UpstreamPrefix:
    """An upstream URL prefix the cluster owner allowed, compared part by part."""

    url: str
    scheme: str
    host: str
    port: int
    segments: tuple[str, ...]

    @classmethod
    def parse(cls, value: object, *, name: str = "upstream prefix") -> UpstreamPrefix:
        """A prefix in the canonical form :func:`parse_base_url` gives base URLs."""
        url = parse_base_url(name, value)
        scheme, host, port, segments = _url_parts(url)
        return cls(url, scheme, host, port, segments)

    def covers(self, base_url: str) -> bool:
        """Same scheme, host and port, and the prefix's path segments begin the URL's path.

        ``http://a.com`` covers ``http://a.com/x`` but not ``http://a.com.evil`` or
        ``http://a.com:8080``; ``http://a.com/v`` does not cover ``http://a.com/vx``.
        """
        scheme, host, port, segments = _url_parts(base_url)
        return (scheme, host, port) == (self.scheme, self.host, self.port) and segments[
            : len(self.segments)
        ] == self.segments


def _url_parts(canonical_url: str) -> tuple[str, str, int, tuple[str, ...]]:
    parts = urlsplit(canonical_url)
    host = canonical_url.split("://", 1)[1].split("/", 1)[0]
    host = host.rsplit(":", 1)[0] if parts.port is not None else host
    port = parts.port if parts.port is not None else _DEFAULT_PORTS[parts.scheme]
    segments = tuple(s for s in parts.path.split("/") if s)
    return parts.scheme, host, port, segments


UPSTREAM_RULE: Final = (
    "options.base_url must begin with an upstream URL prefix the cluster owner allowed "
    "(ficc serve --upstream-allow URL_PREFIX)"
)


@dataclass(frozen=True)
class UpstreamAllowList:
    """The upstream servers ``openai`` services may reach; empty (nothing) unless the owner says.

    An ``openai`` service makes FICC send requests, and prompts, to its ``base_url``; without
    this list any ``inference:manage`` holder could point FICC at the cloud metadata address,
    private networks or other projects' loopback engines.
    """

    prefixes: tuple[UpstreamPrefix, ...] = ()

    @classmethod
    def parse(cls, values: Iterable[object]) -> UpstreamAllowList:
        """From the owner's ``--upstream-allow`` values; a malformed one is refused."""
        return cls(tuple(UpstreamPrefix.parse(v, name="--upstream-allow") for v in values))

    def check(self, spec: ServiceSpec) -> None:
        """PermissionDenied unless ``spec`` reaches no upstream or an allowed one."""
        base_url = spec.options.get("base_url")
        if spec.runtime is not RuntimeName.OPENAI or not isinstance(base_url, str):
            return
        if not any(prefix.covers(base_url) for prefix in self.prefixes):
            raise PermissionDenied(
                UPSTREAM_RULE,
                details={"field": "options.base_url", "reason": "upstream_not_allowed"},
            )


DEFAULT_LLAMA_CPP_THREADS: Final = 1
"""engine.md: more than one thread was erratic on two cores."""

DEFAULT_LLAMA_CPP_CTX: Final = 2048

RUNTIME_OPTIONS: Final[Mapping[RuntimeName, Mapping[str, _Option]]] = {
    RuntimeName.LLAMA_CPP: {
        "n_threads": _Option(_integer(1, 256), default=DEFAULT_LLAMA_CPP_THREADS),
        "n_ctx": _Option(_integer(128, 1_048_576), default=DEFAULT_LLAMA_CPP_CTX),
        "n_batch": _Option(_integer(1, 65_536)),
        "n_gpu_layers": _Option(_integer(0, 10_000), default=0),
        "seed": _Option(_integer(0, 2**32 - 1)),
        # Embeddings need the server's --embedding, with which this runtime serves nothing else.
        "embeddings": _Option(_boolean),
    },
    RuntimeName.OPENAI: {
        "base_url": _Option(parse_base_url, required=True),
    },
    RuntimeName.VLLM: {
        "tensor_parallel_size": _Option(_integer(1, 64), default=1),
        "max_model_len": _Option(_integer(128, 10_485_760)),
        "gpu_memory_utilization": _Option(_number(0.05, 0.99)),
        "dtype": _Option(_one_of("auto", "float16", "bfloat16", "float32"), default="auto"),
        "enforce_eager": _Option(_boolean, default=False),
    },
}


def parse_options(runtime: RuntimeName, value: object) -> dict[str, Any]:
    """Check ``options`` against the runtime's table; unknown options are refused."""
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise InvalidInput("options must be an object", field="options")
    table = RUNTIME_OPTIONS[runtime]
    for key in value:
        if key not in table:
            allowed = ", ".join(sorted(table))
            raise InvalidInput(
                f"options.{key} is not an option of runtime {runtime.value} (allowed: {allowed})",
                field=f"options.{key}",
                details={"allowed": sorted(table)},
            )
    options: dict[str, Any] = {}
    for key, option in table.items():
        name = f"options.{key}"
        if key in value:
            options[key] = option.check(name, value[key])
        elif option.required:
            raise InvalidInput(f"{name} is required for runtime {runtime.value}", field=name)
        elif option.default is not None:
            options[key] = option.default
    return options


def _parse_name(value: object) -> str:
    if not isinstance(value, str) or not _SERVICE_NAME.fullmatch(value):
        raise InvalidInput(
            "name must be 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit",
            field="name",
        )
    return value


def _parse_runtime(value: object) -> RuntimeName:
    allowed = [runtime.value for runtime in RuntimeName]
    if not isinstance(value, str) or value not in allowed:
        raise InvalidInput(
            f"runtime must be one of {', '.join(allowed)}",
            field="runtime",
            details={"allowed": allowed},
        )
    return RuntimeName(value)


def _parse_model(runtime: RuntimeName, value: object) -> str:
    if uses_local_model(runtime):
        return parse_id("model", value, field="model")
    if (
        not isinstance(value, str)
        or len(value) > MAX_MODEL_NAME_CHARS
        or not _UPSTREAM_MODEL_NAME.fullmatch(value)
    ):
        raise InvalidInput(
            f"model must be the upstream model name: 1-{MAX_MODEL_NAME_CHARS} printable "
            "ASCII characters",
            field="model",
        )
    return value


def parse_service_spec(data: object) -> ServiceSpec:
    """Check a spec as sent by a user or a peer; refuse naming every bad field at once.

    One refusal lists each missing or wrong field with its rule and allowed values, so that a
    caller fixes the spec in one go instead of one field per round trip.
    """
    if not isinstance(data, Mapping):
        raise InvalidInput("spec must be an object", field="spec")
    problems: list[InvalidInput] = []
    unknown = sorted(str(key) for key in data if key not in SPEC_FIELDS)
    for key in unknown:
        problems.append(
            InvalidInput(
                f"spec field {key} is unknown (allowed: {', '.join(sorted(SPEC_FIELDS))})",
                field=key,
                details={"allowed": sorted(SPEC_FIELDS)},
            )
        )
    for key in _REQUIRED_FIELDS:
        if key not in data:
            problems.append(_missing(key))
    name = _checked(problems, lambda: _parse_name(data["name"]), "name" in data)
    runtime = _checked(problems, lambda: _parse_runtime(data["runtime"]), "runtime" in data)
    model = node = options = None
    if runtime is not None:
        model = _checked(problems, lambda: _parse_model(runtime, data["model"]), "model" in data)
        options = _checked(problems, lambda: parse_options(runtime, data.get("options")), True)
    if data.get("node") is not None:
        node = _checked(problems, lambda: parse_id("node", data["node"], field="node"), True)
    replicas = _checked(
        problems, lambda: _integer(1, MAX_REPLICAS)("replicas", data.get("replicas", 1)), True
    )
    restart = _checked(
        problems, lambda: _parse_restart(data.get("restart", DEFAULT_RESTART.value)), True
    )
    if problems or name is None or runtime is None or model is None:
        raise _all_of(problems)
    if replicas is None or options is None or restart is None:
        raise _all_of(problems)
    return ServiceSpec(name, model, runtime, node, replicas, options, restart)


def _parse_restart(value: object) -> RestartPolicy:
    allowed = [policy.value for policy in RestartPolicy]
    if not isinstance(value, str) or value not in allowed:
        raise InvalidInput(
            f"restart must be one of {', '.join(allowed)}",
            field="restart",
            details={"allowed": allowed},
        )
    return RestartPolicy(value)


_T = TypeVar("_T")


def _checked(problems: list[InvalidInput], parse: Callable[[], _T], present: bool) -> _T | None:
    """The parsed value, or None with the refusal added to ``problems``."""
    if not present:
        return None
    try:
        return parse()
    except InvalidInput as exc:
        problems.append(exc)
        return None


def _missing(key: str) -> InvalidInput:
    if key == "runtime":
        allowed = [runtime.value for runtime in RuntimeName]
        return InvalidInput(
            f"runtime is required: one of {', '.join(allowed)}",
            field="runtime",
            details={"allowed": allowed},
        )
    if key == "model":
        return InvalidInput(
            "model is required: a model ID (mdl_...) of this project, or the upstream model "
            "name for runtime openai",
            field="model",
        )
    return InvalidInput(f"{key} is required", field=key)


def _all_of(problems: list[InvalidInput]) -> InvalidInput:
    """One refusal for several: the first field in ``field``, every one in ``fields``."""
    if not problems:
        return InvalidInput("spec is incomplete", field="spec")
    if len(problems) == 1:
        return problems[0]
    fields = [{"message": problem.message, **problem.details} for problem in problems]
    return InvalidInput(
        "; ".join(problem.message for problem in problems),
        field=str(problems[0].details.get("field")),
        details={"fields": fields},
    )


# --- admission: what a service needs, what is committed, whether it fits ------------------------

ENGINE_OVERHEAD_BYTES: Final = 256 * 1024 * 1024
"""Memory an engine needs beyond its model file (measured: ~235 MB RSS for SmolLM2)."""

MAX_GRANT_RUNNING_SERVICES: Final = 4
"""Services a grant's peer created that may run (or start, or drain) at once."""
MAX_GRANT_RUNNING_REPLICAS: Final = 8
"""Replicas of those services at once: 8 engines of at least 256 MiB each is about 2 GiB plus
the models, a share a peer can be lent without owning the node."""

TRAINED_CONTEXT_KEY: Final = "context_length"
"""The manifest metadata key that states a model's trained context, in tokens, where known."""


@dataclass(frozen=True)
class Requirements:
    """What a service takes from its node while it runs."""

    memory_bytes: int = 0
    cpu_slots: int = 0
    gpus: int = 0

    def __add__(self, other: Requirements) -> Requirements:
        return Requirements(
            self.memory_bytes + other.memory_bytes,
            self.cpu_slots + other.cpu_slots,
            self.gpus + other.gpus,
        )

    def to_json(self) -> dict[str, int]:
        return {"memory_bytes": self.memory_bytes, "cpu_slots": self.cpu_slots, "gpus": self.gpus}


def requirements(spec: ServiceSpec, model_bytes: int) -> Requirements:
    """Memory (model and engine per replica), CPU threads and GPUs of ``spec``."""
    threads = int(spec.options.get("n_threads", 1)) if spec.runtime is RuntimeName.LLAMA_CPP else 0
    per_replica_memory = (
        model_bytes + ENGINE_OVERHEAD_BYTES if spec.runtime is not RuntimeName.OPENAI else 0
    )
    return Requirements(
        memory_bytes=per_replica_memory * spec.replicas,
        cpu_slots=threads * spec.replicas,
        gpus=1 if spec.runtime is RuntimeName.VLLM else 0,
    )


@dataclass(frozen=True)
class Shortfall:
    """One resource a service needs more of than its node has free."""

    resource: str
    needed: int
    available: int
    reason: str


@dataclass(frozen=True)
class Capacity:
    """What a node has: its CPUs, its total and currently available memory, its GPUs."""

    cpu_count: int
    memory_bytes: int
    memory_available_bytes: int
    gpu_count: int


def fit(
    need: Requirements, committed: Requirements, capacity: Capacity
) -> tuple[list[Shortfall], list[str]]:
    """Whether ``need`` fits beside what running services committed: refusals and warnings.

    Free memory is the smaller of what the node reports available and its total less the
    committed memory of running services: the first sees other processes, the second sees
    engines that are starting and have not taken their memory yet.
    """
    shortfalls: list[Shortfall] = []
    warnings: list[str] = []
    free_memory = max(
        min(capacity.memory_available_bytes, capacity.memory_bytes - committed.memory_bytes), 0
    )
    if need.memory_bytes > free_memory:
        shortfalls.append(
            Shortfall(
                "memory_bytes",
                need.memory_bytes,
                free_memory,
                f"needs {need.memory_bytes} bytes of memory; {free_memory} are free",
            )
        )
    free_cpus = max(capacity.cpu_count - committed.cpu_slots, 0)
    if need.cpu_slots > capacity.cpu_count:
        shortfalls.append(
            Shortfall(
                "cpu_slots",
                need.cpu_slots,
                capacity.cpu_count,
                f"needs {need.cpu_slots} CPU slots; the node has {capacity.cpu_count}",
            )
        )
    elif need.cpu_slots > free_cpus:
        warnings.append(f"needs {need.cpu_slots} CPU slots; {free_cpus} are not yet taken")
    if need.gpus > capacity.gpu_count:
        shortfalls.append(
            Shortfall(
                "gpus",
                need.gpus,
                capacity.gpu_count,
                f"needs {need.gpus} GPU(s); the node has {capacity.gpu_count}",
            )
        )
    return shortfalls, warnings


def grant_running_shortfall(running: list[ServiceSpec], spec: ServiceSpec) -> Shortfall | None:
    """The per-grant cap ``spec`` would pass, beside the grant's ``running`` services."""
    services = len(running) + 1
    if services > MAX_GRANT_RUNNING_SERVICES:
        return Shortfall(
            "running_services",
            services,
            MAX_GRANT_RUNNING_SERVICES,
            f"a grant's services may run at most {MAX_GRANT_RUNNING_SERVICES} at once",
        )
    replicas = sum(other.replicas for other in running) + spec.replicas
    if replicas > MAX_GRANT_RUNNING_REPLICAS:
        return Shortfall(
            "running_replicas",
            replicas,
            MAX_GRANT_RUNNING_REPLICAS,
            f"a grant's services may run at most {MAX_GRANT_RUNNING_REPLICAS} replicas at once",
        )
    return None


def trained_context(metadata: Mapping[str, Any]) -> int | None:
    """The model's trained context in tokens, when its manifest states it."""
    value = metadata.get(TRAINED_CONTEXT_KEY)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return None
    return value


def check_context(spec: ServiceSpec, metadata: Mapping[str, Any]) -> None:
    """``options.n_ctx`` may not pass the model's trained context, where it is known."""
    trained = trained_context(metadata)
    n_ctx = spec.options.get("n_ctx")
    if trained is not None and isinstance(n_ctx, int) and n_ctx > trained:
        raise InvalidInput(
            f"options.n_ctx is {n_ctx}; the model was trained with a context of {trained}",
            field="options.n_ctx",
            details={"maximum": trained},
        )


# --- the service state machine --------------------------------------------------------------


class ServiceState(StrEnum):
    """Where a service is; ``failed`` keeps its replicas' exit and log lines for the operator."""

    STOPPED = "stopped"
    STARTING = "starting"
    RUNNING = "running"
    DRAINING = "draining"
    FAILED = "failed"


class Operation(StrEnum):
    """What a user (or a peer) asks of a service: the ``control`` operations and ``replace``."""

    START = "start"
    DRAIN = "drain"
    STOP = "stop"
    REMOVE = "remove"
    REPLACE = "replace"


_S = ServiceState

REMOVED: Final = None
"""The target of ``remove``: the record is deleted (its ID is never reused)."""

OPERATION_TABLE: Final[Mapping[Operation, Mapping[ServiceState, ServiceState | None]]] = {
    # A failed service starts again without an explicit stop: its replicas are gone already.
    Operation.START: {_S.STOPPED: _S.STARTING, _S.FAILED: _S.STARTING},
    # Draining lets requests in flight finish and admits no new ones.
    Operation.DRAIN: {_S.RUNNING: _S.DRAINING},
    # Stop is immediate from every state and changes nothing when already stopped.
    Operation.STOP: {
        _S.STOPPED: _S.STOPPED,
        _S.STARTING: _S.STOPPED,
        _S.RUNNING: _S.STOPPED,
        _S.DRAINING: _S.STOPPED,
        _S.FAILED: _S.STOPPED,
    },
    Operation.REMOVE: {_S.STOPPED: REMOVED},
    Operation.REPLACE: {_S.STOPPED: _S.STOPPED},
}


@dataclass(frozen=True)
class Transition:
    """An allowed operation; ``to_state`` is ``None`` when the service record is deleted."""

    operation: Operation
    from_state: ServiceState
    to_state: ServiceState | None


def parse_operation(value: object, *, field: str = "operation") -> Operation:
    """Only the operations of the table; ``replace`` travels as its own request, not here."""
    allowed = [op.value for op in Operation if op is not Operation.REPLACE]
    if value not in allowed:
        raise InvalidInput(
            f"{field} must be one of {', '.join(allowed)}",
            field=field,
            details={"allowed": allowed},
        )
    return Operation(value)


def allowed_states(operation: Operation) -> list[ServiceState]:
    """The states in which ``operation`` is allowed, in the order of :class:`ServiceState`."""
    table = OPERATION_TABLE[operation]
    return [state for state in ServiceState if state in table]


def plan_operation(state: ServiceState, operation: Operation) -> Transition:
    """The transition ``operation`` makes from ``state``, or Conflict naming the allowed states."""
    table = OPERATION_TABLE[operation]
    if state not in table:
        allowed = [s.value for s in allowed_states(operation)]
        raise Conflict(
            f"{operation.value} is allowed only when the service is {' or '.join(allowed)}; "
            f"it is {state.value}",
            details={"state": state.value, "operation": operation.value, "allowed": allowed},
        )
    return Transition(operation, state, table[state])


class ServiceEvent(StrEnum):
    """What the engines report about a service's replicas."""

    READY = "ready"  # every replica answers its health check
    LAUNCH_FAILED = "launch_failed"  # a replica could not be launched or never became healthy
    CRASHED = "crashed"  # a replica's process ended without being asked to
    DRAINED = "drained"  # the last request in flight of a draining service ended
    INTERRUPTED = "interrupted"  # FICC restarted under the replicas; they were stopped
    RESTARTING = "restarting"  # a replica ended by itself; its restart policy starts it again


EVENT_TABLE: Final[Mapping[ServiceEvent, Mapping[ServiceState, ServiceState]]] = {
    ServiceEvent.READY: {_S.STARTING: _S.RUNNING},
    ServiceEvent.LAUNCH_FAILED: {_S.STARTING: _S.FAILED},
    ServiceEvent.CRASHED: {_S.STARTING: _S.FAILED, _S.RUNNING: _S.FAILED, _S.DRAINING: _S.FAILED},
    ServiceEvent.DRAINED: {_S.DRAINING: _S.STOPPED},
    # Fenced replicas are provably over: the service is stopped, and started again by its
    # desired state when that is running and no earlier attempt's outcome is unknown.
    ServiceEvent.INTERRUPTED: {
        _S.STARTING: _S.STOPPED,
        _S.RUNNING: _S.STOPPED,
        _S.DRAINING: _S.STOPPED,
    },
    # Starting again holds the service's resources through the backoff: it is still active.
    ServiceEvent.RESTARTING: {_S.STARTING: _S.STARTING, _S.RUNNING: _S.STARTING},
}


def apply_event(state: ServiceState, event: ServiceEvent) -> ServiceState:
    """The state after ``event``; an event the state does not expect is stale and changes nothing.

    Stale events are normal: a health check that ends after the user stopped the service, or a
    crash noticed after the stop that caused it.
    """
    return EVENT_TABLE[event].get(state, state)


def admits_requests(state: ServiceState) -> bool:
    """Only a running service takes new inference requests; draining finishes the old ones."""
    return state is ServiceState.RUNNING


# --- desired state and restarts -------------------------------------------------------------


class DesiredState(StrEnum):
    """What the service's owner (or the grant that created it) last asked for, apart from what
    it is: FICC brings a service whose desired state is ``running`` back after its own restart.
    """

    RUNNING = "running"
    STOPPED = "stopped"


DESIRED_AFTER: Final[Mapping[Operation, DesiredState]] = {
    Operation.START: DesiredState.RUNNING,
    Operation.DRAIN: DesiredState.STOPPED,
    Operation.STOP: DesiredState.STOPPED,
}
"""The desired state a control operation records; ``replace`` and ``remove`` keep it."""


def desired_after(operation: Operation, desired: DesiredState) -> DesiredState:
    """The desired state once ``operation`` is accepted."""
    return DESIRED_AFTER.get(operation, desired)


RESTART_FIRST_DELAY_SECONDS: Final = 1.0
RESTART_MAX_DELAY_SECONDS: Final = 300.0
"""The backoff doubles from 1 s to at most 5 minutes between a crash and the next start."""
CRASH_WINDOW_SECONDS: Final = 600.0
MAX_CRASHES_IN_WINDOW: Final = 5
"""Five crashes within 10 minutes end the restarts: the service is ``failed``."""
BACKOFF_RESET_SECONDS: Final = 600.0
"""An engine that ran this long before it crashed starts the backoff again at 1 s."""


@dataclass(frozen=True)
class CrashLoop:
    """A service's recent crashes (those within the window) and the crashes since its engines
    last ran long enough to reset the backoff."""

    crashes: tuple[datetime, ...] = ()
    consecutive: int = 0

    def after_crash(self, now: datetime, running_since: datetime | None) -> CrashLoop:
        """The loop once a crash at ``now`` is counted; ``running_since``: when the service
        last became running (None: it never did since the last start)."""
        window = timedelta(seconds=CRASH_WINDOW_SECONDS)
        recent = (*(t for t in self.crashes if now - t < window), now)
        consecutive = self.consecutive
        if running_since is not None and now - running_since >= timedelta(
            seconds=BACKOFF_RESET_SECONDS
        ):
            consecutive = 0
        return CrashLoop(recent, consecutive + 1)

    @property
    def gives_up(self) -> bool:
        """Too many crashes within the window: no further restart."""
        return len(self.crashes) >= MAX_CRASHES_IN_WINDOW

    def delay_seconds(self) -> float:
        """How long to wait before the next start: 1 s, 2 s, 4 s, … at most 5 minutes."""
        exponent = min(max(self.consecutive - 1, 0), 32)
        return min(RESTART_FIRST_DELAY_SECONDS * 2.0**exponent, RESTART_MAX_DELAY_SECONDS)


@dataclass(frozen=True)
class RestartDecision:
    """What to do after a replica ended by itself: start again after ``delay_seconds``, or not
    (``reason`` says why, for the service's error)."""

    restart: bool
    loop: CrashLoop
    delay_seconds: float = 0.0
    reason: str | None = None


def decide_restart(
    policy: RestartPolicy,
    *,
    clean_exit: bool,
    loop: CrashLoop,
    now: datetime,
    running_since: datetime | None,
) -> RestartDecision:
    """The restart policy and the crash loop's bound applied to one crash at ``now``."""
    if not policy.restarts(clean_exit):
        return RestartDecision(False, loop, reason=f"restart policy is {policy.value}")
    counted = loop.after_crash(now, running_since)
    if counted.gives_up:
        return RestartDecision(
            False,
            counted,
            reason=(
                f"crashed {len(counted.crashes)} times within {int(CRASH_WINDOW_SECONDS)} s; "
                "not restarted again"
            ),
        )
    return RestartDecision(True, counted, delay_seconds=counted.delay_seconds())


# --- replica attempts -----------------------------------------------------------------------


class AttemptState(StrEnum):
    """One try at running one replica, recorded before its process is launched (write-ahead).

    ``unknown``: recorded, but FICC stopped before it recorded a launch or a failure, so whether
    a process was started cannot be proved; a user must acknowledge it before the next start.
    """

    PENDING = "pending"
    LAUNCHED = "launched"
    HEALTHY = "healthy"
    STOPPING = "stopping"
    STOPPED = "stopped"
    CRASHED = "crashed"
    FAILED = "failed"
    UNKNOWN = "unknown"
    ACKNOWLEDGED = "acknowledged"


class AttemptEvent(StrEnum):
    """What happens to an attempt: engine reports, a stop, and FICC's recovery after a restart."""

    LAUNCHED = "launched"  # the process exists; its pid and start time are recorded
    LAUNCH_FAILED = "launch_failed"  # nothing runs: the launch was refused or the process ended
    HEALTHY = "healthy"  # the engine answered its health check
    STOP = "stop"  # FICC asked the process to end
    EXITED = "exited"  # the process ended after FICC asked it to
    CRASHED = "crashed"  # the process ended without being asked to
    RECOVERED = "recovered"  # after a FICC restart: the earlier process was fenced and killed
    LOST = "lost"  # after a FICC restart: the attempt's fate cannot be proved
    ACKNOWLEDGE = "acknowledge"  # a user accepted an unknown outcome


_A = AttemptState

ATTEMPT_TABLE: Final[Mapping[AttemptEvent, Mapping[AttemptState, AttemptState]]] = {
    AttemptEvent.LAUNCHED: {_A.PENDING: _A.LAUNCHED},
    AttemptEvent.LAUNCH_FAILED: {_A.PENDING: _A.FAILED, _A.LAUNCHED: _A.FAILED},
    AttemptEvent.HEALTHY: {_A.LAUNCHED: _A.HEALTHY},
    AttemptEvent.STOP: {_A.LAUNCHED: _A.STOPPING, _A.HEALTHY: _A.STOPPING},
    AttemptEvent.EXITED: {_A.STOPPING: _A.STOPPED},
    AttemptEvent.CRASHED: {
        _A.LAUNCHED: _A.CRASHED,
        _A.HEALTHY: _A.CRASHED,
        _A.STOPPING: _A.STOPPED,
    },
    AttemptEvent.RECOVERED: {
        _A.LAUNCHED: _A.STOPPED,
        _A.HEALTHY: _A.STOPPED,
        _A.STOPPING: _A.STOPPED,
    },
    # Pending: a process may have been started. Launched but not fenced (the runtime could not
    # be reached, or is not installed any more): the process may still run.
    AttemptEvent.LOST: {
        _A.PENDING: _A.UNKNOWN,
        _A.LAUNCHED: _A.UNKNOWN,
        _A.HEALTHY: _A.UNKNOWN,
        _A.STOPPING: _A.UNKNOWN,
    },
    AttemptEvent.ACKNOWLEDGE: {_A.UNKNOWN: _A.ACKNOWLEDGED},
}

ATTEMPT_FINAL_STATES: Final = frozenset(
    {_A.STOPPED, _A.CRASHED, _A.FAILED, _A.UNKNOWN, _A.ACKNOWLEDGED}
)
"""States no engine event leaves; ``unknown`` leaves only by a user's acknowledgement."""


def next_attempt_state(state: AttemptState, event: AttemptEvent) -> AttemptState:
    """The attempt's state after ``event``, or Conflict: a wrong event here is a broken record."""
    table = ATTEMPT_TABLE[event]
    if state not in table:
        raise Conflict(
            f"an attempt in state {state.value} cannot take event {event.value}",
            details={"state": state.value, "event": event.value},
        )
    return table[state]


def recovery_event(state: AttemptState) -> AttemptEvent | None:
    """After a FICC restart: what to record for an attempt found in ``state``.

    An attempt with a recorded process is fenced (killed by pid and start time) and so is
    provably over; a pending one may or may not have started a process: its outcome is unknown.
    """
    if state is _A.PENDING:
        return AttemptEvent.LOST
    if state in {_A.LAUNCHED, _A.HEALTHY, _A.STOPPING}:
        return AttemptEvent.RECOVERED
    return None


def check_start(
    state: ServiceState, attempts: list[AttemptState], *, acknowledge_unknown: bool
) -> Transition:
    """A start is refused while an earlier attempt's outcome is unknown and not acknowledged."""
    transition = plan_operation(state, Operation.START)
    unknown = sum(1 for attempt in attempts if attempt is _A.UNKNOWN)
    if unknown and not acknowledge_unknown:
        raise UnacknowledgedOutcome(
            f"{unknown} earlier replica attempt(s) of this service have an unknown outcome; "
            "inspect the node, then start with acknowledge_unknown set to true",
            details={"unknown_attempts": unknown},
        )
    return transition
