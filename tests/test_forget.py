"""Deletion on request and retention (docs/how-to/personal-data.md): after `rmi feedback forget --user U` no file
under the home holds U's id or any of U's words, read as Parquet, JSON or a dumped SQLite database as well as byte by
byte; everyone else's feedback is all still there; a deletion killed at any point is completed by the next run; the
gateway and Slack take deletion requests only from those allowed; retention deletes old feedback only."""

import gzip
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rmi_pipeline.cli.main import main
from rmi_pipeline.resources import build_resources, layout

U = "user-forget-me"  # the user who asks to be forgotten
OTHERS = ("user-ada", "user-bob", "user-cyd")
NOW = datetime.now(UTC)


def rmi(*argv) -> int:
    return main(list(argv))


# -- what a user sends, and what the home holds ------------------------------------------------------------------


def sums(seed: str, n: int) -> list[tuple[str, str]]:
    """Additions of seven-digit numbers: no two users (and no eval item) ask the same one."""
    rng = random.Random(seed)
    return [(f"{a}+{b}=", str(a + b)) for a, b in ((rng.randint(10**6, 10**7), rng.randint(10**6, 10**7))
                                                   for _ in range(n))]


def events_of(user: str, batch: int, n: int = 12, ts: datetime = NOW - timedelta(hours=2)) -> list[dict]:
    """A third rated up, a third corrected, a third rated down with a comment only this user wrote."""
    out = []
    for i, (prompt, answer) in enumerate(sums(f"{user}-{batch}", n)):
        kind = i % 3
        out.append({"schema_version": 1, "event_id": f"{user}-b{batch}-{i}", "ts": ts.isoformat(), "user_id": user,
                    "model_version": "1", "prompt": prompt, "completion": answer if kind == 0 else "1",
                    "rating": "up" if kind == 0 else "down", "correction": answer if kind == 1 else None,
                    "comment": f"{user} says batch {batch} answer {i} was off" if kind == 2 else None,
                    "source": "user", "skill": "add", "meta": {"client": "web"}})
    return out


def words_of(events: list[dict]) -> set[str]:
    """What would betray a user: their id, event ids, questions and comments."""
    return {e["user_id"] for e in events} | {e["event_id"] for e in events} | \
        {e[f] for e in events for f in ("prompt", "comment") if e.get(f)}


def file_texts(path: Path):
    """A file as text in every form it can be read: Parquet cell by cell, gzip, a SQLite dump, and its raw bytes."""
    import pyarrow.parquet as pq

    data = path.read_bytes()
    if data.startswith(b"PAR1"):
        table = pq.read_table(path)
        yield "\n".join(str(v) for column in table.columns for v in column.to_pylist())
    elif data.startswith(b"\x1f\x8b"):
        yield gzip.decompress(data).decode("utf-8", "replace")
    elif data.startswith(b"SQLite format 3"):
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            yield "\n".join(conn.iterdump())
        finally:
            conn.close()
    yield data.decode("utf-8", "replace")


def traces(home: Path, words: set[str]) -> dict[str, set[str]]:
    """Every file under the home that holds one of `words`, and which."""
    import re

    found: dict[str, set[str]] = {}
    patterns = {w: re.compile(re.escape(w) + r"(?![0-9A-Za-z])") for w in words}
    for path in sorted(p for p in home.rglob("*") if p.is_file()):
        for text in file_texts(path):
            hits = {w for w, pattern in patterns.items() if pattern.search(text)}
            if hits:
                found.setdefault(str(path.relative_to(home)), set()).update(hits)
    return found


def counts_by_user(settings) -> dict[str, int]:
    frame = build_resources(settings)["warehouse"].query(
        "SELECT user_id, count(*) AS n FROM feedback_events GROUP BY user_id")
    return dict(frame.iter_rows())


def land(tmp_path: Path, name: str, lines: list[str]) -> None:
    """A batch file through `rmi feedback ingest`: the real sensor tick and ingest job, Dagster's records too."""
    path = tmp_path / name
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    assert rmi("feedback", "ingest", str(path)) == 0


