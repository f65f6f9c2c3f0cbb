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
import warnings
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
    # A kernel name the store does not hold: empty, and said (a typo is not silent); a suite
    # kernel not stored yet (a collection's first part) is empty without a word.
    with pytest.warns(costtune.store.StoreWarning,
                      match="no kernel 'softmx' in .*: it holds gemm, softmax"):
        assert load_dataset(tmp_path, kernel="softmx").empty
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_dataset(tmp_path, kernel="attention").empty


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


SAME_KEYS_WRITER = textwrap.dedent("""
    import random, sys, time
    from costtune.store.dataset import Store
    root, seed, mode, start_at = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    store = Store(root)
    rows = [{"kernel": "gemm", "workload": "gemm_M64_N64_K64_float16", "dtype": "float16",
             "M": 64, "N": 64, "K": 64, "BLOCK_M": i, "num_warps": 4, "num_stages": 3,
             "config": f"BLOCK_M={i},num_warps=4,num_stages=3", "status": "ok",
             "time_ms": 1.0 + i, "writer": seed} for i in range(20)]
    random.Random(seed).shuffle(rows)
    time.sleep(max(0.0, start_at - time.time()))  # all four start together
    written = refused = 0
    for row in rows:
        done = store.measured_keys("gemm")  # the check-then-write every writer does
        if (row["workload"], row["config"]) in done:
            continue
        try:
            if store.append([row], meta={"gpu": "NVIDIA H200"}, existing=mode) is not None:
                written += 1
        except ValueError as exc:
            assert "already stored" in str(exc), exc
            refused += 1
    print(written, refused)
""")


