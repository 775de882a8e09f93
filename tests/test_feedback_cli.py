"""`rmi feedback ingest` lands a file through the real sensor and ingest job; `rmi feedback stats` prints the views."""

import gzip

from feedback_intake import event

from rmi_pipeline.cli.main import main
from rmi_pipeline.resources import build_resources, layout


def rmi(*argv) -> int:
    return main(list(argv))


def test_ingest_lands_a_file_under_its_name_and_prints_the_counts(rmi_env, tmp_path, capsys):
    path = tmp_path / "from-support.jsonl.gz"
    path.write_bytes(gzip.compress("\n".join(
        [event(i, rating="down", correction="9") for i in range(6)] + [event(0), "{oops"]).encode()))
    assert rmi("feedback", "ingest", str(path)) == 0
    out = capsys.readouterr().out
    assert "from-support.jsonl.gz: 8 rows, 6 valid, 1 repeated in the file, 1 bad" in out
    assert "ingested 1 batch(es): 8 rows in, 6 new events, 1 duplicates, 1 quarantined" in out
    storage, warehouse = (build_resources(rmi_env)[k] for k in ("storage", "warehouse"))
    # landed under its name, then emptied once redacted (RMI_REDACT): its name stays for the sensor
    assert storage.exists(layout.incoming("from-support.jsonl.gz"))
    assert storage.read_bytes(layout.incoming("from-support.jsonl.gz")) == b""
    assert storage.read_json(layout.validated_summary("from-support.jsonl.gz"))["original"] == "removed"
    assert len(warehouse.query("SELECT * FROM feedback_events")) == 6

    assert rmi("feedback", "ingest", str(path)) == 2  # a second file of the same name would be ignored
    assert "already landed" in capsys.readouterr().err

    assert rmi("feedback", "stats", "--top", "3") == 0
    out = capsys.readouterr().out
    assert "6 feedback events" in out and "top 3 failing prompts" in out and "latest 3 corrections" in out
    assert "100.0%" in out  # every rating was a thumbs-down
    assert out.count("0+1=") == 2  # among the failing prompts and among the corrections


def test_dry_run_and_broken_files_land_nothing(rmi_env, tmp_path, capsys):
    good, broken = tmp_path / "good.jsonl", tmp_path / "broken.jsonl"
    good.write_text(event(1) + "\n")
    broken.write_text("\n".join(["garbage"] * 3 + [event(2)]))
    assert rmi("feedback", "ingest", "--dry-run", str(good)) == 0
    assert rmi("feedback", "ingest", str(broken)) == 1
    out = capsys.readouterr().out
    assert "good.jsonl: 1 rows, 1 valid" in out and "3  malformed JSON" in out and "not landed: 75% bad" in out
    assert build_resources(rmi_env)["storage"].list(layout.INCOMING) == []
    for not_a_file in (tmp_path / "missing.jsonl", tmp_path):
        assert rmi("feedback", "ingest", str(not_a_file)) == 2
        assert "not a file" in capsys.readouterr().err
    (tmp_path / "notes.csv").write_text("a,b\n")
    assert rmi("feedback", "ingest", str(tmp_path / "notes.csv")) == 2
    assert "must end in .jsonl" in capsys.readouterr().err


def test_stats_on_an_empty_warehouse_says_so(rmi_env, capsys):
    assert rmi("feedback", "stats") == 0
    assert "no feedback in the warehouse yet" in capsys.readouterr().out
