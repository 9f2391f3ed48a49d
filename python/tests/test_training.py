"""A short training run of a tiny causal transformer, once with hopattn.flash_attn_func and once
with PyTorch SDPA as the attention, from the same initial weights and batches: the loss curves
must agree to within bf16 rounding, and the loss must go down (gradients flow)."""

import pytest

from hopattn_testing import call_or_skip, require_hopper_extension

torch, hopattn = require_hopper_extension()

from hopattn import flash_attn_func  # noqa: E402

DEV = "cuda"


def sdpa_attention(q, k, v):
    # (B, S, H, D) like flash_attn_func; SDPA wants (B, H, S, D).
    out = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
    return out.transpose(1, 2)


def hopattn_attention(q, k, v):
    return flash_attn_func(q, k, v, causal=True)


class Block(torch.nn.Module):
    def __init__(self, dim, heads, attention):
        super().__init__()
        self.heads, self.attention = heads, attention
        self.norm1, self.norm2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, s, dim = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, dim // self.heads).unbind(2)
        x = x + self.proj(self.attention(q, k, v).reshape(b, s, dim))
        return x + self.mlp(self.norm2(x))


class TinyLM(torch.nn.Module):
    def __init__(self, vocab, dim, heads, layers, attention):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.blocks = torch.nn.ModuleList(Block(dim, heads, attention) for _ in range(layers))
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, tokens):
        x = self.embed(tokens)
        for blk in self.blocks:
            x = blk(x)
        return self.head(x)


def train(attention, steps=30):
    torch.manual_seed(0)
    model = TinyLM(vocab=256, dim=256, heads=4, layers=2, attention=attention).to(DEV, torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator(device=DEV).manual_seed(1)
    losses = []
    for _ in range(steps):
        # Structured data (next token = token + 1) so the loss can fall.
        start = torch.randint(0, 256, (4, 1), device=DEV, generator=gen)
        tokens = (start + torch.arange(257, device=DEV)) % 256
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, 256), tokens[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_loss_curve_matches_sdpa():
    ours = call_or_skip(train, hopattn_attention)
    theirs = train(sdpa_attention)
    assert ours[-1] < 0.8 * ours[0], f"loss did not fall: {ours[0]:.3f} -> {ours[-1]:.3f}"
    for step, (a, b) in enumerate(zip(ours, theirs)):
        # bf16 weights and activations: two correct attentions drift apart by rounding only.
        assert abs(a - b) <= 0.03 * max(abs(b), 1.0), f"step {step}: hopattn {a:.4f} vs SDPA {b:.4f}"