def fill(settings, tmp_path: Path) -> dict:
    """A home holding U's and three other users' feedback in every store the loop keeps it in: two landed batches
    (valid and quarantined rows), a batch file waiting to land, the warehouse, a training dataset and the mined eval
    set built from it, practice rows, the gateway's log, the judge's cache, a Slack audit line naming U, and model
    versions trained on the dataset. No model is trained: the stores are filled as the loop fills them."""
    from dagster import DagsterInstance, materialize

    from rmi_pipeline.assets import eval_suite, training_dataset
    from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe
    from rmi_pipeline.world.curators import curate_eval_suite

    resources = build_resources(settings)
    storage, eval_store = resources["storage"], resources["eval_store"]
    curate_eval_suite(eval_store, ArithmeticRecipe(), 40, seed=0)
    mine = events_of(U, 1, n=18) + events_of(U, 2, n=6)  # 18: one of U's corrections is on the mined side
    theirs = [e for user in OTHERS for e in events_of(user, 1) + events_of(user, 2, n=6)]
    bad_mine = [json.dumps({**events_of(U, 3, n=1)[0], "rating": "meh", "comment": "U's unratable words"}),
                '{"user_id": "' + U + '", "prompt": "a line cut short by U\'s client']
    bad_theirs = [json.dumps({**events_of(OTHERS[0], 3, n=1)[0], "rating": "meh"})]
    land(tmp_path, "b1.jsonl", [json.dumps(e) for e in mine[:18] + theirs[::2]] + bad_mine + bad_theirs)
    land(tmp_path, "b2.jsonl.gz", [json.dumps(e) for e in mine[18:] + theirs[1::2]])
    waiting = events_of(U, 4, n=3) + events_of(OTHERS[1], 4, n=3)  # a file the sensor has not ingested yet
    import polars as pl

    storage.write_parquet(layout.incoming("serve-waiting.parquet"), pl.DataFrame(
        [{**e, "meta": json.dumps(e["meta"])} for e in waiting]))
    with DagsterInstance.get() as instance:
        built = materialize([eval_suite, training_dataset], instance=instance, resources=resources)
    version = built.asset_materializations_for_node("training_dataset")[0].metadata["version"].value
    mined = eval_store.read_json(layout.mined(storage.read_json(layout.EVAL_MANIFEST)["mined_version"]))["items"]
    assert {i["prompt"] for i in mined} & {e["prompt"] for e in mine}, "some of U's corrections are mined"
    # what practice makes of thumbs-down questions: the champion's answers to them, and the coach's failed prompts
    downs = [e["prompt"] for e in mine + theirs if e["rating"] == "down" and not e["correction"]]
    storage.write_parquet(layout.practice_rows("1", 99), pl.DataFrame(
        {"prompt": downs, "target": ["2"] * len(downs), "source": ["practice"] * len(downs), "scale": 1.0,
         "reference": None, "teacher": None}, schema_overrides={"reference": pl.String, "teacher": pl.String}))
    storage.write_json(layout.practice_failed("1"), {"prompts": downs})
    gateway_log(settings, U, OTHERS[2])
    judge_cache(settings, eval_store, mine[0], theirs[0])
    from rmi_pipeline.chat import audit

    audit.record(settings, user="U0OFFICER", text=f"forget {U} their request", outcome="done", detail="requested")
    trained = register_models(resources["registry"], version)
    return {"mine": mine + waiting[:3], "bad_mine": bad_mine, "theirs": theirs + waiting[3:], "dataset": version,
            "models": trained}


def gateway_log(settings, *users: str) -> None:
    """Answers and a feedback of each user in the gateway's write-ahead log, not yet flushed to a batch file."""
    from rmi_pipeline.serving.log import FeedbackLog

    log = FeedbackLog(settings.resolved_serve_log_path, max_bytes=1 << 24, window_seconds=3600)
    try:
        for user in users:
            asked = [{"response_id": f"r-{user}-{i}", "user_id": user, "model_version": "1", "prompt": p,
                      "completion": "7", "skill": "add", "arm": "champion", "sampling": None}
                     for i, (p, _) in enumerate(sums(f"{user}-served", 3))]
            log.record_answers(asked).result()
            log.record_feedback(asked[0]["response_id"], "down", None, f"{user} typed this in the app", "user", None,
                                {}, event_id=f"{user}-served-feedback").result()
    finally:
        log.close()


