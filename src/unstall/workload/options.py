"""The options of every zoo model: frozen, keyword-only dataclasses that validate themselves.

A model in the zoo is built from one of these; a bad value raises
:class:`unstall.errors.ConfigError` naming the options class, the field and why it cannot work.
"""

from __future__ import annotations

from dataclasses import dataclass

from unstall.config import check

RESNET_DEPTHS = (18, 34, 50, 101, 152)
VGG_DEPTHS = (11, 13, 16, 19)
MIN_IMAGE_SIZE = 32


def check_int(owner: object, field: str, value: object, *, minimum: int) -> None:
    """``value`` must be a true ``int`` (not a bool) of at least ``minimum``."""
    ok_type = isinstance(value, int) and not isinstance(value, bool)
    check(ok_type, owner, field, f"must be an integer, got {value!r}")
    assert isinstance(value, int)
    check(value >= minimum, owner, field, f"must be >= {minimum}, got {value}")


def check_choice(owner: object, field: str, value: object, choices: tuple[object, ...]) -> None:
    """``value`` must be one of ``choices``."""
    check(value in choices, owner, field, f"must be one of {list(choices)}, got {value!r}")


def check_dropout(owner: object, field: str, value: object) -> None:
    """A dropout probability: a number in [0, 1)."""
    ok_type = isinstance(value, int | float) and not isinstance(value, bool)
    check(ok_type, owner, field, f"must be a number, got {value!r}")
    assert isinstance(value, int | float)
    check(0 <= value < 1, owner, field, f"must be in [0, 1), got {value}")


def check_bool(owner: object, field: str, value: object) -> None:
    check(isinstance(value, bool), owner, field, f"must be true or false, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class ImageOptions:
    """Options every image classifier takes: square RGB images of ``image_size`` pixels."""

    image_size: int = 224
    num_classes: int = 1000

    def __post_init__(self) -> None:
        check_int(self, "image_size", self.image_size, minimum=MIN_IMAGE_SIZE)
        check_int(self, "num_classes", self.num_classes, minimum=2)


@dataclass(frozen=True, kw_only=True)
class ResNetOptions(ImageOptions):
    """The ResNet family with its depth as an option (for depth sweeps)."""

    depth: int = 50

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice(self, "depth", self.depth, RESNET_DEPTHS)


@dataclass(frozen=True, kw_only=True)
class VGGOptions(ImageOptions):
    """A VGG net of fixed depth; ``batch_norm`` adds BatchNorm after every convolution."""

    batch_norm: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        check_bool(self, "batch_norm", self.batch_norm)


@dataclass(frozen=True, kw_only=True)
class VGGSweepOptions(VGGOptions):
    """The VGG family with its depth as an option (for depth sweeps)."""

    depth: int = 16

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice(self, "depth", self.depth, VGG_DEPTHS)


@dataclass(frozen=True, kw_only=True)
class MobileNetV2Options(ImageOptions):
    """MobileNetV2; ``width_mult`` scales every layer's channels (rounded to multiples of 8)."""

    width_mult: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        ok = isinstance(self.width_mult, int | float) and not isinstance(self.width_mult, bool)
        check(ok, self, "width_mult", f"must be a number, got {self.width_mult!r}")
        check(
            0 < self.width_mult <= 4,
            self,
            "width_mult",
            f"must be in (0, 4], got {self.width_mult}",
        )


@dataclass(frozen=True, kw_only=True)
class TokenOptions:
    """Options every token model takes: a vocabulary and sequences of ``seq_len`` tokens."""

    vocab: int = 10000
    seq_len: int = 35

    def __post_init__(self) -> None:
        check_int(self, "vocab", self.vocab, minimum=2)
        check_int(self, "seq_len", self.seq_len, minimum=1)


@dataclass(frozen=True, kw_only=True)
class LSTMLMOptions(TokenOptions):
    """Word-level LSTM language model (defaults: the 'medium' model of Zaremba et al., 2014).

    ``tie_weights`` shares the embedding with the decoder, so ``embed_dim`` must equal ``hidden``.
    """

    embed_dim: int = 650
    hidden: int = 650
    num_layers: int = 2
    dropout: float = 0.5
    tie_weights: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        for field in ("embed_dim", "hidden", "num_layers"):
            check_int(self, field, getattr(self, field), minimum=1)
        check_dropout(self, "dropout", self.dropout)
        check_bool(self, "tie_weights", self.tie_weights)
        check(
            not self.tie_weights or self.embed_dim == self.hidden,
            self,
            "tie_weights",
            f"needs embed_dim == hidden, got {self.embed_dim} and {self.hidden}",
        )


@dataclass(frozen=True, kw_only=True)
class TransformerOptions(TokenOptions):
    """A small causal transformer-encoder language model."""

    seq_len: int = 64
    d_model: int = 256
    heads: int = 4
    layers: int = 4
    ff: int = 1024
    dropout: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        for field in ("d_model", "heads", "layers", "ff"):
            check_int(self, field, getattr(self, field), minimum=1)
        check_dropout(self, "dropout", self.dropout)
        check(
            self.d_model % self.heads == 0,
            self,
            "heads",
            f"must divide d_model={self.d_model}, got {self.heads}",
        )


@dataclass(frozen=True, kw_only=True)
class MLPOptions:
    """A multilayer perceptron of ``depth`` Linear layers (the output layer included).

    ``depth=1`` is a linear classifier; every hidden layer is ``width`` wide.
    """

    in_features: int = 784
    width: int = 1024
    depth: int = 4
    num_classes: int = 10

    def __post_init__(self) -> None:
        check_int(self, "in_features", self.in_features, minimum=1)
        check_int(self, "width", self.width, minimum=1)
        check_int(self, "depth", self.depth, minimum=1)
        check_int(self, "num_classes", self.num_classes, minimum=2)


@dataclass(frozen=True, kw_only=True)
class NCFOptions:
    """Neural collaborative filtering (NeuMF, He et al. 2017); defaults: MovieLens-1M sizes.

    ``factors`` is the GMF embedding size and the width of the MLP tower's last layer; the tower
    has ``mlp_layers`` layers that halve in width, so its embeddings are
    ``factors * 2**(mlp_layers - 1)`` wide.
    """

    users: int = 6040
    items: int = 3706
    factors: int = 64
    mlp_layers: int = 3

    def __post_init__(self) -> None:
        check_int(self, "users", self.users, minimum=1)
        check_int(self, "items", self.items, minimum=1)
        check_int(self, "factors", self.factors, minimum=1)
        check_int(self, "mlp_layers", self.mlp_layers, minimum=1)
        check(self.mlp_layers <= 8, self, "mlp_layers", f"must be <= 8, got {self.mlp_layers}")
