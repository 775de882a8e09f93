"""A canary through `rmi serve` and the real jobs: its share of users, sticky, meets it; what they say decides.

Two trained versions of the loop (v1 champion, v2 canary) over real HTTP on 127.0.0.1, feedback ingested by the
loop's own job, canary_verdict materialized on a real Dagster instance, MLflow aliases read back."""

import time

import httpx
import pytest
from dagster import DagsterInstance, materialize
from dagster._core.instance.ref import InstanceRef
from gateway import gateway_in_thread, warehouse_events
from webhook import serve_hook

from rmi_pipeline.assets import canary_verdict, champion
from rmi_pipeline.assets.promotion import STARTED_AT
from rmi_pipeline.resources import build_resources, layout
from rmi_pipeline.resources.registry import CANARY, CHAMPION, FAST
from rmi_pipeline.serving.routing import in_canary
from rmi_pipeline.settings import Settings

SHARE = 0.3
USERS = [f"user-{i}" for i in range(120)]
PROMPTS = ["12+34=", "250+250=", "99-45="]


@pytest.fixture
def alerts():
    """The messages a Slack-compatible webhook on 127.0.0.1 received."""
    bodies: list[dict] = []
    server = serve_hook(bodies)
    yield f"http://127.0.0.1:{server.server_port}/hook", bodies
    server.shutdown()


@pytest.fixture
def canary_env(served, alerts, monkeypatch):
    for key, value in {**served["env"], "RMI_CANARY_SHARE": str(SHARE), "RMI_CANARY_MIN_EVENTS": "60",
                       "RMI_PROMOTION": "canary", "RMI_ALERT_WEBHOOK_URL": alerts[0]}.items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    resources = build_resources(settings)
    yield settings, resources, alerts[1]
    registry = resources["registry"]
    registry.end_canary({"canary_outcome": "test over"})
    registry.promote("1", {"promoted_by": "test"})


def ask_and_rate(url: str, down_on_canary: bool) -> dict[str, set[str]]:
    """Every user asks every prompt and rates the answer: thumbs-down on the canary's answers if asked (users the
    canary serves worse), up otherwise. Returns the versions each user met."""
    met: dict[str, set[str]] = {}
    with httpx.Client(base_url=url, timeout=30) as http:
        for user in USERS:
            for prompt in PROMPTS:
                answer = http.post("/v1/answers", json={"prompts": [prompt], "user_id": user}).json()["answers"][0]
                met.setdefault(user, set()).add(answer["model_version"])
                rating = "down" if down_on_canary and answer["model_version"] == "2" else "up"
                assert http.post("/v1/feedback", json={"response_id": answer["response_id"],
                                                       "rating": rating}).status_code == 202
        http.post("/v1/flush")
    return met


def verdict(settings, resources) -> dict:
    with DagsterInstance.from_ref(InstanceRef.from_dir(str(settings.dagster_home))) as instance:
        result = materialize([canary_verdict], instance=instance, resources=resources)
    [event] = [e for e in result.asset_materializations_for_node("canary_verdict")
               if e.asset_key == canary_verdict.key]  # a promotion also reports one of `champion`
    return {k: v.value for k, v in event.metadata.items()}


def wait_for_canary(url: str, version: str | None) -> None:
    deadline = time.monotonic() + 20
    while httpx.get(f"{url}/readyz").json().get("canary_version") != version:
        assert time.monotonic() < deadline, f"the gateway did not follow @canary to {version}"
        time.sleep(0.1)


def test_a_challenger_that_passes_the_gate_becomes_the_canary_and_the_champion_stays(canary_env):
    settings, resources, _ = canary_env
    registry, storage = resources["registry"], resources["storage"]
    registry.client().set_registered_model_alias(registry.model_name, "challenger", "2")
    storage.write_json(layout.evaluation("2"), {"champion_version": "1", "scores": {"challenger_anchor_mean": 0.9},
                                                "decision": {"promote": True, "reason": "Promoted: test."}})
    with DagsterInstance.from_ref(InstanceRef.from_dir(str(settings.dagster_home))) as instance:
        result = materialize([champion], instance=instance, resources=resources)
    assert result.success and not result.asset_materializations_for_node("champion")  # the champion did not change
    assert str(registry.version(CHAMPION).version) == "1" and str(registry.version(CANARY).version) == "2"
    assert float(registry.version(CANARY).tags[STARTED_AT]) <= time.time()
    from rmi_pipeline.cli.report import status_text

    assert f"canary: v2 on trial since {time.strftime('%Y-%m-%d')}" in status_text(settings)
    assert f"{SHARE:.0%} of users; no verdict yet" in status_text(settings)


