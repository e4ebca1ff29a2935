"""The GPU-bound rate of a draft-training step, and where a real step's time goes.

    python benchmarks/train_step_probe.py [--resident-batches 0] [--steps 60] [--losses fused eager]
                                          [--profile-steps 20] [--profile-resident 10] [--real-epochs 2]
                                          [--shape kimi-k2.5] -- <speculators train flags>

Starts the training process exactly as ``eagle_assets.eagle3_checkpoint.trainer_process.launch`` does \
(speculators' config, draft,
loaders and trainer, with this project's additions), then, instead of training epochs:

1. keeps the first epoch's batches on the GPU: all of them, or ``--resident-batches`` spread evenly over it
   (:mod:`benchmarks.train_step_resident`: the ceiling is measured on the rows the epochs train);
2. for each loss in ``--losses``: runs the trainer's own ``train_epoch`` over those resident batches
   (``--warmup-steps`` first, every row length among them: compilation), then ``--steps`` timed steps in
   whole passes over them, and prints
   ``probe resident loss=<impl> ... tokens_per_s=<rate> ... recompiles=<n>`` -- the step rate with no data
   loading at all (same draft, same loss, same step code), the ceiling the real loader path is measured against;
   ``--with-host-syncs`` times the same steps once more with speculators' per-step blocking scalar
   copies put back (see :mod:`eagle_assets.eagle3_checkpoint.trainer_process.host_syncs`), \
to show what removing them is worth; ``--padded-rows`` times them once more with each packed row padded
   to ``total_seq_len`` (speculators' layout), to show what ending rows at their samples is worth (the padded
   copies stay on the GPU beside the resident batches: at 8B a whole epoch of each is ~45 GB, so give
   ``--resident-batches`` a count that fits);
   ``--without-forced-graph-break`` runs the whole probe with the draft layer compiled as one graph
   (speculators forces a break in it on torch >= 2.10, for pytorch#175250), to show what that break costs
   (compare with a run without the flag);
3. with ``--profile-resident N``: profiles N resident steps (torch.profiler) and prints the kernel time
   by op (top device ops), the device's busy share of the wall time (the rest: idle gaps between
   kernels), and torch.compile's graph and recompile counters; the table also goes to
   ``$OUT/profile_<shape>.txt``;
4. with ``--profile-steps N``: profiles N steps of the real loader path (torch.profiler) and prints the
   host time per step spent waiting for the device, the device's busy share, and the top host ops;
5. with ``--loader-epochs N``: iterates the real loader path alone (workers, pinned copies, the side-stream
   copy to the GPU, one loader iterator across the epochs) for N epochs with no step between batches, and prints
   ``probe loader epoch=<k> ... tokens_per_s=<rate>``: the most that path can feed, beside the step's rate;
6. with ``--real-epochs N``: trains N epochs (from epoch 1) with the trainer's own steps on the real loader
   path and prints ``probe real epoch=<k> ... tokens_per_s=<rate>``: the resident rate with the loading
   beside the steps, in the same process (no validation or saves between epochs);
   ``--without-step-logging`` times the resident steps once more, and every other real epoch, with no logged
   step (speculators' step timer synchronizes the device at each of its marks on logged steps);
7. with ``--beside-loading staged pinned unpinned pinned-plain``: times one pass of resident steps while a thread
   drains an epoch of a loader like the trainer's, pinned as the trainer pins, by the DataLoader's thread or not
   at all, and with workers that let go of each batch once sent instead of holding it (``probe beside
   loading=<kind> ...``): what building batches costs the steps beside it, apart from feeding them.

``--shape`` names the verifier preset (:mod:`benchmarks.draft_shapes`) for the result lines, which carry
``shape=``, the draft's trainable parameters as built, and ``mfu=``: the step's matmul FLOPs (6 per weight
per token, times the ttt steps; attention over the row left out) over a bf16 matmul peak measured in
this process (``--peak-tflops`` to give one instead).

Tokens of a step: its packed batch's positions that belong to a sample (after EAGLE-3's one-token
shift), as ``benchmarks/train_gpu.py`` counts them.
"""

from __future__ import annotations

import argparse
import sys
import traceback
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.draft_shapes import PRESETS, train_flops_per_token, verifier_config  # noqa: E402
from benchmarks.peak import matmul_peak  # noqa: E402
from benchmarks.train_step_profiles import compile_counters, profile_real_steps, profile_resident_steps  # noqa: E402
from benchmarks.train_step_resident import (  # noqa: E402
    BESIDE,
    ResidentBatches,
    loader_epochs,
    padded_row,
    real_epochs,
    spread_indices,
    steps_beside_loading,
    timed_steps,
    warmup_order,
    whole_passes,
)
from eagle_assets.eagle3_checkpoint.trainer_process import launch  # noqa: E402

