"""The specification: a Llama-style layer in PyTorch (RMSNorm, multi-head attention, SwiGLU MLP), captured
through the fx frontend on one device. Weights in PyTorch's [out, in] layout, as the JAX implementation reads
them."""
import torch

HIDDEN, HEADS, SEQ, BATCH, FFN = 64, 16, 4, 2, 64  # >= 2 heads per rank up to 8 ranks
EPS = 2 ** -20  # exact in float32: PyTorch records the Python scalar, XLA the float32 value
HD = HIDDEN // HEADS


class RMSNorm(torch.nn.Module):
    def __init__(self, dim, eps=EPS):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.input_norm, self.post_norm = RMSNorm(HIDDEN), RMSNorm(HIDDEN)
        self.q_proj = torch.nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.k_proj = torch.nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.v_proj = torch.nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.o_proj = torch.nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.gate_proj = torch.nn.Linear(HIDDEN, FFN, bias=False)
        self.up_proj = torch.nn.Linear(HIDDEN, FFN, bias=False)
        self.down_proj = torch.nn.Linear(FFN, HIDDEN, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        a = self.input_norm(x)
        q = self.q_proj(a).view(b, s, HEADS, HD).transpose(1, 2)
        k = self.k_proj(a).view(b, s, HEADS, HD).transpose(1, 2)
        v = self.v_proj(a).view(b, s, HEADS, HD).transpose(1, 2)
        probs = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * HD ** -0.5, dim=-1)
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, HIDDEN)
        x = x + self.o_proj(ctx)
        m = self.post_norm(x)
        return x + self.down_proj(torch.nn.functional.silu(self.gate_proj(m)) * self.up_proj(m))
