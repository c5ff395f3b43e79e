"""The specification: a Llama layer in PyTorch as HF writes it (RMSNorm; attention with RoPE on q and k,
grouped-query attention through repeat_kv's expand + reshape, an additive causal mask, softmax; SwiGLU MLP;
residuals), captured through the fx frontend on one device. Weights in PyTorch's [out, in] layout, as the JAX
implementation reads them; the RoPE tables and the mask are inputs (HF computes them once per model)."""
import torch

HIDDEN, HEADS, KV_HEADS, SEQ, BATCH, FFN = 64, 16, 8, 4, 2, 64  # >= 1 KV head per rank up to 8 ranks
REP = HEADS // KV_HEADS  # grouped-query attention: each KV head serves REP query heads
EPS = 2 ** -20  # exact in float32: PyTorch records the Python scalar, XLA the float32 value
HD = HIDDEN // HEADS


class RMSNorm(torch.nn.Module):
    def __init__(self, dim, eps=EPS):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    x1, x2 = x[..., : HD // 2], x[..., HD // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x, cos, sin):  # x: [batch, heads, seq, hd]; cos/sin: [seq, hd]
    return x * cos + rotate_half(x) * sin


def repeat_kv(x):  # HF's repeat_kv: [b, kv_heads, s, hd] -> [b, kv_heads * REP, s, hd], each head REP times
    b, h, s, d = x.shape
    return x[:, :, None].expand(b, h, REP, s, d).reshape(b, h * REP, s, d)


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.input_norm, self.post_norm = RMSNorm(HIDDEN), RMSNorm(HIDDEN)
        self.q_proj = torch.nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.k_proj = torch.nn.Linear(HIDDEN, KV_HEADS * HD, bias=False)
        self.v_proj = torch.nn.Linear(HIDDEN, KV_HEADS * HD, bias=False)
        self.o_proj = torch.nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.gate_proj = torch.nn.Linear(HIDDEN, FFN, bias=False)
        self.up_proj = torch.nn.Linear(HIDDEN, FFN, bias=False)
        self.down_proj = torch.nn.Linear(FFN, HIDDEN, bias=False)

    def forward(self, x, cos, sin, mask):  # cos/sin: [seq, hd] RoPE tables; mask: [seq, seq], additive, causal
        b, s, _ = x.shape
        a = self.input_norm(x)
        q = self.q_proj(a).view(b, s, HEADS, HD).transpose(1, 2)
        k = self.k_proj(a).view(b, s, KV_HEADS, HD).transpose(1, 2)
        v = self.v_proj(a).view(b, s, KV_HEADS, HD).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        k, v = repeat_kv(k), repeat_kv(v)
        probs = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * HD ** -0.5 + mask, dim=-1)
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, HIDDEN)
        x = x + self.o_proj(ctx)
        m = self.post_norm(x)
        return x + self.down_proj(torch.nn.functional.silu(self.gate_proj(m)) * self.up_proj(m))


def causal_mask(s=SEQ):
    """HF Llama's additive causal mask: 0 where a query may attend (key <= query), -inf above the diagonal."""
    return torch.full((s, s), float("-inf")).triu(1)


def rope_tables(s=SEQ):
    """HF Llama's RoPE tables, [seq, hd] each (the rotate-half layout: the angles twice)."""
    inv = 1.0 / (10000 ** (torch.arange(0, HD, 2, dtype=torch.float32) / HD))
    ang = torch.outer(torch.arange(s, dtype=torch.float32), inv)
    ang = torch.cat((ang, ang), dim=-1)
    return ang.cos(), ang.sin()
