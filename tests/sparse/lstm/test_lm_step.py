"""The language model's training step is exact: the fused loss and everything after the backward
pass give what the plain PyTorch recipe (F.cross_entropy, clip_grad_norm_, SGD) gives."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import Tensor, nn

import unstall.sparse.lstm.lm as lm
from unstall.sparse.lstm import LMConfig, build_corpus
from unstall.sparse.lstm.kernels import OutputMemory
from unstall.sparse.lstm.lm import (
    LMTrainer,
    WordLM,
    cross_entropy_grad_,
    train_epoch,
    train_step_loss,
)
from unstall.sparse.lstm.ptb import Corpus, batchify, bptt_batches

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def random_logits(rows: int, vocab: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    gen = torch.Generator().manual_seed(rows * 7 + vocab)
    logits = (torch.randn(rows, vocab, generator=gen) * 4).to(dtype)
    logits[0, 3] = 80.0  # a large logit: the max-shifted exponentials must not overflow
    return logits, torch.randint(vocab, (rows,), generator=gen)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("chunk_bytes", [1, 3 * 13 * 8, 1 << 30])  # one row, ragged, all rows
def test_fused_cross_entropy_equals_f_cross_entropy_and_its_backward(
    dtype: torch.dtype, chunk_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lm, "LOSS_CHUNK_BYTES", chunk_bytes)
    logits, targets = random_logits(20, 13, dtype)
    plain = logits.clone().requires_grad_()
    expected = nn.functional.cross_entropy(plain, targets)
    expected.backward()
    assert plain.grad is not None
    grad = logits.clone()
    loss = cross_entropy_grad_(grad, targets)
    tol = {"rtol": 1e-6, "atol": 1e-7} if dtype == torch.float32 else {}
    torch.testing.assert_close(loss, expected.detach(), **tol)
    torch.testing.assert_close(grad, plain.grad, **tol)
    assert not torch.equal(grad, logits)  # the logits were consumed


def test_fused_cross_entropy_refuses_a_strided_view() -> None:
    logits, targets = random_logits(6, 5, torch.float32)
    with pytest.raises(ValueError, match="contiguous"):
        cross_entropy_grad_(logits.t().contiguous().t(), targets)


def tiny_corpus() -> Corpus:
    words = [f"w{i}" for i in range(37)]
    gen = torch.Generator().manual_seed(3)
    lines = [
        " ".join(words[int(i)] for i in torch.randint(37, (9,), generator=gen)) for _ in range(60)
    ]
    text = "\n".join(lines)
    return build_corpus({"train": text, "valid": text, "test": text})


CASES = {
    "standard": {"mode": "standard"},
    "structured": {"mode": "structured"},
    "structured, split decoder": {"mode": "structured", "decoder_split": True},
    "structured-window": {"mode": "structured-window"},
}


@pytest.mark.parametrize("case", list(CASES))
def test_train_step_loss_gives_the_gradients_of_plain_cross_entropy(case: str) -> None:
    config = LMConfig(hidden=12, layers=2, bptt=5, batch=3, p=0.4, **CASES[case])
    corpus = tiny_corpus()
    inputs, targets = next(bptt_batches(batchify(corpus.train, config.batch), config.bptt))
    fused, plain = WordLM(corpus.vocab_size, config), WordLM(corpus.vocab_size, config)
    fused.train(), plain.train()  # same seeds: same weights, and the same masks drawn
    logits, _ = plain(inputs)
    expected = nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))
    expected.backward()
    logits, _ = fused(inputs)
    loss = train_step_loss(logits, targets)
    torch.testing.assert_close(loss, expected.detach())
    for (name, got), (_, want) in zip(
        fused.named_parameters(), plain.named_parameters(), strict=True
    ):
        assert got.grad is not None and want.grad is not None, name
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-5, atol=1e-7, msg=name)


def plain_epoch(model: WordLM, data: Tensor, config: LMConfig) -> tuple[float, int]:
    """The PyTorch word-language-model recipe, as train_epoch ran it before it was fused."""
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr)
    model.train()
    total, count, state = 0.0, 0, None
    for n, (inputs, targets) in enumerate(bptt_batches(data, config.bptt)):
        if config.max_batches is not None and n >= config.max_batches:
            break
        state = (state[0].detach(), state[1].detach()) if state is not None else None
        optimizer.zero_grad(set_to_none=True)
        logits, state = model(inputs, state)
        loss = nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), config.clip)
        optimizer.step()
        total += float(loss.detach()) * targets.numel()
        count += targets.numel()
    return total / count, count


@pytest.mark.parametrize("case", ["standard", "structured"])
def test_train_epoch_reaches_the_weights_of_the_plain_recipe(case: str) -> None:
    # clip 0.05: the gradient norm is clipped at every batch, so clipping is exercised too
    config = LMConfig(hidden=12, layers=2, bptt=5, batch=3, p=0.4, lr=2.0, clip=0.05,
                      max_batches=6, **CASES[case])  # fmt: skip
    trainer = LMTrainer(config, tiny_corpus())
    plain = copy.deepcopy(trainer.model)
    loss, count = train_epoch(trainer.model, trainer.train, config, trainer.optimizer)
    plain_loss, plain_count = plain_epoch(plain, trainer.train, config)
    assert count == plain_count
    assert loss == pytest.approx(plain_loss, rel=1e-6)
    for (name, got), (_, want) in zip(
        trainer.model.named_parameters(), plain.named_parameters(), strict=True
    ):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("case", ["standard", "structured"])
def test_a_whole_epoch_with_a_shorter_last_batch_reaches_the_weights_of_the_plain_recipe(
    case: str,
) -> None:
    """train_epoch writes every batch's logits into one memory; the last batch is shorter, so
    it uses the start of that memory: nothing of an earlier batch may leak into it."""
    config = LMConfig(hidden=12, layers=2, bptt=5, batch=3, p=0.4, lr=2.0, **CASES[case])
    trainer = LMTrainer(config, tiny_corpus())
    *_, (last, _) = bptt_batches(trainer.train, config.bptt)
    assert last.shape[0] < config.bptt
    plain = copy.deepcopy(trainer.model)
    loss, count = train_epoch(trainer.model, trainer.train, config, trainer.optimizer)
    plain_loss, plain_count = plain_epoch(plain, trainer.train, config)
    assert count == plain_count == trainer.train.numel() - trainer.train.shape[1]
    assert loss == pytest.approx(plain_loss, rel=1e-6)
    for (name, got), (_, want) in zip(
        trainer.model.named_parameters(), plain.named_parameters(), strict=True
    ):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("kept_memory", [False, True])
def test_train_step_loss_leaves_the_logits_version_alone(kept_memory: bool) -> None:
    """The gradient is written through an alias with its own version counter: the dense
    decoder's logits are a view, and a bumped version would send their gradient through a
    full-size as-strided backward (a zero-filled copy of the logits)."""
    config = LMConfig(mode="standard", hidden=12, layers=1, bptt=5, batch=3, p=0.4)
    corpus = tiny_corpus()
    inputs, targets = next(bptt_batches(batchify(corpus.train, config.batch), config.bptt))
    model = WordLM(corpus.vocab_size, config)
    logits, _ = model(inputs, None, OutputMemory() if kept_memory else None)
    version, grad_fn = logits._version, type(logits.grad_fn).__name__
    train_step_loss(logits, targets)
    assert logits._version == version
    assert type(logits.grad_fn).__name__ == grad_fn != "AsStridedBackward0"
