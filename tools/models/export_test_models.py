"""Exports the small PyTorch models that the optimizer's end-to-end tests use.

Regenerate (Debian's python3-torch 1.13 and python3-onnx; output is deterministic):

    /usr/bin/python3 tools/models/export_test_models.py [--out tests/models]

The models are written by hand the way torchvision / Hugging Face write them (random
weights from a fixed seed, eval mode), so the exported graphs have the shapes of real
exports: decomposed LayerNorm at opset 14, Shape/Gather/Concat chains around view(),
erf and tanh GELU written out, BatchNormalization kept (see export()):

  resnet_tiny.onnx       ResNet: conv-bn-relu stem, maxpool, 3 BasicBlocks (one strided
                         with a 1x1 conv-bn downsample), global avgpool, flatten, linear.
                         image [1,3,32,32] -> logits [1,10]; opset 13.
  mobilenetv3_tiny.onnx  MobileNetV3: hardswish stem, inverted residual blocks (1x1 expand
                         conv-bn-act, depthwise conv-bn-act, squeeze-excite, 1x1 project
                         conv-bn, residual add), hardswish head, linear classifier.
                         image [1,3,32,32] -> logits [1,10]; opset 13 (hardswish and
                         hardsigmoid exported as HardSigmoid/Mul).
  bert_tiny.onnx         HF-BERT encoder: embeddings + 2 layers, hidden 64, 4 heads,
                         intermediate 128, vocab 100. input_ids, attention_mask
                         [batch,16] int64 -> last_hidden_state [batch,16,64]; opset 14.
  gpt_tiny.onnx          GPT-2 decoder: 2 pre-LN blocks, hidden 64, 4 heads, MLP 128,
                         causal mask from a tril buffer, NewGELU, lm head, vocab 100.
                         input_ids [1,16] int64 -> logits [1,16,100]; opset 17.
  bert_deep.onnx         the BERT encoder with 12 layers, hidden 32, 4 heads, intermediate
                         64: a model of 700+ nodes for the optimizer's speed test.
"""
import argparse
import math
import os

import onnx
import torch
from torch import nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.normpath(os.path.join(HERE, "..", "..", "tests", "models"))
VOCAB = 100


