"""Image classifiers of the zoo: ResNet, VGG, AlexNet and MobileNetV2, written with ``torch.nn``.

Every net ends in adaptive pooling, so it runs on any image of at least 32x32 pixels; at 224x224
with 1000 classes the parameter counts are those published (ResNet-50 25.56 M, VGG-16 138.36 M,
AlexNet 61.10 M, MobileNetV2 3.50 M).
"""

from __future__ import annotations

import torch
from torch import nn

# --- ResNet (He et al., 2016) ---------------------------------------------------------------------


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with an identity (or 1x1 projection) shortcut: ResNet-18/34."""

    expansion = 1

    def __init__(self, in_channels: int, width: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, width, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.shortcut = _projection(in_channels, width * self.expansion, stride)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (strided, as in the widely used 'v1.5'), 1x1 expand: ResNet-50/101/152."""

    expansion = 4

    def __init__(self, in_channels: int, width: int, stride: int) -> None:
        super().__init__()
        out_channels = width * self.expansion
        self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.shortcut = _projection(in_channels, out_channels, stride)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + self.shortcut(x))


def _projection(in_channels: int, out_channels: int, stride: int) -> nn.Module:
    """The shortcut: identity when shapes match, else a strided 1x1 convolution and BatchNorm."""
    if stride == 1 and in_channels == out_channels:
        return nn.Identity()
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
        nn.BatchNorm2d(out_channels),
    )


# Depth -> (block, blocks per stage), table 1 of He et al.
RESNET_LAYOUTS: dict[int, tuple[type[BasicBlock] | type[Bottleneck], tuple[int, ...]]] = {
    18: (BasicBlock, (2, 2, 2, 2)),
    34: (BasicBlock, (3, 4, 6, 3)),
    50: (Bottleneck, (3, 4, 6, 3)),
    101: (Bottleneck, (3, 4, 23, 3)),
    152: (Bottleneck, (3, 8, 36, 3)),
}


class ResNet(nn.Module):
    """ResNet for ImageNet-style input: 7x7/2 stem, max-pool, four stages, global average pool."""

    def __init__(self, depth: int, num_classes: int = 1000) -> None:
        super().__init__()
        block, blocks_per_stage = RESNET_LAYOUTS[depth]
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        stages: list[nn.Module] = []
        in_channels = 64
        for i, blocks in enumerate(blocks_per_stage):
            width = 64 * 2**i
            layers = []
            for j in range(blocks):
                stride = 2 if i > 0 and j == 0 else 1
                layers.append(block(in_channels, width, stride))
                in_channels = width * block.expansion
            stages.append(nn.Sequential(*layers))
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_channels, num_classes)
        _init_conv_net(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(self.pool(x), 1))


# --- VGG (Simonyan and Zisserman, 2015) -----------------------------------------------------------

# Depth -> 3x3 convolutions in each of the five stages (configurations A, B, D, E).
VGG_STAGES: dict[int, tuple[int, ...]] = {
    11: (1, 1, 2, 2, 2),
    13: (2, 2, 2, 2, 2),
    16: (2, 2, 3, 3, 3),
    19: (2, 2, 4, 4, 4),
}
VGG_WIDTHS = (64, 128, 256, 512, 512)


