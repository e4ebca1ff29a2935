"""The offline (simulated) acceptance: the draft's chained proposals against the verifier's greedy tokens.

For every position of a sequence the verifier produced greedily, the draft proposes K tokens the
way it would while serving: from the verifier's hidden states at that position and the token just
emitted, then from its own previous step. speculators' own ``Eagle3DraftModel.forward`` computes all
positions and all K steps at once ("test-time training" unrolling, with the ground-truth token fed
into each next step — which equals the draft's own proposal wherever the chain is still accepted,
the only case that counts). A draft started after token ``m`` is accepted up to its first proposal
that differs from the verifier's greedy token; positions past the end of the sequence are never
accepted.

Convention (the same as vLLM's, so the two numbers compare directly): acceptance length
``τ = 1 + mean accepted proposals per draft`` — the +1 is the token the verifier emits itself at
every verification step. ``acceptance_per_position[k]`` is the share of drafts whose first ``k+1``
proposals were all accepted. Drafts start at every generated position (vLLM drafts only where the
previous verification ended), so this is an average over all starting points; close to, not
identical with, the served number.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SimulatedAcceptance:
    acceptance_length: float  # 1 + mean accepted proposals (vLLM's +1 convention)
    acceptance_per_position: tuple[float, ...]  # share of drafts whose first k+1 proposals were accepted
    drafts: int  # starting positions evaluated
    sequences: int


@dataclass(frozen=True)
class GreedySample:
    """One verifier-greedy sequence with its hidden states, as the hidden_states asset stores them."""

    token_ids: object  # int64 [seq]: prompt tokens then the greedy completion
    hidden_states: object  # [seq, n_aux + 1, H]: aux layers in order, pre-norm final layer last
    completion_start: int  # index of the first generated token (= prompt length)


def load_draft(folder: Path, device: str | None = None):
    """The checkpoint as a speculators ``Eagle3DraftModel`` in eval mode.

    Flex attention (the training default) has no CPU kernel for these masks: on CPU the draft runs
    with SDPA, which computes the same attention.
    """
    import torch
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    config = Eagle3SpeculatorConfig.from_pretrained(str(folder))
    if device == "cpu":
        config.transformer_layer_config._attn_implementation = "sdpa"
    model = Eagle3DraftModel.from_pretrained(str(folder), config=config)
    return model.to(device).eval()


def draft_proposals(draft, token_ids, hidden_states, num_speculative_tokens: int):
    """Target-vocabulary proposals [seq - 1, K]: row ``t`` is the draft started from the verifier's
    state at token ``t`` and the emitted token ``t + 1``; column ``k`` proposes token ``t + 2 + k``."""
    import torch

    device = next(draft.parameters()).device
    ids = torch.as_tensor(token_ids, dtype=torch.long, device=device)
    states = torch.as_tensor(hidden_states, device=device)
    seq = ids.shape[0]
    # speculators' shift_batch alignment: token t+1 with the aux states of token t, positions from 1.
    aux = states[:-1, :-1, :].reshape(seq - 1, -1).to(draft.fc.weight.dtype)
    with torch.no_grad():
        steps = draft(
            hidden_states=aux.unsqueeze(0),
            input_ids=ids[1:].unsqueeze(0),
            document_ids=torch.zeros(1, seq - 1, dtype=torch.long, device=device),
            position_ids=torch.arange(1, seq, device=device).unsqueeze(0),
            ttt_steps=num_speculative_tokens,
        )
    proposals = torch.stack([s[0] for s in steps], dim=-1)  # draft-vocabulary ids [seq - 1, K]
    if draft.use_draft_vocab:
        proposals = proposals + draft.d2t[proposals]
    return proposals


def accepted_chains(proposals, token_ids, completion_start: int):
    """(accepted [drafts, K] bool, drafts) for drafts started at generated positions.

    A draft starts once the verifier has emitted token ``m >= completion_start`` (row ``m - 1`` of
    ``proposals``) and needs at least one token after ``m`` to be checked against.
    """
    import torch

    ids = torch.as_tensor(token_ids, dtype=torch.long, device=proposals.device)
    seq, k = ids.shape[0], proposals.shape[1]
    first, end = max(completion_start - 1, 0), seq - 2
    if end <= first:
        return torch.zeros(0, k, dtype=torch.bool, device=proposals.device)
    rows = torch.arange(first, end, device=proposals.device)
    target_pos = rows.unsqueeze(1) + 2 + torch.arange(k, device=proposals.device).unsqueeze(0)
    valid = target_pos < seq
    targets = ids[target_pos.clamp(max=seq - 1)]
    correct = (proposals[rows] == targets) & valid
    return correct.to(torch.int64).cumprod(dim=1).bool()


def simulate(draft, samples: Iterable[GreedySample], num_speculative_tokens: int) -> SimulatedAcceptance:
    """Chained acceptance of ``draft`` over ``samples`` (see the module docstring for the convention)."""
    import torch

    per_position = torch.zeros(num_speculative_tokens, dtype=torch.float64)
    drafts = sequences = 0
    for sample in samples:
        proposals = draft_proposals(draft, sample.token_ids, sample.hidden_states, num_speculative_tokens)
        chains = accepted_chains(proposals, sample.token_ids, sample.completion_start)
        per_position += chains.sum(dim=0).double().cpu()
        drafts += chains.shape[0]
        sequences += 1
    if drafts == 0:
        raise ValueError("no draft positions to evaluate: the samples have no generated tokens to check")
    rates = tuple((per_position / drafts).tolist())
    return SimulatedAcceptance(1.0 + sum(rates), rates, drafts, sequences)
