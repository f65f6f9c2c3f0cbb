"""``Forest``: an XGBoost gbtree booster's trees as flat numpy arrays, scored without xgboost.

The pruning hook's first call in a fresh process would otherwise import xgboost (which imports
scikit-learn, scipy and pandas: ~1.3 s on a 2-core VM) to score a few hundred configs. A
``Forest`` holds every node of every tree in one set of arrays and walks all trees for all rows
at once, one step per depth level; it follows XGBoost's rule (left when ``x < split_condition``
in float32, NaN the node's default direction) and adds the leaves in float32 in tree order
after the base score, as XGBoost's CPU predictor does, so a row scores bit for bit what
``booster.inplace_predict`` returns (configs XGBoost scores alike stay tied).

A saved model's forest is ``<stem>.forest.npz`` beside ``<stem>.json`` + ``<stem>.ubj``
(``CostModel.save`` writes it); it records the sha256 of the ``.ubj`` it was made from, so a
retrained booster is never scored with stale trees. For files saved before forests existed::

    python -m costtune.model.forest costtune/models/*.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from costtune.model.files import MODEL_FORMAT

FORMAT_VERSION = 1
SUFFIX = ".forest.npz"
# Objectives whose prediction is the raw margin (no link function).
MARGIN_OBJECTIVES = ("rank:pairwise", "rank:ndcg", "rank:map", "reg:squarederror",
                     "reg:absoluteerror", "reg:pseudohubererror", "reg:quantileerror")
_ARRAYS = ("left", "right", "feature", "cond", "default_left", "roots", "part", "base")


def forest_path(json_path: str | os.PathLike) -> Path:
    """``<stem>.forest.npz`` of a model's ``<stem>.json`` (or ``.ubj``, or bare stem)."""
    p = Path(json_path)
    if p.suffix in (".json", ".ubj"):
        p = p.with_suffix("")
    return p.with_name(p.name + SUFFIX)


