"""The demo applications' DNN architectures, written in plain torch (no torchvision, no weights).

Small but real: an SSD-lite detector on a MobileNetV2 backbone, ResNet-18 classifiers, an
encoder-decoder landmark network, a VGG-stage pose network (OpenPose style), a CNN encoder plus
greedy LSTM decoder for captioning and a small 3D-CNN action classifier. Weights come from a fixed
seed (:func:`build_model`), so every build produces the same ONNX bytes and the same outputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["MODEL_SPECS", "ModelSpec", "build_model"]


def _conv_bn(
    cin: int, cout: int, k: int = 3, stride: int = 1, *, groups: int = 1, act: bool = True
) -> nn.Sequential:
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]
    if act:
        layers.append(nn.ReLU6(inplace=True))
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    """MobileNetV2 block: 1x1 expand, 3x3 depthwise, 1x1 linear projection, residual when shapes match."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(_conv_bn(cin, hidden, 1))
        layers += [_conv_bn(hidden, hidden, 3, stride, groups=hidden), _conv_bn(hidden, cout, 1, act=False)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = self.body(x)
        return x + y if self.residual else y


def _make_divisible(v: float, d: int = 8) -> int:
    return max(d, int(v + d / 2) // d * d)


class SSDLite(nn.Module):
    """SSD-lite detector: MobileNetV2 backbone, depthwise-separable box/class heads on 3 feature maps.

    Output: ``boxes`` (B, A, 4) and ``scores`` (B, A, classes) for A anchors (decoding and NMS run on
    the CPU after the model, as in the SSD reference implementations).
    """

    # (expand, channels, repeats, stride) of MobileNetV2
    CFG = (
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    )

    def __init__(self, num_classes: int = 21, width: float = 0.75, anchors: int = 6):
        super().__init__()
        self.num_classes = num_classes
        self.anchors = anchors
        cin = _make_divisible(32 * width)
        self.stem = _conv_bn(3, cin, 3, 2)
        stages: list[nn.Module] = []
        self.tap_after: list[int] = []
        for expansion, channels, repeats, stride in self.CFG:
            cout = _make_divisible(channels * width)
            for i in range(repeats):
                stages.append(InvertedResidual(cin, cout, stride if i == 0 else 1, expansion))
                cin = cout
            if channels in (96, 320):  # stride-16 and stride-32 feature maps
                self.tap_after.append(len(stages) - 1)
        self.stages = nn.ModuleList(stages)
        self.extra = nn.Sequential(
            _conv_bn(cin, 128, 1), _conv_bn(128, 128, 3, 2, groups=128), _conv_bn(128, 256, 1)
        )
        chans = [_make_divisible(96 * width), cin, 256]
        self.loc = nn.ModuleList(self._head(head_channels, anchors * 4) for head_channels in chans)
        self.cls = nn.ModuleList(self._head(head_channels, anchors * num_classes) for head_channels in chans)

    @staticmethod
    def _head(cin: int, cout: int) -> nn.Sequential:
        return nn.Sequential(_conv_bn(cin, cin, 3, groups=cin), nn.Conv2d(cin, cout, 1))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        feats = []
        x = self.stem(x)
        for i, block in enumerate(self.stages):
            x = block(x)
            if i in self.tap_after:
                feats.append(x)
        feats.append(self.extra(x))
        b = x.shape[0]
        boxes = [h(f).permute(0, 2, 3, 1).reshape(b, -1, 4) for h, f in zip(self.loc, feats, strict=True)]
        scores = [
            h(f).permute(0, 2, 3, 1).reshape(b, -1, self.num_classes)
            for h, f in zip(self.cls, feats, strict=True)
        ]
        return torch.cat(boxes, 1), torch.cat(scores, 1).softmax(-1)


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + self.down(x))


class ResNet18(nn.Module):
    """ResNet-18 (He et al. 2016): 7x7 stem, four stages of two basic blocks, global pool, linear head."""

    def __init__(self, num_classes: int = 10, width: int = 64):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 7, 2, 3, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, 1),
        )
        layers: list[nn.Module] = []
        cin = width
        for i, mult in enumerate((1, 2, 4, 8)):
            cout = width * mult
            layers += [BasicBlock(cin, cout, 1 if i == 0 else 2), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, num_classes)
        self.out_features = cin

    def features(self, x: torch.Tensor) -> torch.Tensor:
        maps: torch.Tensor = self.layers(self.stem(x))
        return maps.mean((2, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.fc(self.features(x))
        return logits


class LandmarkNet(nn.Module):
    """Encoder-decoder (hourglass-style, with skip connections) producing one heatmap per landmark."""

    def __init__(self, landmarks: int = 68, base: int = 32):
        super().__init__()
        c = [base, base * 2, base * 4, base * 8]
        self.enc = nn.ModuleList(
            [
                _conv_bn(3, c[0], 3, 2),
                _conv_bn(c[0], c[1], 3, 2),
                _conv_bn(c[1], c[2], 3, 2),
                _conv_bn(c[2], c[3], 3, 2),
            ]
        )
        self.dec = nn.ModuleList(
            [
                nn.ConvTranspose2d(c[3], c[2], 4, 2, 1),
                nn.ConvTranspose2d(c[2], c[1], 4, 2, 1),
            ]
        )
        self.fuse = nn.ModuleList([_conv_bn(c[2], c[2], 3), _conv_bn(c[1], c[1], 3)])
        self.head = nn.Conv2d(c[1], landmarks, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for layer in self.enc:
            x = layer(x)
            skips.append(x)
        for up, fuse, skip in zip(self.dec, self.fuse, (skips[2], skips[1]), strict=True):
            x = fuse(torch.relu(up(x)) + skip)
        heatmaps: torch.Tensor = self.head(x)
        return heatmaps  # (B, landmarks, H/4, W/4)


class PoseNet(nn.Module):
    """OpenPose-style: VGG front end, then stages that each predict part-affinity fields and part
    heatmaps from the features concatenated with the previous stage's predictions."""

    def __init__(self, parts: int = 19, pafs: int = 38, stages: int = 2, base: int = 32):
        super().__init__()

        def vgg(cin: int, cout: int, layers: int) -> list[nn.Module]:
            out: list[nn.Module] = []
            for i in range(layers):
                out += [nn.Conv2d(cin if i == 0 else cout, cout, 3, 1, 1), nn.ReLU(inplace=True)]
            return out

        front = [*vgg(3, base, 2), nn.MaxPool2d(2), *vgg(base, base * 2, 2), nn.MaxPool2d(2)]
        front += [*vgg(base * 2, base * 4, 3), nn.MaxPool2d(2), *vgg(base * 4, base * 4, 2)]
        self.front = nn.Sequential(*front)
        feat = base * 4
        self.out_ch = parts + pafs
        self.stages = nn.ModuleList()
        for stage in range(stages):
            cin = feat if stage == 0 else feat + self.out_ch
            self.stages.append(nn.Sequential(*vgg(cin, feat, 3), nn.Conv2d(feat, self.out_ch, 1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.front(x)
        y: torch.Tensor = self.stages[0](f)
        for stage in self.stages[1:]:
            y = stage(torch.cat([f, y], 1))
        return y  # (B, parts + pafs, H/8, W/8)


class CaptionEncoder(nn.Module):
    """CNN image encoder (ResNet-18 trunk) projecting to the decoder's feature size."""

    def __init__(self, feature: int = 256):
        super().__init__()
        self.trunk = ResNet18(num_classes=1, width=48)
        self.proj = nn.Linear(self.trunk.out_features, feature)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.proj(self.trunk.features(x)))


class CaptionDecoder(nn.Module):
    """Show-and-tell LSTM decoder: image feature initialises the state, greedy decoding of ``steps`` words."""

    def __init__(
        self, feature: int = 256, hidden: int = 384, vocab: int = 4000, embed: int = 256, steps: int = 12
    ):
        super().__init__()
        self.steps = steps
        self.init_h = nn.Linear(feature, hidden)
        self.init_c = nn.Linear(feature, hidden)
        self.embed = nn.Embedding(vocab, embed)
        self.cell = nn.LSTMCell(embed, hidden)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, feat: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.init_h(feat))
        c = torch.tanh(self.init_c(feat))
        token = torch.zeros_like(feat[:, 0], dtype=torch.long)  # <start> = 0
        words = []
        for _ in range(self.steps):
            h, c = self.cell(self.embed(token), (h, c))
            token = self.out(h).argmax(-1)
            words.append(token)
        return torch.stack(words, 1)  # (B, steps) word ids


class ActionNet(nn.Module):
    """(2+1)D action classifier over a short clip of person crops: (B, 3, T, H, W) -> class logits."""

    def __init__(self, num_classes: int = 20, base: int = 32):
        super().__init__()

        def r21d(cin: int, cout: int, stride: int) -> nn.Sequential:
            mid = (cin + cout) // 2
            return nn.Sequential(
                nn.Conv3d(cin, mid, (1, 3, 3), (1, stride, stride), (0, 1, 1), bias=False),
                nn.BatchNorm3d(mid),
                nn.ReLU(inplace=True),
                nn.Conv3d(mid, cout, (3, 1, 1), (stride, 1, 1), (1, 0, 0), bias=False),
                nn.BatchNorm3d(cout),
                nn.ReLU(inplace=True),
            )

        c = [base, base * 2, base * 4, base * 8]
        self.body = nn.Sequential(
            r21d(3, c[0], 1), r21d(c[0], c[1], 2), r21d(c[1], c[2], 2), r21d(c[2], c[3], 2)
        )
        self.fc = nn.Linear(c[3], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        clip: torch.Tensor = self.body(x)
        logits: torch.Tensor = self.fc(clip.mean((2, 3, 4)))
        return logits


@dataclass(frozen=True)
class ModelSpec:
    """A demo model: how to build it and the shape of one request (without the batch dimension)."""

    name: str
    description: str
    input_shape: tuple[int, ...]
    input_name: str = "input"
    output_names: tuple[str, ...] = ("output",)


MODEL_SPECS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            "ssdlite_mnv2",
            "SSD-lite detector, MobileNetV2-0.75 backbone, 160x160 frames",
            (3, 160, 160),
            output_names=("boxes", "scores"),
        ),
        ModelSpec("resnet18_vehicle", "ResNet-18 vehicle make/type classifier, 112x112 crops", (3, 112, 112)),
        ModelSpec("resnet18_face", "ResNet-18 person/face attribute classifier, 64x64 crops", (3, 64, 64)),
        ModelSpec(
            "landmark_net", "encoder-decoder 68-point face landmark heatmaps, 96x96 crops", (3, 96, 96)
        ),
        ModelSpec(
            "pose_vgg", "OpenPose-style VGG stages (19 heatmaps + 38 PAFs), 128x96 person crops", (3, 128, 96)
        ),
        ModelSpec(
            "caption_encoder", "ResNet-18 (width 48) image encoder to a 256-d feature, 128x128", (3, 128, 128)
        ),
        ModelSpec(
            "caption_decoder",
            "LSTM decoder (hidden 384, vocab 4000), 12 greedy steps",
            (256,),
            input_name="feature",
            output_names=("words",),
        ),
        ModelSpec(
            "action_r21d", "(2+1)D action classifier over 8 frames of 64x64 person crops", (3, 8, 64, 64)
        ),
    )
}


def build_model(name: str, seed: int = 0) -> nn.Module:
    """The demo model ``name`` in eval mode, weights drawn from ``seed`` (deterministic, no download)."""
    factories: dict[str, Callable[[], nn.Module]] = {
        "ssdlite_mnv2": lambda: SSDLite(num_classes=21),
        "resnet18_vehicle": lambda: ResNet18(num_classes=12),
        "resnet18_face": lambda: ResNet18(num_classes=8),
        "landmark_net": lambda: LandmarkNet(landmarks=68),
        "pose_vgg": PoseNet,
        "caption_encoder": CaptionEncoder,
        "caption_decoder": CaptionDecoder,
        "action_r21d": ActionNet,
    }
    if name not in factories:
        raise KeyError(name)
    torch.manual_seed(seed)
    model = factories[name]()
    # Non-trivial batch-norm statistics so the folded graph is not an identity.
    gen = torch.Generator().manual_seed(seed + 1)
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d | nn.BatchNorm3d):
            # built with track_running_stats=False:
            if module.running_mean is None or module.running_var is None:
                raise ValueError(f"{name}: a batch norm without running statistics cannot be folded")
            module.running_mean.copy_(torch.randn(module.num_features, generator=gen) * 0.1)
            module.running_var.copy_(torch.rand(module.num_features, generator=gen) + 0.5)
    return model.eval()


class Bottleneck(nn.Module):
    def __init__(self, cin: int, mid: int, stride: int):
        super().__init__()
        cout = mid * 4
        self.body = nn.Sequential(
            nn.Conv2d(cin, mid, 1, bias=False),
            nn.BatchNorm2d(mid),
            nn.ReLU(inplace=True),
            nn.Conv2d(mid, mid, 3, stride, 1, bias=False),
            nn.BatchNorm2d(mid),
            nn.ReLU(inplace=True),
            nn.Conv2d(mid, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        )
        self.down = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.down(x))


class ResNet50(nn.Module):
    """ResNet-50 at 224x224: only used to count the FLOPs and bytes of the GPU anchor model
    (NVIDIA's published ResNet-50 latencies); never profiled or served."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, 1),
        )
        layers: list[nn.Module] = []
        cin = 64
        for i, (mid, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3))):
            for j in range(blocks):
                layers.append(Bottleneck(cin, mid, 2 if (i > 0 and j == 0) else 1))
                cin = mid * 4
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        maps: torch.Tensor = self.layers(self.stem(x))
        logits: torch.Tensor = self.fc(maps.mean((2, 3)))
        return logits
