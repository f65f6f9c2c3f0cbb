"""Store: append-only parquet parts, metadata, validation, resume after a killed writer."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import costtune
from costtune.store.dataset import SCHEMA_VERSION, Store, StoreError, load_dataset
from costtune.types import Config, Measurement, Status, Workload

REPO = Path(__file__).resolve().parents[1]
META = {"gpu": "NVIDIA H200", "sm_count": 132, "timing": "cudagraph", "sm_clock_mhz": [1980]}


def gemm_rows(n_configs: int = 3, *, M: int = 256) -> list[dict]:
    w = Workload("gemm", {"M": M, "N": 128, "K": 64}, "float16")
    rows = []
    for i in range(n_configs):
        c = Config({"BLOCK_M": 16 * 2**i, "BLOCK_N": 64, "BLOCK_K": 32, "SPLIT_K": 1},
                   num_warps=4, num_stages=2 + i % 3)
        rows.append(Measurement(w, c, Status.OK, time_ms=0.1 + i, time_p20_ms=0.09 + i,
                                time_p80_ms=0.11 + i, rel_err=1e-3, compile_s=0.5,
                                extra={"suite": "train", "run_id": "r1"}).as_row())
    bad = Config({"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 128, "SPLIT_K": 1}, num_warps=8,
                 num_stages=5)
    rows.append(Measurement(w, bad, Status.OUT_OF_RESOURCES, compile_s=0.2,
                            error="out of resource: shared memory, Required: 393216",
                            extra={"suite": "train", "run_id": "r1"}).as_row())
    return rows


def softmax_rows() -> list[dict]:
    w = Workload("softmax", {"rows": 4096, "cols": 1000}, "bfloat16")
    return [Measurement(w, Config({"ROWS_PER_PROG": r}, num_warps=8, num_stages=1), Status.OK,
                        time_ms=0.02 * r).as_row() for r in (1, 2, 4)]


def attention_rows() -> list[dict]:
    w = Workload("attention", {"B": 2, "H": 8, "S": 1024, "D": 64, "causal": True}, "float16")
    c = Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, num_stages=3)
    return [Measurement(w, c, Status.WRONG_RESULT, time_ms=0.05, rel_err=0.7,
                        error="rel_err 0.7 > 0.01").as_row()]


def write_raw_part(path: Path, df: pd.DataFrame, meta: dict | None) -> None:
    table = pa.Table.from_pandas(df, preserve_index=False)
    if meta is not None:
        table = table.replace_schema_metadata(
            {**table.schema.metadata, b"costtune": json.dumps(meta).encode()})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


def test_round_trip_keeps_rows_failures_and_metadata(tmp_path):
    store = Store(tmp_path)
    rows = gemm_rows()
    part = store.append(rows, meta=META)
    assert re.fullmatch(r"part-\d{8}T\d{6}\.\d{6}Z-[0-9a-f]{8}\.parquet", part.name)
    assert part.parent == tmp_path / "gemm"
    assert store.parts() == [part] and store.parts("gemm") == [part] and store.parts("x") == []
    assert store.part_meta(part) == {"schema_version": SCHEMA_VERSION, "kernel": "gemm", **META}

    df = store.load()
    pd.testing.assert_frame_equal(df, pd.DataFrame(rows))
    for col in ("M", "N", "K", "BLOCK_M", "SPLIT_K", "num_warps", "num_stages"):
        assert df[col].dtype == "int64", col
    failed = df[df["status"] == "out_of_resources"].iloc[0]
    assert failed["error"].startswith("out of resource") and pd.isna(failed["time_ms"])
    assert failed["compile_s"] == 0.2


def test_append_accepts_a_dataframe_and_skips_empty(tmp_path):
    store = Store(tmp_path)
    assert store.append([], meta=META) is None
    assert store.append(pd.DataFrame(), meta=META) is None
    assert not any(tmp_path.rglob("*"))
    store.append(pd.DataFrame(softmax_rows()), meta=META)
    assert len(store.load("softmax")) == 3


def test_append_rejects_bad_rows(tmp_path):
    store = Store(tmp_path)
    with pytest.raises(ValueError, match="one kernel family"):
        store.append(gemm_rows() + softmax_rows(), meta=META)
    with pytest.raises(ValueError, match="time_ms"):
        store.append([{k: v for k, v in softmax_rows()[0].items() if k != "time_ms"}],
                     meta=META)
    with pytest.raises(ValueError, match="repeat"):
        store.append(softmax_rows() * 2, meta=META)
    with pytest.raises(ValueError, match="not_measured"):
        store.append([{**softmax_rows()[0], "status": "not_measured"}], meta=META)
    with pytest.raises(ValueError, match="schema_version"):
        store.append(softmax_rows(), meta={"schema_version": 2})
    assert store.parts() == []


def test_append_refuses_a_key_already_stored(tmp_path):
    store = Store(tmp_path)
    first = store.append(gemm_rows(2), meta=META)
    with pytest.raises(ValueError, match=f"already stored in {re.escape(str(first))}"):
        Store(tmp_path).append(gemm_rows(3), meta=META)
    assert store.parts() == [first]


def test_load_mixes_families_as_a_union_of_columns(tmp_path):
    store = Store(tmp_path)
    store.append(gemm_rows(), meta=META)
    store.append(softmax_rows(), meta=META)
    store.append(attention_rows(), meta=META)
    df = store.load()
    assert len(df) == 4 + 3 + 1
    assert list(df.columns[:3]) == ["kernel", "workload", "dtype"]
    assert list(df["kernel"].unique()) == ["attention", "gemm", "softmax"]  # folder order
    assert df["M"].dtype == "Int64" and df["ROWS_PER_PROG"].dtype == "Int64"
    assert df["causal"].dtype == "boolean"
    soft = df[df["kernel"] == "softmax"]
    assert soft["M"].isna().all() and (soft["cols"] == 1000).all()
    assert soft["suite"].isna().all()  # gemm's extra column, absent in softmax rows
    assert store.load("gemm")["M"].dtype == "int64"  # one family: plain ints
    assert store.kernels() == ["attention", "gemm", "softmax"]
    assert store.load("nothing").empty


def test_load_dataset_accepts_root_kernel_folder_or_part(tmp_path):
    store = Store(tmp_path)
    part = store.append(gemm_rows(), meta=META)
    store.append(softmax_rows(), meta=META)
    assert costtune.load_dataset is load_dataset
    assert len(load_dataset(tmp_path)) == 7
    assert len(load_dataset(tmp_path, kernel="softmax")) == 3
    assert len(load_dataset(tmp_path / "gemm")) == 4
    assert len(load_dataset(part)) == 4
    assert load_dataset(part, kernel="softmax").empty
    with pytest.raises(FileNotFoundError):
        load_dataset(tmp_path / "missing")


def test_corrupt_part_names_the_file(tmp_path):
    store = Store(tmp_path)
    good = store.append(gemm_rows(), meta=META)
    torn = good.with_name("part-29990101T000000.000000Z-deadbeef.parquet")
    torn.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(StoreError, match=re.escape(str(torn))):
        store.load()
    with pytest.raises(StoreError, match=re.escape(str(torn))):
        store.measured_keys("gemm")
    torn.write_bytes(b"not parquet at all")
    with pytest.raises(StoreError, match=re.escape(str(torn))):
        load_dataset(tmp_path)


@pytest.mark.parametrize("meta, drop, field", [
    ({"schema_version": 2, "kernel": "gemm"}, None, "schema_version"),
    ({"kernel": "gemm"}, None, "schema_version"),
    (None, None, "costtune"),
    ({"schema_version": SCHEMA_VERSION, "kernel": "gemm"}, "status", "status"),
])
def test_schema_mismatch_names_file_and_field(tmp_path, meta, drop, field):
    df = pd.DataFrame(gemm_rows())
    if drop:
        df = df.drop(columns=[drop])
    path = tmp_path / "gemm" / "part-20250101T000000.000000Z-00000000.parquet"
    write_raw_part(path, df, meta)
    with pytest.raises(StoreError) as err:
        Store(tmp_path).load()
    assert str(path) in str(err.value) and field in str(err.value)
    assert isinstance(err.value, ValueError)


def test_duplicates_across_parts_name_both_files(tmp_path):
    store = Store(tmp_path)
    old = store.append(gemm_rows(), meta=META)
    newer = pd.DataFrame(gemm_rows()).assign(time_ms=9.0)
    new = old.with_name("part-29990101T000000.000000Z-00000000.parquet")
    # Same GPU (the key is GPU, workload, config): a part written around the writer lock.
    write_raw_part(new, newer, {"schema_version": SCHEMA_VERSION, "kernel": "gemm", **META})
    with pytest.raises(StoreError) as err:
        store.load()
    assert str(old) in str(err.value) and str(new) in str(err.value)
    df = store.load(dedupe="last")
    assert len(df) == 4 and (df["time_ms"] == 9.0).all()
    with pytest.raises(ValueError, match="dedupe"):
        store.load(dedupe="first")


WRITER = textwrap.dedent("""
    import sys
    from costtune.store.dataset import Store
    store = Store(sys.argv[1])
    done = store.measured_keys("gemm")
    for i in range(int(sys.argv[2])):
        row = {"kernel": "gemm", "workload": "gemm_M64_N64_K64_float16", "dtype": "float16",
               "M": 64, "N": 64, "K": 64, "BLOCK_M": i, "num_warps": 4, "num_stages": 3,
               "config": f"BLOCK_M={i},num_warps=4,num_stages=3", "status": "ok",
               "time_ms": float(i + 1)}
        if (row["workload"], row["config"]) not in done:
            store.append([row], meta={"writer": "test"})