# ---------------------------------------------------------------- ResNet ----
class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNetTiny(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = BasicBlock(8, 8, 1)
        self.layer2 = BasicBlock(8, 16, 2)
        self.layer3 = BasicBlock(16, 16, 1)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# ----------------------------------------------------------- MobileNetV3 ----
def make_divisible(v, divisor=8):
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


class SqueezeExcitation(nn.Module):
    def __init__(self, channels):
        super().__init__()
        squeeze = make_divisible(channels // 4)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.activation = nn.ReLU()
        self.scale_activation = nn.Hardsigmoid()

    def forward(self, x):
        scale = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
        return scale * x


def conv_bn_act(cin, cout, k, stride=1, groups=1, act=None):
    layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, cin, k, exp, cout, use_se, act, stride):
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        layers = []
        if exp != cin:
            layers.append(conv_bn_act(cin, exp, 1, act=act))
        layers.append(conv_bn_act(exp, exp, k, stride, groups=exp, act=act))
        if use_se:
            layers.append(SqueezeExcitation(exp))
        layers.append(conv_bn_act(exp, cout, 1))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        y = self.block(x)
        return y + x if self.use_res_connect else y


class MobileNetV3Tiny(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        hs, re = nn.Hardswish, nn.ReLU
        self.features = nn.Sequential(
            conv_bn_act(3, 16, 3, 2, act=hs),
            InvertedResidual(16, 3, 16, 16, True, re, 1),   # no expand, SE, residual
            InvertedResidual(16, 3, 48, 24, False, re, 2),  # strided, no SE
            InvertedResidual(24, 5, 72, 24, True, hs, 1),   # SE + hardswish + residual
            InvertedResidual(24, 3, 96, 24, True, hs, 1),
            conv_bn_act(24, 96, 1, act=hs),
        )
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(96, 128), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(128, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


# ------------------------------------------------------------------ BERT ----
class BertEmbeddings(nn.Module):
    def __init__(self, hidden, max_pos):
        super().__init__()
        self.word_embeddings = nn.Embedding(VOCAB, hidden)
        self.position_embeddings = nn.Embedding(max_pos, hidden)
        self.token_type_embeddings = nn.Embedding(2, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(0.1)
        self.register_buffer("position_ids", torch.arange(max_pos).expand((1, -1)))
        self.register_buffer("token_type_ids", torch.zeros((1, max_pos), dtype=torch.long))

    def forward(self, input_ids):
        seq_length = input_ids.size()[1]
        position_ids = self.position_ids[:, :seq_length]
        token_type_ids = self.token_type_ids[:, :seq_length].expand(input_ids.size()[0], seq_length)
        embeddings = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        embeddings = embeddings + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(embeddings))


class BertSelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.num_attention_heads = heads
        self.attention_head_size = hidden // heads
        self.all_head_size = hidden
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(0.1)

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        return x.view(new_x_shape).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        attention_scores = attention_scores + attention_mask
        attention_probs = self.dropout(nn.functional.softmax(attention_scores, dim=-1))
        context_layer = torch.matmul(attention_probs, value_layer)
        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        new_context_layer_shape = context_layer.size()[:-2] + (self.all_head_size,)
        return context_layer.view(new_context_layer_shape)


class BertAddNorm(nn.Module):
    """BertSelfOutput / BertOutput: dense, dropout, LayerNorm(hidden + input)."""

    def __init__(self, din, hidden):
        super().__init__()
        self.dense = nn.Linear(din, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states, input_tensor):
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class BertLayer(nn.Module):
    def __init__(self, hidden, heads, intermediate):
        super().__init__()
        self.self_attention = BertSelfAttention(hidden, heads)
        self.attention_output = BertAddNorm(hidden, hidden)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.output = BertAddNorm(intermediate, hidden)

    def forward(self, hidden_states, attention_mask):
        attention_output = self.attention_output(self.self_attention(hidden_states, attention_mask), hidden_states)
        intermediate_output = F.gelu(self.intermediate(attention_output))  # erf form
        return self.output(intermediate_output, attention_output)


class BertTiny(nn.Module):
    def __init__(self, hidden=64, heads=4, intermediate=128, layers=2, max_pos=32):
        super().__init__()
        self.embeddings = BertEmbeddings(hidden, max_pos)
        self.layer = nn.ModuleList([BertLayer(hidden, heads, intermediate) for _ in range(layers)])

    def forward(self, input_ids, attention_mask):
        extended_attention_mask = (1.0 - attention_mask[:, None, None, :].float()) * -10000.0
        hidden_states = self.embeddings(input_ids)
        for layer in self.layer:
            hidden_states = layer(hidden_states, extended_attention_mask)
        return hidden_states


# ------------------------------------------------------------------- GPT ----
class NewGELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPTAttention(nn.Module):
    def __init__(self, hidden, heads, max_pos):
        super().__init__()
        self.n_head = heads
        self.head_dim = hidden // heads
        self.split_size = hidden
        self.c_attn = nn.Linear(hidden, 3 * hidden)
        self.c_proj = nn.Linear(hidden, hidden)
        self.attn_dropout = nn.Dropout(0.1)
        self.resid_dropout = nn.Dropout(0.1)
        self.register_buffer("bias", torch.tril(torch.ones((max_pos, max_pos), dtype=torch.bool)).view(1, 1, max_pos, max_pos))

    def _split_heads(self, x):
        return x.view(x.size()[:-1] + (self.n_head, self.head_dim)).permute(0, 2, 1, 3)

    def forward(self, x):
        query, key, value = self.c_attn(x).split(self.split_size, dim=2)
        query, key, value = self._split_heads(query), self._split_heads(key), self._split_heads(value)
        attn_weights = torch.matmul(query, key.transpose(-1, -2)) / math.sqrt(self.head_dim)
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length:key_length, :key_length]
        mask_value = torch.tensor(torch.finfo(attn_weights.dtype).min, dtype=attn_weights.dtype)
        attn_weights = torch.where(causal_mask, attn_weights, mask_value)
        attn_weights = self.attn_dropout(nn.functional.softmax(attn_weights, dim=-1))
        out = torch.matmul(attn_weights, value).permute(0, 2, 1, 3).contiguous()
        out = out.view(out.size()[:-2] + (self.n_head * self.head_dim,))
        return self.resid_dropout(self.c_proj(out))


class GPTBlock(nn.Module):
    def __init__(self, hidden, heads, inner, max_pos):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden, eps=1e-5)
        self.attn = GPTAttention(hidden, heads, max_pos)
        self.ln_2 = nn.LayerNorm(hidden, eps=1e-5)
        self.c_fc = nn.Linear(hidden, inner)
        self.act = NewGELU()
        self.c_proj = nn.Linear(inner, hidden)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.dropout(self.c_proj(self.act(self.c_fc(self.ln_2(x)))))


class GPTTiny(nn.Module):
    def __init__(self, hidden=64, heads=4, inner=128, layers=2, max_pos=32):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, hidden)
        self.wpe = nn.Embedding(max_pos, hidden)
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList([GPTBlock(hidden, heads, inner, max_pos) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(hidden, eps=1e-5)
        self.lm_head = nn.Linear(hidden, VOCAB, bias=False)

    def forward(self, input_ids):
        position_ids = torch.arange(0, input_ids.size(-1), dtype=torch.long).unsqueeze(0)
        x = self.drop(self.wte(input_ids) + self.wpe(position_ids))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


# ---------------------------------------------------------------- export ----
def randomize_batchnorm(model):
    """Fresh BatchNorm layers are the identity; give them real statistics so that
    folding them is tested on numbers that matter."""
    g = torch.Generator().manual_seed(7)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            c = m.num_features
            m.weight.data = 0.5 + torch.rand(c, generator=g)
            m.bias.data = 0.2 * torch.randn(c, generator=g)
            m.running_mean.data = 0.2 * torch.randn(c, generator=g)
            m.running_var.data = 0.5 + torch.rand(c, generator=g)


def randomize_layernorm(model):
    g = torch.Generator().manual_seed(11)
    for m in model.modules():
        if isinstance(m, nn.LayerNorm):
            m.weight.data = 0.5 + torch.rand(m.weight.shape, generator=g)
            m.bias.data = 0.1 * torch.randn(m.bias.shape, generator=g)


def export(model, args, path, input_names, output_names, opset, dynamic_axes=None):
    model.eval()
    # TrainingMode.PRESERVE on an eval-mode model exports inference semantics but skips
    # the exporter's own Conv+BatchNorm fusion, so BatchNormalization stays in the graph
    # for kiln's fold_batchnorm_into_conv to remove (as in models exported by other tools).
    with torch.no_grad():
        torch.onnx.export(model, args, path, input_names=input_names, output_names=output_names,
                          opset_version=opset, dynamic_axes=dynamic_axes, do_constant_folding=True,
                          training=torch.onnx.TrainingMode.PRESERVE)
    m = onnx.load(path)
    onnx.checker.check_model(m)
    hist = {}
    for n in m.graph.node:
        hist[n.op_type] = hist.get(n.op_type, 0) + 1
    size = os.path.getsize(path)
    ops = ", ".join(f"{k} {v}" for k, v in sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])))
    print(f"{os.path.basename(path)}: {len(m.graph.node)} nodes, {size} bytes, opset {opset}\n  {ops}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT, help="output folder (default tests/models)")
    out = ap.parse_args().out
    os.makedirs(out, exist_ok=True)

    torch.manual_seed(2026)
    resnet = ResNetTiny()
    randomize_batchnorm(resnet)
    export(resnet, (torch.randn(1, 3, 32, 32),), os.path.join(out, "resnet_tiny.onnx"), ["image"], ["logits"], 13)

    torch.manual_seed(2027)
    mobilenet = MobileNetV3Tiny()
    randomize_batchnorm(mobilenet)
    export(mobilenet, (torch.randn(1, 3, 32, 32),), os.path.join(out, "mobilenetv3_tiny.onnx"), ["image"],
           ["logits"], 13)

    seq = 16
    ids = torch.randint(0, VOCAB, (2, seq))
    mask = torch.ones(2, seq, dtype=torch.long)
    batch_axes = {"input_ids": {0: "batch"}, "attention_mask": {0: "batch"}, "last_hidden_state": {0: "batch"}}
    torch.manual_seed(2028)
    bert = BertTiny()
    randomize_layernorm(bert)
    export(bert, (ids, mask), os.path.join(out, "bert_tiny.onnx"), ["input_ids", "attention_mask"],
           ["last_hidden_state"], 14, batch_axes)

    torch.manual_seed(2029)
    gpt = GPTTiny()
    randomize_layernorm(gpt)
    export(gpt, (torch.randint(0, VOCAB, (1, seq)),), os.path.join(out, "gpt_tiny.onnx"), ["input_ids"], ["logits"], 17)

    torch.manual_seed(2030)
    deep = BertTiny(hidden=32, heads=4, intermediate=64, layers=12)
    randomize_layernorm(deep)
    export(deep, (ids, mask), os.path.join(out, "bert_deep.onnx"), ["input_ids", "attention_mask"],
           ["last_hidden_state"], 14, batch_axes)


if __name__ == "__main__":
    main()
