"""What Gavel's job types compute per step, from their published architectures (pure data).

The roofline (:mod:`unstall.net.device_roofline`) predicts a model's speeds from its FLOPs,
parameter bytes, weight-layer calls and parameter tensors. Fitting it on Gavel's measured
throughputs needs these for Gavel's seven job types; each is derived below from the
architecture (layer shapes) of the model Gavel runs (its ``scheduler/job_table.py`` and
``workloads/pytorch/``), never from a measurement. FLOPs are 2 x multiply-accumulates of
convolutions, linear and recurrent layers (the definition of :mod:`unstall.workload.model_facts`);
a convolution of ``c_in`` to ``c_out`` channels with a ``k x k`` kernel and an ``h x h`` output
does ``h^2 c_in c_out k^2`` of them. Parameter tensors are those the optimizer updates: a
layer's weight and bias each count one, a normalisation layer with an affine transform two (none
without), an LSTM layer four.
"""

from __future__ import annotations

from dataclasses import dataclass

from unstall.config import check_positive
from unstall.net.device_roofline import StepFeatures


@dataclass(frozen=True, kw_only=True)
class GavelModel:
    """One job type's model: forward FLOPs and layer calls per unit of Gavel's batch size."""

    forward_flops: float  # per sample (per batch-size unit)
    params: float
    layer_calls: int  # weight layers run per step (forward)
    winograd_share: float  # share of the FLOPs in 3x3 stride-1 convolutions
    param_tensors: int  # parameter tensors the optimizer updates per step
    source: str

    def __post_init__(self) -> None:
        check_positive(self, forward_flops=self.forward_flops, params=self.params)

    def step(self, batch: int | None) -> StepFeatures:
        """The step at Gavel's batch size (None: the job has no batch-size variants, 1)."""
        return StepFeatures.of_model(
            forward_flops=self.forward_flops,
            params=self.params,
            layer_calls=self.layer_calls,
            batch=batch or 1,
            winograd_share=self.winograd_share,
            param_tensors=self.param_tensors,
        )


