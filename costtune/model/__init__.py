"""The cost model: ``CostModel`` (``xgb``), its xgboost-free scorer for saved models
(``CompactModel``, ``Forest``: ``compact``, ``forest``), its feature sets (``features``), one
loader for shipped and user models (``registry``), and the baselines it is compared with
(``baselines``, ``roofline``).

Names load on first use (sklearn, xgboost and matplotlib stay unimported until needed).
"""

from __future__ import annotations

from costtune._lazy import lazy_exports

_EXPORTS = {
    "CostModel": "costtune.model.xgb",
    "CompactModel": "costtune.model.compact",
    "Forest": "costtune.model.forest",
    "ModelSchemaError": "costtune.model.xgb",
    "attach_features": "costtune.model.features",
    "feature_names": "costtune.model.features",
    "load_model": "costtune.model.registry",
    "score": "costtune.model.registry",
    "TritonTutorialList": "costtune.model.baselines",
    "BestStaticList": "costtune.model.baselines",
    "RandomConfigs": "costtune.model.baselines",
    "expected_random_scores": "costtune.model.baselines",
    "Roofline": "costtune.model.roofline",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports("costtune.model", _EXPORTS, globals())
