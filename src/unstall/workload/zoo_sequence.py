"""Token models of the zoo: a word-level LSTM language model and a small transformer LM.

Both take a batch of token ids of shape ``(N, T)`` and return next-token logits flattened to
``(N * T, vocab)``, so that ``nn.CrossEntropyLoss()(model(tokens), targets.reshape(-1))`` trains
them like any classifier. The hidden state is not carried from one batch to the next.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class LSTMLanguageModel(nn.Module):
    """Embedding, a stacked ``nn.LSTM``, dropout, and a Linear decoder (optionally tied)."""

    def __init__(
        self,
        *,
        vocab: int,
        embed_dim: int,
        hidden: int,
        num_layers: int,
        dropout: float,
        tie_weights: bool,
    ) -> None:
        super().__init__()
        self.vocab = vocab
        self.embedding = nn.Embedding(vocab, embed_dim)
        self.drop = nn.Dropout(dropout)
        # nn.LSTM applies its dropout between layers only, so it is meaningless for one layer.
        between = dropout if num_layers > 1 else 0.0
        self.lstm = nn.LSTM(embed_dim, hidden, num_layers, dropout=between, batch_first=True)
        self.decoder = nn.Linear(hidden, vocab)
        nn.init.uniform_(self.embedding.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        if tie_weights:
            # One tensor serves both: the model has one gradient for it, counted once.
            self.decoder.weight = self.embedding.weight
        else:
            nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.drop(self.embedding(tokens))
        out, _ = self.lstm(x)
        return self.decoder(self.drop(out)).reshape(-1, self.vocab)


class TransformerLM(nn.Module):
    """Token and learned position embeddings, a causal pre-norm ``nn.TransformerEncoder``, and a
    Linear decoder."""

    def __init__(
        self,
        *,
        vocab: int,
        seq_len: int,
        d_model: int,
        heads: int,
        layers: int,
        ff: int,
        dropout: float,
    ) -> None:
        super().__init__()
        self.vocab = vocab
        self.scale = math.sqrt(d_model)
        self.embedding = nn.Embedding(vocab, d_model)
        self.position = nn.Embedding(seq_len, d_model)
        self.drop = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(
            d_model, heads, ff, dropout, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(
            layer, layers, norm=nn.LayerNorm(d_model), enable_nested_tensor=False
        )
        self.decoder = nn.Linear(d_model, vocab)
        nn.init.normal_(self.embedding.weight, 0.0, 0.02)
        nn.init.normal_(self.position.weight, 0.0, 0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        steps = tokens.shape[1]
        positions = torch.arange(steps, device=tokens.device)
        x = self.drop(self.embedding(tokens) * self.scale + self.position(positions))
        mask = nn.Transformer.generate_square_subsequent_mask(steps, device=tokens.device)
        x = self.encoder(x, mask=mask, is_causal=True)
        return self.decoder(x).reshape(-1, self.vocab)
