"""speculators EAGLE-3 drafts built in memory from a transformer layer config, for tests of what trains them."""

from __future__ import annotations


def eagle3_draft(layer, draft_vocab_size: int, verifier_architecture: str):
    """A randomly initialised ``Eagle3DraftModel``: one ``layer``, 3 speculative tokens, greedy proposals."""
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig

    config = Eagle3SpeculatorConfig(
        transformer_layer_config=layer,
        draft_vocab_size=draft_vocab_size,
        norm_before_residual=True,
        eagle_aux_hidden_state_layer_ids=[1, 2, 3],
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=3)],
            default_proposal_method="greedy",
            verifier=VerifierConfig(name_or_path=None, architectures=[verifier_architecture]),
        ),
    )
    return Eagle3DraftModel(config)


def llama_layer(vocab_size: int, hidden_size: int, head_dim: int, intermediate_size: int, max_positions: int):
    """A one-layer Llama config of two query heads and one KV head, attention through sdpa: a draft layer
    small enough for CPU tests."""
    from transformers import LlamaConfig

    layer = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=head_dim,
        max_position_embeddings=max_positions,
    )
    layer._attn_implementation = "sdpa"
    return layer