@pytest.mark.parametrize("mode", ["error", "skip"])
def test_four_writers_of_the_same_keys_store_each_key_once(tmp_path, mode):
    """The issue's goal: 4 processes appending the same 20 keys, one part per key, at once.
    Without the writer lock they wrote 40-61 parts and the dataset refused to load."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    start_at = time.time() + 3.0
    procs = [subprocess.Popen([sys.executable, "-c", SAME_KEYS_WRITER, str(tmp_path), str(i),
                               mode, str(start_at)], env=env, stdout=subprocess.PIPE, text=True)
             for i in range(4)]
    outs = [p.communicate(timeout=120)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    written = sum(int(o[0]) for o in outs)
    store = Store(tmp_path)
    df = store.load()  # loadable: raises on a key stored twice
    assert len(df) == 20 and sorted(df["BLOCK_M"]) == list(range(20))
    assert written == 20 and len(store.parts("gemm")) == 20
    assert not df.duplicated(["workload", "config"]).any()
    assert not list((tmp_path / "gemm").glob("*.tmp"))


def test_append_checks_values_and_names_row_and_field(tmp_path):
    store = Store(tmp_path)
    good = softmax_rows()
    cases = [
        ({"time_ms": "2.5"}, "field 'time_ms' is '2.5' (str); expected a number"),
        ({"time_ms": float("nan")}, "field 'time_ms' is nan in an 'ok' row"),
        ({"time_ms": float("inf")}, "field 'time_ms' is inf in an 'ok' row"),
        ({"time_ms": -1.0}, "field 'time_ms' is -1.0 in an 'ok' row"),
        ({"time_ms": 0.0}, "field 'time_ms' is 0.0 in an 'ok' row"),
        ({"workload": None}, "field 'workload' is nan (float); expected a non-empty"),
        ({"config": ""}, "field 'config' is '' (str); expected a non-empty string"),
        ({"status": "great"}, "field 'status' is 'great', not a storable status"),
        ({"status": "compile_error", "time_ms": -3.0}, "expected a finite time >= 0 or NaN"),
        ({"compile_s": "fast"}, "field 'compile_s' is 'fast' (str)"),
        ({"gpu": 7}, "field 'gpu' is 7.0 (float); expected a GPU name"),
        # A suite family's rows carry its problem sizes (features are built from them).
        ({"cols": None}, "problem field 'cols' is nan (float); expected an integer"),
        ({"rows": 2.5}, "problem field 'rows' is 2.5 (float); expected an integer"),
        ({"rows": "64"}, "problem field 'rows' is '64' (str); expected an integer"),
    ]
    for change, message in cases:
        rows = [dict(r) for r in good]
        rows[1].update(change)
        with pytest.raises(ValueError) as err:
            store.append(rows, meta=META)
        text = str(err.value)
        assert "\n" not in text and text.startswith("row 1 (workload "), text
        assert message in text, text
    assert store.parts() == []
    no_sizes = [{k: v for k, v in r.items() if k != "cols"} for r in good]
    with pytest.raises(ValueError, match=r"^softmax rows lack problem column\(s\) \['cols'\]"):
        store.append(no_sizes, meta=META)
    gemm = {"kernel": "gemm", "workload": "g", "dtype": "float16", "config": "c",
            "status": "ok", "time_ms": 1.0}
    with pytest.raises(ValueError, match=r"lack problem column\(s\) \['M', 'N', 'K'\]"):
        store.append([gemm], meta=META)
    assert store.parts() == []
    # A user's kernel (a harvest) has no known problem columns: not checked.
    store.append([{**gemm, "kernel": "my_matmul"}], meta=META)
    store.append([{**gemm, "M": 64.0, "N": 64, "K": 64}], meta=META)  # a widened int column
    assert len(store.parts()) == 2
    for part in store.parts():
        part.unlink()
    # Failed rows may carry a time (wrong_result) or none; numbers stay float columns.
    store.append([{**good[0], "status": "wrong_result", "time_ms": 0.3},
                  {**good[1], "status": "timeout", "time_ms": None}], meta=META)
    df = store.load()
    assert df["time_ms"].dtype == "float64" and df["time_ms"].isna().sum() == 1


def test_only_the_layout_loads_and_strays_are_reported(tmp_path):
    store = Store(tmp_path)
    store.append(gemm_rows(), meta=META)
    store.append(softmax_rows(), meta=META)
    part = store.parts("softmax")[0]
    stray = tmp_path / part.name  # a part copied to the root: the 92-of-8,199 rows
    stray.write_bytes(part.read_bytes())
    odd = tmp_path / "gemm" / "backup.parquet"
    odd.write_bytes(part.read_bytes())
    (tmp_path / "DATASHEET.md").write_text("not data")
    (tmp_path / "features.parquet").write_bytes(b"a feature table, not a part")
    for load in (lambda: load_dataset(tmp_path), lambda: Store(tmp_path).load()):
        with pytest.warns(costtune.store.StoreWarning) as record:
            df = load()
        assert len(df) == 7 and set(df["kernel"]) == {"gemm", "softmax"}
        text = str(record[0].message)
        assert str(stray) in text and str(odd) in text and "features.parquet" not in text
    assert store.strays() == sorted([stray, odd])
    with pytest.warns(costtune.store.StoreWarning, match=re.escape(str(odd))):
        assert len(load_dataset(tmp_path / "gemm")) == 4  # a kernel folder alone
    # A part whose metadata names another family than its folder is not trusted.
    (tmp_path / "attention").mkdir()
    moved = tmp_path / "attention" / part.name
    moved.write_bytes(part.read_bytes())
    with pytest.raises(StoreError, match="differs from its folder 'attention'"), \
            pytest.warns(costtune.store.StoreWarning):
        Store(tmp_path).load()


def test_missing_paths_behave_the_same_everywhere(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(FileNotFoundError, match="no dataset at"):
        load_dataset(missing)
    with pytest.raises(FileNotFoundError, match="no dataset at"):
        Store(missing).load()
    assert Store(missing).measured_keys("gemm") == set() and Store(missing).parts() == []
    assert load_dataset(tmp_path).empty and Store(tmp_path).load().empty  # exists, empty


def test_a_bad_part_is_skipped_only_when_asked_and_named(tmp_path):
    store = Store(tmp_path)
    good = store.append(gemm_rows(), meta=META)
    torn = good.with_name("part-29990101T000000.000000Z-deadbeef.parquet")
    torn.write_bytes(good.read_bytes()[:100])
    with pytest.raises(StoreError, match=re.escape(str(torn))):
        store.load()
    for load in (lambda: store.load(on_bad_part="skip"),
                 lambda: load_dataset(tmp_path, on_bad_part="skip"),
                 lambda: Store(tmp_path, on_bad_part="skip").load()):
        with pytest.warns(costtune.store.StoreWarning, match=r"skipped 1 bad part\(s\): "
                          + re.escape(str(torn))):
            assert len(load()) == 4
    skipping = Store(tmp_path, on_bad_part="skip")
    with pytest.warns(costtune.store.StoreWarning, match=re.escape(str(torn))):
        assert len(skipping.measured_keys("gemm")) == 4  # resume goes on around it
    with pytest.raises(ValueError, match="on_bad_part"):
        Store(tmp_path, on_bad_part="ignore")


def test_stale_temp_files_are_removed_young_ones_kept(tmp_path):
    store = Store(tmp_path, stale_temp_s=60)
    store.append(gemm_rows(1), meta=META)
    old = tmp_path / "gemm" / "part-20250101T000000.000000Z-0badf00d.parquet.tmp"
    young = tmp_path / "gemm" / "part-20250101T000001.000000Z-0badf00e.parquet.tmp"
    old.write_bytes(b"PAR1 torn")
    young.write_bytes(b"PAR1 being written")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    store.append(softmax_rows(), meta=META)  # another family's folder: gemm's untouched
    assert old.exists()
    store.append(gemm_rows(3, M=512), meta=META)  # the next gemm writer cleans up
    assert not old.exists() and young.exists()
    assert store.clean_temp(older_than_s=0) == [young] and not young.exists()


def test_the_gpu_is_part_of_the_key(tmp_path):
    store = Store(tmp_path)
    rows = gemm_rows()
    store.append(rows, meta=META)
    key = (rows[0]["workload"], rows[0]["config"])
    assert key in store.measured_keys("gemm", gpu="NVIDIA H200")
    assert store.measured_keys("gemm", gpu="NVIDIA A100") == set()
    assert key in store.measured_keys("gemm")  # any GPU
    store.append([{**r, "gpu": "NVIDIA A100"} for r in rows], meta=META)  # the row's gpu wins
    with pytest.raises(ValueError, match="already stored"):
        store.append([{**rows[0], "gpu": "NVIDIA A100"}], meta=META)
    assert store.append([{**rows[0], "gpu": "NVIDIA A100"}], meta=META, existing="skip") is None
    assert len(store.load()) == 8
    assert len(store.load(gpu="NVIDIA A100")) == 4 == len(load_dataset(tmp_path, gpu=META["gpu"]))


CLAIMER = textwrap.dedent("""
    import sys, time
    from costtune.store.dataset import Store
    claim = Store(sys.argv[1]).claim("gemm", "gemm_M64_N64_K64_float16", gpu="NVIDIA H200")
    print("held" if claim is not None else "busy", flush=True)
    time.sleep(60)
