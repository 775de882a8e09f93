"""A team's eval files: JSONL, CSV and Parquet read into the same items, sliced by metadata, split by a stable hash;
every bad file is refused with one error naming each file, line and reason."""

import csv
import gzip
import hashlib
import io
import json

import polars as pl
import pytest

from rmi_pipeline.schema.eval_files import EvalFileError, canonical_input, held_out_fraction, read_eval_files

TOPICS = ("prices", "plans", "shipping")


def rows(n: int, start: int = 0) -> list[dict]:
    return [{"input": f"What does item {i} cost?", "target": f"{i} euros", "topic": TOPICS[i % 3],
             "lang": ("fr", "en")[i % 2]} for i in range(start, start + n)]


def jsonl(records: list[dict]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def csv_bytes(records: list[dict]) -> bytes:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(records[0]))
    writer.writeheader()
    writer.writerows(records)
    return out.getvalue().encode()


def parquet(records: list[dict]) -> bytes:
    out = io.BytesIO()
    pl.DataFrame(records).write_parquet(out)
    return out.getvalue()


def write(path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def refused(*urls, **options) -> str:
    with pytest.raises(EvalFileError) as caught:
        read_eval_files(urls, **{"min_slice_items": 1, **options})
    return str(caught.value)


def test_jsonl_csv_and_parquet_files_read_the_same_items(tmp_path):
    records = rows(60)
    nested = [{"input": r["input"], "target": r["target"], "metadata": {"topic": r["topic"], "lang": r["lang"]}}
              for r in records]
    urls = [write(tmp_path / "evals.jsonl", jsonl(records)), write(tmp_path / "nested.jsonl", jsonl(nested)),
            write(tmp_path / "evals.csv", csv_bytes(records)), write(tmp_path / "evals.parquet", parquet(records)),
            write(tmp_path / "evals.jsonl.gz", gzip.compress(jsonl(records)))]
    read = [read_eval_files([url], slice_by=["topic"]) for url in urls]
    seen = [[(i.input, i.target, i.slice, i.metadata, i.held_out, i.digest) for i in r.items] for r in read]
    assert all(s == seen[0] for s in seen[1:])
    assert len(seen[0]) == 60 and seen[0][1][:3] == ("What does item 1 cost?", "1 euros", "plans")
    assert [i.source for i in read[2].items[:2]] == [f"{urls[2]}:2", f"{urls[2]}:3"]  # line 1 is the header
    digest = hashlib.sha256((tmp_path / "evals.jsonl").read_bytes()).hexdigest()
    assert read[0].files == [{"url": urls[0], "format": "jsonl", "rows": 60, "sha256": digest}]


def test_a_file_url_and_a_plain_path_both_work(tmp_path):
    path = write(tmp_path / "evals.jsonl", jsonl(rows(20)))
    by_path, by_url = read_eval_files([path]), read_eval_files([f"file://{path}"])
    assert [i.input for i in by_path.items] == [i.input for i in by_url.items] and len(by_url.items) == 20


def test_slices_come_from_one_or_two_metadata_fields(tmp_path):
    url = write(tmp_path / "evals.jsonl", jsonl(rows(240)))
    assert read_eval_files([url]).slices.keys() == {"all"}
    one = read_eval_files([url], slice_by=["topic"])
    assert {name: s["items"] for name, s in one.slices.items()} == {"plans": 80, "prices": 80, "shipping": 80}
    two = read_eval_files([url], slice_by=["topic", "lang"])
    assert {name: s["items"] for name, s in two.slices.items()} == {
        f"{t}|{lang}": 40 for t in TOPICS for lang in ("fr", "en")}
    assert all(s["counted"] + s["held_out"] == s["items"] for s in two.slices.values())
    assert {i.slice for i in two.items if i.input == "What does item 4 cost?"} == {"plans|fr"}


def test_the_split_is_stable_across_rereads_and_when_a_file_grows(tmp_path):
    path = tmp_path / "evals.jsonl"
    first = read_eval_files([write(path, jsonl(rows(400)))], slice_by=["topic"])
    again = read_eval_files([str(path)], slice_by=["topic"])
    grown = read_eval_files([write(path, jsonl(rows(400)) + jsonl(rows(200, start=400)))], slice_by=["topic"])
    split = {i.input: i.held_out for i in first.items}
    assert {i.input: i.held_out for i in again.items} == split
    assert {i.input: i.held_out for i in grown.items[:400]} == split
    assert 0.18 < sum(split.values()) / 400 < 0.32  # held_out_share 0.25
    assert all(i.held_out == (held_out_fraction(i.digest) < 0.25) for i in grown.items)


def test_a_slice_the_hash_would_hold_out_entirely_keeps_a_counted_item(tmp_path):
    url = write(tmp_path / "evals.jsonl", jsonl(rows(30)))
    read = read_eval_files([url], slice_by=["topic"], held_out_share=0.99, min_slice_items=1)
    assert all(s["counted"] == 1 and s["held_out"] == 9 for s in read.slices.values())


def test_a_json_number_target_becomes_its_text_and_an_empty_target_is_none(tmp_path):
    records = [{"input": "2 + 2?", "target": 4}, {"input": "half?", "target": 0.5}, {"input": "open?", "target": ""},
               {"input": "none?"}]
    read = read_eval_files([write(tmp_path / "evals.jsonl", jsonl(records))], min_slice_items=1)
    assert [i.target for i in read.items] == ["4", "0.5", None, None]


def test_duplicates_are_found_after_case_and_spacing_are_normalized():
    assert canonical_input("  What IS\tthe  price?\n") == canonical_input("what is the price?") == "what is the price?"
    assert canonical_input("ｐｒｉｃｅ") == "price"  # full-width letters (NFKC)


@pytest.mark.parametrize("name, data, expected", [
    ("missing.csv", b"question,target\nhi,there\n", "missing.csv: input: no column 'input'"),
    ("missing.jsonl", b'{"input": "a"}\n{"question": "b"}\n', "missing.jsonl, line 2: input: no input field"),
    ("empty.jsonl", b'{"input": "a"}\n\n{"input": "  "}\n', "empty.jsonl, line 3: input: only whitespace"),
    ("empty.csv", b"input,target\na,b\n,c\n", "empty.csv, line 3: input: empty"),
    ("latin1.jsonl", b'{"input": "a"}\n{"input": "caf\xe9"}\n', "latin1.jsonl, line 2: not UTF-8"),
    ("latin1.csv", b'input\na\ncaf\xe9\n', "latin1.csv, line 3: not UTF-8"),
    ("broken.jsonl", b'{"input": "a"}\n{"input": "b"\n', "broken.jsonl, line 2: not JSON"),
    ("list.jsonl", b'{"input": "a"}\n[1, 2]\n', "list.jsonl, line 2: not a JSON object"),
    ("array.json", b'[{"input": "a"},\n {"input": "b"}]\n', "array.json: one JSON array"),
    ("pretty.json", b'{\n  "input": "a"\n}\n', "pretty.json: one JSON object over several lines"),
    ("number.jsonl", b'{"input": 42}\n', "number.jsonl, line 1: input: a number, not text"),
    ("target.jsonl", b'{"input": "a", "target": ["b"]}\n', "target.jsonl, line 1: target: a list, not text"),
    ("cells.csv", b"input,target\na,b\nc,d,e\n", "cells.csv, line 3: 3 cells where the header has 2"),
    ("dup.jsonl", b'{"input": "Price?"}\n{"input": "b"}\n{"input": " price? "}\n',
     "dup.jsonl, line 3: input: the same input as {dir}/dup.jsonl:1"),
    ("ids.jsonl", b'{"input": "a", "id": 7}\n{"input": "b", "id": "7"}\n', "ids.jsonl, line 2: id: the same id as"),
    ("blank.jsonl", b"\n\n", "blank.jsonl: the file has no items"),
    ("notes.txt", b"input\na\n", "notes.txt: unknown format"),
    ("garbage.parquet", b"PAR1 not really", "garbage.parquet: not Parquet"),
    ("broken.jsonl.gz", b"not gzip", "broken.jsonl.gz: not gzip"),
])
def test_each_kind_of_bad_file_is_named_with_its_line_and_reason(tmp_path, name, data, expected):
    assert expected.format(dir=tmp_path) in refused(write(tmp_path / name, data))


def test_a_missing_file_and_bad_parquet_columns_are_named(tmp_path):
    assert f"{tmp_path}/nowhere.jsonl: file not found" in refused(str(tmp_path / "nowhere.jsonl"))
    no_input = write(tmp_path / "no_input.parquet", parquet([{"question": "a"}]))
    assert "no_input.parquet: input: no column 'input'" in refused(no_input)
    numbers = write(tmp_path / "numbers.parquet", parquet([{"input": 1}, {"input": 2}]))
    message = refused(numbers)
    assert "numbers.parquet: input: the column holds int64, not text" in message and "row" not in message
    nulls = write(tmp_path / "nulls.parquet", parquet([{"input": "a"}, {"input": None}]))
    assert "nulls.parquet, row 2: input: empty (null)" in refused(nulls)


def test_slice_by_values_must_be_there_on_every_row(tmp_path):
    url = write(tmp_path / "evals.jsonl", b'{"input": "a", "topic": "x"}\n{"input": "b"}\n'
                                         b'{"input": "c", "topic": null}\n{"input": "d", "topic": " "}\n')
    message = refused(url, slice_by=["topic"])
    assert all(f"evals.jsonl, line {n}: topic: {state}" in message
               for n, state in ((2, "missing"), (3, "null"), (4, "empty")))
    table = write(tmp_path / "evals.csv", b"input,lang\na,fr\n")
    assert "evals.csv: topic: no slice_by column 'topic'" in refused(table, slice_by=["topic"])


def test_a_duplicate_of_a_row_with_another_problem_is_named_too(tmp_path):
    url = write(tmp_path / "evals.jsonl", b'{"input": "a", "target": [1]}\n{"input": "A"}\n')
    message = refused(url)
    assert "line 1: target: a list, not text" in message and f"line 2: input: the same input as {url}:1" in message


def test_duplicates_across_files_name_both_places(tmp_path):
    first = write(tmp_path / "a.jsonl", jsonl(rows(3)))
    second = write(tmp_path / "b.csv", csv_bytes(rows(2, start=2)))
    assert f"{second}, line 2: input: the same input as {first}:3" in refused(first, second)
    assert f"{first}: the same bytes as {first} (given twice)" in refused(first, first)


def test_a_slice_too_small_to_judge_is_named_with_its_count(tmp_path):
    url = write(tmp_path / "evals.jsonl", jsonl(rows(63)))
    assert len(read_eval_files([url], slice_by=["topic"], min_slice_items=21).slices) == 3  # 21 each: enough
    small = write(tmp_path / "small.jsonl", jsonl(rows(5)))
    message = refused(small, slice_by=["topic"], min_slice_items=20)
    assert f"{small}: topic: slice 'prices' has 2 good item(s); a slice needs at least 20" in message
    assert "slice 'plans' has 2" in message and "slice 'shipping' has 1" in message
    assert message.startswith("3 problem(s)")


def test_every_problem_is_reported_at_once_and_the_message_lists_twenty(tmp_path):
    lines = [b'{"input": ""}'] * 25 + [b"oops", b'{"input": 1}']
    with pytest.raises(EvalFileError) as caught:
        read_eval_files([write(tmp_path / "bad.jsonl", b"\n".join(lines)), write(tmp_path / "x.tsv", b"")])
    message, problems = str(caught.value), caught.value.problems
    assert len(problems) == 28 and message.startswith("28 problem(s)") and "... and 8 more" in message
    assert [(p.line, p.reason) for p in problems[-3:]] == [(26, "not JSON: Expecting value"),
                                                            (27, "a number, not text"), (None, problems[-1].reason)]
    assert problems[-1].file.endswith("x.tsv") and "unknown format" in problems[-1].reason


def test_an_items_source_is_its_line_in_the_file_blank_lines_counted(tmp_path):
    url = write(tmp_path / "evals.jsonl", b'\n\n{"input": "a"}\n\n{"input": "b"}\n')
    assert [i.source for i in read_eval_files([url], min_slice_items=1).items] == [f"{url}:3", f"{url}:5"]