def test_the_canary_s_users_meet_it_and_are_worse_off_so_it_is_aborted_and_everyone_is_back_on_the_champion(
        canary_env):
    settings, resources, alerted = canary_env
    registry = resources["registry"]
    registry.start_canary("2", {STARTED_AT: str(time.time())})
    with gateway_in_thread(settings) as url:
        wait_for_canary(url, "2")
        met = ask_and_rate(url, down_on_canary=True)
        # sticky: a user meets one version all through the canary, the one their id hashes to
        assert all(versions == {"2" if in_canary(u, "2", SHARE) else "1"} for u, versions in met.items())
        assert 0.15 < sum(versions == {"2"} for versions in met.values()) / len(USERS) < 0.45
        events = warehouse_events(settings)
        assert {e["model_version"] for e in events} == {"1", "2"}
        meta = verdict(settings, resources)
        assert meta["verdict"] == "abort" and meta["canary_rated"] == 3 * sum(v == {"2"} for v in met.values())
        assert meta["reason"].startswith("Aborted: canary v2 is worse for users than champion v1")
        assert registry.version(CANARY) is None and str(registry.version(CHAMPION).version) == "1"
        assert registry.client().get_model_version(registry.model_name, "2").tags["canary_outcome"] == "aborted"
        wait_for_canary(url, None)  # every user back on the champion
        with httpx.Client(base_url=url, timeout=30) as http:
            versions = {http.post("/v1/answers", json={"prompts": ["1+1="], "user_id": u}).json()["answers"][0]
                        ["model_version"] for u in USERS}
        assert versions == {"1"}
    assert verdict(settings, resources)["verdict"] == "none"  # nothing on trial: nothing moves
    canary_alerts = [b["text"] for b in alerted if b["text"].startswith("[rmi canary]")]
    assert len(canary_alerts) == 1 and "All users are back on champion v1" in canary_alerts[0]


def test_a_canary_users_rate_as_well_as_the_champion_is_promoted(canary_env):
    settings, resources, _ = canary_env
    registry = resources["registry"]
    registry.start_canary("2", {STARTED_AT: str(time.time())})
    with gateway_in_thread(settings) as url:
        wait_for_canary(url, "2")
        ask_and_rate(url, down_on_canary=False)
        warehouse_events(settings)
    meta = verdict(settings, resources)
    assert meta["verdict"] == "promote" and meta["reason"].startswith("Promoted: over")
    assert str(registry.version(CHAMPION).version) == "2" and registry.version(CANARY) is None
    assert registry.champion_history()[-2:] == ["1", "2"]
    tags = registry.client().get_model_version(registry.model_name, "2").tags
    assert tags["promoted_by"] == "canary" and tags["canary_outcome"] == "promoted"