PROBE_LINE = "probe resident"
# The label of the resident steps as the trainer runs them: the rate ``train_gpu.py`` reads as the ceiling.
AS_TRAINED = "without host syncs"
# The resident steps with no logged step: speculators' step timer synchronizes the device at each of its marks
# on a logged step (``--log-freq``), and its metrics are read back there.
WITHOUT_LOGGED_STEPS = "without logged steps"
NEVER = 10**9


def resident_line(loss: str, label: str, steps: int, tokens: int, seconds: float, shape: str, mfu: float) -> str:
    """The probe's result line for ``steps`` resident steps, with torch.compile's recompiles so far (a
    row length or layout the draft met anew)."""
    return (
        f"{PROBE_LINE} loss={loss} ({label}): steps={steps} tokens={tokens} seconds={seconds:.3f} "
        f"step_ms={seconds / steps * 1000:.1f} tokens_per_s={tokens / seconds:.0f} shape={shape} mfu={mfu:.3f} "
        f"recompiles={compile_counters()['recompiles']}"
    )


def use_loss(trainer, implementation: str) -> None:
    from speculators.losses.utils import _LOSS_FN_MAPS

    for kwargs in (trainer.config.train_call_kwargs, trainer.config.val_call_kwargs):
        config = kwargs["loss_config"]
        for name, (_fn, weight) in list(config.items()):
            config[name] = (_LOSS_FN_MAPS[implementation][name], weight)
    if implementation == "fused":
        from eagle_assets.eagle3_checkpoint.trainer_process import fused_loss

        fused_loss.install()


def probe(trainer, args) -> None:
    import torch

    real_loader = trainer.train_loader
    keep = set(spread_indices(len(real_loader), args.resident_batches))
    resident = [batch for index, batch in enumerate(real_loader) if index in keep]
    tokens_per_batch = [int((b["document_ids"] != -1).sum()) for b in resident]
    resident_bytes = sum(v.nbytes for b in resident for v in b.values() if isinstance(v, torch.Tensor))
    warm = warmup_order([b["document_ids"].shape[1] for b in resident], args.warmup_steps)
    steps = whole_passes(args.steps, len(resident))
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    config = verifier_config(args.shape)
    flops_per_token = train_flops_per_token(config, args.draft_vocab)
    peak = args.peak_tflops * 1e12 if args.peak_tflops else matmul_peak()
    print(
        f"probe: shape={args.shape} {len(resident)} resident batches of the epoch's {len(real_loader)} "
        f"({resident_bytes / 1e9:.1f} GB), {sum(tokens_per_batch) / len(resident):.0f} tokens each on average, "
        f"{steps} timed steps after {len(warm)} untimed, device {torch.cuda.get_device_name()}, draft trainable "
        f"params {trainable} (matmul FLOPs/token {flops_per_token / 1e9:.2f} G), bf16 peak {peak / 1e12:.1f} TFLOP/s",
        flush=True,
    )
    for implementation in args.losses:
        use_loss(trainer, implementation)
        # Compiles for this loss, every row length before the timed steps.
        timed_steps(trainer, [resident[i] for i in warm], len(warm), [tokens_per_batch[i] for i in warm])
        variants = [(AS_TRAINED, None, resident)]
        if args.without_step_logging:
            variants.append((WITHOUT_LOGGED_STEPS, None, resident))
        if args.with_host_syncs:
            variants.append(("with speculators' host syncs", torch, resident))
        if args.padded_rows:
            max_len = real_loader.collate_fn.max_len
            padded = [padded_row(batch, max_len) for batch in resident]
            timed_steps(trainer, padded, args.warmup_steps, tokens_per_batch)  # a new row length may compile
            variants.append((f"rows padded to {max_len} as speculators pads them", None, padded))
        for label, module, batches in variants:
            from speculators.train import trainer as trainer_module

            patched, config = trainer_module.torch, trainer.config
            if module is not None:
                trainer_module.torch = module
            if label == WITHOUT_LOGGED_STEPS:
                trainer.config = config._replace(log_freq=NEVER)
            try:
                seconds, tokens = timed_steps(trainer, batches, steps, tokens_per_batch)
            finally:
                trainer_module.torch, trainer.config = patched, config
            mfu = tokens / seconds * flops_per_token / peak
            print(resident_line(implementation, label, steps, tokens, seconds, args.shape, mfu), flush=True)
        if args.profile_resident:
            try:  # a diagnostic: its failure must not discard the rates above
                profile_resident_steps(
                    trainer,
                    ResidentBatches(resident, args.profile_resident),
                    args.profile_resident,
                    f"{args.shape}-{implementation}",
                )
            except Exception:
                print(f"probe profile resident failed:\n{traceback.format_exc()}", flush=True)
    for kind in args.beside_loading:
        steps_beside_loading(trainer, real_loader.loader, resident, tokens_per_batch, kind)
    if args.profile_steps:
        profile_real_steps(trainer, real_loader, args.profile_steps)
    if args.real_epochs:
        own = trainer.config.log_freq
        real_epochs(trainer, real_loader, args.real_epochs, log_freqs=(own, NEVER) if args.without_step_logging else ())
    if args.loader_epochs:
        loader_epochs(real_loader, args.loader_epochs)


