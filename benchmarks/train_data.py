"""The data every run of ``benchmarks/train_gpu.py`` trains on: a head-only verifier, random features in the
``hidden_states`` asset's layout (and their fp8 copy), the training folder and the draft vocabulary.

Needs the repository root on ``sys.path`` (the entry scripts put it there).
"""

from __future__ import annotations

import json
import os
import shutil
import time

from benchmarks.train_runs import StampedLog
from eagle_assets.eagle3_checkpoint.training_data import build_training_data
from eagle_assets.eagle3_checkpoint.vocab import build_draft_vocab
from tests.helpers.synthetic import write_head_only_verifier, write_random_features


def write_data(args, config, captured: list[int], draft_vocab: int, device: str):
    """The verifier head, the random features (and their fp8 copy), the training folder and draft vocab:
    (data, vocab, fp8 (data, vocab) or None, when writing started). Features that an earlier job on this
    machine wrote with the same settings (``features.json``) are kept: a set resumed over several device
    calls writes its GBs once."""
    verifier, storage, work = args.work / "verifier", args.work / "storage", args.work / "work"
    started = time.perf_counter()
    features = dict(
        verifier_path=verifier,
        layer_ids=captured,
        hidden_size=config.hidden_size,
        vocab_size=config.vocab_size,
        num_rows=args.rows,
        seq_len=tuple(args.seq_len),
        device=device,
        distinct_rows=args.distinct_rows,
    )
    stamp = json.dumps(dict(features, verifier_path=str(verifier), shape=args.shape, fp8=args.fp8_features))
    kept = (args.work / "features.json").exists() and (args.work / "features.json").read_text() == stamp
    if kept:
        shutil.rmtree(work, ignore_errors=True)
    else:
        shutil.rmtree(args.work, ignore_errors=True)
        write_head_only_verifier(verifier, config, device=device)
        write_random_features(storage, "bench", **features)
        if args.fp8_features:  # the same seed: the same rows and bf16 states, stored quantized
            write_random_features(args.work / "storage-fp8", "bench", **features, feature_dtype="fp8")
        (args.work / "features.json").write_text(stamp)
    setup_log = StampedLog("setup")
    data = build_training_data(storage, ["bench"], work, log=setup_log)
    vocab = build_draft_vocab(data.path, draft_vocab, config.vocab_size, log=setup_log)
    fp8 = None
    if args.fp8_features:
        fp8_data = build_training_data(args.work / "storage-fp8", ["bench"], work, log=setup_log)
        fp8 = (fp8_data, build_draft_vocab(fp8_data.path, draft_vocab, config.vocab_size, log=setup_log))
    os.sync()  # no write-back of the fresh files while the first run is being timed
    print(
        f"data: {data.num_rows} rows, {data.num_tokens} tokens, {'features kept, ' if kept else ''}"
        f"written in {time.perf_counter() - started:.0f}s",
        flush=True,
    )
    return data, vocab, fp8, started
