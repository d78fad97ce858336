"""The one text-file reader, shared by the CLI and the lab."""

from __future__ import annotations

import pytest

from espew_integrations.textfiles import TextFileError, read_text_file


def test_txt_lines_are_stripped_and_blank_ones_skipped(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("first text\n\n  second text \n")
    read = read_text_file(path)
    assert read.texts == ["first text", "second text"] and read.labels is None


def test_csv_text_and_label_columns(tmp_path):
    path = tmp_path / "b.csv"
    path.write_text("body,stars\nnice film,5\n ,1\nok film,\n")
    read = read_text_file(path, text_field="body", label_field="stars")
    assert read.texts == ["nice film", "ok film"] and read.labels == ["5", ""]
    single = tmp_path / "one.csv"
    single.write_text("review\ngood\nbad\n")
    assert read_text_file(single).texts == ["good", "bad"]  # a one-column CSV needs no name
    labelled = tmp_path / "l.csv"
    labelled.write_text("text,label\nx,pos\ny,neg\n")
    assert read_text_file(labelled).labels == ["pos", "neg"]  # "label" is found by itself


def test_jsonl_objects_and_bare_strings(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"text": "x y", "label": "a"}\n\n"bare"\n{"text": " z ", "label": 2}\n')
    read = read_text_file(path)
    assert read.texts == ["x y", "bare", "z"] and read.labels == ["a", "", "2"]
    path.write_text('{"text": "x"}\n{"body": "z"}\n')
    with pytest.raises(TextFileError, match=r"c\.jsonl:2 has no string field 'text'"):
        read_text_file(path)


def test_bad_files_say_what_is_wrong(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_text_file(tmp_path / "missing.csv")
    (tmp_path / "b.csv").write_text("a,b\n1,2\n")
    with pytest.raises(TextFileError, match=r"no column 'text'.*\['a', 'b'\]"):
        read_text_file(tmp_path / "b.csv")
    with pytest.raises(TextFileError, match="no label column 'stars'"):
        read_text_file(tmp_path / "b.csv", text_field="a", label_field="stars")
    (tmp_path / "d.jsonl").write_text("{broken\n")
    with pytest.raises(TextFileError, match=r"d\.jsonl:1 is not valid JSON"):
        read_text_file(tmp_path / "d.jsonl")
    (tmp_path / "e.txt").write_text("\n  \n")
    with pytest.raises(TextFileError, match="contains no texts"):
        read_text_file(tmp_path / "e.txt")
    (tmp_path / "f.parquet").write_bytes(b"PAR1")
    with pytest.raises(TextFileError, match=r"unsupported file type '\.parquet'"):
        read_text_file(tmp_path / "f.parquet")
    assert issubclass(TextFileError, ValueError)
