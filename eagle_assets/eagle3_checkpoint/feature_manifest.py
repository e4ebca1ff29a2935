"""What a training folder's features are: the ``hidden_states`` manifest of the verifier that made them (or,
with ``features: online``, of the server that makes them), and the check of one stored file against it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from eagle_assets.core.layout import MANIFEST_FILE, current_folder


class TrainingDataError(ValueError):
    """Upstream features are missing or inconsistent; the message names the partition/row and the fix."""


# safetensors' dtype names -> the manifest's storage dtypes (hidden_state_files.FEATURE_DTYPES).
STORED_DTYPES = {"BF16": "bfloat16", "F8_E4M3": "fp8"}


@dataclass(frozen=True)
class FeatureManifest:
    """What the ``hidden_states`` asset recorded about the verifier it captured."""

    verifier_path: str
    verifier_id: str
    backend: str
    layer_ids: list[int]  # captured layers in file order: the auxiliary ids, then the final layer's
    hidden_size: int
    dtype: str

    @property
    def aux_layer_ids(self) -> list[int]:
        return self.layer_ids[:-1]

    @classmethod
    def read(cls, folder: Path) -> FeatureManifest:
        """Parse the ``manifest.json`` of the ``hidden_states`` partition ``folder``'s current version."""
        path = current_folder(folder) / MANIFEST_FILE
        if not path.exists():
            raise TrainingDataError(f"{path} is missing: materialize the hidden_states partition first")
        raw = json.loads(path.read_text())
        try:
            verifier = raw["verifier"]
            return cls(
                verifier_path=str(verifier["model_path"]),
                verifier_id=str(verifier["identity"]),
                backend=str(verifier["backend"]),
                layer_ids=[int(i) for i in raw["layer_ids"]],
                hidden_size=int(raw["hidden_size"]),
                dtype=str(raw["dtype"]),
            )
        except (KeyError, TypeError) as missing:
            raise TrainingDataError(f"{path} lacks field {missing}: re-materialize hidden_states") from None

    def identity(self) -> tuple:
        return (self.verifier_id, tuple(self.layer_ids), self.hidden_size, self.dtype)


def check_tensor_file(path: Path, row: dict, manifest: FeatureManifest) -> None:
    from safetensors import safe_open

    if not path.exists():
        raise TrainingDataError(
            f"{path} (row {row['partition']}/{row['prompt_id']}) is missing: re-materialize hidden_states"
        )
    with safe_open(str(path), framework="pt") as fh:
        states = fh.get_slice("hidden_states")
        shape, stored = states.get_shape(), STORED_DTYPES.get(states.get_dtype(), states.get_dtype())
    if stored != manifest.dtype:
        raise TrainingDataError(
            f"{path} (row {row['partition']}/{row['prompt_id']}) holds {stored} hidden states but manifest.json "
            f"says {manifest.dtype}: re-materialize hidden_states"
        )
    expected = [row["seq_len"], len(manifest.layer_ids), manifest.hidden_size]
    if list(shape) != expected:
        raise TrainingDataError(
            f"{path} (row {row['partition']}/{row['prompt_id']}) holds hidden_states {list(shape)}, "
            f"expected {expected} from manifest.json: re-materialize hidden_states"
        )