def file_sha256(path: str | os.PathLike) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class Forest:
    """The trees of one or more gbtree boosters (their scores summed), as flat arrays.

    Node arrays (all trees concatenated): ``left``/``right`` child indices (a leaf points to
    itself), ``feature``, ``cond`` (float32 threshold, or a leaf's value), ``default_left``.
    Per tree: ``roots`` (its root node) and ``part`` (which booster). Per booster: ``base``
    (float32 base score). ``depth``: the deepest leaf's depth.
    """

    def __init__(self, *, left: np.ndarray, right: np.ndarray, feature: np.ndarray,
                 cond: np.ndarray, default_left: np.ndarray, roots: np.ndarray,
                 part: np.ndarray, base: np.ndarray, depth: int, n_features: int,
                 booster_sha256: str = "") -> None:
        self.left = np.asarray(left, dtype=np.int32)
        self.right = np.asarray(right, dtype=np.int32)
        self.feature = np.asarray(feature, dtype=np.int32)
        self.cond = np.asarray(cond, dtype=np.float32)
        self.default_left = np.asarray(default_left, dtype=bool)
        self.roots = np.asarray(roots, dtype=np.int32)
        self.part = np.asarray(part, dtype=np.int32)
        self.base = np.asarray(base, dtype=np.float32)
        self.depth = int(depth)
        self.n_features = int(n_features)
        self.booster_sha256 = str(booster_sha256)
        n = len(self.cond)
        if not all(len(a) == n for a in (self.left, self.right, self.feature,
                                         self.default_left)):
            raise ValueError("forest node arrays differ in length")
        if len(self.roots) != len(self.part):
            raise ValueError("forest roots and part differ in length")
        if np.any(np.diff(self.part) < 0) or (len(self.part) and
                                              self.part.max() >= len(self.base)):
            raise ValueError("forest part indices must be sorted and below len(base)")
        leaf = self.left == np.arange(n)
        if np.any(self.right[~leaf] != self.left[~leaf] + 1) or np.any(self.right[leaf] !=
                                                                      self.left[leaf]):
            raise ValueError("forest nodes need each right child right after its left sibling")
        if not np.all(np.isfinite(self.cond[~leaf])):
            raise ValueError("forest split conditions must be finite")
        # predict's view: the column of its [x, x, 0] matrix each node reads, and +inf at leaves
        self._column = np.where(leaf, 2 * self.n_features, self.feature + np.where(
            self.default_left, 0, self.n_features)).astype(np.intp)
        self._threshold = np.where(leaf, np.float32(np.inf), self.cond).astype(np.float32)
        self._left, self._roots = self.left.astype(np.intp), self.roots.astype(np.intp)

    @property
    def n_trees(self) -> int:
        return len(self.roots)

    # ----------------------------------------------------------------------------- building
    @classmethod
    def from_booster(cls, booster: Any) -> Forest:
        """The forest of an ``xgboost.Booster``, or of an object with ``.base`` and ``.delta``
        boosters (``model.learned._SumBooster``: the sum of both scores)."""
        if hasattr(booster, "base") and hasattr(booster, "delta"):
            return cls.concat([cls.from_booster(booster.base), cls.from_booster(booster.delta)])
        return cls.from_json(json.loads(booster.save_raw("json")))

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Forest:
        """The forest of a booster's JSON dump (``json.loads(booster.save_raw("json"))``)."""
        learner = doc["learner"]
        objective = learner.get("objective", {}).get("name")
        if objective not in MARGIN_OBJECTIVES:
            raise ValueError(f"Forest scores margin objectives {list(MARGIN_OBJECTIVES)}; "
                             f"the booster's objective is {objective!r}")
        param = learner["learner_model_param"]
        if int(param.get("num_class", "0")) > 1 or int(param.get("num_target", "1")) != 1:
            raise ValueError("Forest scores single-output boosters only")
        gbm = learner["gradient_booster"]
        if gbm.get("name") != "gbtree":
            raise ValueError(f"Forest scores gbtree boosters; this one is {gbm.get('name')!r}")
        trees = gbm["model"]["trees"]
        nodes: dict[str, list[np.ndarray]] = {k: [] for k in _ARRAYS[:5]}
        roots, depth, offset = [], 0, 0
        for tree in trees:
            arrays, tree_depth = _tree_arrays(tree, offset)
            for k, v in arrays.items():
                nodes[k].append(v)
            roots.append(offset)
            offset += len(arrays["cond"])
            depth = max(depth, tree_depth)

        def cat(k: str, dtype: Any) -> np.ndarray:
            return np.concatenate(nodes[k]) if nodes[k] else np.zeros(0, dtype=dtype)

        return cls(left=cat("left", np.int32), right=cat("right", np.int32),
                   feature=cat("feature", np.int32), cond=cat("cond", np.float32),
                   default_left=cat("default_left", bool), roots=np.array(roots),
                   part=np.zeros(len(roots)), base=[_base_score(param["base_score"])],
                   depth=depth, n_features=int(param["num_feature"]))

    @classmethod
    def concat(cls, forests: Sequence[Forest]) -> Forest:
        """One forest scoring the sum of ``forests``' scores."""
        if not forests:
            raise ValueError("concat needs at least one forest")
        n_features = {f.n_features for f in forests}
        if len(n_features) != 1:
            raise ValueError(f"forests differ in feature count: {sorted(n_features)}")
        offsets = np.cumsum([0] + [len(f.cond) for f in forests[:-1]])
        parts = np.cumsum([0] + [len(f.base) for f in forests[:-1]])
        return cls(left=np.concatenate([f.left + o for f, o in zip(forests, offsets)]),
                   right=np.concatenate([f.right + o for f, o in zip(forests, offsets)]),
                   feature=np.concatenate([f.feature for f in forests]),
                   cond=np.concatenate([f.cond for f in forests]),
                   default_left=np.concatenate([f.default_left for f in forests]),
                   roots=np.concatenate([f.roots + o for f, o in zip(forests, offsets)]),
                   part=np.concatenate([f.part + p for f, p in zip(forests, parts)]),
                   base=np.concatenate([f.base for f in forests]),
                   depth=max(f.depth for f in forests), n_features=n_features.pop())

    # ---------------------------------------------------------------------------- inference
    def predict(self, x: np.ndarray) -> np.ndarray:
        """Scores of a [rows, features] matrix (cast to float32; NaN = missing): float32 as
        ``inplace_predict`` returns for one booster, float64 sums for several."""
        x = np.asarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.n_features:
            raise ValueError(f"Forest.predict needs a [rows, {self.n_features}] matrix; "
                             f"got shape {x.shape}")
        rows, f = x.shape
        if rows == 0:
            return np.zeros(0, dtype=np.float32)
        # Columns [x, NaN as -inf | x, NaN as +inf | 0]: a node reads the copy that sends a
        # missing value its default way (thresholds are finite), a leaf the zero column
        # against +inf, so one compare steps every node: right (left + 1) when x >= threshold.
        wide = np.zeros((rows, 2 * f + 1), dtype=np.float32)
        missing = np.isnan(x)
        wide[:, :f] = np.where(missing, -np.inf, x)
        wide[:, f:2 * f] = np.where(missing, np.inf, x)
        flat = wide.ravel()
        offsets = (np.arange(rows, dtype=np.intp) * (2 * f + 1))[None, :]
        node = np.repeat(self._roots[:, None], rows, axis=1)  # [trees, rows]
        for _ in range(self.depth):  # np.take of intp indices: the fastest gather
            value = np.take(flat, offsets + np.take(self._column, node))
            node = np.take(self._left, node) + (value >= np.take(self._threshold, node))
        leaves = np.take(self.cond, node)
        sums = []
        for p, base in enumerate(self.base):
            own = leaves[self.part == p]
            stack = np.concatenate([np.full((1, rows), base, dtype=np.float32), own])
            # accumulate, not sum: XGBoost adds in tree order (sum's pairwise order differs)
            sums.append(np.add.accumulate(stack, axis=0, dtype=np.float32)[-1])
        if len(sums) == 1:
            return sums[0]
        return np.sum([s.astype(np.float64) for s in sums], axis=0)

    # -------------------------------------------------------------------------- persistence
    def save(self, path: str | os.PathLike) -> Path:
        """Write the forest as ``.npz`` (no pickles); returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        arrays = {k: getattr(self, k) for k in _ARRAYS}
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.npz")
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays, depth=np.int64(self.depth),
                     n_features=np.int64(self.n_features),
                     format_version=np.int64(FORMAT_VERSION),
                     booster_sha256=np.str_(self.booster_sha256))
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> Forest:
        """A saved forest; ValueError for another format version or a broken file."""
        try:
            # The file opened here, so a broken one is closed too (np.load would leave it).
            with open(path, "rb") as file, np.load(file, allow_pickle=False) as data:
                version = int(data["format_version"])
                if version != FORMAT_VERSION:
                    raise ValueError(f"{path}: forest format {version}, this code reads "
                                     f"{FORMAT_VERSION}")
                return cls(**{k: data[k] for k in _ARRAYS}, depth=int(data["depth"]),
                           n_features=int(data["n_features"]),
                           booster_sha256=str(data["booster_sha256"]))
        except (KeyError, OSError, EOFError, zipfile.BadZipFile) as exc:  # a cut-short file
            raise ValueError(f"{path}: not a readable forest file ({type(exc).__name__}: "
                             f"{exc})") from exc


def _tree_arrays(tree: dict[str, Any], offset: int) -> tuple[dict[str, np.ndarray], int]:
    """One tree's node arrays, renumbered from the root breadth first so that every right
    child directly follows its left sibling (children shifted by ``offset``), and its depth.
    Nodes the root does not reach (deleted ones) are dropped."""
    if any(int(t) != 0 for t in tree.get("split_type", [])):
        raise ValueError("Forest does not score categorical splits")
    left = np.asarray(tree["left_children"], dtype=np.int64)
    right = np.asarray(tree["right_children"], dtype=np.int64)
    order, depth_of = [0], [0]
    for i in range(len(left)):  # grows while read
        if i >= len(order):
            break
        if left[order[i]] != -1:
            order += [int(left[order[i]]), int(right[order[i]])]
            depth_of += [depth_of[i] + 1] * 2
    order = np.asarray(order)
    new_id = np.full(len(left), -1, dtype=np.int64)
    new_id[order] = np.arange(len(order))
    leaf = left[order] == -1
    own = np.arange(len(order))
    new_left = np.where(leaf, own, new_id[np.where(leaf, 0, left[order])])
    arrays = {"left": new_left + offset, "right": np.where(leaf, own, new_left + 1) + offset,
              "feature": np.where(leaf, 0, np.asarray(tree["split_indices"])[order]),
              "cond": np.asarray(tree["split_conditions"], dtype=np.float32)[order],
              "default_left": np.asarray(tree["default_left"], dtype=bool)[order]}
    return arrays, max(depth_of)


def _base_score(text: Any) -> float:
    """XGBoost's stored base score: ``'[-0E0]'``, ``'5E-1'`` or a number."""
    if isinstance(text, str):
        text = text.strip().strip("[]").split(",")[0]
    return float(text)