""")


def run_writer(root: Path, n: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.Popen([sys.executable, "-c", WRITER, str(root), str(n)], env=env)


def test_resume_after_writer_killed_with_sigkill(tmp_path):
    total = 400
    proc = run_writer(tmp_path, total)
    deadline = time.monotonic() + 60
    # Count temp files too, so the kill often lands inside a write.
    while len(list((tmp_path / "gemm").glob("part-*"))) < 10:
        assert proc.poll() is None, "writer exited early"
        assert time.monotonic() < deadline, "writer too slow"
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    # A writer killed inside append leaves at most a stray temp file; add one to be sure.
    stray = tmp_path / "gemm" / "part-29990101T000000.000000Z-0badf00d.parquet.tmp"
    stray.write_bytes(b"PAR1 torn")

    store = Store(tmp_path)
    assert stray not in store.parts()
    df = store.load("gemm")
    n = len(df)
    assert 9 <= n < total  # one writer, one part at a time: at most one was in flight
    # Rows are written in order, so at most the one in flight is lost: a prefix survives.
    assert sorted(df["BLOCK_M"]) == list(range(n))
    assert store.measured_keys("gemm") == set(zip(df["workload"], df["config"], strict=True))

    proc = run_writer(tmp_path, n + 5)  # resume: skips what is stored, writes the rest
    assert proc.wait(timeout=60) == 0
    df = store.load("gemm")
    assert sorted(df["BLOCK_M"]) == list(range(n + 5))
    assert not df.duplicated(["workload", "config"]).any()
    assert len(store.parts("gemm")) == n + 5
