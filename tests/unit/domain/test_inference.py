"""The service spec, the service state machine and replica attempts, cell by cell."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ficc.base.errors import Conflict, InvalidInput, UnacknowledgedOutcome
from ficc.domain.inference import (
    ATTEMPT_FINAL_STATES,
    MAX_CRASHES_IN_WINDOW,
    MAX_REPLICAS,
    RESTART_MAX_DELAY_SECONDS,
    AttemptEvent,
    AttemptState,
    ControlAction,
    CrashLoop,
    DesiredState,
    RestartDecision,
    RestartPolicy,
    RuntimeName,
    ServiceEvent,
    ServiceState,
    admits_requests,
    apply_event,
    check_start,
    decide_restart,
    desired_after,
    next_attempt_state,
    parse_base_url,
    parse_control_action,
    parse_service_spec,
    plan_action,
    recovery_event,
    uses_local_model,
)

MODEL = "mdl_" + "a" * 26
NODE = "nod_" + "b" * 26
GPU_MEMORY = "options.gpu_memory_utilization"


def spec(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"name": "chat", "model": MODEL, "runtime": "llama.cpp"}
    base.update(changes)
    return {key: value for key, value in base.items() if value is not ...}


def refused_field(data: object) -> str:
    with pytest.raises(InvalidInput) as caught:
        parse_service_spec(data)
    field = caught.value.details["field"]
    assert isinstance(field, str)
    assert field in caught.value.message
    return field


# --- the spec -------------------------------------------------------------------------------


def test_a_minimal_llama_cpp_spec_gets_one_replica_the_local_node_and_default_options() -> None:
    parsed = parse_service_spec(spec())
    assert parsed.to_json() == {
        "name": "chat",
        "model": MODEL,
        "runtime": "llama.cpp",
        "node": None,
        "replicas": 1,
        "options": {"n_threads": 1, "n_ctx": 2048, "n_gpu_layers": 0},
        "restart": "on-failure",
    }


def test_a_full_llama_cpp_spec_keeps_every_given_value() -> None:
    options = {"n_threads": 2, "n_ctx": 4096, "n_batch": 256, "n_gpu_layers": 10, "seed": 7}
    parsed = parse_service_spec(spec(node=NODE, replicas=MAX_REPLICAS, options=options))
    assert parsed.node == NODE
    assert parsed.replicas == MAX_REPLICAS
    assert dict(parsed.options) == options
    assert parsed.runtime is RuntimeName.LLAMA_CPP


def test_an_openai_spec_names_the_upstream_model_and_stores_its_base_url_without_v1() -> None:
    parsed = parse_service_spec(
        spec(runtime="openai", model="gpt-4o mini", options={"base_url": "https://x.test/v1/"})
    )
    assert parsed.model == "gpt-4o mini"
    assert parsed.options == {"base_url": "https://x.test"}


def test_a_vllm_spec_gets_its_defaults_and_keeps_a_float_option_as_float() -> None:
    parsed = parse_service_spec(spec(runtime="vllm", options={"gpu_memory_utilization": 1 - 0.5}))
    assert parsed.options == {
        "tensor_parallel_size": 1,
        "dtype": "auto",
        "enforce_eager": False,
        "gpu_memory_utilization": 0.5,
    }


def test_only_openai_services_have_no_local_model() -> None:
    assert [r for r in RuntimeName if not uses_local_model(r)] == [RuntimeName.OPENAI]


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (spec(colour="red"), "colour"),
        (spec(name=...), "name"),
        (spec(model=...), "model"),
        (spec(runtime=...), "runtime"),
        (spec(name=""), "name"),
        (spec(name="-chat"), "name"),
        (spec(name="a" * 64), "name"),
        (spec(name="chat/1"), "name"),
        (spec(name="chat\n"), "name"),
        (spec(name=5), "name"),
        (spec(runtime="tgi"), "runtime"),
        (spec(runtime=["llama.cpp"]), "runtime"),
        (spec(model="SmolLM2"), "model"),
        (spec(model="mdl_short"), "model"),
        (spec(runtime="vllm", model="svc_" + "a" * 26), "model"),
        (spec(runtime="openai", model="", options={"base_url": "http://x"}), "model"),
        (spec(runtime="openai", model=" lead", options={"base_url": "http://x"}), "model"),
        (spec(runtime="openai", model="x\n", options={"base_url": "http://x"}), "model"),
        (spec(runtime="openai", model="m" * 257, options={"base_url": "http://x"}), "model"),
        (spec(node="local"), "node"),
        (spec(replicas=0), "replicas"),
        (spec(replicas=MAX_REPLICAS + 1), "replicas"),
        (spec(replicas=True), "replicas"),
        (spec(replicas="2"), "replicas"),
        (spec(replicas=1.0), "replicas"),
        (spec(options=[]), "options"),
        (spec(options={"base_url": "http://x"}), "options.base_url"),
        (spec(options={"n_threads": 0}), "options.n_threads"),
        (spec(options={"n_threads": 257}), "options.n_threads"),
        (spec(options={"n_threads": True}), "options.n_threads"),
        (spec(options={"n_ctx": 64}), "options.n_ctx"),
        (spec(options={"n_gpu_layers": -1}), "options.n_gpu_layers"),
        (spec(options={"seed": 2**32}), "options.seed"),
        (spec(runtime="openai", model="m"), "options.base_url"),
        (spec(runtime="openai", model="m", options={"base_url": "ftp://x"}), "options.base_url"),
        (spec(runtime="vllm", options={"n_threads": 1}), "options.n_threads"),
        (spec(runtime="vllm", options={"dtype": "int4"}), "options.dtype"),
        (spec(runtime="vllm", options={"enforce_eager": 1}), "options.enforce_eager"),
        (spec(runtime="vllm", options={"gpu_memory_utilization": 1.0}), GPU_MEMORY),
        (spec(runtime="vllm", options={"gpu_memory_utilization": float("nan")}), GPU_MEMORY),
        (spec(runtime="vllm", options={"gpu_memory_utilization": True}), GPU_MEMORY),
        (spec(runtime="vllm", options={"tensor_parallel_size": 0}), "options.tensor_parallel_size"),
    ],
)  # fmt: skip
def test_a_refused_spec_names_the_field_that_broke_the_rule(data: object, field: str) -> None:
    assert refused_field(data) == field


def test_a_spec_that_is_not_an_object_is_refused() -> None:
    assert refused_field(["chat"]) == "spec"


def test_an_out_of_range_option_states_the_allowed_range() -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_service_spec(spec(options={"n_threads": 0}))
    assert caught.value.message == "options.n_threads must be an integer from 1 to 256"
    assert caught.value.details == {"field": "options.n_threads", "minimum": 1, "maximum": 256}


def test_an_unknown_option_is_refused_with_the_runtimes_options_listed() -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_service_spec(spec(runtime="openai", model="m", options={"api_key": "k"}))
    assert caught.value.details["allowed"] == ["base_url"]
    assert "runtime openai" in caught.value.message


@pytest.mark.parametrize(
    ("url", "stored"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000"),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000"),
        ("https://Example.test/llm/v1/", "https://example.test/llm"),
        ("http://[::1]:9000/v1", "http://[::1]:9000"),
    ],
)
def test_a_base_url_is_stored_as_the_servers_root(url: str, stored: str) -> None:
    assert parse_base_url("options.base_url", url) == stored


@pytest.mark.parametrize(
    "url",
    [
        "",
        "127.0.0.1:8000",
        "file:///etc/passwd",
        "http://",
        "http://user:secret@host",
        "http://host/?q=1",
        "http://host/#top",
        "http://host:99999",
        "http://host/a b",
        "http://host/\x00",
        "http://" + "h" * 2050,
        42,
    ],
)
def test_a_base_url_that_is_not_a_plain_http_url_is_refused(url: object) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_base_url("options.base_url", url)
    assert caught.value.details["field"] == "options.base_url"


# --- the service state machine --------------------------------------------------------------

St = ServiceState
Act = ControlAction

EXPECTED_ACTIONS: dict[tuple[ServiceState, ControlAction], ServiceState | type[Conflict] | None] = {
    (St.STOPPED, Act.START): St.STARTING,
    (St.STARTING, Act.START): Conflict,
    (St.RUNNING, Act.START): Conflict,
    (St.DRAINING, Act.START): Conflict,
    (St.FAILED, Act.START): St.STARTING,
    (St.STOPPED, Act.DRAIN): Conflict,
    (St.STARTING, Act.DRAIN): Conflict,
    (St.RUNNING, Act.DRAIN): St.DRAINING,
    (St.DRAINING, Act.DRAIN): Conflict,
    (St.FAILED, Act.DRAIN): Conflict,
    (St.STOPPED, Act.STOP): St.STOPPED,
    (St.STARTING, Act.STOP): St.STOPPED,
    (St.RUNNING, Act.STOP): St.STOPPED,
    (St.DRAINING, Act.STOP): St.STOPPED,
    (St.FAILED, Act.STOP): St.STOPPED,
    (St.STOPPED, Act.REMOVE): None,
    (St.STARTING, Act.REMOVE): Conflict,
    (St.RUNNING, Act.REMOVE): Conflict,
    (St.DRAINING, Act.REMOVE): Conflict,
    (St.FAILED, Act.REMOVE): Conflict,
    (St.STOPPED, Act.REPLACE): St.STOPPED,
    (St.STARTING, Act.REPLACE): Conflict,
    (St.RUNNING, Act.REPLACE): Conflict,
    (St.DRAINING, Act.REPLACE): Conflict,
    (St.FAILED, Act.REPLACE): Conflict,
}


def test_the_expected_action_table_covers_every_state_and_action() -> None:
    assert set(EXPECTED_ACTIONS) == {(s, o) for s in ServiceState for o in ControlAction}


@pytest.mark.parametrize(("state", "action"), list(EXPECTED_ACTIONS))
def test_each_action_moves_a_service_as_the_table_says(
    state: ServiceState, action: ControlAction
) -> None:
    expected = EXPECTED_ACTIONS[(state, action)]
    if expected is Conflict:
        with pytest.raises(Conflict) as caught:
            plan_action(state, action)
        assert caught.value.details["state"] == state.value
        assert caught.value.details["operation"] == action.value
        assert f"it is {state.value}" in caught.value.message
    else:
        transition = plan_action(state, action)
        assert (transition.from_state, transition.to_state) == (state, expected)


def test_remove_is_refused_naming_stopped_as_the_only_allowed_state() -> None:
    with pytest.raises(Conflict) as caught:
        plan_action(ServiceState.RUNNING, ControlAction.REMOVE)
    assert caught.value.message == (
        "remove is allowed only when the service is stopped; it is running"
    )
    assert caught.value.details["allowed"] == ["stopped"]


@pytest.mark.parametrize("name", ["start", "drain", "stop", "remove"])
def test_the_control_actions_are_parsed_by_name(name: str) -> None:
    assert parse_control_action(name).value == name


@pytest.mark.parametrize("name", ["replace", "restart", "", None, 1])
def test_anything_but_a_control_action_is_refused(name: object) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_control_action(name)
    assert caught.value.details["allowed"] == ["start", "drain", "stop", "remove"]


Ev = ServiceEvent

EXPECTED_EVENTS: dict[tuple[ServiceState, ServiceEvent], ServiceState] = {
    (St.STOPPED, Ev.READY): St.STOPPED,
    (St.STARTING, Ev.READY): St.RUNNING,
    (St.RUNNING, Ev.READY): St.RUNNING,
    (St.DRAINING, Ev.READY): St.DRAINING,
    (St.FAILED, Ev.READY): St.FAILED,
    (St.STOPPED, Ev.LAUNCH_FAILED): St.STOPPED,
    (St.STARTING, Ev.LAUNCH_FAILED): St.FAILED,
    (St.RUNNING, Ev.LAUNCH_FAILED): St.RUNNING,
    (St.DRAINING, Ev.LAUNCH_FAILED): St.DRAINING,
    (St.FAILED, Ev.LAUNCH_FAILED): St.FAILED,
    (St.STOPPED, Ev.CRASHED): St.STOPPED,
    (St.STARTING, Ev.CRASHED): St.FAILED,
    (St.RUNNING, Ev.CRASHED): St.FAILED,
    (St.DRAINING, Ev.CRASHED): St.FAILED,
    (St.FAILED, Ev.CRASHED): St.FAILED,
    (St.STOPPED, Ev.DRAINED): St.STOPPED,
    (St.STARTING, Ev.DRAINED): St.STARTING,
    (St.RUNNING, Ev.DRAINED): St.RUNNING,
    (St.DRAINING, Ev.DRAINED): St.STOPPED,
    (St.FAILED, Ev.DRAINED): St.FAILED,
    (St.STOPPED, Ev.INTERRUPTED): St.STOPPED,
    (St.STARTING, Ev.INTERRUPTED): St.STOPPED,
    (St.RUNNING, Ev.INTERRUPTED): St.STOPPED,
    (St.DRAINING, Ev.INTERRUPTED): St.STOPPED,
    (St.FAILED, Ev.INTERRUPTED): St.FAILED,
    (St.STOPPED, Ev.RESTARTING): St.STOPPED,
    (St.STARTING, Ev.RESTARTING): St.STARTING,
    (St.RUNNING, Ev.RESTARTING): St.STARTING,
    (St.DRAINING, Ev.RESTARTING): St.DRAINING,
    (St.FAILED, Ev.RESTARTING): St.FAILED,
}


def test_the_expected_event_table_covers_every_state_and_event() -> None:
    assert set(EXPECTED_EVENTS) == {(s, e) for s in ServiceState for e in ServiceEvent}


@pytest.mark.parametrize(("state", "event"), list(EXPECTED_EVENTS))
def test_each_engine_event_moves_a_service_as_the_table_says_and_stale_ones_change_nothing(
    state: ServiceState, event: ServiceEvent
) -> None:
    assert apply_event(state, event) is EXPECTED_EVENTS[(state, event)]


@pytest.mark.parametrize("state", list(ServiceState))
def test_only_a_running_service_admits_new_requests(state: ServiceState) -> None:
    assert admits_requests(state) is (state is ServiceState.RUNNING)


@given(
    st.lists(st.one_of(st.sampled_from(list(ControlAction)), st.sampled_from(list(ServiceEvent))))
)
def test_any_sequence_of_actions_and_events_keeps_a_service_in_a_known_state(
    steps: list[ControlAction | ServiceEvent],
) -> None:
    state = ServiceState.STOPPED
    for step in steps:
        if isinstance(step, ServiceEvent):
            state = apply_event(state, step)
            continue
        try:
            transition = plan_action(state, step)
        except Conflict:
            continue
        if transition.to_state is None:
            assert state is ServiceState.STOPPED
            return
        state = transition.to_state
        assert state in ServiceState


# --- replica attempts -----------------------------------------------------------------------

A = AttemptState
E = AttemptEvent

EXPECTED_ATTEMPTS: dict[tuple[AttemptEvent, AttemptState], AttemptState] = {
    (E.LAUNCHED, A.PENDING): A.LAUNCHED,
    (E.LAUNCH_FAILED, A.PENDING): A.FAILED,
    (E.LAUNCH_FAILED, A.LAUNCHED): A.FAILED,
    (E.HEALTHY, A.LAUNCHED): A.HEALTHY,
    (E.STOP, A.LAUNCHED): A.STOPPING,
    (E.STOP, A.HEALTHY): A.STOPPING,
    (E.EXITED, A.STOPPING): A.STOPPED,
    (E.CRASHED, A.LAUNCHED): A.CRASHED,
    (E.CRASHED, A.HEALTHY): A.CRASHED,
    (E.CRASHED, A.STOPPING): A.STOPPED,
    (E.RECOVERED, A.LAUNCHED): A.STOPPED,
    (E.RECOVERED, A.HEALTHY): A.STOPPED,
    (E.RECOVERED, A.STOPPING): A.STOPPED,
    (E.LOST, A.PENDING): A.UNKNOWN,
    (E.LOST, A.LAUNCHED): A.UNKNOWN,
    (E.LOST, A.HEALTHY): A.UNKNOWN,
    (E.LOST, A.STOPPING): A.UNKNOWN,
    (E.ACKNOWLEDGE, A.UNKNOWN): A.ACKNOWLEDGED,
}

ALL_ATTEMPT_CELLS = [(e, s) for e in AttemptEvent for s in AttemptState]


@pytest.mark.parametrize(("event", "state"), ALL_ATTEMPT_CELLS)
def test_each_attempt_event_is_allowed_only_where_the_table_says(
    event: AttemptEvent, state: AttemptState
) -> None:
    expected = EXPECTED_ATTEMPTS.get((event, state))
    if expected is None:
        with pytest.raises(Conflict) as caught:
            next_attempt_state(state, event)
        assert caught.value.details == {"state": state.value, "event": event.value}
    else:
        assert next_attempt_state(state, event) is expected


@pytest.mark.parametrize("state", sorted(ATTEMPT_FINAL_STATES - {AttemptState.UNKNOWN}))
def test_a_final_attempt_state_takes_no_event(state: AttemptState) -> None:
    assert not [e for e in AttemptEvent if (e, state) in EXPECTED_ATTEMPTS]


def test_an_unknown_attempt_leaves_only_by_acknowledgement() -> None:
    assert [e for e in AttemptEvent if (e, AttemptState.UNKNOWN) in EXPECTED_ATTEMPTS] == [
        AttemptEvent.ACKNOWLEDGE
    ]


@pytest.mark.parametrize(
    ("state", "event"),
    [
        (A.PENDING, E.LOST),
        (A.LAUNCHED, E.RECOVERED),
        (A.HEALTHY, E.RECOVERED),
        (A.STOPPING, E.RECOVERED),
        (A.STOPPED, None),
        (A.CRASHED, None),
        (A.FAILED, None),
        (A.UNKNOWN, None),
        (A.ACKNOWLEDGED, None),
    ],
)
def test_after_a_restart_a_pending_attempt_becomes_unknown_and_a_launched_one_is_fenced(
    state: AttemptState, event: AttemptEvent | None
) -> None:
    assert recovery_event(state) is event
    if event is not None:
        next_attempt_state(state, event)


def test_a_start_is_refused_while_an_attempts_outcome_is_unknown() -> None:
    attempts = [AttemptState.STOPPED, AttemptState.UNKNOWN]
    with pytest.raises(UnacknowledgedOutcome) as caught:
        check_start(ServiceState.FAILED, attempts, acknowledge_unknown=False)
    assert caught.value.code == "unknown_outcome"
    assert caught.value.details == {"unknown_attempts": 1}
    assert "acknowledge_unknown" in caught.value.message


def test_an_acknowledged_unknown_outcome_lets_the_service_start() -> None:
    attempts = [AttemptState.UNKNOWN]
    transition = check_start(ServiceState.STOPPED, attempts, acknowledge_unknown=True)
    assert transition.to_state is ServiceState.STARTING


def test_a_start_checks_the_service_state_before_the_attempts() -> None:
    with pytest.raises(Conflict) as caught:
        check_start(ServiceState.RUNNING, [], acknowledge_unknown=False)
    assert not isinstance(caught.value, UnacknowledgedOutcome)


# --- desired state and restart policies -----------------------------------------------------


def test_a_spec_takes_a_restart_policy_on_failure_by_default() -> None:
    assert parse_service_spec(spec()).restart is RestartPolicy.ON_FAILURE
    assert parse_service_spec(spec(restart="always")).to_json()["restart"] == "always"
    assert parse_service_spec(spec(restart="never")).restart is RestartPolicy.NEVER


@pytest.mark.parametrize("value", ["sometimes", "", None, True, 1, ["always"]])
def test_a_restart_policy_outside_the_three_is_refused_naming_the_field(value: object) -> None:
    assert refused_field(spec(restart=value)) == "restart"


def test_start_records_desired_running_and_stop_or_drain_desired_stopped() -> None:
    assert desired_after(ControlAction.START, DesiredState.STOPPED) is DesiredState.RUNNING
    assert desired_after(ControlAction.STOP, DesiredState.RUNNING) is DesiredState.STOPPED
    assert desired_after(ControlAction.DRAIN, DesiredState.RUNNING) is DesiredState.STOPPED
    assert desired_after(ControlAction.REPLACE, DesiredState.RUNNING) is DesiredState.RUNNING


@pytest.mark.parametrize(
    ("policy", "clean", "restarts"),
    [
        (RestartPolicy.ON_FAILURE, False, True),
        (RestartPolicy.ON_FAILURE, True, False),
        (RestartPolicy.ALWAYS, False, True),
        (RestartPolicy.ALWAYS, True, True),
        (RestartPolicy.NEVER, False, False),
        (RestartPolicy.NEVER, True, False),
    ],
)
def test_each_policy_restarts_the_ends_it_names(
    policy: RestartPolicy, clean: bool, restarts: bool
) -> None:
    decision = decide_restart(
        policy, clean_exit=clean, loop=CrashLoop(), now=T0, running_since=None
    )
    assert decision.restart is restarts


T0 = datetime(2026, 1, 1, tzinfo=UTC)


def crash_at(
    loop: CrashLoop, seconds: float, running_since: float | None = None
) -> RestartDecision:
    return decide_restart(
        RestartPolicy.ON_FAILURE,
        clean_exit=False,
        loop=loop,
        now=T0 + timedelta(seconds=seconds),
        running_since=None if running_since is None else T0 + timedelta(seconds=running_since),
    )


def test_the_backoff_doubles_from_one_second_and_the_fifth_crash_in_ten_minutes_fails() -> None:
    loop, at, delays = CrashLoop(), 0.0, []
    for _ in range(MAX_CRASHES_IN_WINDOW - 1):
        decision = crash_at(loop, at)
        assert decision.restart
        delays.append(decision.delay_seconds)
        loop, at = decision.loop, at + decision.delay_seconds
    assert delays == [1.0, 2.0, 4.0, 8.0]
    last = crash_at(loop, at)
    assert not last.restart
    assert last.reason == "crashed 5 times within 600 s; not restarted again"


def test_crashes_older_than_ten_minutes_no_longer_count_but_the_backoff_grows_to_five_minutes() -> (
    None
):
    loop, at, delays = CrashLoop(), 0.0, []
    for _ in range(12):
        decision = crash_at(loop, at, running_since=at - 179)  # 3 minutes of running each time
        assert decision.restart
        delays.append(decision.delay_seconds)
        loop, at = decision.loop, at + decision.delay_seconds + 180
    assert delays[:9] == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert delays[9:] == [RESTART_MAX_DELAY_SECONDS] * 3


def test_ten_minutes_of_running_start_the_backoff_again_at_one_second() -> None:
    first = crash_at(CrashLoop(), 0)
    second = crash_at(first.loop, 1)
    assert second.delay_seconds == 2
    third = crash_at(second.loop, 2000, running_since=1400)
    assert third.restart
    assert third.delay_seconds == 1