def write_forest(json_path: str | os.PathLike, booster: Any = None) -> Path:
    """Write ``<stem>.forest.npz`` for the model ``<stem>.json`` from its ``.ubj`` (or from
    ``booster`` when given: it must be the booster saved there); returns the npz path."""
    json_path = Path(json_path)
    ubj = json_path.with_suffix(".ubj")
    if not ubj.is_file():
        raise FileNotFoundError(f"{json_path}: its booster {ubj.name} is missing")
    if booster is None:
        import xgboost as xgb

        booster = xgb.Booster()
        booster.load_model(str(ubj))
    forest = Forest.from_booster(booster)
    forest.booster_sha256 = file_sha256(ubj)
    return forest.save(forest_path(json_path))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Write <stem>.forest.npz beside saved models (<stem>.json + <stem>.ubj).")
    parser.add_argument("models", nargs="+", help="model JSON files, e.g. costtune/models/*.json")
    args = parser.parse_args(argv)
    for name in args.models:
        path = Path(name)
        try:
            meta = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise SystemExit(f"{path}: not a readable model JSON ({exc})") from None
        if not isinstance(meta, dict) or meta.get("format") != MODEL_FORMAT:
            print(f"skipped {path} (not a costtune CostModel file)")
            continue
        out = write_forest(path)
        print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
