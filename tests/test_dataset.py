"""training_dataset: eval items and held-out hard cases never reach training; a canary blocks."""

import json
import random

import pytest
from dagster import instance_for_test, materialize

from rmi_pipeline.assets import eval_suite, training_dataset
from rmi_pipeline.ml.hygiene import is_mined_holdout, ngram_hashes
from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe
from rmi_pipeline.resources import build_resources, layout
from rmi_pipeline.schema import event_frame, parse_batch
from rmi_pipeline.settings import Settings
from rmi_pipeline.world.curators import curate_eval_suite

RECIPE = ArithmeticRecipe()


def event(i: int, prompt: str, completion: str, rating="up", correction=None, ts="2026-11-30T10:00:00Z",
          signal=None) -> dict:
    return {"event_id": f"e{i}", "ts": ts, "user_id": "u", "model_version": "1", "prompt": prompt,
            "completion": completion, "rating": rating, "correction": correction,
            **({"meta": {"signal": signal, "client": "web"}} if signal else {})}


def validated(records: list[dict]) -> list[dict]:
    """The records as the ingest validates them, in one batch b1.jsonl (one pass of the suite, not one a row)."""
    data = "\n".join(json.dumps(r) for r in records).encode()
    parsed = parse_batch("b1.jsonl", data, "b1.jsonl", 4096, Settings().cache_dir)
    assert not parsed.quarantined and not parsed.duplicates, parsed.quarantined
    return parsed.events


@pytest.fixture
def build(rmi_env):
    resources = build_resources(rmi_env)
    suite = curate_eval_suite(resources["eval_store"], RECIPE, 40, seed=0)

    def run(events: list[dict], mix: dict[str, float] | None = None):
        if events:
            resources["warehouse"].ingest(event_frame(validated(events)))
        resources["settings"] = rmi_env.model_copy(update={"mix": {**rmi_env.mix, **(mix or {})}})
        with instance_for_test() as instance:
            result = materialize([eval_suite, training_dataset], instance=instance, resources=resources,
                                 raise_on_error=False)
        meta = {k: v.value for k, v in result.asset_materializations_for_node("training_dataset")[0].metadata.items()
                } if result.success else {}
        return result, meta

    return run, resources, suite