def served_words(user: str) -> set[str]:
    return {p for p, _ in sums(f"{user}-served", 3)} | {f"r-{user}-0", f"{user}-served-feedback",
                                                         f"{user} typed this in the app"}


def judge_cache(settings, eval_store, mine: dict, theirs: dict) -> None:
    """The judge's verdicts on one rated answer of U's and one of another user's, as judge_agreement caches them."""
    from types import SimpleNamespace

    from rmi_pipeline.scoring.judge import JudgeScorer, parse_criteria

    judge = SimpleNamespace(settings=settings.judge, criteria=parse_criteria(settings.judge.criteria))
    eval_store.write_json(layout.JUDGE_CACHE, {
        JudgeScorer.key(judge, e["prompt"], e["completion"], None): {"model": "judge", "verdicts": [
            {"criterion": "correct", "pass": False, "reason": f"{e['prompt']} is not {e['completion']}"}]}
        for e in (mine, theirs)})


def register_models(registry, dataset: str) -> list[str]:
    """v1 trained on the dataset, v2 warm-started from v1 (it learned from the same rows), v3 on another dataset."""
    client = registry.client()
    client.create_registered_model(registry.model_name)
    for tags in ({"dataset_version": dataset, "warm_start_from": "scratch"},
                 {"dataset_version": "ds-later", "warm_start_from": "1"},
                 {"dataset_version": "ds-unrelated", "warm_start_from": "scratch"}):
        client.create_model_version(registry.model_name, source="file:///nowhere", tags=tags)
    client.set_registered_model_alias(registry.model_name, "champion", "2")
    return ["1", "2"]


# -- the tests -----------------------------------------------------------------------------------------------------


def test_forgetting_a_user_leaves_no_trace_of_them_and_all_of_everyone_else(rmi_env, tmp_path, capsys):
    filled = fill(rmi_env, tmp_path)
    home, storage = rmi_env.resolved_home, build_resources(rmi_env)["storage"]
    mine = words_of(filled["mine"]) | served_words(U) | {"U's unratable words", "a line cut short by U's client"}
    theirs = words_of(filled["theirs"]) | served_words(OTHERS[2])
    before = counts_by_user(rmi_env)
    rows = storage.read_parquet(layout.dataset_rows(filled["dataset"]))
    rows_before, their_rows = rows.height, rows.filter(rows["prompt"].is_in([e["prompt"] for e in filled["theirs"]]))
    assert set(traces(home, mine)) >= {  # U is everywhere
        "warehouse.sqlite", "serve/feedback-log.sqlite3", "chat/audit.jsonl", f"store/{layout.validated('b1.jsonl')}",
        f"store/{layout.quarantine('b1.jsonl')}", f"store/{layout.incoming('serve-waiting.parquet')}",
        f"store/{layout.dataset_rows(filled['dataset'])}", f"store/{layout.practice_rows('1', 99)}",
        f"evals/{layout.JUDGE_CACHE}"}

    assert rmi("feedback", "forget", "--user", "  ", "--reason", "x") == 2  # an empty id deletes nothing
    assert rmi("feedback", "forget", "--user", U, "--reason", f"ticket 7: {U} asked us to") == 0
    out = capsys.readouterr().out

    assert traces(home, mine) == {}
    assert counts_by_user(rmi_env) == {user: n for user, n in before.items() if user != U}
    left = traces(home, theirs)
    assert set().union(*left.values()) == theirs  # every other user's every word is still somewhere
    [key] = storage.list(layout.PRIVACY_AUDIT)
    audit = storage.read_json(key)
    assert audit["kind"] == "user" and audit["subject"] and audit["reason"] == "ticket 7: <forgotten user> asked us to"
    removed = audit["removed"]
    assert removed["warehouse_events"] == before[U] == 24
    assert removed["validated_rows"] == 24 and removed["quarantined_rows"] == 2 and removed["incoming_rows"] == 3
    assert removed["gateway_log_answers"] == 3 and removed["gateway_log_events"] == 4
    assert removed["dataset_rows"] > 0 and removed["mined_items"] == 1
    assert removed["practice_rows"] == removed["practice_failed_prompts"] == 8
    assert removed["judge_verdicts"] == 1 and removed["chat_audit_lines"] == 1
    rows = storage.read_parquet(layout.dataset_rows(filled["dataset"]))
    assert rows.height == rows_before - removed["dataset_rows"]
    assert rows.filter(rows["prompt"].is_in(their_rows["prompt"])).equals(their_rows)  # all of theirs, as they were
    manifest = storage.read_json(layout.dataset_manifest(filled["dataset"]))
    assert manifest["rows"] == rows_before - removed["dataset_rows"] == sum(manifest["by_source"].values())
    assert [m["version"] for m in audit["models_trained_on_it"]] == filled["models"]
    assert "v2 (champion): warm-started from v1" in out and "warehouse events" in out
    assert storage.list(layout.FORGET_PENDING) == []


