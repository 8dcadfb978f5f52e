"""The web console in a real headless Chromium, against two real clusters over HyperNet.

alpha requests, beta grants. Each test drives the pages as a person would (clicks, typing,
confirmation dialogs) and then checks, through the API, that exactly what the page showed
happened: the grant approval created, the revocation, the transfer's bytes, the service's state.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from playwright.sync_api import BrowserContext, Dialog, Page, expect
from tests.support.cluster import RunningCluster, ficc
from tests.support.console import (
    DESKTOP,
    PHONE,
    UI_DEADLINE_MS,
    accessibility_problems,
    describe,
    screenshot,
    sign_in,
)
from tests.support.federation import (
    API,
    grant_in,
    identity,
    offer_in,
    ok,
    overview,
    pair,
    refresh,
    send_offer,
)
from tests.support.inference import add_model, get, spec, start_running, wait_for_state
from tests.support.metering import PLAIN_TEXT
from tests.support.tiny_gguf import write_tiny_gguf
from tests.support.transfers import (
    TRANSFER_SCOPES,
    Clusters,
    MiB,
    generated_model,
    local_model,
    show,
    transfer_grant,
    wait_until,
)

from ficc.web.console import SCOPE_WORDS, fingerprint, grouped

TRANSFER_SIZE = 96 * MiB
SIDEWAYS = "document.documentElement.scrollWidth - document.documentElement.clientWidth"
"""How far a page scrolls sideways (more than 0: it does not fit its width)."""
PAIRING_SCOPES = ["discover", *TRANSFER_SCOPES]


def _page(new_context: Any, viewport: dict[str, int] = DESKTOP) -> Page:
    context: BrowserContext = new_context(viewport=viewport)
    page = context.new_page()
    page.set_default_timeout(UI_DEADLINE_MS)
    return page


def _accept(page: Page, expected: str) -> list[str]:
    """Accept the next confirmation dialog; the list receives its message."""
    seen: list[str] = []

    def answer(dialog: Dialog) -> None:
        seen.append(dialog.message)
        assert expected in dialog.message
        dialog.accept()

    page.once("dialog", answer)
    return seen


def _paired_peers(clusters: Clusters) -> tuple[str, str]:
    """(alpha's peer ID for beta, beta's peer ID for alpha); pairs through the API if needed."""
    beta_id = identity(clusters.beta)["hypernet_id"]
    for peer in overview(clusters.alpha.owner())["peers"]:
        if peer["hypernet_id"] == beta_id and peer["state"] == "paired":
            alpha_id = identity(clusters.alpha)["hypernet_id"]
            theirs = next(
                p
                for p in overview(clusters.beta.owner())["peers"]
                if p["hypernet_id"] == alpha_id and p["state"] == "paired"
            )
            return peer["id"], theirs["id"]
    pairing = pair(clusters.alpha, clusters.beta, scopes=PAIRING_SCOPES)
    return pairing.requester_peer, pairing.service_peer


def test_an_offer_is_reviewed_approved_finished_revoked_and_retired(
    clusters: Clusters, new_context: Any, tmp_path: Path
) -> None:
    alpha, beta = clusters.alpha, clusters.beta
    model = generated_model(beta, tmp_path / "small", "small", [64 * 1024])
    offer = send_offer(alpha.owner(), beta, PAIRING_SCOPES)
    requester = identity(alpha)

    # beta reviews: who asks, with which key, for what, and the grant approval will create.
    page = _page(new_context)
    sign_in(page, beta, "/ui/p/default/federation")
    page.locator(f"#row-{offer['id']}").get_by_role("link", name="Review").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Review offer")
    expect(page.locator("#offer-label")).to_have_text("alpha-lab")
    expect(page.locator("#offer-fingerprint")).to_have_text(fingerprint(requester["cluster_key"]))
    expect(page.locator("#offer-hypernet-id")).to_have_text(grouped(requester["hypernet_id"]))
    for scope in PAIRING_SCOPES:
        expect(page.get_by_text(SCOPE_WORDS[scope])).to_be_visible()
        expect(page.get_by_role("checkbox", name=scope, exact=True)).to_be_checked()
    expect(page.get_by_label("Total requests")).to_have_value("1000")
    expect(page.get_by_label("Concurrent requests")).to_have_value("2")
    assert accessibility_problems(page) == [], describe(accessibility_problems(page))
    page.get_by_role("checkbox", name="discover", exact=True).uncheck()
    page.get_by_label("Total requests").fill("50")
    page.get_by_label("Model transfer allowance (bytes)").fill(str(4 * MiB))
    page.get_by_role("checkbox", name=re.compile(model["id"])).check()
    screenshot(page, "offer-review")
    page.get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator("#console-status")).to_contain_text("Receipt digest")
    expect(page.locator("#offer-state")).to_have_text("approved")
    digest = "".join(page.locator("#receipt-digest").inner_text().split())
    assert re.fullmatch(r"[0-9a-f]{64}", digest), digest
    signed = _terms(page)  # the approver sees the grant it signed, not only its ID
    assert (signed["Total requests"], signed["Models"]) == ("50", model["id"])
    assert signed["Model transfer allowance"] == "4.0 MiB"

    given = grant_in(
        overview(beta.owner()), offer_in(overview(beta.owner()), offer["id"])["receipt"]["grant"]
    )  # type: ignore[index]
    assert given is not None
    assert given["scopes"] == ["models:read", "models:transfer"]
    assert given["models"] == [model["id"]]
    assert (given["requests"], given["transfer_bytes"], given["concurrent"]) == (50, 4 * MiB, 2)
    assert given["state"] == "active"

    # alpha finishes with the digest beta's approver read out (typed with its spaces).
    other = _page(new_context)
    sign_in(other, alpha, f"/ui/p/default/offers/{offer['id']}")
    expect(other.get_by_role("heading", level=1)).to_have_text("Finish offer")
    # The requester reads the terms it accepts, the same as the approver signed; the digest
    # it must type is nowhere on its page, so the read-aloud check cannot become a copy.
    accepting = _terms(other)
    assert _without_lifetime(accepting) == _without_lifetime(signed)
    assert "".join(other.locator("body").inner_text().split()).find(digest) == -1
    assert digest[:8] not in other.content()
    expect(other.locator("#receipt-digest")).to_have_count(0)
    assert accessibility_problems(other) == [], describe(accessibility_problems(other))
    screenshot(other, "offer-finish")
    other.get_by_label("Receipt digest the other cluster's approver read to you").fill(
        grouped(digest)
    )
    other.get_by_role("button", name="Finish", exact=True).click()
    expect(other.locator("#console-status")).to_contain_text("Pairing finished")
    assert any(p["state"] == "paired" for p in overview(alpha.owner())["peers"])

    # beta revokes: a dismissed confirmation changes nothing, an accepted one revokes.
    page.goto(f"{beta.url}/ui/p/default/federation")
    screenshot(page, "federation")
    row = page.locator(f"#row-{given['id']}")
    page.once("dialog", lambda dialog: dialog.dismiss())
    row.get_by_role("button", name="Revoke", exact=True).click()
    expect(row.get_by_role("button", name="Revoke", exact=True)).to_be_visible()
    assert grant_in(overview(beta.owner()), given["id"])["state"] == "active"  # type: ignore[index]
    seen = _accept(page, "Revoke this grant?")
    row.get_by_role("button", name="Revoke", exact=True).click()
    expect(row.locator(".state")).to_have_text("revoked")
    assert seen
    # Ended reads as ended: a grey bar, when it was revoked, and no "expires in".
    expect(row.locator("meter").first).to_have_class("ended")
    expect(row).to_contain_text("revoked at")
    expect(row).not_to_contain_text("expires")
    revoked = grant_in(overview(beta.owner()), given["id"])
    assert revoked is not None
    assert (revoked["state"], revoked["in_flight"]) == ("revoked", 0)

    page.goto(f"{beta.url}/ui/p/default/grants/{given['id']}")
    expect(page.locator("#grant-state")).to_have_text("revoked")
    expect(page.locator("#grant-expires")).to_contain_text("revoked at")
    expect(page.locator("main")).not_to_contain_text("expires")
    expect(page.locator("meter.ended")).to_have_count(2)
    assert accessibility_problems(page) == [], describe(accessibility_problems(page))
    screenshot(page, "grant")
    _accept(page, "Retire this grant?")
    page.get_by_role("button", name="Retire", exact=True).click()
    expect(page.locator("#grant-state")).to_have_text("retired")
    expect(page.locator("#grant-expires")).to_contain_text("revoked at")
    assert grant_in(overview(beta.owner()), given["id"])["state"] == "retired"  # type: ignore[index]


def _terms(page: Page) -> dict[str, str]:
    """The grant terms the page shows (``#grant-terms``), each term with its words."""
    found = page.locator("#grant-terms").evaluate(
        """dl => Object.fromEntries([...dl.querySelectorAll("dt")].map(
            dt => [dt.textContent.trim(), dt.nextElementSibling.textContent.trim()]))"""
    )
    assert isinstance(found, dict)
    return {str(term): " ".join(str(words).split()) for term, words in found.items()}


def _without_lifetime(terms: dict[str, str]) -> dict[str, str]:
    """The terms without the lifetime line, whose "expires in …" counts down between pages."""
    return {term: words for term, words in terms.items() if term != "Lifetime"}


def test_a_transfer_bar_moves_live_and_pauses_and_resumes(
    clusters: Clusters, new_context: Any, tmp_path: Path
) -> None:
    alpha, beta = clusters.alpha, clusters.beta
    requester_peer, service_peer = _paired_peers(clusters)
    model = generated_model(beta, tmp_path / "big", "big", [TRANSFER_SIZE])
    body = transfer_grant([model["id"]], 2 * TRANSFER_SIZE)
    grant = ok(beta.owner().post(f"{API}/peers/{service_peer}/grants", json=body), 201)

    # alpha learns of the new grant and selects it in the console.
    page = _page(new_context)
    sign_in(page, alpha, "/ui/p/default/federation")
    page.locator(f"#row-{requester_peer}").get_by_role("button", name="Refresh").click()
    row = page.locator(f"#row-{grant['id']}")
    row.get_by_role("button", name="Select", exact=True).click()
    expect(row).to_contain_text("selected")
    assert overview(alpha.owner())["peers"][0]["selected"] == grant["id"]

    started = ok(
        alpha.owner().post(f"{API}/peers/{requester_peer}/models", json={"model": model["id"]}),
        202,
    )
    transfer_id = started["id"]
    page.goto(f"{alpha.url}/ui/p/default/transfers")
    bar = page.locator(f"#progress-{transfer_id}")
    card = page.locator(f"#transfer-{transfer_id}")
    # The bar moves without a page load: the section polls itself while the transfer runs.
    page.evaluate("window.ficcLoaded = true")
    first = _bar_value_above(page, transfer_id, 0)
    _bar_value_above(page, transfer_id, first)
    assert page.evaluate("window.ficcLoaded") is True  # the same document all along

    card.get_by_role("button", name="Pause", exact=True).click()
    expect(card.locator(".transfer-state")).to_have_text("paused")
    paused = show(alpha.owner(), transfer_id)
    assert paused["state"] == "paused"
    assert 0 < paused["bytes_done"] < TRANSFER_SIZE
    expect(bar).to_have_attribute("value", str(paused["bytes_done"]))
    screenshot(page, "transfers")

    card.get_by_role("button", name="Resume", exact=True).click()
    expect(card.locator(".transfer-state")).to_have_text("complete", timeout=90_000)
    done = wait_until(alpha.owner(), transfer_id, ("complete",))
    assert done["bytes_done"] == TRANSFER_SIZE
    assert local_model(alpha, done["local_model"])["sha256"] == model["sha256"]
    expect(bar).to_have_attribute("value", str(TRANSFER_SIZE))


def _bar_value_above(page: Page, transfer_id: str, floor: int) -> int:
    """Wait until the page's bar shows more than ``floor`` bytes; the value it shows then."""
    handle = page.wait_for_function(
        """([id, floor]) => {
            const bar = document.getElementById("progress-" + id);
            return bar && Number(bar.getAttribute("value")) > floor
                ? Number(bar.getAttribute("value")) : false;
        }""",
        arg=[transfer_id, floor],
        timeout=60_000,
    )
    value = handle.json_value()
    assert isinstance(value, int | float)
    assert value < TRANSFER_SIZE, "the transfer finished before the page saw it move"
    return int(value)


def test_a_service_starts_and_stops_with_its_state_shown_live(
    clusters: Clusters, new_context: Any, tmp_path: Path
) -> None:
    alpha = clusters.alpha
    path = write_tiny_gguf(tmp_path / "tiny.gguf")
    added = ficc("model-add", "--name", "tiny", str(path), state_dir=alpha.state_dir)
    assert added.returncode == 0, added.stderr
    spec = {"name": "console-tiny", "model": _model_id(added.stdout), "runtime": "llama.cpp"}
    service = ok(alpha.owner().post("/api/v1/inference/services", json=spec), 201)

    page = _page(new_context)
    sign_in(page, alpha, "/ui/p/default/services")
    row = page.locator(f"#row-{service['id']}")
    expect(row.locator(".service-state")).to_have_text("stopped")
    row.get_by_role("button", name="Start", exact=True).click()
    expect(row.locator(".service-state")).to_have_text("running", timeout=90_000)
    assert get(alpha.owner(), service["id"])["state"] == "running"
    screenshot(page, "services")

    _accept(page, "Stop this service?")
    row.get_by_role("button", name="Stop", exact=True).click()
    expect(row.locator(".service-state")).to_have_text("stopped", timeout=60_000)
    wait_for_state(alpha.owner(), service["id"], "stopped")


def _model_id(stdout: str) -> str:
    return str(json.loads(stdout)["id"])


def test_a_restricted_token_a_route_and_a_metered_grant_show_what_they_allow_and_what_is_left(
    clusters: Clusters, new_context: Any, tmp_path: Path
) -> None:
    alpha, beta = clusters.alpha, clusters.beta
    requester_peer, service_peer = _paired_peers(clusters)
    model = add_model(beta, "chat", write_tiny_gguf(tmp_path / "chat.gguf"))
    service = start_running(beta.owner(), spec("console-chat", model))
    route = {"name": "console-route", "policy": "priority", "targets": [{"service": service["id"]}]}
    made_route = ok(beta.owner().post("/api/v1/inference/routes", json=route), 201)
    terms = {"scopes": ["inference:invoke"], "services": [service["id"]], "tokens": 1000}
    grant = ok(beta.owner().post(f"{API}/peers/{service_peer}/grants", json=terms), 201)
    ok(refresh(alpha.owner(), requester_peer))
    ok(refresh(alpha.owner(), requester_peer, grant=grant["id"]))

    # alpha's owner mints a token for beta alone with a budget of its own, through the form.
    page = _page(new_context)
    sign_in(page, alpha, "/ui/p/default/tokens")
    page.get_by_role("checkbox", name="federation:invoke", exact=True).check()
    page.get_by_role("checkbox", name="inference:invoke", exact=True).check()
    page.get_by_label("Peers it may call (peer IDs, one a line)").fill(requester_peer)
    page.get_by_label("Tokens in all (prompt + completion)").fill("500")
    page.get_by_role("button", name="Create token", exact=True).click()
    secret_field = page.locator("#token-secret")
    expect(secret_field).to_have_value(re.compile(r"^ficc_"))
    secret = secret_field.input_value()
    minted = next(t for t in ok(alpha.owner().get("/api/v1/tokens"))["tokens"] if t["peers"])
    assert (minted["peers"], minted["tokens"]) == ([requester_peer], 500)

    # The token calls beta's service under the grant; its row and the grant's pages show it.
    answer = alpha.client().post(
        f"{API}/peers/{requester_peer}/v1/chat/completions",
        json={
            "model": service["id"],
            "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": 4,
            "temperature": 0,
            "logit_bias": PLAIN_TEXT,
        },
        headers={"Authorization": f"Bearer {secret}"},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    spent = int(answer.json()["usage"]["total_tokens"])
    page.reload()
    row = page.locator(f"#row-{minted['id']}")
    expect(row.locator(".token-restrictions")).to_contain_text(requester_peer)
    expect(row.locator(".token-restrictions")).to_contain_text("500 tokens")
    expect(row.locator(".token-remaining")).to_contain_text(f"{500 - spent} tokens")
    assert accessibility_problems(page) == [], describe(accessibility_problems(page))
    page.set_viewport_size(PHONE)
    assert accessibility_problems(page) == [], describe(accessibility_problems(page))
    assert page.evaluate(SIDEWAYS) <= 0, "the tokens page scrolls sideways on a phone"

    # beta's services page lists the route with its target.
    page = _page(new_context)
    sign_in(page, beta, "/ui/p/default/services")
    listed = page.locator(f"#row-{made_route['id']}")
    expect(listed.get_by_role("rowheader")).to_have_text("console-route")
    expect(listed.locator("ol li")).to_have_text([service["id"]])
    assert accessibility_problems(page) == [], describe(accessibility_problems(page))

    # beta's page of the grant draws its use per hour and tells what is left of the budget.
    page.goto(f"{beta.url}/ui/p/default/grants/{grant['id']}")
    expect(page.locator("svg.usage-chart rect.completion")).to_have_count(1)
    expect(page.locator("#usage-chart-caption")).to_contain_text(f"the tallest bar is {spent}")
    expect(page.locator("#grant-tokens-used")).to_contain_text("over 1 requests")
    expect(page.locator("main")).to_contain_text(f"{1000 - spent} of 1000 left")
    given = grant_in(overview(beta.owner()), grant["id"])
    assert given is not None
    assert given["remaining"]["tokens"] == 1000 - spent
    assert accessibility_problems(page) == [], describe(accessibility_problems(page))

    # alpha reconciles the receipts; its page of the grant tells the chains match.
    ok(alpha.owner().post(f"{API}/peers/{requester_peer}/reconcile", json={"grant": grant["id"]}))
    held = _page(new_context)
    sign_in(held, alpha, f"/ui/p/default/grants/{grant['id']}")
    expect(held.locator("#reconcile-matched")).to_have_text("both chains match")
    expect(held.locator("svg.usage-chart")).to_be_visible()
    assert accessibility_problems(held) == [], describe(accessibility_problems(held))
    held.set_viewport_size(PHONE)
    assert held.evaluate(SIDEWAYS) <= 0, "the held grant's page scrolls sideways on a phone"


def test_password_sign_in_project_switch_and_log_out_with_the_keyboard_only(
    clusters: Clusters, new_context: Any
) -> None:
    alpha = clusters.alpha
    password = "correct horse battery staple"
    response = alpha.owner().put("/api/v1/owner/password", json={"password": password})
    assert response.status_code == 204, response.text
    ok(alpha.owner().post("/api/v1/projects", json={"name": "second"}), 201)

    page = _page(new_context)
    page.goto(alpha.url + "/ui")
    expect(page.get_by_role("heading", level=1)).to_have_text("Sign in")
    screenshot(page, "login")
    _tab_to(page, "login-password")
    _assert_focus_visible(page)
    page.keyboard.type(password)
    page.keyboard.press("Enter")
    expect(page.get_by_text("Signed in as owner")).to_be_visible()
    expect(page.get_by_role("heading", level=1)).to_have_text("Overview")

    _tab_to(page, "project-switch")
    _assert_focus_visible(page)
    page.keyboard.press("End")  # the last project in the list: "second"
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{alpha.url}/ui/p/second")
    expect(page.get_by_role("heading", name="Project second")).to_be_visible()

    cookies = page.context.cookies()
    page.get_by_role("button", name="Log out").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", level=1)).to_have_text("Sign in")
    session = next(c for c in cookies if c["name"] == "ficc_session")
    stale = alpha.client()
    stale.cookies.set("ficc_session", session["value"])
    assert stale.get("/api/v1/session").status_code == 401


def _tab_to(page: Page, element_id: str, presses: int = 30) -> None:
    """Press Tab until the element with ``element_id`` has the focus (keyboard only)."""
    for _ in range(presses):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement && document.activeElement.id") == element_id:
            return
    raise AssertionError(f"#{element_id} is not reachable with Tab")


def _assert_focus_visible(page: Page) -> None:
    outline = page.evaluate(
        "(() => { const s = getComputedStyle(document.activeElement);"
        " return [s.outlineStyle, parseFloat(s.outlineWidth)]; })()"
    )
    assert outline[0] != "none", outline
    assert outline[1] >= 2, outline


PAGES = [
    ("overview", "/ui/p/default"),
    ("federation-list", "/ui/p/default/federation"),
    ("transfers-list", "/ui/p/default/transfers"),
    ("services-list", "/ui/p/default/services"),
    ("models", "/ui/p/default/models"),
    ("tokens", "/ui/p/default/tokens"),
    ("audit", "/ui/p/default/audit?limit=10"),
]


def _grant_pages(cluster: RunningCluster) -> list[tuple[str, str]]:
    """The pages of the grants the cluster gives that are still active (the tests before
    this one made them: a metered grant's page carries its usage chart)."""
    grants = overview(cluster.owner())["grants"]
    return [
        (f"grant-{g['id']}", f"/ui/p/default/grants/{g['id']}")
        for g in grants
        if g["state"] == "active"
    ]


def test_every_page_passes_the_accessibility_check_at_desktop_and_phone_width(
    clusters: Clusters, new_context: Any
) -> None:
    beta = clusters.beta
    errors: list[str] = []
    for viewport, suffix in ((DESKTOP, ""), (PHONE, "-phone")):
        page = _page(new_context, viewport)
        page.on(
            "console",
            lambda message: errors.append(message.text) if message.type == "error" else None,
        )
        page.on("pageerror", lambda error: errors.append(str(error)))
        sign_in(page, beta)
        for name, path in [*PAGES, *_grant_pages(beta)]:
            page.goto(beta.url + path)
            expect(page.locator("main h1")).to_be_visible()
            problems = accessibility_problems(page)
            assert problems == [], f"{path} at {viewport['width']} px: {describe(problems)}"
            overflow = page.evaluate(SIDEWAYS)
            assert overflow <= 0, f"{path} scrolls sideways at {viewport['width']} px"
            if name.startswith("grant-"):
                continue
            if suffix == "" or name in ("overview", "federation-list"):
                screenshot(page, name + suffix)
    assert errors == [], errors
    _check_login_page(beta, new_context)


def _check_login_page(cluster: RunningCluster, new_context: Any) -> None:
    page = _page(new_context)
    page.goto(cluster.url + "/ui")
    problems = accessibility_problems(page)
    assert problems == [], describe(problems)
    # The check can fail: the faults it exists for, added to the page, are each reported.
    page.evaluate(
        """() => {
            const main = document.querySelector("main");
            main.insertAdjacentHTML("beforeend", '<p id="faint">faint</p><input id="bare">'
                + '<table><tr><th>x</th></tr></table><button></button>');
            document.getElementById("faint").style.color = "#999";
        }"""
    )
    rules = {problem["rule"] for problem in accessibility_problems(page)}
    assert {"color-contrast", "control-has-label", "table-caption", "th-scope"} <= rules
    assert "has-accessible-name" in rules
