"""The PyTorch twins of Loom's model zoo (models/registry.h): one builder per
registry row, with the same name, the same module structure and so the same
state_dict names and shapes, so weights move both ways (safetensors).

bench/torch_bench.py times them against Loom; tools/model_interop.py checks
logits both ways; tools/zoo_golden.py writes the state_dict names and shapes
the C++ tests compare Loom's models with. torchvision is not needed: the
torchvision architectures are written out here with torchvision's names
(checked against its parameter counts in tests/models).

    import torch_models
    row = torch_models.ZOO["resnet18_cifar"]
    net = row.build(row.num_classes)          # (N, 3, 32, 32) -> (N, 10)
"""
from collections import OrderedDict, namedtuple

import torch
import torch.nn as nn
import torch.nn.functional as F

# --- the reference models (layers/models.cc) ------------------------------------------------


def mnist_net():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def lenet5():
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))


def conv_bn(ci, co):
    return nn.Sequential(nn.Conv2d(ci, co, 3, padding=1, bias=False), nn.BatchNorm2d(co), nn.ReLU())


class Residual(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.a = conv_bn(c, c)
        self.b = conv_bn(c, c)

    def forward(self, x):
        return x + self.b(self.a(x))


def resnet9():
    """The DAWNBench-style ResNet-9 for CIFAR-10."""
    return nn.Sequential(
        conv_bn(3, 64),
        conv_bn(64, 128), nn.MaxPool2d(2), Residual(128),
        conv_bn(128, 256), nn.MaxPool2d(2),
        conv_bn(256, 512), nn.MaxPool2d(2), Residual(512),
        nn.AdaptiveMaxPool2d(1), nn.Flatten(), nn.Linear(512, 10))

# --- ResNets (models/resnet.h) ----------------------------------------------------------------


def conv3x3(cin, cout, stride=1):
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    """torchvision's BasicBlock."""

    def __init__(self, cin, c, stride):
        super().__init__()
        self.conv1 = conv3x3(cin, c, stride)
        self.bn1 = nn.BatchNorm2d(c)
        self.relu = nn.ReLU()
        self.conv2 = conv3x3(c, c)
        self.bn2 = nn.BatchNorm2d(c)
        self.downsample = None
        if stride != 1 or cin != c:
            self.downsample = nn.Sequential(nn.Conv2d(cin, c, 1, stride=stride, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet(nn.Module):
    """torchvision's ResNet with BasicBlocks; cifar_stem: 3x3 stride-1 conv1, maxpool = Identity."""

    def __init__(self, blocks, num_classes=1000, cifar_stem=False):
        super().__init__()
        self.conv1 = conv3x3(3, 64) if cifar_stem else nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU()
        self.maxpool = nn.Identity() if cifar_stem else nn.MaxPool2d(3, stride=2, padding=1)
        cin = 64
        for stage, n in enumerate(blocks):
            c, stride = 64 << stage, 1 if stage == 0 else 2
            layer = []
            for b in range(n):
                layer.append(BasicBlock(cin, c, stride if b == 0 else 1))
                cin = c
            setattr(self, f"layer{stage + 1}", nn.Sequential(*layer))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)
        self.stages = len(blocks)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for stage in range(self.stages):
            x = getattr(self, f"layer{stage + 1}")(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


class CifarBasicBlock(nn.Module):
    """He et al.'s CIFAR block with the option-A shortcut (akamaster's names)."""

    def __init__(self, cin, c, stride):
        super().__init__()
        self.conv1 = conv3x3(cin, c, stride)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = conv3x3(c, c)
        self.bn2 = nn.BatchNorm2d(c)
        self.reshape = stride != 1 or cin != c
        self.stride, self.pad = stride, (c - cin) // 2

    def shortcut(self, x):
        if not self.reshape:
            return x
        s = self.stride
        return F.pad(x[:, :, ::s, ::s], (0, 0, 0, 0, self.pad, self.pad))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    def __init__(self, n, num_classes=10):
        super().__init__()
        self.conv1 = conv3x3(3, 16)
        self.bn1 = nn.BatchNorm2d(16)
        cin = 16
        for stage in range(3):
            c = 16 << stage
            layer = []
            for b in range(n):
                layer.append(CifarBasicBlock(cin, c, 2 if b == 0 and stage > 0 else 1))
                cin = c
            setattr(self, f"layer{stage + 1}", nn.Sequential(*layer))
        self.linear = nn.Linear(64, num_classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.linear(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

# --- VGG (models/vgg.h) -------------------------------------------------------------------------

VGG11 = [[64], [128], [256, 256], [512, 512], [512, 512]]
VGG16 = [[64, 64], [128, 128], [256, 256, 256], [512, 512, 512], [512, 512, 512]]


class VGG(nn.Module):
    """torchvision's VGG with batch norm; cifar: 1x1 pool and a 512-wide classifier."""

    def __init__(self, stages, num_classes=1000, cifar=False):
        super().__init__()
        layers, cin = [], 3
        for stage in stages:
            for c in stage:
                layers += [nn.Conv2d(cin, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU()]
                cin = c
            layers.append(nn.MaxPool2d(2, stride=2))
        self.features = nn.Sequential(*layers)
        side, hidden = (1, 512) if cifar else (7, 4096)
        self.avgpool = nn.AdaptiveAvgPool2d(side)
        self.classifier = nn.Sequential(
            nn.Linear(512 * side * side, hidden), nn.ReLU(), nn.Dropout(0.5),
            nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(0.5), nn.Linear(hidden, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))

# --- MobileNetV2 (models/mobilenet_v2.h) ------------------------------------------------------


def conv_bn_relu6(cin, cout, k, stride=1, groups=1):
    """torchvision's Conv2dNormActivation with ReLU6."""
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU6())


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, t):
        super().__init__()
        hidden = cin * t
        self.use_res_connect = stride == 1 and cin == cout
        layers = [conv_bn_relu6(cin, hidden, 1)] if t != 1 else []
        layers += [conv_bn_relu6(hidden, hidden, 3, stride, hidden),
                   nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


MOBILENET_V2_STAGES = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1)]


class MobileNetV2(nn.Module):
    """torchvision's MobileNetV2; cifar: stem and second stage at stride 1."""

    def __init__(self, num_classes=1000, cifar=False, dropout=0.2):
        super().__init__()
        features, cin = [conv_bn_relu6(3, 32, 3, 1 if cifar else 2)], 32
        for i, (t, c, n, s) in enumerate(MOBILENET_V2_STAGES):
            first = 1 if cifar and i == 1 else s
            for b in range(n):
                features.append(InvertedResidual(cin, c, first if b == 0 else 1, t))
                cin = c
        features.append(conv_bn_relu6(cin, 1280, 1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(1280, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))

# --- U-Net (models/unet.h) --------------------------------------------------------------------


class DoubleConv(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.double_conv = nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())

    def forward(self, x):
        return self.double_conv(x)


class Down(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.maxpool_conv = nn.Sequential(nn.MaxPool2d(2), DoubleConv(cin, cout))

    def forward(self, x):
        return self.maxpool_conv(x)


class Up(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.up = nn.ConvTranspose2d(cin, cin // 2, 2, stride=2)
        self.conv = DoubleConv(cin, cout)

    def forward(self, x, skip):
        return self.conv(torch.cat([skip, self.up(x)], dim=1))


class OutConv(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 1)

    def forward(self, x):
        return self.conv(x)


class UNet(nn.Module):
    def __init__(self, in_channels=3, num_classes=2, width=16):
        super().__init__()
        w = width
        self.inc = DoubleConv(in_channels, w)
        self.down1, self.down2 = Down(w, 2 * w), Down(2 * w, 4 * w)
        self.down3, self.down4 = Down(4 * w, 8 * w), Down(8 * w, 16 * w)
        self.up1, self.up2 = Up(16 * w, 8 * w), Up(8 * w, 4 * w)
        self.up3, self.up4 = Up(4 * w, 2 * w), Up(2 * w, w)
        self.outc = OutConv(w, num_classes)

    def forward(self, x):
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        x4 = self.down3(x3)
        y = self.up1(self.down4(x4), x4)
        y = self.up2(y, x3)
        y = self.up3(y, x2)
        return self.outc(self.up4(y, x1))

# --- ViT (models/vit.h) -------------------------------------------------------------------------


class EncoderBlock(nn.Module):
    """torchvision's EncoderBlock."""

    def __init__(self, hidden, heads, mlp, dropout):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden, eps=1e-6)
        self.self_attention = nn.MultiheadAttention(hidden, heads, batch_first=True)
        self.dropout = nn.Dropout(dropout)
        self.ln_2 = nn.LayerNorm(hidden, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(hidden, mlp), nn.GELU(), nn.Dropout(dropout), nn.Linear(mlp, hidden),
                                 nn.Dropout(dropout))

    def forward(self, x):
        h = self.ln_1(x)
        h, _ = self.self_attention(h, h, h, need_weights=False)
        h = self.dropout(h) + x
        return h + self.mlp(self.ln_2(h))


class Encoder(nn.Module):
    def __init__(self, seq, layers, hidden, heads, mlp, dropout):
        super().__init__()
        self.pos_embedding = nn.Parameter(torch.empty(1, seq, hidden).normal_(std=0.02))
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.Sequential(OrderedDict(
            (f"encoder_layer_{i}", EncoderBlock(hidden, heads, mlp, dropout)) for i in range(layers)))
        self.ln = nn.LayerNorm(hidden, eps=1e-6)

    def forward(self, x):
        return self.ln(self.layers(self.dropout(x + self.pos_embedding)))


class VisionTransformer(nn.Module):
    """torchvision's VisionTransformer, sized down (and with in_channels)."""

    def __init__(self, image_size=28, patch_size=7, in_channels=1, num_classes=10, hidden_dim=64, num_layers=4,
                 num_heads=4, mlp_dim=128, dropout=0.1):
        super().__init__()
        self.hidden_dim = hidden_dim
        self.conv_proj = nn.Conv2d(in_channels, hidden_dim, patch_size, stride=patch_size)
        self.class_token = nn.Parameter(torch.zeros(1, 1, hidden_dim))
        seq = (image_size // patch_size) ** 2 + 1
        self.encoder = Encoder(seq, num_layers, hidden_dim, num_heads, mlp_dim, dropout)
        self.heads = nn.Sequential(OrderedDict(head=nn.Linear(hidden_dim, num_classes)))

    def forward(self, x):
        n = x.shape[0]
        x = self.conv_proj(x).flatten(2).permute(0, 2, 1)  # flatten: an empty batch has no size for a -1
        x = torch.cat([self.class_token.expand(n, -1, -1), x], dim=1)
        return self.heads(self.encoder(x)[:, 0])

# --- the registry's rows ------------------------------------------------------------------------

Row = namedtuple("Row", "build input num_classes per_pixel")
MNIST, CIFAR, IMAGENET, SEGMENTATION = (1, 28, 28), (3, 32, 32), (3, 224, 224), (3, 64, 64)

ZOO = {
    "lenet5": Row(lambda k: lenet5(), MNIST, 10, False),
    "mnist_net": Row(lambda k: mnist_net(), MNIST, 10, False),
    "resnet9": Row(lambda k: resnet9(), CIFAR, 10, False),
    "resnet18": Row(lambda k: ResNet([2, 2, 2, 2], k), IMAGENET, 1000, False),
    "resnet34": Row(lambda k: ResNet([3, 4, 6, 3], k), IMAGENET, 1000, False),
    "resnet18_cifar": Row(lambda k: ResNet([2, 2, 2, 2], k, cifar_stem=True), CIFAR, 10, False),
    "resnet34_cifar": Row(lambda k: ResNet([3, 4, 6, 3], k, cifar_stem=True), CIFAR, 10, False),
    "resnet20": Row(lambda k: CifarResNet(3, k), CIFAR, 10, False),
    "resnet56": Row(lambda k: CifarResNet(9, k), CIFAR, 10, False),
    "vgg11_bn": Row(lambda k: VGG(VGG11, k), IMAGENET, 1000, False),
    "vgg16_bn": Row(lambda k: VGG(VGG16, k), IMAGENET, 1000, False),
    "vgg11_bn_cifar": Row(lambda k: VGG(VGG11, k, cifar=True), CIFAR, 10, False),
    "vgg16_bn_cifar": Row(lambda k: VGG(VGG16, k, cifar=True), CIFAR, 10, False),
    "mobilenet_v2": Row(lambda k: MobileNetV2(k), IMAGENET, 1000, False),
    "mobilenet_v2_cifar": Row(lambda k: MobileNetV2(k, cifar=True), CIFAR, 10, False),
    "unet": Row(lambda k: UNet(3, k), SEGMENTATION, 2, True),
    "vit_tiny": Row(lambda k: VisionTransformer(num_classes=k), MNIST, 10, False),
}


def build(name, num_classes=None):
    """The twin of registry row `name`, with its classes unless given."""
    row = ZOO[name]
    return row.build(row.num_classes if num_classes is None else num_classes)