# `rmi` in a process that kills itself with SIGKILL after its n-th write to the object store (a request, a step
# done, a rewritten file), or (KILL_IN_WAREHOUSE) once the warehouse has deleted and cleaned, before its vacuum
DYING_RMI = """
import os, signal, sys
from rmi_pipeline.resources.storage import ObjectStore
from rmi_pipeline.resources.warehouse import Warehouse

after, written, write = int(os.environ.get("KILL_AFTER_WRITES", 0)), [0], ObjectStore.write_bytes

def dying_write(self, key, data):
    done = write(self, key, data)
    written[0] += 1
    if written[0] == after:
        os.kill(os.getpid(), signal.SIGKILL)
    return done

ObjectStore.write_bytes = dying_write
if os.environ.get("KILL_IN_WAREHOUSE"):
    Warehouse._vacuum_catalog = lambda self: os.kill(os.getpid(), signal.SIGKILL)
from rmi_pipeline.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_deletion_killed_at_any_point_is_completed_by_the_next_run(rmi_env, tmp_path):
    """SIGKILL after the request is written, after its events are listed, in the middle of the batch files, in the
    warehouse's cleaning, in the datasets: each next run goes on from where the last one stopped, and the end is
    the same as one run's."""
    filled = fill(rmi_env, tmp_path)
    home, storage = rmi_env.resolved_home, build_resources(rmi_env)["storage"]
    mine = words_of(filled["mine"]) | served_words(U)
    before = counts_by_user(rmi_env)
    kills = [{"KILL_AFTER_WRITES": "1"}, {"KILL_AFTER_WRITES": "3"}, {"KILL_AFTER_WRITES": "6"},
             {"KILL_IN_WAREHOUSE": "1"}, {"KILL_AFTER_WRITES": "4"}, {"KILL_AFTER_WRITES": "4"}]
    runs, stopped = [], []  # each killed run's steps done
    for i, kill in enumerate(kills):
        args = ["feedback", "forget", "--user", U, "--reason", "ticket 9"] if i == 0 else ["feedback", "forget",
                                                                                           "--pending"]
        done = subprocess.run([sys.executable, "-c", DYING_RMI, *args], env={**os.environ, **kill},
                              capture_output=True, text=True, timeout=300)
        runs.append(done.returncode)
        assert done.returncode in (0, -signal.SIGKILL), done.stderr[-3000:]
        if done.returncode == 0:
            break
        [request] = [k for k in storage.list(layout.FORGET_PENDING) if k.endswith(".json")]  # it waits, redone
        stopped.append(len(storage.read_json(request)["done"]))
    assert runs.count(-signal.SIGKILL) >= 5, runs
    # killed before any step, after the events were listed, among the batch files, in the warehouse, in the datasets
    assert {0, 1, 2, 3, 4} <= set(stopped), stopped
    assert rmi("feedback", "forget", "--pending") == 0

    assert traces(home, mine) == {}
    assert counts_by_user(rmi_env) == {user: n for user, n in before.items() if user != U}
    assert storage.list(layout.FORGET_PENDING) == []
    [key] = storage.list(layout.PRIVACY_AUDIT)
    audit = storage.read_json(key)
    assert 5 <= audit["attempts"] <= len(runs) + 1  # the first run died before it began the steps
    # each row counted once, however often a rewrite was cut short and redone
    assert audit["removed"]["warehouse_events"] == audit["removed"]["validated_rows"] == before[U] == 24
    assert audit["removed"]["quarantined_rows"] == 2 and audit["removed"]["incoming_rows"] == 3
    assert [m["version"] for m in audit["models_trained_on_it"]] == filled["models"]