def test_a_derivative_on_trial_for_fast_meets_only_fast_users_and_their_thumbs_move_fast_to_it(canary_env, monkeypatch):
    """A canary tagged for `fast` answers its share of a gateway of fast (RMI_SERVE_MODEL=fast), never the champion's
    users; its verdict compares it with fast's version and moves `fast`, leaving the champion where it was."""
    from rmi_pipeline.assets.promotion import serving_gateways

    settings, resources, alerted = canary_env
    registry, storage = resources["registry"], resources["storage"]
    registry.point(FAST, "1", {"promoted_by": "test"})
    registry.start_canary("2", {STARTED_AT: str(time.time())}, for_alias=FAST)
    try:
        with gateway_in_thread(settings) as url, httpx.Client(base_url=url, timeout=30) as http:
            assert "canary_version" not in http.get("/readyz").json()  # not on trial for the champion
            assert {http.post("/v1/answers", json={"prompts": ["1+1="], "user_id": u}).json()["answers"][0]
                    ["model_version"] for u in USERS} == {"1"}
        monkeypatch.setenv("RMI_SERVE_MODEL", "fast")
        with gateway_in_thread(Settings()) as url:
            assert httpx.get(f"{url}/readyz").json()["alias"] == FAST
            wait_for_canary(url, "2")
            assert [g["alias"] for g in serving_gateways(storage, FAST)] == [FAST] and not serving_gateways(storage)
            met = ask_and_rate(url, down_on_canary=False)
            assert all(versions == {"2" if in_canary(u, "2", SHARE) else "1"} for u, versions in met.items())
            warehouse_events(settings)
        meta = verdict(settings, resources)
        assert meta["verdict"] == "promote" and meta["canary_for"] == FAST and meta["fast_version"] == "1"
        assert meta["alias_moved"] == "fast: v1 -> v2"
        assert str(registry.version(FAST).version) == "2" and registry.version(CANARY) is None
        assert str(registry.version(CHAMPION).version) == "1" and registry.champion_history()[-1] == "1"
        assert any(b["text"].startswith("[rmi promotion] fast v1 -> v2 after its canary") for b in alerted)
    finally:
        registry.client().delete_registered_model_alias(registry.model_name, FAST)


def test_in_shadow_the_challenger_answers_every_request_unseen_and_its_agreement_is_measured(served, monkeypatch):
    from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe

    for key, value in {**served["env"], "RMI_SERVE_SHADOW": "true"}.items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    registry = build_resources(settings)["registry"]
    registry.client().set_registered_model_alias(registry.model_name, "challenger", "2")
    prompts = [f"{a}+{b}=" for a, b in zip(range(1000, 1040), range(2000, 2040), strict=True)] + \
              [f"{a}-{b}=" for a, b in zip(range(900, 940), range(100, 140), strict=True)]
    recipe = ArithmeticRecipe()
    own = {v: recipe.answer(registry.load(v, recipe), prompts) for v in ("1", "2")}
    with gateway_in_thread(settings) as url, httpx.Client(base_url=url, timeout=30) as http:
        http.post("/v1/answers", json={"prompts": ["1+1="], "user_id": "warm-up"})
        deadline = time.monotonic() + 20
        while http.get("/v1/shadow").json()["challenger_version"] is None:
            assert time.monotonic() < deadline, "the shadow never answered"
            time.sleep(0.05)
        before = sum(s["answers"] for s in http.get("/v1/shadow").json()["slices"].values())
        given = []
        for i, prompt in enumerate(prompts):
            given.append(http.post("/v1/answers", json={"prompts": [prompt], "user_id": f"u{i}"}).json()["answers"][0])
            while sum(s["answers"] for s in http.get("/v1/shadow").json()["slices"].values()) < before + i + 1:
                time.sleep(0.01)  # one request at a time, so the shadow keeps up and skips none
        report = http.get("/v1/shadow").json()
    assert [a["completion"] for a in given] == own["1"] and {a["model_version"] for a in given} == {"1"}
    assert report["challenger_version"] == "2" and report["skipped"] == 0
    agree = {"add/4": [own["1"][i] == own["2"][i] for i in range(40)],
             "sub/3": [own["1"][i] == own["2"][i] for i in range(40, 80)]}
    for name, same in agree.items():
        assert report["slices"][name]["answers"] == 40
        assert report["slices"][name]["agreement"] == round(sum(same) / 40, 4)
        right = [recipe.verify(p, a)[0] for p, a in zip(prompts, own["2"], strict=True)]
        assert report["slices"][name]["verifier_reward"] == round(
            sum(right[:40] if name == "add/4" else right[40:]) / 40, 4)
        assert report["slices"][name]["latency_ms_p95"] > 0