def big_sums(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    return [(f"{a}+{b}=", str(a + b)) for a, b in ((rng.randint(10**6, 10**7), rng.randint(10**6, 10**7))
                                                   for _ in range(n))]


def test_eval_items_are_removed_and_counted_and_each_source_gets_its_share_of_every_batch(build):
    run, resources, suite = build
    leaked = next(i for i in suite["items"] if i["tier"] == 4 and "+" in i["prompt"])
    a, b = leaked["prompt"][:-1].split("+")
    events = [event(i, p, c) for i, (p, c) in enumerate(big_sums(50, 5))]
    events += [event(100, f"{b}+{a}=", leaked["answer"]),  # operand order does not hide an eval item
               event(101, "7+8=", "16", "down", correction="15"), event(102, "what is 2+2", "4"),
               event(103, "1+1=", "3", "down")]
    result, meta = run(events)
    assert result.success
    manifest = resources["storage"].read_json(layout.EVAL_MANIFEST)
    sealed = set(manifest["hashes"])
    seed_overlap = sum(RECIPE.prompt_hash(t.prompt) in sealed for t in RECIPE.seed_tasks(random.Random(0)))
    assert meta["removed_eval_overlap"] == seed_overlap + 1 and meta["unusable_rows"] == 1
    assert meta["rows_feedback"] == 50 and meta["rows_corrections"] == 1 and meta["rows_thumbs_down"] == 1
    data = resources["storage"].read_parquet(layout.dataset_rows(meta['version']))
    assert not any(RECIPE.prompt_hash(p) in sealed for p in data["prompt"])
    # no champion yet, so nothing from practice: new thumbs-up, corrections, thumbs-downs (KTO, on by default) and
    # replay share each batch
    mix = Settings().mix
    sources = ("feedback", "corrections", "thumbs_down", "replay")
    present = sum(mix[source] for source in sources)
    weights = resources["storage"].read_json(layout.dataset_manifest(meta["version"]))["weights"]
    data = data.with_columns(weight=data["mix"].replace_strict(weights))  # as the training program weighs rows
    for source in sources:
        share = data.filter(data["mix"] == source)["weight"].sum()
        assert abs(share - mix[source] / present) < 1e-9, source
    assert abs(data["weight"].sum() - 1.0) < 1e-9


def test_implicit_signals_become_weak_labels_each_weighed_by_its_own_share(build):
    """Where RMI_MIX gives them a share, an unrated answer a user copied is a target of the source `copied` and one
    they asked again a row of `asked_again` (KTO's undesirable: never imitated); each source gets its own share of
    every batch, and an answer also rated keeps its rating's label. At share 0 (the default) neither is read."""
    from rmi_pipeline.ml.mix import KTO_MIX

    run, resources, _ = build
    sums = big_sums(30, 9)
    copied = [event(i, p, c, None, signal="copied") for i, (p, c) in enumerate(sums[:10])]
    asked = [event(10 + i, p, str(int(c) + 1), None, signal="asked_again") for i, (p, c) in enumerate(sums[10:20])]
    rated = [event(20 + i, p, c, "up", signal="asked_again") for i, (p, c) in enumerate(sums[20:])]
    shares = {"copied": 0.1, "asked_again": 0.05}
    result, meta = run(copied + asked + rated, mix=shares)
    assert result.success
    assert (meta["rows_copied"], meta["rows_asked_again"], meta["rows_feedback"]) == (10, 10, 10)
    data = resources["storage"].read_parquet(layout.dataset_rows(meta["version"]))
    by_mix = {m: dict(data.filter(data["mix"] == m).select("prompt", "target").iter_rows())
              for m in ("copied", "asked_again", "feedback")}
    assert by_mix["copied"] == {e["prompt"]: e["completion"] for e in copied}  # the answer the user took for right
    assert by_mix["asked_again"] == {e["prompt"]: e["completion"] for e in asked}
    assert by_mix["feedback"] == {e["prompt"]: e["completion"] for e in rated}  # rated up: a thumbs-up, no signal
    assert KTO_MIX["copied"] is True and KTO_MIX["asked_again"] is False
    manifest = resources["storage"].read_json(layout.dataset_manifest(meta["version"]))
    present = sum(manifest["mix"][m] for m in ("feedback", "replay", *shares))
    weighted = data.with_columns(weight=data["mix"].replace_strict(manifest["weights"]))
    for source, share in shares.items():
        assert abs(weighted.filter(weighted["mix"] == source)["weight"].sum() - share / present) < 1e-9, source

    result, meta = run([])  # the same warehouse, the default mix
    assert result.success and meta["rows_feedback"] == 10
    assert "rows_copied" not in meta and "rows_asked_again" not in meta


def test_corrected_hard_cases_split_by_hash_into_the_mined_eval_and_training(build):
    run, resources, _ = build
    cases = big_sums(200, 7)
    events = [event(i, p, "1", "down", correction=c) for i, (p, c) in enumerate(cases)]
    held = {p for p, _ in cases if is_mined_holdout(RECIPE.prompt_hash(p), 0.2)}
    assert 20 < len(held) < 60
    result, meta = run(events)
    assert result.success and meta["held_out_mined"] == len(held)
    assert meta["rows_corrections"] == len(cases) - len(held)
    manifest = resources["storage"].read_json(layout.EVAL_MANIFEST)
    mined = resources["eval_store"].read_json(layout.mined(manifest['mined_version']))["items"]
    assert {m["prompt"] for m in mined} == held
    data = resources["storage"].read_parquet(layout.dataset_rows(meta['version']))
    assert held.isdisjoint(data["prompt"].to_list())


def test_the_eval_suite_s_leak_marker_in_feedback_blocks_the_dataset(build):
    run, _, suite = build
    result, _ = run([event(1, "12+30=", "42", "down", correction=f"42 {suite['leak_marker']}")])
    assert not result.success
    checks = {e.asset_check_key.name: e for e in result.get_asset_check_evaluations()}
    assert not checks["no_leak_marker"].passed and \
        checks["no_leak_marker"].metadata["rows_with_leak_marker"].value == 1


def test_text_overlap_is_found_by_13_gram_hashes():
    passage = "the quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat"
    row = "user asked: " + passage + " and more"
    assert ngram_hashes(row, 13) & ngram_hashes(passage, 13)
    assert not ngram_hashes("the quick brown fox", 13)
    assert not ngram_hashes(row.replace("lazy", "busy"), 13) & ngram_hashes(passage.replace("fox", "cow"), 13)


def test_what_earlier_champions_made_is_replayed_but_not_their_rl_samples_or_best_of_n_picks(rmi_env):
    import polars as pl

    from rmi_pipeline.assets.dataset import _practice_rows
    from rmi_pipeline.ml.mix import EARLIER_PRACTICE, mix_sources

    storage = build_resources(rmi_env)["storage"]

    def made(key: str, sources: list[str]) -> None:
        storage.write_parquet(key, pl.DataFrame({"prompt": [f"{i}+1=" for i in range(len(sources))],
                                                 "target": [str(i + 1) for i in range(len(sources))],
                                                 "source": sources, "scale": [1.0] * len(sources),
                                                 "reference": [None] * len(sources),
                                                 "teacher": [None] * len(sources)},
                                                schema_overrides={"reference": pl.String, "teacher": pl.String}))

    made(layout.practice_rows("1", 100), ["practice", "rl", "self_label", "hint_distill", "best_of_n"])
    made(layout.practice_rows("2", 300), ["practice", "rl", "rl", "best_of_n"])
    storage.write_json(layout.PRACTICE_LATEST, {"champion_version": "2", "rows": layout.practice_rows("2", 300)})
    rows = pl.concat(_practice_rows(storage, type("Version", (), {"version": 2})()))
    assert sorted(rows["source"].to_list()) == sorted(["practice", "rl", "rl", "best_of_n"] + [EARLIER_PRACTICE] * 3)
    # the current champion's best-of-n answers train under their own share; an earlier one's are not replayed
    assert sorted(mix_sources(rows, [])["mix"].to_list()) == sorted(["practice", "rl", "rl", "best_of_n"]
                                                                    + ["replay"] * 3)
    assert list(_practice_rows(storage, None)) == []  # no champion: nothing was made yet


def test_each_refresh_draws_new_eval_items_and_the_same_seed_draws_them_again(rmi_env, tmp_path, monkeypatch):
    def refreshes(home: str, times: int) -> list[set[str]]:
        monkeypatch.setenv("RMI_HOME", str(tmp_path / home))
        resources = build_resources(Settings())
        curate_eval_suite(resources["eval_store"], RECIPE, 40, seed=0)
        with instance_for_test() as instance:
            for _ in range(times):
                assert materialize([eval_suite], instance=instance, resources=resources).success
        store = resources["eval_store"]
        # slices of 3 digits and up: small ones (1-digit sums) hold few problems, so draws repeat there
        return [{i["prompt"] for i in store.read_json(key)["items"] if i["tier"] >= 3}
                for key in store.list(layout.REFRESHED)]

    first, second = refreshes("one", 2)
    assert len(first & second) < 0.01 * len(first)  # drawn anew: no model can have seen the next one
    assert refreshes("two", 1) == [first]  # a second home with the same seed: the same loop


def test_a_history_read_in_chunks_gives_the_dataset_read_at_once(tmp_path):
    """The dataset streams its sources a chunk at a time (memory that of one chunk): however they are cut, the same
    rows, weights, counts and version digest come out."""
    import polars as pl

    from rmi_pipeline.ml import dataset

    rng = random.Random(5)
    tasks = RECIPE.sample_tasks(rng, 300, ["add", "sub"], [2, 3, 4])
    rows = pl.DataFrame({
        "prompt": [t.prompt for t in tasks] + ["7+", "12-99="], "target": [t.answer for t in tasks] + ["7", "x"],
        "batch_id": [f"b{i % 3}" for i in range(len(tasks))] + ["b0", "b1"],
        "source": [rng.choice(["thumbs_up", "correction"]) for _ in tasks] + ["thumbs_up"] * 2, "scale": 1.0,
    }).with_columns(reference=pl.lit(None, pl.String), teacher=pl.lit(None, pl.String))
    evals = {"hashes": [RECIPE.prompt_hash(t.prompt) for t in tasks[:40]], "leak_marker": "rmi-leak-marker-x",
             "mined_share": 0.3}
    shares = {"feedback": 0.5, "corrections": 0.3, "replay": 0.2}

    def built(chunk: int):
        out = tmp_path / f"by-{chunk}.parquet"
        counts = dataset.build(rows.iter_slices(chunk), RECIPE, evals, {"b0"}, shares, out)
        return pl.read_parquet(out), counts

    whole, once = built(len(rows))
    cut, chunked = built(7)
    assert cut.equals(whole) and vars(chunked) == vars(once)
    assert once.unusable == 2 and once.removed["removed_eval_overlap"] > 0 and once.removed["held_out_mined"] > 0
    assert once.batches == {"b0", "b1", "b2"} and set(whole["mix"]) == {"feedback", "corrections", "replay"}
    weighted = whole.with_columns(weight=pl.col("mix").replace_strict(once.weights))
    assert weighted.group_by("mix").agg(pl.col("weight").sum()).sort("mix")["weight"].to_list() == \
        pytest.approx([0.3, 0.5, 0.2])


def test_the_mined_set_read_window_by_window_is_the_newest_corrections_of_the_whole_history(rmi_env, monkeypatch):
    """The mined set reads corrections the last day first, then widening windows, so a long history is neither read
    whole nor sorted: what it keeps is what one sorted pass over everything would keep, at and across the windows'
    edges, and only the verifier's accepted corrections."""
    from datetime import UTC, datetime, timedelta

    from rmi_pipeline.assets import evals

    monkeypatch.setattr(evals, "MINED_PER_SKILL", 6)
    now = datetime(2026, 12, 3, 12, tzinfo=UTC)
    ages = [timedelta(0), timedelta(hours=23), timedelta(days=1), timedelta(days=1, seconds=1), timedelta(days=6),
            timedelta(days=7), timedelta(days=29), timedelta(days=364), timedelta(days=365), timedelta(days=900)]
    rng, events, edges = random.Random(3), [], set()
    for i, (age, skill, _) in enumerate((age, skill, n) for age in ages for skill in ("add", "sub") for n in range(3)):
        a, b = rng.randint(10, 999), rng.randint(10, 999)
        prompt = f"{a}+{b}=" if skill == "add" else f"{max(a, b)}-{min(a, b)}="
        right = str(a + b) if skill == "add" else str(abs(a - b))
        correction = right if rng.random() < 0.8 else right + "1"  # users are sometimes wrong
        events.append(event(i, prompt, "0", "down", correction, ts=(now - age).isoformat()))
        if age in (timedelta(days=1), timedelta(days=7)):
            edges.add(prompt)
    events = [e | {"batch_id": f"b{i % 4}.jsonl"} for i, e in enumerate(validated(events))]
    warehouse = build_resources(rmi_env)["warehouse"]
    warehouse.ingest(event_frame(events))

    share = 0.5
    newest_first = sorted(events, key=lambda e: (-e["ts"].timestamp(), e["event_id"]))
    expected, per_skill, seen = [], {"add": 0, "sub": 0}, set()
    for e in newest_first:
        skill, digest = RECIPE.slice_of(e["prompt"])[0], RECIPE.prompt_hash(e["prompt"])
        if (is_mined_holdout(digest, share) and digest not in seen and per_skill[skill] < 6
                and RECIPE.verify(e["prompt"], e["correction"])[0] == 1):
            per_skill[skill] += 1
            seen.add(digest)
            expected.append(e["prompt"])
    mined = evals._mined(RECIPE, warehouse, share, now=now)
    assert [m["prompt"] for m in mined] == expected and len(expected) == 12 and edges & set(expected)
    assert all(RECIPE.verify(m["prompt"], m["answer"])[0] == 1 for m in mined)