def landed(settings, name: str, events: list[dict]) -> None:
    """A batch validated and in the warehouse as an ingest run lands it (its asset functions, without Dagster)."""
    from rmi_pipeline.assets.feedback import check_batch, land_batch

    resources = build_resources(settings)
    resources["storage"].write_bytes(layout.incoming(name), "".join(json.dumps(e) + "\n" for e in events).encode())
    check_batch(resources["storage"], name, settings)
    land_batch(resources["storage"], resources["warehouse"], name)


def logged(settings, user: str) -> int:
    conn = sqlite3.connect(settings.resolved_serve_log_path)
    try:
        return conn.execute("SELECT count(*) FROM answers WHERE user_id = ?", (user,)).fetchone()[0]
    finally:
        conn.close()


def run_forget_job(settings, run_config: dict | None = None, tags: dict | None = None):
    from dagster import DagsterInstance

    from rmi_pipeline.cli.home import prepare_home
    from rmi_pipeline.definitions import build_definitions

    prepare_home(settings)
    with DagsterInstance.get() as instance:
        job = build_definitions(settings).resolve_job_def("forget_feedback")
        return job.execute_in_process(run_config=run_config, instance=instance, tags=tags).success


def test_the_gateway_deletes_only_with_a_key_and_the_forget_sensor_completes_it(rmi_env, monkeypatch):
    from dagster import DagsterInstance, RunRequest, build_sensor_context
    from fastapi.testclient import TestClient

    from rmi_pipeline.automation.forget import forget_sensor
    from rmi_pipeline.cli.home import prepare_home
    from rmi_pipeline.serving.app import build_app
    from rmi_pipeline.settings import Settings

    mine, theirs = events_of(U, 1, n=6), events_of(OTHERS[0], 1, n=6)
    landed(rmi_env, "b1.jsonl", mine + theirs)
    gateway_log(rmi_env, U, OTHERS[0])
    storage, path = build_resources(rmi_env)["storage"], f"/v1/users/{U}/feedback"

    app = build_app(rmi_env)  # no RMI_SERVE_API_KEYS: the gateway deletes nothing
    try:
        refused = TestClient(app).delete(path)
    finally:
        app.state.gateway.log.close()
    assert refused.status_code == 403 and "RMI_SERVE_API_KEYS" in refused.json()["error"]
    assert logged(rmi_env, U) == 3 and storage.list(layout.FORGET_PENDING) == []

    monkeypatch.setenv("RMI_SERVE_API_KEYS", "key-one,key-two")
    settings = Settings()
    app = build_app(settings)
    try:
        client = TestClient(app)
        assert client.delete(path).status_code == 401
        assert client.delete(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert logged(settings, U) == 3 and storage.list(layout.FORGET_PENDING) == []
        accepted = client.delete(path, params={"reason": "asked by mail"}, headers={"X-API-Key": "key-two"})
        documented = app.openapi()["paths"]["/v1/users/{user_id}/feedback"]["delete"]["responses"]
        counted = app.state.gateway.metrics.render().decode()
    finally:
        app.state.gateway.log.close()
    assert accepted.status_code == 202, accepted.text
    assert accepted.json()["removed_from_gateway_log"] == {"gateway_log_answers": 3, "gateway_log_events": 4}
    assert logged(settings, U) == 0 and logged(settings, OTHERS[0]) == 3  # at once, and only U's
    assert {"202", "401", "403", "422", "429", "503"} <= set(documented)
    assert 'route="/v1/users/{user_id}/feedback"' in counted and U not in counted  # no label names the user

    prepare_home(settings)
    with DagsterInstance.get() as instance:
        asked = forget_sensor(build_sensor_context(instance=instance, resources={"storage": storage}))
    assert isinstance(asked, RunRequest) and accepted.json()["request_id"] in asked.tags["rmi/requests"]
    assert run_forget_job(settings, tags=asked.tags)
    assert storage.list(layout.FORGET_PENDING) == []
    [key] = storage.list(layout.PRIVACY_AUDIT)
    assert storage.read_json(key)["via"] == "gateway" and storage.read_json(key)["removed"]["warehouse_events"] == 6
    assert traces(settings.resolved_home, words_of(mine) | served_words(U)) == {}
    assert counts_by_user(settings) == {OTHERS[0]: 6}


def test_slack_forget_is_refused_to_anyone_not_allowed_and_its_reply_names_no_one(rmi_env, monkeypatch):
    from rmi_pipeline.chat.commands import CommandRunner
    from rmi_pipeline.chat.listeners import Listeners
    from rmi_pipeline.settings import Settings

    monkeypatch.setenv("RMI_SLACK_ALLOWED_USERS", "U0ADMIN,U0OFFICER")
    monkeypatch.setenv("RMI_FORGET_ALLOWED", "U0OFFICER")
    settings = Settings()
    listeners, storage = Listeners(settings, CommandRunner(settings)), build_resources(settings)["storage"]

    def ask(user: str, text: str) -> str:
        said: list[str] = []
        listeners.command(lambda **reply: said.append(reply["text"]), {"user_id": user, "user_name": user,
                                                                        "text": text},
                          lambda **reply: said.append(reply["text"]))
        return said[-1]

    assert "may not" in ask("U0STRANGER", f"forget {U} they asked")
    assert "RMI_FORGET_ALLOWED" in ask("U0ADMIN", f"forget {U} they asked")  # acting on the loop is not enough
    assert "needs a reason" in ask("U0OFFICER", f"forget {U}")
    assert storage.list(layout.FORGET_PENDING) == []
    reply = ask("U0OFFICER", f"forget {U} their mail of 3 May")
    [request] = storage.list(layout.FORGET_PENDING)
    assert request.rsplit("/", 1)[-1].removesuffix(".json") in reply
    assert U not in reply and "3 May" not in reply
    assert storage.read_json(request)["scope"]["user_id"] == U and storage.read_json(request)["via"] == "Slack"


def test_retention_deletes_feedback_past_its_age_everywhere_and_nothing_newer(rmi_env, monkeypatch):
    from dagster import build_schedule_context

    from rmi_pipeline.automation.schedules import retention_schedule
    from rmi_pipeline.settings import Settings

    old = [e for user in OTHERS[:2] for e in events_of(user, 1, n=6, ts=NOW - timedelta(days=40))]
    new = [e for user in OTHERS[:2] for e in events_of(user, 2, n=6, ts=NOW - timedelta(days=2))]
    landed(rmi_env, "old.jsonl", old)
    landed(rmi_env, "mixed.jsonl", new[:6] + [{**e, "event_id": e["event_id"] + "-m",
                                               "prompt": e["prompt"].replace("=", "0=")} for e in old[:4]])
    landed(rmi_env, "new.jsonl", new[6:])
    aged = words_of(old) | {e["prompt"].replace("=", "0=") for e in old[:4]}
    assert retention_schedule(rmi_env).evaluate_tick(build_schedule_context()).skip_message  # off while unset

    monkeypatch.setenv("RMI_RETENTION_DAYS", "30")
    settings = Settings()
    [asked] = retention_schedule(settings).evaluate_tick(build_schedule_context()).run_requests
    assert run_forget_job(settings, asked.run_config, asked.tags)

    storage = build_resources(settings)["storage"]
    assert traces(settings.resolved_home, aged - {u for u in OTHERS}) == {}
    assert counts_by_user(settings) == {OTHERS[0]: 6, OTHERS[1]: 6}  # every newer event is there
    assert set().union(*traces(settings.resolved_home, words_of(new)).values()) == words_of(new)
    [key] = storage.list(layout.PRIVACY_AUDIT)
    audit = storage.read_json(key)
    assert audit["kind"] == "retention" and audit["subject"] is None and audit["removed"]["warehouse_events"] == 16
    assert storage.read_json(layout.validated_summary("mixed.jsonl"))["valid"] == 6
