"""Managed inference: the service spec, the service state machine and replica attempts.

Pure rules, no I/O, one module a concept:

- :mod:`.runtimes`: the engines and the options each takes;
- :mod:`.base_urls`: an upstream server's URL, in one canonical spelling;
- :mod:`.spec`: the service spec and its one parse;
- :mod:`.upstream`: the owner's allow-list of upstream servers;
- :mod:`.capacity`: what a service needs of its node and whether it fits;
- :mod:`.states`: the service state machine and the desired state, as tables;
- :mod:`.restarts`: the restart policy and the crash loop's bound;
- :mod:`.attempts`: replica attempts, their table and recovery.

This face names what callers outside the package use; the modules import each other directly.
"""

from __future__ import annotations

from ficc.domain.inference.attempts import (
    ATTEMPT_FINAL_STATES,
    AttemptEvent,
    AttemptState,
    check_start,
    next_attempt_state,
    recovery_event,
)
from ficc.domain.inference.base_urls import parse_base_url
from ficc.domain.inference.capacity import (
    ENGINE_OVERHEAD_BYTES,
    MAX_GRANT_RUNNING_REPLICAS,
    MAX_GRANT_RUNNING_SERVICES,
    Capacity,
    Requirements,
    check_context,
    fit,
    grant_running_shortfall,
    requirements,
)
from ficc.domain.inference.restarts import (
    MAX_CRASHES_IN_WINDOW,
    RESTART_MAX_DELAY_SECONDS,
    CrashLoop,
    RestartDecision,
    RestartPolicy,
    decide_restart,
)
from ficc.domain.inference.runtimes import (
    DEFAULT_LLAMA_CPP_THREADS,
    RuntimeName,
    uses_local_model,
)
from ficc.domain.inference.spec import (
    MAX_REPLICAS,
    ServiceSpec,
    parse_service_spec,
)
from ficc.domain.inference.states import (
    ACTION_TABLE,
    EVENT_TABLE,
    ControlAction,
    DesiredState,
    ServiceEvent,
    ServiceState,
    admits_requests,
    apply_event,
    desired_after,
    parse_control_action,
    plan_action,
)
from ficc.domain.inference.upstream import UpstreamAllowList

__all__ = [
    "ACTION_TABLE",
    "ATTEMPT_FINAL_STATES",
    "DEFAULT_LLAMA_CPP_THREADS",
    "ENGINE_OVERHEAD_BYTES",
    "EVENT_TABLE",
    "MAX_CRASHES_IN_WINDOW",
    "MAX_GRANT_RUNNING_REPLICAS",
    "MAX_GRANT_RUNNING_SERVICES",
    "MAX_REPLICAS",
    "RESTART_MAX_DELAY_SECONDS",
    "AttemptEvent",
    "AttemptState",
    "Capacity",
    "ControlAction",
    "CrashLoop",
    "DesiredState",
    "Requirements",
    "RestartDecision",
    "RestartPolicy",
    "RuntimeName",
    "ServiceEvent",
    "ServiceSpec",
    "ServiceState",
    "UpstreamAllowList",
    "admits_requests",
    "apply_event",
    "check_context",
    "check_start",
    "decide_restart",
    "desired_after",
    "fit",
    "grant_running_shortfall",
    "next_attempt_state",
    "parse_base_url",
    "parse_control_action",
    "parse_service_spec",
    "plan_action",
    "recovery_event",
    "requirements",
    "uses_local_model",
]