GAVEL_MODELS: dict[str, GavelModel] = {
    # ResNet-18 for 32 px CIFAR-10 images (He et al. 2016 blocks with a 3x3 stem and no max
    # pool): stem 3->64 at 32^2, 4 convs 64->64 at 32^2, then per stage (16^2, 8^2, 4^2) one
    # strided 3x3, three 3x3 and a 1x1 shortcut, fc 512->10: 0.555 G multiply-accumulates,
    # 11.16 M parameters, 21 weight layers; 3x3 stride-1: all but the strided and 1x1 convs,
    # 0.491 of 0.555 G (0.885). Tensors: 20 convolutions without bias, 20 BatchNorms (2 each),
    # the fc's weight and bias: 62.
    "resnet18": GavelModel(
        forward_flops=1.111e9,
        params=11.16e6,
        layer_calls=21,
        winograd_share=0.885,
        param_tensors=62,
        source="ResNet-18, CIFAR-10 variant (He et al. 2016)",
    ),
    # ResNet-50 at 224 px (He et al. 2016, Table 1; torchvision's layout): the zoo's layer-level
    # count, `unstall.workload.zoo.facts("resnet50")`: 8.18 GFLOPs, 25.56 M parameters, 54
    # weight layers. 3x3 stride-1: the bottlenecks' 3x3 convs (64 to 512 channels at 56^2 to 7^2,
    # 0.116 G MACs each) except the first, strided one of stages 2-4: 13 x 0.116 = 1.50 of 4.09
    # G MACs (0.367). Tensors: 53 convolutions without bias, 53 BatchNorms (2 each), the fc's 2:
    # 161 (the zoo's count too).
    "resnet50": GavelModel(
        forward_flops=8.18e9,
        params=25.56e6,
        layer_calls=54,
        winograd_share=0.367,
        param_tensors=161,
        source="ResNet-50, ImageNet (He et al. 2016; unstall zoo facts)",
    ),
    # Transformer base (Vaswani et al. 2017: d_model 512, d_ff 2048, 6 + 6 layers, Gavel's
    # defaults) on Multi30k de-en, one sentence pair a sample. Per token: encoder layer 4 x 512^2
    # + 2 x 512 x 2048 MACs, decoder layer 8 x 512^2 + 2 x 512 x 2048, attention scores 2 x 25 x
    # 512 per attention (18 of them), output projection 512 x 5000. Assumed: sentences of about
    # 12 words (Elliott et al. 2016) padded to 25 tokens a side; a 5,000-word vocabulary a side
    # (the projection is 5% of the FLOPs). Layer calls: 6 per encoder layer (q, k, v, output, two
    # feed-forward), 10 per decoder layer, two embeddings and the projection. Tensors (Gavel's copy
    # of Huang's attention-is-all-you-need-pytorch: q, k, v and output projections and both
    # feed-forward layers with biases, a LayerNorm after each sub-layer, sinusoid positions
    # frozen): 16 per encoder layer, 26 per decoder layer, two embeddings and the projection: 255.
    "transformer": GavelModel(
        forward_flops=2.353e9,
        params=49.16e6,
        layer_calls=99,
        winograd_share=0.0,
        param_tensors=255,
        source="Transformer base (Vaswani et al. 2017), Multi30k",
    ),
    # Word-level LSTM language model (Gavel's defaults: 2 layers, 200 embedding and hidden units,
    # untied, 35 tokens a sequence) on WikiText-2 (33,278 words, Merity et al. 2016). Per token:
    # 2 x 4 x 200 x 400 LSTM and 200 x 33,278 decoder MACs; a sample is one 35-token sequence.
    # Layer calls: embedding, two LSTM layers (one cuDNN call each for the sequence), decoder.
    # Tensors: embedding 1, LSTM layers 4 each, decoder weight and bias: 11.
    "lm": GavelModel(
        forward_flops=0.5107e9,
        params=13.99e6,
        layer_calls=4,
        winograd_share=0.0,
        param_tensors=11,
        source="2-layer LSTM LM, 200 units, WikiText-2",
    ),
    # Autoencoder recommender (Gavel's Recoder DynamicAutoencoder: one tanh layer of 200) over the
    # 20,108 items of MovieLens-20M after Liang et al. 2018's filtering; a sample is one user's
    # item vector: 2 x 20,108 x 200 MACs dense, 8.04 M parameters, 2 layers; 4 tensors (weight
    # and bias of each).
    "recommendation": GavelModel(
        forward_flops=16.09e6,
        params=8.04e6,
        layer_calls=2,
        winograd_share=0.0,
        param_tensors=4,
        source="autoencoder, 200 hidden, ML-20M items (Liang et al. 2018)",
    ),
    # A3C with an LSTM (Mnih et al. 2016) on Atari Pong, 80x80 grey frames: convs 1->32 5x5 at
    # 80^2, 32->32 5x5 at 38^2, 32->64 4x4 at 18^2, 64->64 3x3 at 9^2 (max-pooled between), LSTM
    # cell 1024 -> 512, actor and critic heads: 58.8 M MACs and 3.25 M parameters per frame. One
    # step of Gavel's job is one rollout of 20 frames of worker 0, while 4 workers share the GPU:
    # 4 x 20 frames, 7 weight layers each. 3x3 stride-1: the last conv, 3.0 of 58.8 M (0.051).
    # Tensors: 4 convolutions and 2 heads with biases, the LSTM cell's 4: 16, updated by each of
    # the 4 workers once a rollout: 64.
    "a3c": GavelModel(
        forward_flops=4 * 20 * 117.7e6,
        params=3.25e6,
        layer_calls=4 * 20 * 7,
        winograd_share=0.051,
        param_tensors=4 * 16,
        source="A3C-LSTM (Mnih et al. 2016), 4 workers x 20-frame rollouts",
    ),
    # CycleGAN (Zhu et al. 2017) at 256 px, batch 1: ResNet generator (c7s1-64, two stride-2 3x3
    # downs, 9 residual blocks of two 3x3 convs at 256 channels, two 3x3 ups, c7s1-3) 56.8 G MACs
    # and 11.37 M parameters; PatchGAN discriminator (four stride-2 4x4 convs 64-512, one to 1)
    # 1.66 G MACs and 2.76 M parameters. A step runs each generator 3 times (translation,
    # identity, cycle) and the discriminators 6 times in all: 6 x (56.8 + 1.66) G MACs; two of
    # each network, 28.3 M parameters; 6 x 24 + 6 x 5 layer calls. 3x3 stride-1: the residual
    # blocks and the two up-sampling convs (resize, then convolve), 53.2 of 58.5 G (0.909).
    # Tensors: every convolution has a bias (InstanceNorm without affine parameters carries
    # none): 24 convolutions a generator, 5 a discriminator, two of each: 2 x 48 + 2 x 10 = 116.
    "cyclegan": GavelModel(
        forward_flops=701.5e9,
        params=28.27e6,
        layer_calls=174,
        winograd_share=0.909,
        param_tensors=116,
        source="CycleGAN (Zhu et al. 2017), 256 px, ResNet-9 generators",
    ),
}
