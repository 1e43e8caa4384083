"""Model constructors under torchvision's names: small networks of the right
input and output shapes, so that a step takes milliseconds on a CPU."""

from __future__ import annotations

from torch import nn


def resnet18(pretrained: bool = False, num_classes: int = 1000, **kwargs) -> nn.Module:
    """Stands for ResNet-18: images in, `num_classes` logits out."""
    return nn.Sequential(
        nn.Conv2d(3, 8, kernel_size=7, stride=4, padding=3, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, num_classes),
    )


class _ResNet(nn.Module):
    """ResNet's named children, in its order (conv1, bn1, relu, maxpool,
    layer1-4, avgpool, fc), each layer a single strided 1 x 1 convolution:
    scripts that take the children apart (SimCLR) find what they expect."""

    def __init__(self, widths: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        for number, (before, after) in enumerate(zip(widths, widths[1:]), 1):
            layer = nn.Sequential(
                nn.Conv2d(before, after, kernel_size=1, stride=2, bias=False),
                nn.BatchNorm2d(after),
                nn.ReLU(inplace=True),
            )
            self.add_module(f"layer{number}", layer)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(widths[-1], num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.avgpool(x).flatten(1))


def resnet50(pretrained: bool = False, num_classes: int = 1000, **kwargs) -> nn.Module:
    """Stands for ResNet-50: its children, 64 channels in and 2048 features out
    (narrower between: float16 convolutions are slow on a CPU)."""
    return _ResNet((64, 64, 128, 256, 2048), num_classes)


# `from torchvision.models.resnet import resnet50`: this module stands for that one too.
import sys as _sys  # noqa: E402

_sys.modules[__name__ + ".resnet"] = _sys.modules[__name__]


class _VGG(nn.Module):
    """VGG's `features` (its convolutions, ReLUs and max-pools, child by child
    in VGG's order, 3 x 3 convolutions a sixteenth as wide), `avgpool` and
    `classifier`: scripts that cut `features` at a layer's index (ESRGAN's
    `features.children()[:35]`) find the layer they expect there."""

    def __init__(self, config: tuple, num_classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = 3
        for width in config:
            if width == "M":
                layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            else:
                layers += [nn.Conv2d(channels, width // 16, kernel_size=3, padding=1), nn.ReLU(True)]
                channels = width // 16
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(channels, num_classes)

    def forward(self, x):
        return self.classifier(self.avgpool(self.features(x)).flatten(1))


def vgg19(pretrained: bool = False, num_classes: int = 1000, **kwargs) -> nn.Module:
    """Stands for VGG-19 (random weights, whatever `pretrained` says: there is
    nothing to download): 37 children in `features`, as torchvision's."""
    config = (64, 64, "M", 128, 128, "M") + (256,) * 4 + ("M",) + ((512,) * 4 + ("M",)) * 2
    return _VGG(config, num_classes)