""")


def test_a_claim_is_exclusive_and_dies_with_its_process(tmp_path):
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, "-c", CLAIMER, str(tmp_path)], env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        store = Store(tmp_path)
        assert store.claim("gemm", "gemm_M64_N64_K64_float16", gpu="NVIDIA H200") is None
        other = store.claim("gemm", "gemm_M64_N64_K64_float16", gpu="NVIDIA A100")
        assert other is not None  # another GPU model: another claim
        other.release()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        claim = store.claim("gemm", "gemm_M64_N64_K64_float16", gpu="NVIDIA H200")
        assert claim is not None  # the OS released the dead collector's lock
        claim.release()
        assert store.load().empty  # claims and the lock file are not data
    finally:
        proc.kill()
        proc.wait()


def test_a_gpu_filter_matching_nothing_says_so():
    import warnings as _w

    from costtune.store.dataset import StoreWarning

    dataset = Path(__file__).resolve().parents[1] / "datasets" / "h200"
    with _w.catch_warnings(record=True) as caught:
        _w.simplefilter("always")
        assert costtune.load_dataset(dataset, kernel="softmax", gpu="H200").empty
    assert any(issubclass(w.category, StoreWarning) and "'NVIDIA H200'" in str(w.message)
               for w in caught)


def test_an_implementation_name_loads_its_rows_from_the_family(tmp_path):
    store = Store(tmp_path)
    one = Workload("softmax", {"rows": 64, "cols": 1000}, "float16",
                   implementation="softmax_onepass")
    store.append(softmax_rows(), meta=META)
    store.append([Measurement(one, Config({}, num_warps=4, num_stages=1), Status.OK,
                              time_ms=0.01).as_row()], meta=META)
    for path in (tmp_path, tmp_path / "softmax"):
        df = load_dataset(path, kernel="softmax_onepass")
        assert list(df["workload"]) == [one.id] and set(df["implementation"]) == {
            "softmax_onepass"}, path
        assert len(load_dataset(path, kernel="softmax")) == 4  # the family: every implementation
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # none stored yet: empty, and no warning
        assert load_dataset(tmp_path, kernel="softmax_multirow").empty
        assert load_dataset(tmp_path, kernel="gemm_tma").empty


def test_a_fresh_writer_reads_the_key_index_and_only_newer_parts(tmp_path, monkeypatch):
    """Once ``EVERY`` parts are outside the folder's key index an append rewrites it: a
    writer in a fresh process reads only the parts written since, and still refuses a stored
    key."""
    from costtune.store import dataset, key_index

    monkeypatch.setattr(key_index, "EVERY", 3)
    parts = [Store(tmp_path).append(gemm_rows(2, M=M), meta=META) for M in (64, 128, 256, 512)]
    assert set(key_index.read(tmp_path / "gemm")) == {p.name for p in parts[:3]}
    reads = []
    real = dataset.read_part
    monkeypatch.setattr(dataset, "read_part", lambda *a, **k: reads.append(a[0]) or real(*a, **k))
    with pytest.raises(ValueError, match="already stored"):
        Store(tmp_path).append(gemm_rows(1, M=128), meta=META)
    assert reads == [parts[3]]
    assert Store(tmp_path).measured_keys("gemm") == {
        (r["workload"], r["config"]) for M in (64, 128, 256, 512) for r in gemm_rows(2, M=M)}


def test_a_torn_stale_or_foreign_key_index_is_not_trusted(tmp_path, monkeypatch):
    """The index saves reading parts, never decides what is stored: a torn index is read as
    empty; a part torn in place (same name, same size: only its time differs) is read itself
    and named; an entry whose part is gone holds nothing; keys the index cannot hold (a foreign
    part's integer workloads) leave it unwritten and the append done."""
    from costtune.store import key_index

    monkeypatch.setattr(key_index, "EVERY", 1)
    store = Store(tmp_path)
    first = store.append(gemm_rows(1, M=64), meta=META)
    second = store.append(gemm_rows(1, M=128), meta=META)
    index = tmp_path / "gemm" / key_index.INDEX
    assert set(key_index.read(index.parent)) == {first.name, second.name}
    good = index.read_bytes()
    index.write_bytes(b"ARROW1 torn")
    with pytest.raises(ValueError, match="already stored"):
        Store(tmp_path).append(gemm_rows(1, M=64), meta=META)  # read from the parts

    index.write_bytes(good)
    size = first.stat().st_size
    with open(first, "r+b") as f:  # torn in place: data pages zeroed, the size unchanged
        f.seek(4)
        f.write(b"\0" * (size - 4 - 2048))
    assert first.stat().st_size == size
    with pytest.raises(StoreError, match=first.name):
        Store(tmp_path).measured_keys("gemm")
    first.unlink()

    second.unlink()
    assert (gemm_rows(1, M=128)[0]["workload"], gemm_rows(1, M=128)[0]["config"]) not in \
        Store(tmp_path).measured_keys("gemm")

    foreign = tmp_path / "gemm" / "part-20250101T000000.000000Z-0badf00d.parquet"
    write_raw_part(foreign, pd.DataFrame([{**gemm_rows(1, M=999)[0], "workload": 7}]),
                   {"schema_version": SCHEMA_VERSION, "kernel": "gemm", **META})
    assert Store(tmp_path).append(gemm_rows(1, M=128), meta=META) is not None
    assert len(Store(tmp_path).load("gemm")) == 3  # the foreign row and two of M=128
