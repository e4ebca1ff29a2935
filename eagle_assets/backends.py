"""The verifier-backend contract: what a plugin registers through ``register_verifier_backends``.

A backend owns everything specific to a model family. The ``hidden_states`` asset and the training
step only talk to a verifier through this class.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class VerifierBackend:
    """A way to read a verifier's configuration and extract its hidden states."""

    name: str
    description: str
    version: str = "1"