def torch_before_the_break():
    """torch as speculators' draft layer sees it without its forced break: reporting 2.9 (the break is for
    >= 2.10), every other name the real one's, so the compiled graph is the same but for the break."""
    import torch
    from torch.torch_version import TorchVersion

    view = types.ModuleType("torch")
    view.__dict__.update(vars(torch))
    view.__version__ = TorchVersion("2.9.0")
    return view


def without_forced_graph_break() -> None:
    from speculators.models.eagle3 import model_definitions

    model_definitions.torch = torch_before_the_break()
    print("probe: the draft layer compiles without speculators' forced graph break", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--resident-batches", type=int, default=0, help="batches kept on the GPU, spread over the epoch (0: all)"
    )
    parser.add_argument("--warmup-steps", type=int, default=12, help="untimed steps per loss (compilation)")
    parser.add_argument("--steps", type=int, default=60, help="timed steps per loss, in whole passes")
    parser.add_argument("--losses", nargs="+", default=["fused"], choices=["fused", "eager"])
    parser.add_argument(
        "--with-host-syncs",
        action="store_true",
        help="also time the resident steps with speculators' blocking scalar copies",
    )
    parser.add_argument(
        "--padded-rows",
        action="store_true",
        help="also time the resident steps with their rows padded to total_seq_len, as speculators' collate pads them",
    )
    parser.add_argument(
        "--without-forced-graph-break",
        action="store_true",
        help="compile speculators' draft layer as one graph (it forces a break on torch >= 2.10)",
    )
    parser.add_argument("--profile-steps", type=int, default=0, help="profile this many real-loader steps")
    parser.add_argument(
        "--profile-resident", type=int, default=0, help="profile this many resident steps per loss (kernels by op)"
    )
    parser.add_argument(
        "--loader-epochs", type=int, default=0, help="iterate the real loader path alone for this many epochs"
    )
    parser.add_argument(
        "--real-epochs", type=int, default=0, help="train this many epochs on the real loader path (timed)"
    )
    parser.add_argument(
        "--without-step-logging",
        action="store_true",
        help="also time the resident steps, and every other real epoch, with no logged step",
    )
    parser.add_argument(
        "--beside-loading",
        nargs="*",
        default=[],
        choices=list(BESIDE),
        help="time a pass of resident steps while a loader like the trainer's builds an epoch, per kind",
    )
    parser.add_argument("--shape", choices=PRESETS, default="llama-3.1-8b", help="the verifier preset (result lines)")
    parser.add_argument("--peak-tflops", type=float, default=None, help="bf16 peak for the MFU (default: measured)")
    parser.add_argument("--metrics-file", type=Path, default=Path("probe-metrics.jsonl"))
    argv = sys.argv[1:]
    if "--" not in argv:
        parser.error("separate speculators' flags with '--'")
    split = argv.index("--")
    args = parser.parse_args(argv[:split])
    flags = argv[split + 1 :]
    if "--draft-vocab-size" not in flags:
        parser.error("the speculators flags must give --draft-vocab-size (the MFU counts the draft's lm_head)")
    args.draft_vocab = int(flags[flags.index("--draft-vocab-size") + 1])

    install = launch._install_trainer

    def install_then_probe(patience, speculators_argv):
        install(patience, speculators_argv)
        if args.without_forced_graph_break:
            without_forced_graph_break()
        from speculators.train import cli

        class ProbeTrainer(cli.Trainer):
            def run_training(self):
                probe(self, args)

        cli.Trainer = ProbeTrainer

    launch._install_trainer = install_then_probe
    launch.main(["--metrics-file", str(args.metrics_file), "--", *argv[split + 1 :]])


if __name__ == "__main__":
    main()