class VGG(nn.Module):
    """Five stages of 3x3 convolutions with max-pools, pooled to 7x7, then 4096-4096-classes."""

    def __init__(self, depth: int, num_classes: int = 1000, batch_norm: bool = False) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        in_channels = 3
        for convs, width in zip(VGG_STAGES[depth], VGG_WIDTHS, strict=True):
            for _ in range(convs):
                layers.append(nn.Conv2d(in_channels, width, 3, padding=1))
                if batch_norm:
                    layers.append(nn.BatchNorm2d(width))
                layers.append(nn.ReLU(inplace=True))
                in_channels = width
            layers.append(nn.MaxPool2d(2, stride=2))
        self.features = nn.Sequential(*layers)
        # Small images come out of the features at 1x1; adaptive pooling repeats them to 7x7, so
        # the classifier (and the parameter count) is the same at every image size.
        self.pool = nn.AdaptiveAvgPool2d(7)
        self.classifier = _classifier(512 * 7 * 7, num_classes)
        _init_conv_net(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def _classifier(in_features: int, num_classes: int, dropout_first: bool = False) -> nn.Sequential:
    """The 4096-4096-classes head of AlexNet and VGG, with dropout before the two hidden layers."""
    hidden = 4096
    layers: list[nn.Module] = [nn.Dropout(0.5)] if dropout_first else []
    layers += [nn.Linear(in_features, hidden), nn.ReLU(inplace=True), nn.Dropout(0.5)]
    layers += [nn.Linear(hidden, hidden), nn.ReLU(inplace=True)]
    if not dropout_first:
        layers.append(nn.Dropout(0.5))
    layers.append(nn.Linear(hidden, num_classes))
    return nn.Sequential(*layers)


# --- AlexNet (Krizhevsky, 2014: the one-GPU variant of 'One weird trick') -------------------------

# Three unpadded 3x3/2 max-pools after the 11x11/4 stem need images of at least 63 pixels.
ALEXNET_MIN_UNPADDED = 63


class AlexNet(nn.Module):
    """Five convolutions (64-192-384-256-256), pooled to 6x6, then 4096-4096-classes.

    Below 63x63 pixels the max-pools get a padding of 1 so that small images keep at least one
    pixel; pooling has no parameters, so the parameter count does not change.
    """

    def __init__(self, num_classes: int = 1000, image_size: int = 224) -> None:
        super().__init__()
        pad = 0 if image_size >= ALEXNET_MIN_UNPADDED else 1
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 11, stride=4, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=pad),
            nn.Conv2d(64, 192, 5, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=pad),
            nn.Conv2d(192, 384, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(384, 256, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(256, 256, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=pad),
        )
        self.pool = nn.AdaptiveAvgPool2d(6)
        self.classifier = _classifier(256 * 6 * 6, num_classes, dropout_first=True)
        _init_conv_net(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


# --- MobileNetV2 (Sandler et al., 2018) -----------------------------------------------------------

# (expansion t, output channels c, repeats n, first stride s), table 2 of the paper.
MOBILENET_V2_SETTING: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def round_channels(channels: float, divisor: int = 8) -> int:
    """Round a scaled channel count to the nearest multiple of ``divisor``, never below it, and
    never more than 10% below the unrounded count (the rule the reference models use)."""
    rounded = max(divisor, int(channels + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * channels else rounded


def _conv_bn_relu6(
    in_ch: int, out_ch: int, kernel: int, stride: int = 1, groups: int = 1
) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(in_ch, out_ch, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(out_ch),
        nn.ReLU6(inplace=True),
    )


class InvertedResidual(nn.Module):
    """1x1 expansion, 3x3 depthwise, linear 1x1 projection; residual when the shape is kept."""

    def __init__(self, in_ch: int, out_ch: int, stride: int, expansion: int) -> None:
        super().__init__()
        hidden = in_ch * expansion
        layers: list[nn.Module] = []
        if expansion != 1:
            layers.append(_conv_bn_relu6(in_ch, hidden, 1))
        layers.append(_conv_bn_relu6(hidden, hidden, 3, stride, groups=hidden))
        layers += [nn.Conv2d(hidden, out_ch, 1, bias=False), nn.BatchNorm2d(out_ch)]
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and in_ch == out_ch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        return x + out if self.residual else out


class MobileNetV2(nn.Module):
    """MobileNetV2 with a width multiplier; dropout 0.2 before the classifier."""

    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0) -> None:
        super().__init__()
        in_ch = round_channels(32 * width_mult)
        last_ch = round_channels(1280 * max(1.0, width_mult))
        layers: list[nn.Module] = [_conv_bn_relu6(3, in_ch, 3, stride=2)]
        for expansion, channels, repeats, first_stride in MOBILENET_V2_SETTING:
            out_ch = round_channels(channels * width_mult)
            for i in range(repeats):
                stride = first_stride if i == 0 else 1
                layers.append(InvertedResidual(in_ch, out_ch, stride, expansion))
                in_ch = out_ch
        layers.append(_conv_bn_relu6(in_ch, last_ch, 1))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last_ch, num_classes))
        _init_conv_net(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


# --- shared ---------------------------------------------------------------------------------------


def _init_conv_net(model: nn.Module) -> None:
    """He-normal (fan-out) convolutions, unit BatchNorm, small-normal linear layers, zero biases."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            _zero_bias(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.01)
            _zero_bias(m.bias)


def _zero_bias(bias: torch.Tensor | None) -> None:
    if bias is not None:
        nn.init.zeros_(bias)