def test_a_champion_users_are_worse_off_with_is_rolled_back_to_its_predecessor_and_a_person_is_alerted_once(
        served, loop_home, alerts, monkeypatch):
    import shutil

    from rmi_pipeline.assets import champion_health

    for key, value in {**served["env"], "RMI_ALERT_WEBHOOK_URL": alerts[0]}.items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    resources = build_resources(settings)
    registry, home = resources["registry"], served["home"]
    shutil.copytree(loop_home["home"] / "evals", home / "evals", dirs_exist_ok=True)  # the loop's sealed suite
    (home / "store" / "evals").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(loop_home["home"] / "store" / layout.EVAL_MANIFEST, home / "store" / layout.EVAL_MANIFEST)
    prompts = [f"{a}+{b}=" for a, b in zip(range(100, 180), range(500, 580), strict=True)] + \
              [f"{a}-{b}=" for a, b in zip(range(900, 980), range(100, 180), strict=True)]

    def users_rate(url: str, version: str, down_on_sums: float) -> None:
        with httpx.Client(base_url=url, timeout=30) as http:
            deadline = time.monotonic() + 20
            while http.get("/readyz").json().get("model_version") != version:
                assert time.monotonic() < deadline
                time.sleep(0.1)
            for i, prompt in enumerate(prompts):
                answer = http.post("/v1/answers", json={"prompts": [prompt], "user_id": f"u{i}"}).json()["answers"][0]
                assert answer["model_version"] == version
                share = down_on_sums if "+" in prompt else 0.1
                rating = "down" if (i % 20) < share * 20 else "up"
                http.post("/v1/feedback", json={"response_id": answer["response_id"], "rating": rating})
            http.post("/v1/flush")
        warehouse_events(settings)

    def health() -> dict:
        with DagsterInstance.from_ref(InstanceRef.from_dir(str(settings.dagster_home))) as instance:
            result = materialize([champion_health], instance=instance, resources=resources)
        [event] = [e for e in result.asset_materializations_for_node("champion_health")
                   if e.asset_key == champion_health.key]  # a rollback also reports one of `champion`
        return {k: v.value for k, v in event.metadata.items()}

    try:
        with gateway_in_thread(settings) as url:
            users_rate(url, "1", down_on_sums=0.1)
            registry.promote("2", {"promoted_by": "test"})
            users_rate(url, "2", down_on_sums=0.6)  # a release users are worse off with on sums, not differences
        meta = health()
        assert meta["rolled_back"].startswith("v2 -> v1: live thumbs-down of v2 on ") and "add/3" in meta["rolled_back"]
        assert meta["regressed"] is False  # the release is gone: nothing left for a targeted cycle to fix
        assert str(registry.version(CHAMPION).version) == "1" and registry.champion_history()[-1] == "1"
        tags = registry.client().get_model_version(registry.model_name, "1").tags
        assert tags["override_by"] == "champion_health" and "add/3" in tags["override_reason"]
        assert health()["rolled_back"] == "no"  # once: v1 is the champion now, with nothing before it to lose to
        rollbacks = [b["text"] for b in alerts[1] if b["text"].startswith("[rmi rollback]")]
        assert len(rollbacks) == 1 and rollbacks[0].startswith("[rmi rollback] champion v2 -> v1, rolled back")
    finally:
        registry.promote("1", {"promoted_by": "test"})


def test_auto_promotion_is_canary_exactly_while_a_gateway_of_the_champion_serves(served, monkeypatch):
    from rmi_pipeline.assets.promotion import serving_gateways

    for key, value in served["env"].items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    storage = build_resources(settings)["storage"]
    assert settings.promotion == "auto" and serving_gateways(storage) == []
    with gateway_in_thread(settings):
        [said] = serving_gateways(storage)  # it says so from its start
        assert said["alias"] == "champion" and said["canary_share"] == settings.canary.share
    assert serving_gateways(storage) == []  # and takes it back when it stops
    storage.write_json(layout.gateway("gone"), {"alias": "champion", "canary_share": 0.1, "at": time.time() - 60})
    assert serving_gateways(storage) == []  # a gateway killed before it could say so: its word ages out
    monkeypatch.setenv("RMI_CANARY_SHARE", "0")
    with gateway_in_thread(Settings()):
        assert serving_gateways(storage) == []  # one that routes no one to a canary does not count
